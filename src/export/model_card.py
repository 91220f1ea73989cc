"""The model card (README.md) of an HF export, so that the folder can be published as it is: the metadata the Hugging
Face Hub reads (YAML between `---` lines: library, tags, pipeline, data sets, metrics and their values, base model,
license) and what a reader needs (what the model is, how it was trained and evaluated, its license, how to run it).

It says only what the export knows, and where it comes from: the network and, for a run's checkpoint, the training
progress it carries (step, batch, rows, seed); the task yaml given with --config_path, labelled as such (the flags of
the training command are recorded nowhere); the metrics of the run's eval_results.json (--eval_results, else the
OUTPUT_DIR/eval/eval_results.json of the run whose OUTPUT_DIR/checkpoints holds the checkpoint, when it evaluated
this very checkpoint); --license and --base_model. No path of the exporting machine is written, only file names.
Written with PyYAML; the tests read it back with huggingface_hub's ModelCard.
"""
import json
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import yaml

from model_utils import json_input
from model_utils.config import Config, flatten
from model_utils.errors import UserError

# GLUE's tasks as src.create_finetune_data names them -> the Hub data set's config (the split evaluated on comes from
# the evaluated data's .meta.json, where it is at hand: run_*.py evaluates whatever data it is given)
GLUE_CONFIGS = {"cola": "cola", "sst-2": "sst2", "mrpc": "mrpc", "qqp": "qqp", "mnli": "mnli", "mnli-mm": "mnli",
                "qnli": "qnli", "rte": "rte", "wnli": "wnli", "sts-b": "stsb"}
TASK_DATASETS = {"race": ("ehovy/race", "RACE"), "squad_v1": ("rajpurkar/squad", "SQuAD v1.1")}
GLUE = "nyu-mll/glue"
HUB_METRICS = {"mcc": "matthews_correlation", "macro_f1": "f1", "pearson_correlation": "pearsonr",
               "spearman_correlation": "spearmanr"}  # ours -> the Hub's metric id (the rest are the same)
NOT_METRICS = ("score", "examples", "rows", "devices", "questions", "total", "masked_tokens")  # evaluation bookkeeping
TRAINING_KEYS = ("optimizer", "train_steps", "epoch_num", "epoch_size", "batch_size", "train_batch_size",
                 "accumulation_steps", "classifier_dropout_prob", "seed")
ALBERT_LICENSE = "apache-2.0"  # Google's ALBERT weights and the albert_zh releases


@dataclass
class EvalResults:
    """A run's eval_results.json as the card reports it, or why there is none."""

    values: Optional[Dict[str, object]]
    source: str  # the file's name, or why none was used


@dataclass
class CardFacts:
    """What the card says about one export."""

    name: str  # the folder's name
    task: str
    architecture: str
    pipeline: str
    net: object  # the AlbertConfig
    parameters: int
    labels: Dict[str, object]  # config.json's id2label... of a classifier
    task_name: str
    checkpoint: str
    progress: Dict[str, int]  # the training progress the checkpoint carries (empty for weights only)
    tokenizer: bool
    evaluation: EvalResults
    settings: Optional[Tuple[str, Config]]  # (where they come from, values): recorded by the run, or its yaml
    license: str
    base_model: str
    language: str = ""  # the Hub's code of the vocabulary's language, where it tells (vocabulary_language)


def model_card(facts: CardFacts) -> str:
    """README.md: the YAML metadata, then the card."""
    metadata = yaml.safe_dump(card_metadata(facts), sort_keys=False, allow_unicode=True, width=1000)
    sections = [[f"# {facts.name}", "", summary(facts)], ["## Training", "", *training_lines(facts)],
                ["## Evaluation", "", *evaluation_lines(facts)], ["## Usage", "", *usage_lines(facts)],
                ["## License", "", license_line(facts)]]
    return f"---\n{metadata}---\n\n" + "\n\n".join("\n".join(section) for section in sections) + "\n"


def dataset_of(facts: CardFacts) -> Optional[Dict[str, str]]:
    """The Hub data set (type, name, config) of the task, where it is known."""
    if facts.task_name in GLUE_CONFIGS:
        return {"type": GLUE, "name": f"GLUE {facts.task_name.upper()}", "config": GLUE_CONFIGS[facts.task_name]}
    if facts.task in TASK_DATASETS:
        hub_id, name = TASK_DATASETS[facts.task]
        return {"type": hub_id, "name": name}
    return None


