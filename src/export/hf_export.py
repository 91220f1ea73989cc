"""export.py --file_format HF: a pretraining or fine-tuned checkpoint as an HF transformers model folder
(config.json, model.safetensors, and the tokenizer files of src/export/hf_tokenizer.py) that `from_pretrained` loads
with no missing or unexpected weights and that computes what our network computes.

The weight names are src.convert_checkpoint's HF table read backwards (`name_in_hf`), so an HF model
converted in and exported out comes back tensor for tensor. Nothing is dropped silently: a weight of the checkpoint that
HF's class has no place for, or one the class needs that the checkpoint lacks, stops the export; the one weight left out
by design (the pooler of the SQuAD v1.1 head, which its outputs never read) is named in the printed summary.
safetensors is written with the `safetensors` package, already a dependency of this package (HF checkpoints are
read with it); nothing else beyond the package's own requirements is needed. README.md is the model card
(src/export/model_card.py), so that the folder can be uploaded to the Hugging Face Hub as it is.
"""
import json
import os
from dataclasses import dataclass, fields
from typing import Dict, List, Optional, Tuple

import numpy as np

from model_utils.config import Config
from model_utils.errors import UserError
from src.common.atomic_files import check_folder_output, claimed_folder_of, publish_folder
from src.conversion.convert_checkpoint import HF_HEADS, name_in_hf
from src.data.tokenization import FullTokenizer
from src.export.hf_tokenizer import TOKENIZER_FILES, tokenizer_files
from src.export.model_card import (CardFacts, EvalResults, check_evaluation, checkpoint_progress, find_eval_results,
                                   model_card, vocabulary_language)
from src.serving.finetuned_heads import HEAD_OWNERS, check_head, fitting_task
from src.tasks.registry import TASKS, check_trained_tokenizer


@dataclass(frozen=True)
class HfClass:
    """The transformers class an export of one of our tasks is, and what of ours it has no place for."""

    architecture: str
    auto_class: str  # the transformers Auto class that builds it from the folder
    pipeline: str  # the Hub's pipeline tag (what transformers.pipeline runs it as)
    unread: str = ""  # prefix of our parameters that the head's outputs never read and the HF class lacks
    why_unread: str = ""


HF_CLASSES: Dict[str, HfClass] = {
    "pretrain": HfClass("AlbertForPreTraining", "AutoModelForPreTraining", "fill-mask"),
    "classifier": HfClass("AlbertForSequenceClassification", "AutoModelForSequenceClassification",
                          "text-classification"),
    "race": HfClass("AlbertForMultipleChoice", "AutoModelForMultipleChoice", "multiple-choice"),
    "squad_v1": HfClass("AlbertForQuestionAnswering", "AutoModelForQuestionAnswering", "question-answering",
                        "albert.pooler.", "the question-answering head never reads the pooled output, and HF's "
                        "AlbertForQuestionAnswering has no pooler"),
}
SQUAD_V2_REFUSAL = ("--file_format HF cannot export the squad_v2 head: its start_logits.*, end_logits.* (the end "
                    "conditioned on the start) and answer_class.* layers (Google's ALBERT v2 head, from XLNet) have no "
                    "counterpart in HF transformers' ALBERT, whose AlbertForQuestionAnswering has only qa_outputs.* "
                    "(independent start and end logits, no answer classifier); export it as MINDIR or ONNX")
OURS_ONLY = ("hidden_act", "share_type", "ln_type", "compute_type")  # AlbertConfig keys HF spells otherwise or lacks
ALBERT_SPECIAL_IDS = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3}  # HF AlbertConfig's defaults
WEIGHT_PREFIXES = ("albert.",) + HF_HEADS + tuple(HEAD_OWNERS)  # checkpoint names that are network weights
OUTPUT_FILES = frozenset({"config.json", "model.safetensors", "README.md", *TOKENIZER_FILES})  # all an export writes
TRANSFORMERS_FORMAT = "4.57.6"  # config.json's transformers_version: the release whose format the export follows


@dataclass
class HfExport:
    """What an export wrote, for the summary export.py prints."""

    folder: str
    hf_class: HfClass
    net: object  # the AlbertConfig of the exported network
    files: List[str]
    notes: List[str]


