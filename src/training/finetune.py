"""The fine-tuning driver shared by run_classifier.py, run_race.py, run_squad_v1.py and run_squad_v2.py.

A `Task` (src/tasks/registry.py) says only what is task-specific: its yaml, its dataset, its head and loss, and how its
outputs become predictions and metrics. `run` does the rest, the same way for every task:

1. parse the task yaml into flags; check every input (data files, eval json, checkpoints) before any training;
2. `do_train`: the pretraining machinery of src/training/train_loop.py (step plan, resume, loss scaling, accumulation,
   checkpoints, metrics.jsonl, data parallel), initialised from `load_pretrain_checkpoint_path` where only the
   task head may be missing;
3. `do_eval` / `do_predict`: the trained weights (or `load_finetune_checkpoint_path`) in the inference head; the
   ranks split the rows (rank 0 shows the progress), their outputs are summed into one table (each row exactly
   once, checked), and rank 0 writes predictions into OUTPUT_DIR/eval or OUTPUT_DIR/predict, plus
   eval_results.json with the metrics, also as TensorBoard scalars eval/<metric> at the step of the weights.

The modules that import MindSpore are imported inside the functions that need them, so that `--help` and the
input checks of step 1 answer without MindSpore's import (seconds).
"""
import os
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from model_utils.config import Config, parse_cli
from model_utils.errors import UserError, as_user_error
from src.common.atomic_files import save_json_atomic
from src.common.checkpoint_io import foreign_weights
from src.common.fixed_shape_batches import cell_runner, real_rows, run_padded
from src.common.progress import progress
from src.common.run_log import log_to
from src.data.pipelines import check_schema, creation_order
from src.tasks.registry import Task
from src.training.settings import TrainSettings, finetune_settings
from src.training.summaries import write_metrics

RUN_WEIGHTS = "the fine-tuned weights of this run"  # eval_results.json's checkpoint when they were not saved


@dataclass(frozen=True)
class FinetuneRun:
    """What every step of one fine-tuning run shares: the task, its settings (the yaml, the output and checkpoint
    folders), the device and the main rank's log."""
    task: Task
    settings: TrainSettings
    device: object
    log: Callable[[str], None]

    @property
    def config(self) -> Config:
        return self.settings.config


@dataclass(frozen=True)
class FineTuned:
    """The fine-tuned checkpoint a run without training evaluates: its path, weights and their digest."""
    path: str
    weights: Dict
    digest: str


@dataclass(frozen=True)
class TrainedHead:
    """The head this run trained, its AlbertConfig and the optimizer steps it took."""
    head: object
    net: object
    steps: int


def run(task: Task, argv: Sequence[str]) -> int:
    """Train and/or evaluate and/or predict as the flags say; returns the exit code."""
    config = parse_cli(task.config_file, argv, task.description)
    jobs = _check_config(task, config)

    from src.devices.device_setup import kernels_status, start_device

    device, log = start_device(config)
    this_run = FinetuneRun(task, finetune_settings(config, task.checkpoint_prefix), device, log)
    actions = ["train"] * bool(config.do_train) + [action for action, _ in jobs]
    log(f"device: {device.target} ({device.group_size} worker(s)); task: {task.name}; {', '.join(actions)}; "
        f"kernels: {kernels_status(device.target)}")
    trained = _train(this_run) if config.do_train else None
    checkpoint = _fine_tuned_checkpoint(this_run, jobs) if trained is None else None
    for action, data_file in jobs:
        _evaluate(this_run, trained, action, data_file, checkpoint)
    return 0


def _check_config(task: Task, config: Config) -> List[tuple]:
    """Everything a run needs, checked before any time is spent; returns the (action, data file) evaluations."""

    if not (config.do_train or config.do_eval or config.do_predict):
        raise UserError("nothing to do: set at least one of --do_train, --do_eval, --do_predict to true")
    if config.do_train:
        _need(config, "train_data_file_path", "do_train")
        check_schema(config.train_data_file_path, config.schema_file_path, task.train_columns)
        check_data_fits_task(task, config.train_data_file_path, "train")
        if config.load_finetune_checkpoint_path:
            raise UserError("load_finetune_checkpoint_path is for evaluating or predicting without training; to "
                            "fine-tune, start from --load_pretrain_checkpoint_path")
    for key in ("load_finetune_checkpoint_path", "load_pretrain_checkpoint_path"):
        _need_checkpoint(config, key)
    jobs = []
    for action, key in (("eval", "eval_data_file_path"), ("predict", "predict_data_file_path")):
        if config[f"do_{action}"]:
            _need(config, key, f"do_{action}")
            check_schema(config[key], "", task.eval_columns)
            check_data_fits_task(task, config[key], action, config.train_data_file_path if config.do_train else "")
            task.check_eval_inputs(config, config[key], action)
            jobs.append((action, config[key]))
    return jobs