def evaluated_split(values: Optional[Dict[str, object]]) -> str:
    """The split the evaluation ran on, as the .meta.json of its data says (src.create_finetune_data records it),
    else "": scores on training data are then not published as if they were the benchmark's."""
    from src.data.pipelines import load_data_meta

    data = (values or {}).get("data")
    if not isinstance(data, str):
        return ""
    try:
        split = load_data_meta(data).get("split")
    except (UserError, OSError):  # the data is not on this machine
        return ""
    return split if isinstance(split, str) else ""


def published_metrics(values: Optional[Dict[str, object]]) -> List[Tuple[str, float]]:
    """(our name, value) of every metric of an eval_results.json."""
    return [(key, float(value)) for key, value in (values or {}).items()
            if key not in NOT_METRICS and isinstance(value, (int, float)) and not isinstance(value, bool)]


def card_metadata(facts: CardFacts) -> Dict[str, object]:
    dataset = dataset_of(facts)
    metrics = published_metrics(facts.evaluation.values)
    metadata: Dict[str, object] = {"library_name": "transformers"}
    if facts.license:
        metadata["license"] = facts.license
    if facts.language:
        metadata["language"] = [facts.language]
    metadata["tags"] = ["albert", "mindspore", facts.pipeline] + ([facts.task_name] if facts.task_name else [])
    metadata["pipeline_tag"] = facts.pipeline
    if dataset:
        metadata["datasets"] = [dataset["type"]]
    if facts.base_model:
        metadata["base_model"] = facts.base_model
    if metrics:
        metadata["metrics"] = list(dict.fromkeys(HUB_METRICS.get(name, name) for name, _ in metrics))
    split = evaluated_split(facts.evaluation.values)
    if metrics and dataset:
        dataset = {**dataset, "split": split} if split else dataset
        metadata["model-index"] = [{"name": facts.name, "results": [{
            "task": {"type": facts.pipeline}, "dataset": dataset,
            "metrics": [{"type": HUB_METRICS.get(name, name), "name": name, "value": value}
                        for name, value in metrics]}]}]
    return metadata


def summary(facts: CardFacts) -> str:
    net = facts.net
    what = {"pretrain": "pretrained (masked-LM and sentence-order heads)", "classifier": "fine-tuned for "
            f"{facts.task_name.upper() or 'sentence (pair) classification'}", "race": "fine-tuned for multiple "
            "choice (RACE)", "squad_v1": "fine-tuned for extractive question answering (SQuAD v1.1)"}[facts.task]
    labels = f" Labels: {', '.join(map(str, facts.labels['id2label'].values()))}." if facts.labels else ""
    return (f"An ALBERT model {what}, trained with MindSpore (ALBERT for MindSpore) and exported as transformers' "
            f"`{facts.architecture}`: {net.num_hidden_layers} layers in {net.num_hidden_groups} shared group(s), "
            f"hidden size {net.hidden_size}, embedding size {net.embedding_size}, {net.num_attention_heads} attention "
            f"heads, vocabulary of {net.vocab_size}, up to {net.max_position_embeddings} positions; "
            f"{facts.parameters:,} parameters.{labels}")


def training_lines(facts: CardFacts) -> List[str]:
    """The checkpoint's progress, and the run's settings: recorded in the checkpoint, else the yaml the export was
    given as the run's."""
    progress = facts.progress
    name = os.path.basename(facts.checkpoint)
    if progress:
        batch = progress["batch_size"] * progress["group_size"] * progress["accumulation_steps"]
        step = progress["micro_step"] // progress["accumulation_steps"]
        lines = [f"From the checkpoint `{name}`: optimizer step {step}, global batch {batch} ({progress['batch_size']} "
                 f"x {progress['group_size']} device(s) x {progress['accumulation_steps']} accumulation step(s)), "
                 f"{progress['rows']} training rows ({step * batch / max(progress['rows'], 1):.2f} epochs), data "
                 f"seed {progress['seed']}."]
    else:
        lines = [f"From `{name}`, a checkpoint of weights only (it records no training progress)."]
    if facts.settings is None:
        return lines + ["", "The training settings (optimizer, learning rate, schedule) were not given to the export "
                            "(its --config_path takes the yaml of the run)."]
    source, config = facts.settings
    flat = flatten(config.to_dict())
    chosen = [key for key in TRAINING_KEYS if key in flat]
    chosen += [key for key in flat if key.startswith(f"optimizer_cfg.{flat.get('optimizer')}.")]
    return lines + ["", f"Settings of {source}:", "", "| setting | value |", "|---|---|",
                    *[f"| `{key}` | {flat[key]} |" for key in chosen]]


