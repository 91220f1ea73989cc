"""The fine-tuning driver shared by run_classifier.py, run_race.py, run_squad_v1.py and run_squad_v2.py.

A `FinetuneTask` says only what is task-specific: its yaml, its dataset, its head and loss, and how its outputs
become predictions and metrics. `run` does the rest, the same way for every task:

1. parse the task yaml into flags; check every input (data files, eval json, checkpoints) before any training;
2. `do_train`: the pretraining machinery of src/train_loop.py (step plan, resume, loss scaling, accumulation,
   checkpoints, metrics.jsonl, data parallel), initialised from `load_pretrain_checkpoint_path` where only the
   task head may be missing;
3. `do_eval` / `do_predict`: the trained weights (or `load_finetune_checkpoint_path`) in the inference head; the
   ranks split the rows, their outputs are summed into one table (each row exactly once, checked), and rank 0
   writes predictions into OUTPUT_DIR/eval or OUTPUT_DIR/predict, plus eval_results.json with the metrics.
"""
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import numpy as np

from model_utils.config import Config, parse_cli
from model_utils.errors import UserError

# (config, outputs of the head for every row, data file, output folder, score against labels?, log) -> metrics
Report = Callable[[Config, List[np.ndarray], str, str, bool, Callable[[str], None]], Dict[str, object]]


@dataclass
class FinetuneTask:
    name: str
    config_file: Path
    description: str
    train_columns: Sequence[str]
    eval_columns: Sequence[str]
    head_inputs: Sequence[str]  # eval columns given to the head, in its argument order
    dataset: Callable[..., object]  # (config, data, batch_size, is_training, indices) -> batched dataset
    build_model: Callable[[Config, object, bool], object]  # (config, AlbertConfig, is_training) -> head
    build_loss: Callable[[Config, object], object]  # (config, head) -> network with loss (train columns in)
    report: Report
    check_data: Callable[[Config, dict, Sequence[int], str], None] = lambda config, meta, shape, path: None
    check_eval_inputs: Callable[[Config, str, str], None] = lambda config, data_file, action: None

    @property
    def checkpoint_prefix(self) -> str:
        return f"albert_{self.name}"


def run(task: FinetuneTask, argv: Sequence[str]) -> int:
    """Train and/or evaluate and/or predict as the flags say; returns the exit code."""
    config = parse_cli(task.config_file, argv, task.description)
    jobs = _check_config(task, config)

    from src import cpu_kernels
    from src.device_setup import setup_device
    from src.settings import finetune_settings

    device = setup_device(config.device_target, config.device_id, config.distribute, config.device_num,
                          config.cpu_threads, config.seed)

    def log(message: str) -> None:
        if device.is_main:
            print(message, flush=True)

    settings = finetune_settings(config, task.checkpoint_prefix)
    actions = ["train"] * bool(config.do_train) + [action for action, _ in jobs]
    log(f"device: {device.target} ({device.group_size} worker(s)); task: {task.name}; {', '.join(actions)}; "
        f"kernels: {cpu_kernels.status()}")
    trained, net = None, None
    if config.do_train:
        trained, net = _train(task, settings, device, log)
    for action, data_file in jobs:
        _evaluate(task, config, device, net, trained, settings.save_dir, data_file, action, settings.output_dir, log)
    return 0


def _check_config(task: FinetuneTask, config: Config) -> List[tuple]:
    """Everything a run needs, checked before any time is spent; returns the (action, data file) evaluations."""
    from src.dataset import check_schema

    if not (config.do_train or config.do_eval or config.do_predict):
        raise UserError("nothing to do: set at least one of --do_train, --do_eval, --do_predict to true")
    if config.do_train:
        _need(config, "train_data_file_path", "do_train")
        check_schema(config.train_data_file_path, config.schema_file_path, task.train_columns)
        if config.load_finetune_checkpoint_path:
            raise UserError("load_finetune_checkpoint_path is for evaluating or predicting without training; to "
                            "fine-tune, start from --load_pretrain_checkpoint_path")
    elif config.load_finetune_checkpoint_path and not os.path.isfile(config.load_finetune_checkpoint_path):
        raise UserError(f"load_finetune_checkpoint_path not found: {config.load_finetune_checkpoint_path}")
    if config.load_pretrain_checkpoint_path and not os.path.isfile(config.load_pretrain_checkpoint_path):
        raise UserError(f"load_pretrain_checkpoint_path not found: {config.load_pretrain_checkpoint_path}")
    jobs = []
    for action, key in (("eval", "eval_data_file_path"), ("predict", "predict_data_file_path")):
        if config[f"do_{action}"]:
            _need(config, key, f"do_{action}")
            check_schema(config[key], "", task.eval_columns)
            task.check_eval_inputs(config, config[key], action)
            jobs.append((action, config[key]))
    return jobs