# The tasks each kind of data (its .meta.json's `kind`, from the src.create_* tool that made it) is for.
DATA_TASKS = {"classifier": ("classifier",), "race": ("race",), "squad": ("squad_v1", "squad_v2")}


def check_data_fits_task(task: Task, data_file: str, action: str, trained_on: str = "") -> None:
    """What the data's .meta.json says must fit: its kind the task (RACE data ran into the classifier's graph, SQuAD
    v2.0 data into v1.1 scoring, each as a traceback), its split labelled unless only predicted (a GLUE test split
    holds placeholder labels, scored without a word), the GLUE task of data evaluated or predicted after training
    the one trained on, and its tokenizer the one of the training data."""
    from src.training.checkpoints import check_data_tokenizer, trained_tokenizer
    from src.training.network_config import data_meta

    meta = data_meta(data_file)
    kind = meta.get("kind")
    if kind in DATA_TASKS and task.name not in DATA_TASKS[kind]:
        raise UserError(f"{data_file}: {kind} data, not {task.name} data: run_{DATA_TASKS[kind][0]}.py takes it")
    if kind == "squad" and bool(meta.get("version_2_with_negative")) != (task.name == "squad_v2"):
        version, runner = ("v2.0", "squad_v2") if meta.get("version_2_with_negative") else ("v1.1", "squad_v1")
        raise UserError(f"{data_file}: SQuAD {version} data (made with --version_2_with_negative "
                        f"{str(version == 'v2.0').lower()}): run_{runner}.py takes it")
    if action != "predict" and _placeholder_labels(meta):
        raise UserError(f"{data_file}: the {meta.get('task_name', kind)} test split, whose labels are placeholders: "
                        f"{'train' if action == 'train' else 'evaluate'} on the train or dev split; predict the test "
                        f"split with do_predict")
    if not trained_on:
        return
    trained_meta = data_meta(trained_on)
    trained = trained_meta.get("task_name")
    if action != "train":
        check_same_task(meta.get("task_name"), trained, data_file, f"the run trains on {trained} ({trained_on})",
                        action)
    check_data_tokenizer(trained_tokenizer(trained_meta), meta, f"this run trains on {trained_on}, made with",
                         data_file)


def _placeholder_labels(meta: dict) -> bool:
    """Whether the data is a test split whose file holds no labels (GLUE's; LCQMC's and RACE's test sets have
    theirs), so that create_finetune_data wrote placeholders."""
    from src.data.tsv_tasks import TSV_TASKS

    task = TSV_TASKS.get(str(meta.get("task_name")))
    return meta.get("split") == "test" and task is not None and task.test.label is None


def _glue_task(name: str) -> str:
    """MNLI's mismatched sets (mnli-mm) and GLUE's diagnostic set (ax) are an MNLI model's."""
    return "mnli" if name == "ax" else name.removesuffix("-mm")


def check_same_task(given: Optional[str], trained: Optional[str], data_file: str, trained_by: str,
                    action: str) -> None:
    """Data of another GLUE task than the weights learn or learned (`trained`; `trained_by` says whose) runs through
    a head of the same shape without an error: its predictions name the other task's labels, its scores are near
    chance. Data or weights that record no task (earlier versions, converted weights) pass."""
    if given and trained and _glue_task(given) != _glue_task(trained):
        fix = f"evaluate on the {trained} dev split" if action == "eval" else f"predict {trained} data"
        raise UserError(f"{data_file} is {given} data but {trained_by}: {fix}")