def check_hf_request(args: Config, task: str, folder: str) -> None:
    """What the flags alone decide for an HF export, before any file is read."""
    if task == "squad_v2":
        raise UserError(SQUAD_V2_REFUSAL)
    if args.spm_model_file and args.vocab_file:
        raise UserError("pass one vocabulary: --spm_model_file (SentencePiece) or --vocab_file (WordPiece vocab.txt)")
    if args.task_name and task != "classifier":
        raise UserError(f"--task_name names the labels of a classifier; the {task} export has none")
    if os.path.lexists(folder) and not os.path.isdir(folder):
        raise UserError(f"export_file_name must name a folder for --file_format HF (a model folder), not a file: "
                        f"{folder}")
    if args.eval_results and not os.path.isfile(args.eval_results):
        raise UserError(f"eval_results not found: {args.eval_results}")
    check_folder_output(folder, args.overwrite, OUTPUT_FILES.__contains__,
                        {"--export_ckpt_file": args.export_ckpt_file, "--spm_model_file": args.spm_model_file,
                         "--vocab_file": args.vocab_file, "--eval_results": args.eval_results})
    if os.path.isdir(folder) and os.listdir(folder) and not written_by_an_export(folder):
        raise UserError(f"{folder} holds an HF model this command did not write (its README.md is no model card of an "
                        f"export): --overwrite replaces only an earlier export; name another folder")


def written_by_an_export(folder: str) -> bool:
    """Whether the model folder `folder` is an earlier export: its README.md is a card export_hf wrote (tagged
    mindspore). A model downloaded from the Hub holds the same file names, and is not replaced."""
    import yaml

    try:
        with open(os.path.join(folder, "README.md"), encoding="utf-8") as handle:
            text = handle.read(1 << 16)
        front = yaml.safe_load(text.split("---\n")[1]) if text.startswith("---\n") else None
    except (OSError, UnicodeDecodeError, IndexError, yaml.YAMLError):
        return False
    return isinstance(front, dict) and "mindspore" in (front.get("tags") or [])


def export_hf(args: Config, task: str, task_config: Config, source: str, folder: str,
              settings_file: str = "") -> HfExport:
    """Check the checkpoint against the task and the vocabulary, then write the model folder `folder`, its model card
    telling the settings of `settings_file` (the task yaml given as the run's, if any)."""
    from src.common.checkpoint_io import config_beside, read_checkpoint_and_digest
    from src.training.network_config import network_config

    checkpoint = args.export_ckpt_file
    tokenizer = read_tokenizer(args)
    # the run's evaluation: a fine-tuning run's OUTPUT_DIR/eval/eval_results.json, pretrain_eval.py's default output
    prefix = TASKS[task].checkpoint_prefix if task in TASKS else ""
    beside = "pretrain_eval.json" if task == "pretrain" else os.path.join("eval", "eval_results.json")
    values, digest = read_checkpoint_and_digest(checkpoint)
    check_task(values, task, task_config, checkpoint, source, by_flag=bool(args.task))
    evaluation = find_eval_results(args.eval_results, checkpoint, prefix, digest, beside)
    check_evaluation(evaluation.values, task, args.task_name, args.eval_results or f"the run's {beside}")
    net = network_config(task_config, None, config_beside(checkpoint))
    check_expressible(net)
    check_vocabulary(tokenizer, values, checkpoint)
    check_trained_tokenizer(values, tokenizer, checkpoint)
    hf_class = HF_CLASSES[task]
    tensors = hf_tensors(values, task, task_config, net, checkpoint)
    labels = task_labels(tensors, args.task_name, task)
    config = hf_config(net, hf_class, task_config, tokenizer, labels)
    card = card_facts(args, task, hf_class, net, values, tensors, labels, tokenizer, evaluation, folder,
                      training_settings(values, settings_file, task_config))
    files = {"config.json": (json.dumps(config, indent=2, ensure_ascii=False) + "\n").encode("utf-8"),
             "README.md": model_card(card).encode("utf-8")}
    if tokenizer is not None:
        files.update(tokenizer_files(tokenizer, net.max_position_embeddings))
    write_model_folder(folder, tensors, files, args.overwrite)
    notes = [f"{hf_class.unread}* left out: {hf_class.why_unread}"] if hf_class.unread else []
    notes.append("model card README.md: " + (f"the metrics of {card.evaluation.source}" if card.evaluation.values
                                             else f"no evaluation results ({card.evaluation.source})"))
    if tokenizer is None:
        notes.append("no tokenizer files: pass the vocabulary the model was trained with (--spm_model_file or "
                     "--vocab_file) to write them beside the model")
    return HfExport(folder, hf_class, net, sorted(["model.safetensors", *files]), notes)


def card_facts(args: Config, task: str, hf_class: HfClass, net, values: Dict[str, object],
               tensors: Dict[str, np.ndarray], labels: Dict[str, object], tokenizer: Optional[FullTokenizer],
               evaluation: EvalResults, folder: str, settings: Optional[Tuple[str, Config]]) -> CardFacts:
    """What the model card of this export says (src/export/model_card.py)."""
    from src.training.step_plan import PLAN_KEYS

    checkpoint = args.export_ckpt_file
    task_name = (args.task_name or str((evaluation.values or {}).get("task", ""))) if task == "classifier" else ""
    return CardFacts(os.path.basename(os.path.abspath(folder)), task, hf_class.architecture, hf_class.pipeline, net,
                     sum(int(value.size) for value in tensors.values()), labels, task_name, checkpoint,
                     checkpoint_progress(values, ("micro_step", *PLAN_KEYS)), tokenizer is not None, evaluation,
                     settings, args.license, args.base_model,
                     vocabulary_language(list(tokenizer.vocab)) if tokenizer is not None else "")