def _need(config: Config, key: str, because: str) -> None:
    if not config[key]:
        raise UserError(f"{because} is true but --{key} is not set")


def _network(config: Config, data_file: str, columns: Sequence[str], checkpoint: str):
    """The AlbertConfig (yaml, else the albert_config.json beside `checkpoint`, else the preset), checked against
    the data; returns it with the data's meta and row shape."""
    from src.dataset import check_schema
    from src.run_config import check_data_fits, config_beside, data_meta, network_config

    meta = data_meta(data_file)
    shape = check_schema(data_file, "", columns)
    net = network_config(config, meta.get("tokenizer", {}).get("vocab_size"), config_beside(checkpoint))
    check_data_fits(meta, net, shape, data_file)
    return net, meta, shape


def _train(task: FinetuneTask, settings, device, log):
    """Fine-tune; returns (the trained head, its AlbertConfig)."""
    from src.train_loop import fit

    config = settings.config
    data = config.train_data_file_path
    net, meta, shape = _network(config, data, task.train_columns, config.load_pretrain_checkpoint_path)
    task.check_data(config, meta, shape, data)
    if not config.load_pretrain_checkpoint_path:
        log("no load_pretrain_checkpoint_path: the whole network starts from random weights")
    heads = []

    def make_network():
        heads.append(task.build_model(config, net, True))
        return task.build_loss(config, heads[0])

    def make_dataset(rows):
        return task.dataset(config, data, config.train_batch_size, True, rows)

    fit(settings, make_network, net, device, shape[-1], make_dataset, log)
    return heads[0], net


def _evaluate(task: FinetuneTask, config: Config, device, net, trained, save_dir: str, data_file: str,
              action: str, output_dir: str, log) -> None:
    from src.dataset import count_rows
    from src.checkpoints import latest_checkpoint
    from src.utils import load_weights

    source = "the fine-tuned weights of this run"
    if trained is None:
        checkpoint = config.load_finetune_checkpoint_path or latest_checkpoint(save_dir, task.checkpoint_prefix)
        if not checkpoint:
            raise UserError(f"do_{action} without do_train needs --load_finetune_checkpoint_path (no checkpoint of "
                            f"this task in {save_dir} either)")
        net, _, _ = _network(config, data_file, task.eval_columns, checkpoint)
        source = checkpoint
    model = task.build_model(config, net, False)
    model.set_train(False)
    load_weights(model, {p.name: p for p in trained.get_parameters()} if trained is not None else source)
    total = count_rows(data_file)
    if total < device.group_size:
        raise UserError(f"{data_file} has {total} rows, fewer than the {device.group_size} devices")
    rows = np.arange(total)[device.rank::device.group_size]
    log(f"{action}: {total} rows of {data_file} with {source}")
    outputs = _gather_rows(_predict_rows(task, config, model, data_file, rows), rows, total, device.group_size)
    if device.is_main:
        folder = os.path.join(output_dir, action)
        metrics = task.report(config, outputs, data_file, folder, action == "eval", log)
        if action == "eval":
            from src.utils import save_json_atomic

            path = os.path.join(folder, "eval_results.json")
            save_json_atomic({**metrics, "rows": total, "devices": device.group_size, "checkpoint": source,
                              "data": os.path.abspath(data_file)}, path)
            log(f"wrote {path}")


def _predict_rows(task: FinetuneTask, config: Config, model, data_file: str, rows: np.ndarray) -> List[np.ndarray]:
    """The head's outputs for `rows`, in that order (the last batch is padded to the compiled shape)."""
    from mindspore import Tensor

    from src.inference import pad_batch

    positions = [list(task.eval_columns).index(name) for name in task.head_inputs]
    dataset = task.dataset(config, data_file, config.eval_batch_size, False, rows)
    parts: List[List[np.ndarray]] = []
    for batch in dataset.create_tuple_iterator(output_numpy=True, num_epochs=1):
        real = len(batch[0])
        inputs = pad_batch([batch[i] for i in positions], config.eval_batch_size)[:-1]
        outputs = model(*[Tensor(column) for column in inputs])
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        parts.append([output.asnumpy()[:real] for output in outputs])
    return [np.concatenate(columns) for columns in zip(*parts)]