def _need_checkpoint(config: Config, key: str) -> None:
    """The checkpoint `key` names, when set, is a MindSpore checkpoint that exists (another framework's weights: the
    conversion that makes one)."""
    path = config[key]
    foreign = foreign_weights(path) if path else ""
    if foreign or path and not os.path.isfile(path):
        raise UserError(foreign or f"{key} not found: {path}")


def _need(config: Config, key: str, because: str) -> None:
    if not config[key]:
        raise UserError(f"{because} is true but --{key} is not set")


def _train(this_run: FinetuneRun) -> TrainedHead:
    """Fine-tune from the pretrained weights."""
    from src.training.network_config import checked_network
    from src.training.train_loop import fit

    task, config = this_run.task, this_run.config
    data = config.train_data_file_path
    net, meta, shape = checked_network(config, data, task.train_columns, config.load_pretrain_checkpoint_path)
    task.check_data(config, meta, shape, data)
    heads = []

    def make_network(runtime):
        heads.append(task.build_model(config, net, True, runtime))
        return task.build_loss(config, heads[0])

    def make_dataset(rows):
        return task.dataset(config, data, config.train_batch_size, True, rows)

    steps = fit(this_run.settings, make_network, net, this_run.device, shape[-1], make_dataset, this_run.log)
    return TrainedHead(heads[0], net, steps)


def _fine_tuned_checkpoint(this_run: FinetuneRun, jobs: List[tuple]) -> FineTuned:
    """load_finetune_checkpoint_path, else the save folder's newest checkpoint that reads back whole (a damaged or
    foreign file numbered higher is skipped with a warning), read once; it must be of this task, and the data of
    every evaluation (`jobs`) must fit what it records before the first one starts."""
    from src.common.checkpoint_io import read_checkpoint_and_digest
    from src.tasks.registry import trained_task
    from src.training.checkpoints import newest_train_checkpoint

    task, config, save_dir = this_run.task, this_run.config, this_run.settings.save_dir
    newest = newest_train_checkpoint(save_dir, task.checkpoint_prefix, this_run.log) \
        if not config.load_finetune_checkpoint_path else None
    checkpoint = config.load_finetune_checkpoint_path or (newest.path if newest else None)
    if not checkpoint:
        raise UserError(f"do_{jobs[0][0]} without do_train needs --load_finetune_checkpoint_path (no checkpoint of "
                        f"this task in {save_dir} either)")
    weights, digest = read_checkpoint_and_digest(checkpoint)
    fine_tuned_by = trained_task(weights, checkpoint)
    if fine_tuned_by and fine_tuned_by != task.name:  # a head of the same shape (RACE's, a regression's) loads
        raise UserError(f"{checkpoint} was fine-tuned by run_{fine_tuned_by}.py, not run_{task.name}.py: "
                        f"evaluate it with run_{fine_tuned_by}.py")
    for action, data_file in jobs:
        _check_data_fits_checkpoint(weights, checkpoint, data_file, action)
    return FineTuned(checkpoint, weights, digest)


def _check_data_fits_checkpoint(weights: Dict, checkpoint: str, data_file: str, action: str) -> None:
    """The data must be made with the tokenizer, and for the GLUE task, that the checkpoint's run recorded (a
    checkpoint-only run knows nothing else of what the weights were fine-tuned on)."""
    from src.data.tokenization import checkpoint_tokenizer
    from src.tasks.registry import checkpoint_task
    from src.training.checkpoints import check_data_tokenizer
    from src.training.network_config import data_meta

    meta = data_meta(data_file)
    check_data_tokenizer(checkpoint_tokenizer(weights, checkpoint), meta,
                         f"{checkpoint} was trained on data made with", data_file)
    trained = checkpoint_task(weights, checkpoint).get("task_name")
    check_same_task(meta.get("task_name"), trained, data_file, f"{checkpoint} was fine-tuned on {trained} data",
                    action)