def training_settings(values: Dict[str, object], settings_file: str,
                      task_config: Config) -> Optional[Tuple[str, Config]]:
    """(where they come from, the settings) a model card tells of the training: those the run recorded in its
    checkpoint, else the yaml given to the export as the run's (its defaults, not the flags the run was given)."""
    recorded = values.get("run_settings")
    if recorded is not None:
        return ("the run that wrote the checkpoint (recorded in it)", Config(json.loads(str(recorded))))
    if settings_file:
        return (f"`{os.path.basename(settings_file)}`, the yaml the export was given as the run's (the checkpoint "
                f"records no settings, so flags given to the run are not shown)", task_config)
    return None


def read_tokenizer(args: Config) -> Optional[FullTokenizer]:
    """Our tokenizer as the data tools built it (keep_accents is never set there), or None without a vocabulary."""
    if not (args.spm_model_file or args.vocab_file):
        return None
    return FullTokenizer(args.vocab_file or None, args.do_lower_case, args.spm_model_file or None)


def check_task(values: Dict[str, object], task: str, task_config: Config, checkpoint: str, source: str,
               by_flag: bool) -> None:
    """The checkpoint must hold the heads of `task`: the pretraining heads for pretrain, else the fine-tuned head."""
    heads = [prefix for prefix in HEAD_OWNERS if any(name.startswith(prefix) for name in values)]
    pretraining = any(name.startswith(HF_HEADS) for name in values)
    named = ", ".join(prefix + "*" for prefix in HF_HEADS)
    if task == "pretrain":
        if heads:
            raise UserError(f"{checkpoint} holds a {HEAD_OWNERS[heads[0]]} head ({heads[0]}*), not the pretraining "
                            f"heads ({named}): use {fitting_task(values, heads[0])}")
        return
    if pretraining and not heads:
        raise UserError(f"{checkpoint} is a pretraining checkpoint ({named}), not a {task} head: export it with "
                        f"--task pretrain, or fine-tune it with run_{task}.py first")
    check_head(values, task, task_config, checkpoint, source, by_flag)


def check_expressible(net) -> None:
    """HF's ALBERT shares whole layer groups, normalises after each block and runs at most layers-per-group inner
    layers in a group; other networks have no HF class."""
    if net.share_type != "all":
        raise UserError(f"the network's share_type {net.share_type} has no HF transformers counterpart (HF's ALBERT "
                        f"shares whole layer groups: share_type all)")
    if net.ln_type != "postln":
        raise UserError(f"the network's ln_type {net.ln_type} has no HF transformers counterpart (HF's ALBERT "
                        f"normalises after each block: ln_type postln)")
    per_group = net.num_hidden_layers // net.num_hidden_groups
    if net.inner_group_num > per_group:
        raise UserError(f"the network's inner_group_num {net.inner_group_num} exceeds its layers per group "
                        f"({net.num_hidden_layers} // {net.num_hidden_groups} = {per_group}): HF transformers' ALBERT "
                        f"cannot run it (it gives each group only that many layers)")


def check_vocabulary(tokenizer: Optional[FullTokenizer], values: Dict[str, object], checkpoint: str) -> None:
    """The vocabulary must be the one the embeddings were trained with: at least its size must match."""
    table = values.get("albert.embeddings.word_embeddings.embedding_table")
    if tokenizer is None or table is None:
        return  # without a table, loading names the missing weight
    rows = int(table.shape[0])
    if tokenizer.vocab_size != rows:
        raise UserError(f"{tokenizer.model_file} holds {tokenizer.vocab_size} tokens but the word embeddings of "
                        f"{checkpoint} have {rows} rows: pass the vocabulary the model was trained with")