def evaluation_lines(facts: CardFacts) -> List[str]:
    values = facts.evaluation.values
    if values is None:
        return [f"No evaluation results: {facts.evaluation.source}."]
    data = os.path.basename(str(values.get("data", ""))) or "its evaluation data"
    count = values.get("examples", values.get("questions", values.get("rows")))
    lines = [f"From `{facts.evaluation.source}` (the run's evaluation on {data}"
             + (f", {count} examples" if count is not None else "") + "):", "", "| metric | value |", "|---|---|"]
    return lines + [f"| {name} | {value:.4f} |" for name, value in published_metrics(values)]


PIPELINES = {"pretrain": 'fill = pipeline("fill-mask", model=MODEL)',
             "classifier": 'classify = pipeline("text-classification", model=MODEL)',
             "squad_v1": 'answer = pipeline("question-answering", model=MODEL)'}
EXAMPLES = {  # a call of each pipeline, on text the model's vocabulary reads ("" = English, "zh" = Chinese)
    "": {"pretrain": 'print(fill("The capital of France is [MASK]."))',
         "classifier": 'print(classify({"text": "The cat sat.", "text_pair": "A cat was sitting."}))',
         "squad_v1": 'print(answer(question="Who wrote it?", context="It was written by Ada in 1843."))'},
    "zh": {"pretrain": 'print(fill("北京是中国的首[MASK]。"))',
           "classifier": 'print(classify({"text": "今天天气怎么样？", "text_pair": "今天天气如何？"}))',
           "squad_v1": 'print(answer(question="这本书是谁写的？", context="这本书是艾达在1843年写的。"))'},
}
RACE_USAGE = ["import torch", "from transformers import AutoModelForMultipleChoice, AutoTokenizer", "",
              'MODEL = "user/model"  # or the folder', "tokenizer = AutoTokenizer.from_pretrained(MODEL)",
              "model = AutoModelForMultipleChoice.from_pretrained(MODEL)",
              'article, question = "Tom went home early.", "Tom went home _ ."',
              'options = ["early", "late", "never", "twice"]',
              "# as the fine-tuning data: the article, then the question with the option in its _ blank (or after it)",
              'pairs = [question.replace("_", o) if "_" in question else f"{question} {o}" for o in options]',
              'inputs = tokenizer([article] * len(options), pairs, truncation="only_first", padding=True, '
              'return_tensors="pt")',
              "with torch.no_grad():",
              "    logits = model(**{key: value.unsqueeze(0) for key, value in inputs.items()}).logits",
              'print("ABCD"[logits.argmax(-1).item()])']


def usage_lines(facts: CardFacts) -> List[str]:
    code = RACE_USAGE if facts.task == "race" else \
        ["from transformers import pipeline", "", 'MODEL = "user/model"  # or the folder', PIPELINES[facts.task],
         EXAMPLES[facts.language if facts.language in EXAMPLES else ""][facts.task]]
    tokenizer = "" if facts.tokenizer else ("This folder holds no tokenizer files (the export was given no "
                                            "vocabulary): save the tokenizer the model was trained with beside it "
                                            "first. ")
    return [f"{tokenizer}With transformers and torch (neither MindSpore nor sentencepiece is needed):", "",
            "```python", *code, "```"]


def vocabulary_language(tokens: Sequence[str]) -> str:
    """"zh" for a vocabulary mostly of CJK characters (albert_zh's: ~14,000 of its 21,128 tokens) with few tokens
    of Japanese kana or Korean Hangul (albert_zh's: 553 kana; a Japanese vocabulary, which writes kanji too, has far
    more), else "": the script alone cannot tell English from another language written in Latin letters."""
    def share(low: str, high: str) -> float:
        return sum(1 for token in tokens if any(low <= char <= high for char in token)) / max(len(tokens), 1)

    other = share("\u3040", "\u30ff") + share("\uac00", "\ud7af")
    return "zh" if share("\u4e00", "\u9fff") > 0.3 and other < 0.1 else ""


def license_line(facts: CardFacts) -> str:
    if not facts.license:
        return ("Not set: the license is that of the weights it started from; export again with --license (ALBERT's "
                "public weights, Google's and albert_zh's, are Apache-2.0).")
    return (f"`{facts.license}`: the license of the weights it started from (ALBERT's public weights, Google's and "
            f"albert_zh's, are Apache-2.0; --license sets another).")