def _evaluate(this_run: FinetuneRun, trained: Optional[TrainedHead], action: str, data_file: str,
              fine_tuned: Optional[FineTuned]) -> None:
    """`action` (eval or predict) on `data_file` with the head this run `trained`, else with the `fine_tuned`
    checkpoint."""
    from src.common.checkpoint_io import load_weights, read_checkpoint_and_digest
    from src.devices.device_setup import model_runtime
    from src.training.checkpoints import checkpoint_step
    from src.training.network_config import checked_network, network_note

    task, config, device, log = this_run.task, this_run.config, this_run.device, this_run.log
    save_dir, output_dir = this_run.settings.save_dir, this_run.settings.output_dir
    source = RUN_WEIGHTS
    if trained is None:
        checkpoint, weights, digest = fine_tuned.path, fine_tuned.weights, fine_tuned.digest
        net, _, _ = checked_network(config, data_file, task.eval_columns, checkpoint)
        source, step = os.path.abspath(checkpoint), checkpoint_step(checkpoint)
    else:
        net, step = trained.net, trained.steps
        final = os.path.join(save_dir, f"{task.checkpoint_prefix}-{step}.ckpt")  # these weights, as saved
        if os.path.isfile(final):
            source, digest = os.path.abspath(final), read_checkpoint_and_digest(final)[1]
        else:
            source, digest = RUN_WEIGHTS, None
    runtime = model_runtime(device.target, net.compute_type)
    with as_user_error():
        model = task.build_model(config, net, False, runtime)
    model.set_train(False)
    load_weights(model, {p.name: p for p in trained.head.get_parameters()} if trained is not None else weights,
                 name=source, network_note="" if trained is not None else network_note(config, checkpoint))
    order, known = creation_order(data_file)  # outputs in the order of the examples the data was made from
    total = len(order)
    if total < device.group_size:
        raise UserError(f"{data_file} has {total} rows, fewer than the {device.group_size} devices")
    positions = np.arange(total)[device.rank::device.group_size]
    if device.is_main:
        log_to(output_dir)
    log(f"{action}: {total} rows of {data_file} with {source}")
    if not known:
        log(f"warning: {data_file}: in which order its files' rows were made is not known (data of an earlier version "
            f"whose files fit several partition numbers, files named in another order than its .meta.json, or no "
            f".meta.json): outputs are in file order; make the data again to have them in the input's order")
    outputs = _gather_rows(_predict_rows(task, config, model, data_file, order[positions], action, device.is_main),
                           positions, total, device.group_size)
    if device.is_main:
        folder = os.path.join(output_dir, action)
        metrics = task.report(config, outputs, data_file, folder, action == "eval", log)
        if action == "eval":
            path = os.path.join(folder, "eval_results.json")
            save_json_atomic({**metrics, "rows": total, "devices": device.group_size, "checkpoint": source,
                              "checkpoint_sha256": digest, "data": os.path.abspath(data_file)}, path)
            log(f"wrote {path}")
            write_metrics(config, output_dir, "eval", metrics, step)


def _predict_rows(task: Task, config: Config, model, data_file: str, rows: np.ndarray, action: str,
                  shown: bool) -> List[np.ndarray]:
    """The head's outputs for `rows`, in that order (the last batch is padded to the compiled shape); its progress
    `shown` as `action`."""
    positions = [list(task.eval_columns).index(name) for name in task.head_inputs]
    dataset = task.dataset(config, data_file, config.eval_batch_size, False, rows)
    batches = ([batch[i] for i in positions] for batch in dataset.create_tuple_iterator(output_numpy=True,
                                                                                        num_epochs=1))
    with progress(action, len(rows), " rows", enabled=shown) as bar:
        return real_rows(run_padded(cell_runner(model), batches, config.eval_batch_size, bar=bar))


def _gather_rows(outputs: List[np.ndarray], positions: np.ndarray, total: int, group_size: int) -> List[np.ndarray]:
    """Every rank's outputs placed at their positions (in creation order) and summed over the ranks (zeros
    elsewhere), so each rank ends with the whole table; a row count column proves each row was evaluated exactly
    once."""
    if group_size == 1:
        return outputs
    from src.devices.device_setup import all_ranks_sum

    gathered = []
    for values in outputs + [np.ones(len(positions), np.float32)]:
        table = np.zeros((total,) + values.shape[1:], np.float32)
        table[positions] = values
        gathered.append(all_ranks_sum(table))
    counts = gathered.pop()
    if not np.all(counts == 1):
        raise RuntimeError(f"evaluation rows were not split exactly once over the ranks (counts {set(counts)})")
    return [table.astype(values.dtype) for table, values in zip(gathered, outputs)]
