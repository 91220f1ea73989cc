"""The fine-tuning tasks, each defined once: its yaml, columns, head and loss, the checks of its data, how its
outputs become predictions and metrics, and what its export looks like (inputs, outputs, the head's parameter
prefix). `src/training/finetune.py` runs any of them; the run_*.py scripts, `export.py` and `src/predict.py` look them
up in `TASKS`.

The network classes, the data pipelines, the metrics and SQuAD's reporting are imported where they are used, not
here: the entry points' `--help` and input checks stay free of MindSpore's import (seconds), and serving a classifier
loads nothing of SQuAD or of training. The columns come from the record schemas (src/data/schema.py).
"""
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from model_utils.config import Config
from model_utils.errors import UserError
from src.common.atomic_files import save_text_atomic
from src.data import schema
from src.data.tokenization import checkpoint_record, checkpoint_tokenizer, same_ids, tokenizer_record

ROOT = Path(__file__).resolve().parents[2]
# (config, outputs of the head for every row, data file, output folder, score against labels?, log) -> metrics
Report = Callable[[Config, List[np.ndarray], str, str, bool, Callable[[str], None]], Dict[str, object]]
Signature = List[Tuple[str, str, List[object]]]  # (name, dtype, shape) of each input or output


def _no_check(*args) -> None:
    return None


@dataclass(frozen=True)
class Task:
    name: str
    config_file: Path
    description: str
    train_columns: Sequence[str]
    eval_columns: Sequence[str]
    head_inputs: Sequence[str]  # eval columns given to the head, in its argument order
    dataset: Callable[..., object]  # (config, data, batch_size, is_training, indices) -> batched dataset
    build_model: Callable[[Config, object, bool, object], object]  # (config, AlbertConfig, is_training, Runtime)
    build_loss: Callable[[Config, object], object]  # (config, head) -> network with loss (train columns in)
    report: Report
    head_prefix: str  # parameter names only this head has (classifier and RACE share theirs)
    head_title: str  # the head in messages about a checkpoint that holds it
    outputs: Callable[[Config, object, int], Signature]  # (config, batch, seq) -> what the exported head returns
    check_data: Callable[[Config, dict, Sequence[int], str], None] = _no_check  # (config, meta, row shape, path)
    check_eval_inputs: Callable[[Config, str, str], None] = _no_check  # (config, data file, action)
    choices: bool = False  # rows are [choices, seq] (RACE)

    @property
    def checkpoint_prefix(self) -> str:
        return f"albert_{self.name}"

    def input_shape(self, config: Config, batch: Optional[int], seq: int) -> List[Optional[int]]:
        """The shape of each exported input."""
        return [batch, config.num_class, seq] if self.choices else [batch, seq]


# ------------------------------------------------------------------------------------- classification / regression
def classifier_dataset(config: Config, data, batch_size: int, is_training: bool, indices):
    from src.data.pipelines import create_classification_dataset
    return create_classification_dataset(data, batch_size, is_training, regression=config.num_class == 1,
                                         indices=indices)


def classifier_model(config: Config, net, is_training: bool, runtime):
    from src.model.task_heads import AlbertForSequenceClassification

    return AlbertForSequenceClassification(net, config.num_class, config.classifier_dropout_prob, is_training,
                                           runtime)


def classifier_loss(config: Config, model):
    from src.model.task_losses import AlbertClassifierWithLoss

    return AlbertClassifierWithLoss(model, regression=config.num_class == 1)


def check_labels(config: Config, meta: dict, shape, path: str) -> None:
    """num_class must equal the data's label count (1 for the regression task sts-b)."""
    if "task_name" not in meta:
        return
    labels = meta.get("label_list")
    count = len(labels) if labels else 1
    if count != config.num_class:
        raise UserError(f"{path}: task {meta['task_name']} has {count} label(s) ({labels or 'regression'}) but num_class "
                        f"is {config.num_class}")


def check_classifier_eval_data(config: Config, data_file: str, action: str) -> None:
    from src.data.pipelines import load_data_meta
    check_labels(config, load_data_meta(data_file), (), data_file)
    if action == "eval":
        check_assessment_method(config)