def hf_tensors(values: Dict[str, object], task: str, task_config: Config, net, checkpoint: str
               ) -> Dict[str, np.ndarray]:
    """HF's name -> value of every weight of our network for `task`, loaded from `values` (every parameter must be
    there, in its shape); checkpoint weights the network has no place for are an error."""
    from src.common.checkpoint_io import load_weights
    from src.model.albert import PORTABLE
    from src.model.pretraining_heads import AlbertPreTraining
    from src.serving.finetuned_heads import build_head

    if task == "pretrain":
        network = AlbertPreTraining(net)
        network.set_train(False)
        load_weights(network, values, name=checkpoint)
    else:
        network = build_head(values, task, task_config, net, PORTABLE, checkpoint)
    params = {param.name for param in network.get_parameters()}
    stray = sorted(name for name in values if name.startswith(WEIGHT_PREFIXES) and name not in params)
    if stray:
        raise UserError(f"{checkpoint}: weights that HF's {HF_CLASSES[task].architecture} has no place for: "
                        f"{stray[0]}" + (f" and {len(stray) - 1} more" if len(stray) > 1 else ""))
    unread = HF_CLASSES[task].unread
    return {name_in_hf(param.name): np.ascontiguousarray(param.asnumpy(), dtype=np.float32)
            for param in network.get_parameters() if not (unread and param.name.startswith(unread))}


def task_labels(tensors: Dict[str, np.ndarray], task_name: str, task: str) -> Dict[str, object]:
    """config.json's label keys of a classifier: the label names of `task_name` (a task of src.data.tsv_tasks),
    else 0..n-1 as src.predict names them; regression (one output, STS-B) as problem_type regression."""
    if task != "classifier":
        return {}
    from src.data.tsv_tasks import label_list

    classes = int(tensors["classifier.weight"].shape[0])
    names = label_list(task_name) if task_name else None
    if task_name and len(names or ["score"]) != classes:
        raise UserError(f"--task_name {task_name} has {len(names or ['score'])} label(s) but the checkpoint's "
                        f"classifier has {classes} output(s)")
    names = names or [str(i) for i in range(classes)]
    return {"id2label": {str(i): name for i, name in enumerate(names)},
            "label2id": {name: i for i, name in enumerate(names)},
            "problem_type": "regression" if classes == 1 else "single_label_classification"}


def hf_config(net, hf_class: HfClass, task_config: Config, tokenizer: Optional[FullTokenizer],
              labels: Dict[str, object]) -> Dict[str, object]:
    """config.json: every key of transformers' AlbertConfig (ours under the names HF shares, the activation by HF's
    name), the architecture, the special token ids of the tokenizer and, for a classifier, its labels."""
    from src.model.albert import AlbertConfig, HF_ACTIVATIONS

    shared = {field.name: getattr(net, field.name) for field in fields(AlbertConfig) if field.name not in OURS_ONLY}
    ours = "gelu_new" if net.hidden_act == "gelu" else net.hidden_act  # Google's "gelu" is the tanh form
    special = dict(ALBERT_SPECIAL_IDS) if tokenizer is None else {
        "pad_token_id": tokenizer.pad_id, "bos_token_id": tokenizer.cls_id, "eos_token_id": tokenizer.sep_id}
    config = {"architectures": [hf_class.architecture], "model_type": "albert", **shared,
              "hidden_act": next(hf for hf, mapped in HF_ACTIVATIONS.items() if mapped == ours),
              "classifier_dropout_prob": task_config.get("classifier_dropout_prob", 0.1),
              "position_embedding_type": "absolute", **special, **labels,
              "transformers_version": TRANSFORMERS_FORMAT}
    if tokenizer is not None and tokenizer.kind == "wordpiece":
        config["tokenizer_class"] = "BertTokenizer"
    return config


def write_model_folder(folder: str, tensors: Dict[str, np.ndarray], files: Dict[str, bytes],
                       overwrite: bool = False) -> None:
    """model.safetensors (with the "pt" format mark transformers checks) and `files`, all in a hidden folder renamed
    into place (see publish_folder) in the folder claimed for this run (claimed_folder_of); `overwrite`: an earlier
    export there (only OUTPUT_FILES) is replaced whole, so no file of it stays beside the new one."""
    from safetensors.numpy import save_file

    def fill(staging: str) -> None:
        save_file(tensors, os.path.join(staging, "model.safetensors"), metadata={"format": "pt"})
        for name, content in files.items():
            with open(os.path.join(staging, name), "wb") as handle:
                handle.write(content)

    with claimed_folder_of(folder, "export_file_name"):
        publish_folder(folder, fill, OUTPUT_FILES.__contains__ if overwrite else None)


def summary_lines(task: str, checkpoint: str, done: HfExport) -> List[str]:
    """What export.py prints after an HF export."""
    return [f"exported the {task} network of {checkpoint} ({done.net.num_hidden_layers} layers, hidden "
            f"{done.net.hidden_size}) for HF transformers as "
            f"{done.hf_class.architecture}: {done.folder} ({', '.join(done.files)})",
            f"load it with transformers.{done.hf_class.auto_class}.from_pretrained({done.folder!r})" +
            (f" and transformers.AutoTokenizer.from_pretrained({done.folder!r})" if "tokenizer_config.json" in
             done.files else "")] + [f"note: {note}" for note in done.notes]