def _gather_rows(outputs: List[np.ndarray], rows: np.ndarray, total: int, group_size: int) -> List[np.ndarray]:
    """Every rank's outputs placed at their global rows and summed over the ranks (zeros elsewhere), so each
    rank ends with the whole table; a row count column proves each row was evaluated exactly once."""
    if group_size == 1:
        return outputs
    from src.inference import all_ranks_sum

    gathered = []
    for values in outputs + [np.ones(len(rows), np.float32)]:
        table = np.zeros((total,) + values.shape[1:], np.float32)
        table[rows] = values
        gathered.append(all_ranks_sum(table))
    counts = gathered.pop()
    if not np.all(counts == 1):
        raise RuntimeError(f"evaluation rows were not split exactly once over the ranks (counts {set(counts)})")
    return [table.astype(values.dtype) for table, values in zip(gathered, outputs)]



def classification_report(config: Config, outputs: List[np.ndarray], data_file: str, folder: str, score: bool,
                          log: Callable[[str], None]) -> Dict[str, object]:
    """predictions.tsv (row, predicted label, then each label's probability or the regression value) and, when
    scoring, every metric that applies (classification: accuracy, f1, macro_f1, mcc; regression: pearson and
    spearman correlation) with the yaml's assessment_method as `score`."""
    from src.dataset import load_data_meta, read_column
    from src.assessment_method import METHODS
    from src.utils import save_text_atomic

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
    path = os.path.join(folder, "predictions.tsv")
    save_text_atomic("\n".join(lines) + "\n", path)
    log(f"wrote {path}")
    if not score:
        return {}
    labels = read_column(data_file, "label_ids")
    applicable = ("pearson_correlation", "spearman_correlation") if regression else \
        ("accuracy", "f1", "macro_f1", "mcc") if len(names) == 2 else ("accuracy", "macro_f1", "mcc")
    metrics = {name: METHODS[name](labels, predictions) for name in applicable}
    result = {"task": meta.get("task_name", ""), "assessment_method": config.assessment_method,
              "score": metrics[config.assessment_method], **metrics, "examples": int(len(labels))}
    log(f"{config.assessment_method}: {result['score']:.4f} on {len(labels)} examples")
    return result


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


def squad_report(config: Config, outputs: List[np.ndarray], data_file: str, folder: str, score: bool,
                 log: Callable[[str], None]) -> Dict[str, object]:
    """predictions.json, nbest_predictions.json and (v2, five head outputs) null_odds.json; when scoring, the
    official SQuAD metrics of those files against eval_json_path, computed exactly as
    `python -m src.squad_postprocess` would (v2 with --na_prob_thresh null_score_diff_threshold)."""
    from src.dataset import read_column
    from src.squad_get_predictions import (predictions_v1, predictions_v2, results_from_outputs,
                                           write_prediction_files)
    from src.squad_postprocess import evaluate_v1, evaluate_v2, load_inputs

    examples, features = squad_eval_maps(data_file)
    results = results_from_outputs(read_column(data_file, "unique_ids"), outputs)
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
    from src.squad_get_predictions import load_squad_eval_maps

    return load_squad_eval_maps(data_file)


def check_squad_eval_inputs(config: Config, data_file: str, action: str) -> None:
    """Before training starts: the feature maps beside the data and, for scoring, a SQuAD json that holds the
    data's questions."""
    from src.squad_postprocess import load_dataset, questions

    examples, _ = squad_eval_maps(data_file)
    if action == "eval":
        _need(config, "eval_json_path", "do_eval")
        if not os.path.isfile(config.eval_json_path):
            raise UserError(f"eval_json_path not found: {config.eval_json_path}")
        known = {qa["id"] for qa in questions(load_dataset(config.eval_json_path))}
        foreign = [example["qas_id"] for example in examples if example["qas_id"] not in known]
        if foreign:
            raise UserError(f"{len(foreign)} questions of {data_file} (e.g. {foreign[0]}) are not in eval_json_path "
                            f"{config.eval_json_path}: was the data made from another SQuAD file?")