def read_eval_results(path: str) -> Dict[str, object]:
    """An eval_results.json: a JSON object (one line naming the file otherwise)."""
    try:
        with open(path, encoding="utf-8") as handle:
            values = json_input.load(handle)
    except json.JSONDecodeError as err:
        raise UserError(f"{path} line {err.lineno}: malformed json ({err.msg})") from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text") from None
    if not isinstance(values, dict):
        raise UserError(f"{path}: not an eval_results.json (a JSON object of metrics), got {type(values).__name__}")
    return values


def evaluation_kind(values: Dict[str, object]) -> str:
    """Which evaluation an eval_results.json is, by the metrics only it holds: "pretrain" (pretrain_eval.py),
    "squad", "race" or "classifier" (the fine-tuning runs); "" when none fits."""
    if "masked_lm_accuracy" in values:
        return "pretrain"
    if "exact_match" in values or "exact" in values:
        return "squad"
    if "assessment_method" in values:
        return "race" if values.get("task") == "race" else "classifier"
    return ""


def check_evaluation(values: Optional[Dict[str, object]], task: str, task_name: str, source: str) -> None:
    """The evaluation a card publishes must be of the exported model's task (and GLUE task, when --task_name names
    one): another run's metrics would be published under this model's name."""
    kind = evaluation_kind(values or {})
    if kind and kind != ("squad" if task.startswith("squad") else task):
        raise UserError(f"{source} holds a {kind} evaluation, not one of the {task} model exported: pass the "
                        f"eval_results.json of this model's run")
    recorded = str((values or {}).get("task") or "")
    if task_name and kind == "classifier" and recorded and recorded != task_name:
        raise UserError(f"--task_name {task_name} but {source} is the evaluation of {recorded}: drop --task_name, or "
                        f"pass the evaluation of the {task_name} run")


def find_eval_results(given: str, checkpoint: str, prefix: str, digest: str,
                      beside: str = os.path.join("eval", "eval_results.json")) -> EvalResults:
    """--eval_results when given; else the run's evaluation `beside` in OUTPUT_DIR (a fine-tuning run's
    eval/eval_results.json, pretrain_eval.py's pretrain_eval.json), the checkpoint being in OUTPUT_DIR/checkpoints,
    when it evaluated this checkpoint: the same weights (`digest`, the checkpoint's contents_digest, as evaluations
    record it), or for evaluations of older versions, named as its checkpoint or as the run's own final weights
    (the newest `prefix` checkpoint of the folder)."""
    if given:
        if not os.path.isfile(given):
            raise UserError(f"eval_results not found: {given}")
        return EvalResults(read_eval_results(given), os.path.basename(given))
    folder = os.path.dirname(os.path.abspath(checkpoint))
    name = os.path.basename(beside)
    path = os.path.join(os.path.dirname(folder), beside)
    if not os.path.isfile(path):
        return EvalResults(None, f"no {name} in the checkpoint's run (OUTPUT_DIR/{beside}) and no --eval_results")
    values = read_eval_results(path)
    if values.get("checkpoint_sha256"):
        if values["checkpoint_sha256"] == digest:
            return EvalResults(values, name)
        return EvalResults(None, f"the run's {name} is of other weights than {os.path.basename(checkpoint)}'s "
                                 f"(--eval_results takes it anyway)")
    recorded = evaluated_checkpoint(values.get("checkpoint"), folder, prefix)
    if not (os.path.isfile(recorded) and os.path.samefile(recorded, checkpoint)):
        which = os.path.basename(recorded) or "another checkpoint"
        return EvalResults(None, f"the run's {name} is of {which}, not of {os.path.basename(checkpoint)} "
                                 f"(--eval_results takes it anyway)")
    return EvalResults(values, name)


def evaluated_checkpoint(recorded: object, folder: str, prefix: str) -> str:
    """The checkpoint an older eval_results.json's `checkpoint` names: a path, or the run's own final weights,
    which the run saved last as the newest `prefix` checkpoint of its checkpoint folder `folder`."""
    from src.training.checkpoints import list_checkpoints
    from src.training.finetune import RUN_WEIGHTS

    if recorded == RUN_WEIGHTS:
        newest = list_checkpoints(folder, prefix)
        return newest[-1][1] if newest else ""
    return recorded if isinstance(recorded, str) else ""


def checkpoint_progress(values: Dict[str, object], keys: Sequence[str]) -> Dict[str, int]:
    """The training progress a run's checkpoint carries (`keys`, all of them), else {}."""
    if not all(key in values for key in keys):
        return {}
    return {key: int(np.asarray(values[key])) for key in keys}