def classification_report(config: Config, outputs: List[np.ndarray], data_file: str, folder: str, score: bool,
                          log: Callable[[str], None]) -> Dict[str, object]:
    """predictions.tsv (row, predicted label, then each label's probability or the regression value, and the
    example's id where the data's .examples.jsonl names it) and, when scoring, every metric that applies
    (classification: accuracy, f1, macro_f1, mcc; regression: pearson and spearman correlation) with the yaml's
    assessment_method as `score`."""
    from src.data.pipelines import load_data_meta, read_column_as_made
    from src.tasks.assessment_method import METHODS
    logits = outputs[0]
    regression = config.num_class == 1
    meta = load_data_meta(data_file)
    names = _label_names(meta, logits.shape[1])
    if regression:
        predictions = logits[:, 0]
        lines = ["row\tprediction"] + [f"{row}\t{value:.6f}" for row, value in enumerate(predictions)]
    else:
        predictions = logits.argmax(-1)
        probabilities = np.exp(logits - logits.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        lines = ["row\tprediction\t" + "\t".join(f"p_{name}" for name in names)]
        lines += [f"{row}\t{names[label]}\t" + "\t".join(f"{p:.6f}" for p in probs)
                  for row, (label, probs) in enumerate(zip(predictions, probabilities))]
    ids = _example_ids(data_file, len(predictions))
    if ids:
        lines = [f"{line}\t{example}" for line, example in zip(lines, ["id", *ids])]
    path = os.path.join(folder, "predictions.tsv")
    save_text_atomic("\n".join(lines) + "\n", path)
    log(f"wrote {path}")
    if not score:
        return {}
    labels = read_column_as_made(data_file, "label_ids")
    applicable = ("pearson_correlation", "spearman_correlation") if regression else \
        ("accuracy", "f1", "macro_f1", "mcc") if len(names) == 2 else ("accuracy", "macro_f1", "mcc")
    metrics = {name: METHODS[name](labels, predictions) for name in applicable}
    result = {"task": meta.get("task_name", ""), "assessment_method": config.assessment_method,
              "score": metrics[config.assessment_method], **metrics, "examples": int(len(labels))}
    log(f"{config.assessment_method}: {result['score']:.4f} on {len(labels)} examples")
    if not regression and len(set(predictions.tolist())) == 1 < len(set(labels.tolist())):
        log(f"warning: all {len(predictions)} predictions are {names[predictions[0]]!r} while the labels hold "
            f"{len(set(labels.tolist()))} classes: the classifier learned only one class (too few steps, a learning "
            f"rate too low or too high, or imbalanced training data?)")
    return result


def _example_ids(data_file: str, rows: int) -> List[str]:
    """The id of the example behind each row (RACE's question ids such as high-1234.txt-0, GLUE's split-row), from
    the .examples.jsonl that src.create_finetune_data writes beside the data; none for data without it (was: RACE's
    predictions named their questions by row only)."""
    from src.data.pipelines import creation_order
    from src.tasks.squad_answers import EXAMPLES_SUFFIX, sidecar_base
    if not creation_order(data_file)[1]:  # rows in file order: the sidecar's order would name other examples
        return []
    try:
        examples = f"{sidecar_base(data_file)}{EXAMPLES_SUFFIX}"
        with open(examples, encoding="utf-8") as handle:
            ids = [str(json.loads(line).get("guid", "")) for line in handle if line.strip()]
    except (UserError, OSError, ValueError, AttributeError):
        return []
    return ids if len(ids) == rows and all(ids) else []


def _label_names(meta: dict, width: int) -> List[str]:
    names = meta.get("label_list")
    return [str(name) for name in names] if names and len(names) == width else [str(i) for i in range(width)]


def check_assessment_method(config: Config) -> None:
    regression = config.num_class == 1
    wanted = ("pearson_correlation", "spearman_correlation") if regression else ("accuracy", "f1", "macro_f1", "mcc")
    if config.assessment_method not in wanted:
        kind = "regression (num_class 1)" if regression else "classification"
        raise UserError(f"assessment_method {config.assessment_method} does not fit {kind}; use one of "
                        f"{', '.join(wanted)}")
    if config.assessment_method == "f1" and config.num_class != 2:
        raise UserError(f"assessment_method f1 is binary F1; with num_class {config.num_class} use macro_f1")


# ------------------------------------------------------------------------------------------------------------ RACE
def race_dataset(config: Config, data, batch_size: int, is_training: bool, indices):
    from src.data.pipelines import create_race_dataset
    return create_race_dataset(data, batch_size, is_training, indices=indices)


def race_model(config: Config, net, is_training: bool, runtime):
    from src.model.task_heads import AlbertForMultipleChoice

    return AlbertForMultipleChoice(net, config.classifier_dropout_prob, is_training, runtime)


def check_choices(config: Config, meta: dict, shape, path: str) -> None:
    """Rows are [choices, seq]: num_class must equal the data's number of choices."""
    if len(shape) != 2:
        raise UserError(f"{path}: rows of shape {list(shape)} are not RACE data ([choices, seq]); create it with "
                        f"src.create_finetune_data --task_name race")
    if shape[0] != config.num_class:
        raise UserError(f"{path}: {shape[0]} choices per question but num_class is {config.num_class}")


def check_race_eval_data(config: Config, data_file: str, action: str) -> None:
    from src.data.pipelines import check_schema
    check_choices(config, {}, check_schema(data_file, "", schema.RACE.without("is_real_example")), data_file)
    if config.assessment_method not in ("accuracy", "macro_f1", "mcc"):
        raise UserError(f"assessment_method {config.assessment_method} does not fit RACE; use accuracy")


# ----------------------------------------------------------------------------------------------------------- SQuAD


def squad_dataset(config: Config, data, batch_size: int, is_training: bool, indices):
    from src.data.pipelines import create_squad_dataset
    return create_squad_dataset(data, batch_size, is_training, indices=indices)


def squad_v1_model(config: Config, net, is_training: bool, runtime):
    from src.model.task_heads import AlbertForQuestionAnswering

    return AlbertForQuestionAnswering(net, is_training, runtime)


def squad_v1_loss(config: Config, model):
    from src.model.task_losses import AlbertSquadWithLoss

    return AlbertSquadWithLoss(model)


def squad_v2_model(config: Config, net, is_training: bool, runtime):
    from src.model.task_heads import AlbertForSquadV2

    return AlbertForSquadV2(net, config.classifier_dropout_prob, is_training, config.start_n_top, config.end_n_top,
                            runtime)


def squad_v2_loss(config: Config, model):
    from src.model.task_losses import AlbertSquadV2WithLoss

    return AlbertSquadV2WithLoss(model)


def squad_report(config: Config, outputs: List[np.ndarray], data_file: str, folder: str, score: bool,
                 log: Callable[[str], None]) -> Dict[str, object]:
    """predictions.json, nbest_predictions.json and (v2, five head outputs) null_odds.json; when scoring, the
    official SQuAD metrics of those files against eval_json_path, computed exactly as
    `python -m src.squad_postprocess` would (v2 with --na_prob_thresh null_score_diff_threshold)."""
    from src.data.pipelines import read_column_as_made
    from src.tasks.squad_answers import predictions_v1, predictions_v2, results_from_outputs, write_prediction_files
    from src.tasks.squad_metrics import evaluate_v1, evaluate_v2, load_inputs
    examples, features = squad_eval_maps(data_file)
    results = results_from_outputs(read_column_as_made(data_file, "unique_ids"), outputs)
    version_2 = len(outputs) > 2
    if version_2:
        predictions, nbest, null_odds = predictions_v2(examples, features, results, config.n_best_size,
                                                       config.max_answer_length, config.start_n_top,
                                                       config.end_n_top, config.null_score_diff_threshold)
    else:
        predictions, nbest = predictions_v1(examples, features, results, config.n_best_size,
                                            config.max_answer_length)
        null_odds = None
    paths = write_prediction_files(folder, predictions, nbest, null_odds)
    log(f"wrote {', '.join(paths)}")
    if not score:
        return {}
    dataset, predictions, na_probs = load_inputs(config.eval_json_path, paths[0], paths[2] if version_2 else "")
    if version_2:
        metrics = evaluate_v2(dataset, predictions, na_probs, config.null_score_diff_threshold)
    else:
        metrics = evaluate_v1(dataset, predictions, warn=lambda message: None)
    log(", ".join(f"{key} {value:.4f}" if isinstance(value, float) else f"{key} {value}"
                  for key, value in metrics.items()))
    return {"version": "2.0" if version_2 else "1.1", **metrics, "questions": len(predictions)}


@functools.lru_cache(maxsize=2)
def squad_eval_maps(data_file: str):
    """The SQuAD feature maps of `data_file`, read once per run (checked before training, used after; they are
    large for a full dev set, and nothing modifies them)."""
    from src.tasks.squad_answers import load_squad_eval_maps
    return load_squad_eval_maps(data_file)


def check_squad_eval_inputs(config: Config, data_file: str, action: str) -> None:
    """Before training starts: the feature maps beside the data and, for scoring, a SQuAD json holding the data's
    questions and no others (v1.1 scoring counts a question without a prediction as 0 and v2.0's refuses it, after
    the whole evaluation)."""
    from src.tasks.squad_metrics import load_dataset, questions
    examples, _ = squad_eval_maps(data_file)
    if action == "eval":
        if not config.eval_json_path:
            raise UserError("do_eval is true but --eval_json_path is not set")
        if not os.path.isfile(config.eval_json_path):
            raise UserError(f"eval_json_path not found: {config.eval_json_path}")
        listed = [qa["id"] for qa in questions(load_dataset(config.eval_json_path))]
        known = set(listed)
        foreign = [example["qas_id"] for example in examples if example["qas_id"] not in known]
        if foreign:
            raise UserError(f"{len(foreign)} questions of {data_file} (e.g. {foreign[0]}) are not in eval_json_path "
                            f"{config.eval_json_path}: was the data made from another SQuAD file?")
        made = {example["qas_id"] for example in examples}
        extra = [qas_id for qas_id in dict.fromkeys(listed) if qas_id not in made]
        if extra:
            raise UserError(f"{len(extra)} of the {len(known)} questions of eval_json_path {config.eval_json_path} "
                            f"(e.g. {extra[0]}) are not in {data_file}, and would be scored as unanswered: pass the "
                            f"SQuAD file the data was made from")


# -------------------------------------------------------------------------------------------- the exported outputs
def classifier_outputs(config: Config, batch, seq: int) -> Signature:
    return [("logits", "float32", [batch, config.num_class])]


def race_outputs(config: Config, batch, seq: int) -> Signature:
    return [("choice_logits", "float32", [batch, config.num_class])]


def squad_v1_outputs(config: Config, batch, seq: int) -> Signature:
    return [("start_logits", "float32", [batch, seq]), ("end_logits", "float32", [batch, seq])]


def squad_v2_outputs(config: Config, batch, seq: int) -> Signature:
    beam = config.start_n_top * config.end_n_top
    return [("start_top_log_probs", "float32", [batch, config.start_n_top]),
            ("start_top_index", "int32", [batch, config.start_n_top]),
            ("end_top_log_probs", "float32", [batch, beam]), ("end_top_index", "int32", [batch, beam]),
            ("cls_logits", "float32", [batch])]


TASKS: Dict[str, Task] = {task.name: task for task in (
    Task(name="classifier", config_file=ROOT / "task_classifier_config.yaml",
         description="Fine-tune, evaluate and predict with ALBERT on GLUE / LCQMC classification or STS-B regression.",
         train_columns=schema.CLASSIFIER.without("is_real_example"), eval_columns=schema.CLASSIFIER.names,
         head_inputs=schema.HEAD_INPUTS, dataset=classifier_dataset, build_model=classifier_model,
         build_loss=classifier_loss, report=classification_report, head_prefix="classifier.",
         head_title="classifier/RACE", outputs=classifier_outputs, check_data=check_labels,
         check_eval_inputs=check_classifier_eval_data),
    Task(name="race", config_file=ROOT / "task_race_config.yaml",
         description="Fine-tune, evaluate and predict with ALBERT on RACE multiple-choice reading comprehension.",
         train_columns=schema.RACE.without("is_real_example"), eval_columns=schema.RACE.names,
         head_inputs=schema.HEAD_INPUTS, dataset=race_dataset, build_model=race_model, build_loss=classifier_loss,
         report=classification_report, head_prefix="classifier.", head_title="classifier/RACE",
         outputs=race_outputs, check_data=check_choices, check_eval_inputs=check_race_eval_data, choices=True),
    Task(name="squad_v1", config_file=ROOT / "task_squad_v1_config.yaml",
         description="Fine-tune, evaluate and predict with ALBERT on SQuAD v1.1 extractive question answering.",
         train_columns=schema.SQUAD_TRAIN.names, eval_columns=schema.SQUAD_EVAL.names,
         head_inputs=schema.SQUAD_HEAD_INPUTS, dataset=squad_dataset, build_model=squad_v1_model,
         build_loss=squad_v1_loss, report=squad_report, head_prefix="qa_outputs.",
         head_title="SQuAD v1.1 (squad_v1)", outputs=squad_v1_outputs, check_eval_inputs=check_squad_eval_inputs),
    Task(name="squad_v2", config_file=ROOT / "task_squad_v2_config.yaml",
         description="Fine-tune, evaluate and predict with ALBERT on SQuAD v2.0 (unanswerable questions; Google's "
                     "v2 head).",
         train_columns=schema.SQUAD_TRAIN.names, eval_columns=schema.SQUAD_EVAL.names,
         head_inputs=schema.SQUAD_HEAD_INPUTS, dataset=squad_dataset, build_model=squad_v2_model,
         build_loss=squad_v2_loss, report=squad_report, head_prefix="start_logits.",
         head_title="SQuAD v2.0 (squad_v2)", outputs=squad_v2_outputs, check_eval_inputs=check_squad_eval_inputs),
)}


def tasks_accepting(path: os.PathLike, candidates: Dict[str, Path]) -> List[str]:
    """The tasks of `candidates` (task -> shipped yaml) whose yaml has every key of the yaml at `path`: what a
    user's yaml is, when its name does not say."""
    from model_utils.config import flatten, load_yaml_documents, yamls_holding

    values, _, _ = load_yaml_documents(path)
    holding = yamls_holding([key for key, value in flatten(values).items() if value != {}], candidates.values())
    return [task for task, config_file in candidates.items() if config_file in holding]


def task_copied(path: os.PathLike, candidates: Dict[str, Path], task: str) -> Tuple[str, List[str]]:
    """(another task, the keys only `task`'s yaml has) when the yaml at `path` holds every key of that task's
    shipped yaml and none of those: a copy of it. SQuAD v1.1's keys are a subset of v2.0's, so v1.1's yaml passed as
    a v2.0 one (its own settings, silently). ("", []) otherwise."""
    from model_utils.config import flatten, load_yaml_documents

    def keys(yaml_path: os.PathLike) -> set:
        return set(flatten(load_yaml_documents(yaml_path)[0]))

    given, own = keys(path), keys(candidates[task])
    for other, config_file in candidates.items():
        theirs = keys(config_file)
        if other != task and theirs <= given and own - theirs and not given & (own - theirs):
            return other, sorted(own - theirs)
    return "", []


def trained_task(values: Dict[str, object], checkpoint: str) -> str:
    """The task a fine-tuning run wrote the checkpoint `values` for ("" when unknown), by the checkpoint prefix of
    that run: recorded in it (run_kind), else the start of a train checkpoint's name (albert_<task>-<step>.ckpt).
    Tells a RACE head from a one-output classifier (a regression's), whose weights look alike."""
    prefix = str(values.get("run_kind") or os.path.basename(checkpoint).rsplit("-", 1)[0])
    return next((name for name, task in TASKS.items() if task.checkpoint_prefix == prefix), "")


def checkpoint_task(values: Dict[str, object], source: str) -> Dict[str, object]:
    """The record of its data's task a fine-tuning checkpoint (or an export of one) `source` carries (run_task:
    task_name, label_list, max_seq_length, as src.training.checkpoints.trained_data_task writes it); {} for
    pretraining runs, converted weights and checkpoints of earlier versions, which are used as before."""
    return checkpoint_record(values, "run_task", "task", source)


def check_trained_tokenizer(values: Dict[str, object], tokenizer, checkpoint: str) -> None:
    """A checkpoint trained here records the tokenizer its data was made with (run_tokenizer): another vocabulary or
    casing would feed it ids that mean other words, and it would answer without a word of warning."""
    trained = checkpoint_tokenizer(values, checkpoint)  # {}: converted weights, a checkpoint of an earlier version
    given = tokenizer.describe() if tokenizer is not None and trained else {}
    if not same_ids(trained, given):
        raise UserError(f"{checkpoint} was trained on data made with {tokenizer_record(trained)}, not with "
                        f"{tokenizer_record(given)}: its ids would mean other words; pass the tokenizer the run's "
                        f"data was made with")
