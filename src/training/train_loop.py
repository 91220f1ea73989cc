"""The training loop every run shares: `fit` (pretraining and fine-tuning alike, on `TrainSettings`), and under it
one `Model.train` over one dataset of the plan's remaining rows (so a GPU/Ascend graph compiles once), with
`StepCounter` (exact step totals kept on the device, also per data sink), `TrainMonitor` (log lines +
metrics.jsonl, and each row to its observers: TensorBoard, `FlatLoss`), `NonFiniteGuard` (a run whose loss turns
and stays inf/nan stops with its last good checkpoint) and `CheckpointSaver` (atomic checkpoints of weights,
optimizer state, loss scale and progress, newest N kept).
"""
import json
import math
import os
import shutil
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.train import Callback, Model

from model_utils.config import Config
from model_utils.errors import UserError, as_user_error
from model_utils.signals import Stopped, stop_if_asked, stops_deferred
from src.common.atomic_files import (check_not_in_use, claim_folder, free_name, move_aside, open_regular,
                                     save_text_atomic, standard_json)
from src.common.checkpoint_io import save_checkpoint_atomic
from src.common.run_log import log_to
from src.data.pipelines import count_rows, load_data_meta, rows_fingerprint
from src.devices.device_checks import overflow_needs_float_status
from src.devices.device_setup import Device, model_runtime, precision_note
from src.model.albert import AlbertConfig, Runtime
from src.training.checkpoints import (RUN_ID_KEY, Lineage, RunIdentity, check_checkpoint_space, check_same_start,
                                      list_checkpoints, resume_or_init, run_settings, trained_data_task,
                                      trained_tokenizer, weights_digest)
from src.training.optimization import build_optimizer, schedule_warnings
from src.training.settings import TrainSettings
from src.training.step_plan import Progress, StepPlan
from src.training.summaries import Summaries, open_summaries, settings_text, summaries_folder
from src.training.train_step import AlbertTrainOneStepCell

Record = Dict[str, float]  # one metrics.jsonl row

class CountedSteps(nn.Cell):
    """The train cell plus running totals kept on the device: micro-steps, skipped updates, and the sums of the
    loss and its parts. In data-sink mode the callbacks run once per sink and see only the last step's outputs;
    these totals let them still count every step exactly. Not part of checkpoints (the train cell is)."""

    def __init__(self, train_cell: nn.Cell, parts: int):
        super().__init__(auto_prefix=False)  # the train cell's parameter names stay its checkpoint names
        self.train_cell = train_cell
        self.parts = parts
        self.totals = Parameter(Tensor(np.zeros(1 + parts, np.float32)), name="step_totals.sums",
                                requires_grad=False)
        self.counts = Parameter(Tensor(np.zeros(2, np.int32)), name="step_totals.counts", requires_grad=False)

    def construct(self, *inputs):
        outputs = self.train_cell(*inputs)
        values = [outputs[0].astype(ms.float32).reshape(1)]
        for index in range(self.parts):
            values.append(outputs[3 + index].astype(ms.float32).reshape(1))
        ops.assign_add(self.totals, ops.concat(values))
        ops.assign_add(self.counts, ops.stack([Tensor(1, ms.int32), outputs[1].astype(ms.int32)]))
        return outputs

    def take(self) -> Tuple[int, int, Tuple[float, ...]]:
        """(micro-steps, skipped updates, sums) since the previous take; resets the totals (float32 sums stay
        exact over a sink, not over a whole run)."""
        totals, counts = self.totals.asnumpy().astype(np.float64), self.counts.asnumpy()
        self.totals.set_data(Tensor(np.zeros_like(totals, np.float32)))
        self.counts.set_data(Tensor(np.zeros(2, np.int32)))
        return int(counts[0]), int(counts[1]), tuple(float(value) for value in totals)


class StepCounter(Callback):
    """First callback of every run: moves `CountedSteps`' totals into `progress` for the callbacks after it."""

    def __init__(self, train_cell: nn.Cell, progress: Progress, parts: int):
        super().__init__()
        self.network, self.progress = CountedSteps(train_cell, parts), progress

    def on_train_step_end(self, run_context) -> None:
        steps, overflows, sums = self.network.take()
        progress = self.progress
        progress.micro_step += steps
        progress.overflow_count += overflows
        progress.window_steps, progress.window_overflows, progress.window_sums = steps, overflows, sums


class StopBetweenSteps(Callback):
    """Last callback of every run: a Ctrl-C or SIGTERM that came during the step stops the run here, once the step
    is reported and a checkpoint due at it saved (model_utils/signals.py)."""

    def on_train_step_end(self, run_context) -> None:
        stop_if_asked()


class TrainMonitor(Callback):
    """Every `log_steps` optimizer steps (and at the last): one line on stdout, one JSON object in `jsonl_path`, and
    the same record to each of `observers` (the one place every run's metrics pass).

    Loss values are means over every micro-batch since the previous line (from `progress.window_sums`, exact in
    data-sink mode too). Throughput counts all ranks; tokens are batch x seq_length (padding included). ETA
    extrapolates the mean step time since the first callback (whose steps include graph compilation).
    """

    def __init__(self, plan: StepPlan, progress: Progress, log_steps: int, seq_length: int,
                 lr_at: Callable[[int], float], jsonl_path: Optional[str], log: Callable[[str], None] = print,
                 part_names: Sequence[str] = ("mlm_loss", "sop_loss"),
                 observers: Sequence[Callable[[Record], None]] = ()):
        super().__init__()
        if log_steps < 1:
            raise UserError(f"log_steps must be >= 1, got {log_steps}")
        self.plan, self.progress, self.log_steps, self.seq_length = plan, progress, log_steps, seq_length
        self.lr_at, self.jsonl_path, self.log, self.part_names = lr_at, jsonl_path, log, tuple(part_names)
        self.observers = tuple(observers)
        self._sums: List[float] = []
        self._count = 0
        self._first_step_end: Optional[float] = None
        self._first_step_micro = 0

    def on_train_step_end(self, run_context) -> None:
        progress = self.progress
        sums = progress.window_sums[:1 + len(self.part_names)]
        self._sums = [a + b for a, b in zip(self._sums, sums)] if self._sums else list(sums)
        self._count += progress.window_steps
        if self._first_step_end is None:
            self._first_step_end, self._first_step_micro = time.time(), progress.micro_step
        accum = self.plan.accumulation_steps
        step = progress.micro_step // accum
        crossed = step // self.log_steps > ((progress.micro_step - progress.window_steps) // accum) // self.log_steps
        if crossed or progress.micro_step >= self.plan.total_micro_steps:
            self._report(step, float(run_context.original_args().net_outputs[2].asnumpy()))

    def _report(self, step: int, loss_scale: float) -> None:
        means = [v / self._count for v in self._sums]
        self._sums, self._count = [], 0
        now = time.time()
        timed_micro = self.progress.micro_step - self._first_step_micro
        per_micro = (now - self._first_step_end) / timed_micro if timed_micro > 0 else float("nan")
        samples_per_s = self.plan.batch_size * self.plan.group_size / per_micro if timed_micro > 0 else float("nan")
        eta = per_micro * (self.plan.total_micro_steps - self.progress.micro_step) if timed_micro > 0 else float("nan")
        record = {"step": step, "total_steps": self.plan.total_steps,
                  "epoch": round(self.progress.micro_step / self.plan.batches_per_epoch, 4), "loss": means[0],
                  **dict(zip(self.part_names, means[1:])), "lr": self.lr_at(max(step - 1, 0)),
                  "loss_scale": loss_scale, "overflow_count": self.progress.overflow_count,
                  "samples_per_s": samples_per_s, "tokens_per_s": samples_per_s * self.seq_length,
                  "eta_s": eta, "elapsed_s": now - self.progress.started_at}
        parts = " ".join(f"{name.replace('_loss', '')} {record[name]:.4f}" for name in self.part_names)
        self.log(f"step {step}/{self.plan.total_steps} | epoch {record['epoch']:.2f} | loss {means[0]:.4f}"
                 f"{f' ({parts})' if parts else ''} | lr {record['lr']:.3e} | loss scale {loss_scale:g} | "
                 f"overflows {self.progress.overflow_count} | {samples_per_s:.1f} samples/s "
                 f"{record['tokens_per_s']:.0f} tokens/s | eta {_clock(eta)}")
        if self.jsonl_path:
            with open_regular(self.jsonl_path, "a") as handle:
                handle.write(standard_json(record) + "\n")
        for observe in self.observers:
            observe(record)


# A fresh run whose loss moved less than FLAT_LOSS_TOLERANCE (relative) from its first log line to its first line
# past FLAT_LOSS_FRACTION of the run is warned: batch-to-batch noise of a run that learns nothing stays below 1%
# (a random network predicts uniformly), and a learning run has moved by far more than 2% by then.
FLAT_LOSS_FRACTION = 0.25
FLAT_LOSS_TOLERANCE = 0.02


class FlatLoss:
    """A TrainMonitor observer: warns once when the loss has not moved (FLAT_LOSS_*), with the learning rate, which
    is the usual cause (too low, or still warming up), instead of leaving it to be found in the curves."""

    def __init__(self, total_steps: int, log: Callable[[str], None]):
        self.total_steps, self.log = total_steps, log
        self.first: Optional[Record] = None
        self.checked = False

    def __call__(self, record: Record) -> None:
        if self.checked:
            return
        if self.first is None:
            self.first = record
            return
        if record["step"] < FLAT_LOSS_FRACTION * self.total_steps:
            return
        self.checked = True
        start, now = self.first["loss"], record["loss"]
        if math.isfinite(start) and math.isfinite(now) and abs(now - start) < FLAT_LOSS_TOLERANCE * abs(start):
            self.log(f"warning: the loss has not moved in the first {record['step']} of {self.total_steps} steps: "
                     f"{start:.4f} at step {self.first['step']}, {now:.4f} at step {record['step']} (less than "
                     f"{FLAT_LOSS_TOLERANCE:.0%} apart) with a learning rate of {record['lr']:.3g}: too low, or "
                     f"still in warmup? (expected only when continuing from weights that learned already)")


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class CheckpointSaver(Callback):
    """Every `every` optimizer steps and at the end: the whole train cell (weights, optimizer moments, loss scale,
    accumulation buffers) plus progress, the data plan and the run id of `lineage`, written atomically with a
    digest of the contents. A train cell holding inf/nan is never saved: the run stops with one line instead.

    Retention keeps the newest `keep` checkpoints of this training and deletes only older ones that this training
    wrote: this run's own saves, and those the lineage owns (its run id, the step its name says, same plan) up to
    the step the run resumed from. Nothing else under the run's checkpoint names is ever deleted or counted: a
    damaged, foreign or newer-numbered file is left in place with one warning line; one in the way of the next save
    is moved aside to `<name>.replaced`."""

    def __init__(self, train_cell: nn.Cell, plan: StepPlan, progress: Progress, directory: str, prefix: str,
                 every: int, keep: int, lineage: Lineage, log: Callable[[str], None] = print,
                 identity: Optional[RunIdentity] = None):
        super().__init__()
        self.identity = identity.entries() if identity else {}
        if every < 1 or keep < 1:
            raise UserError(f"save_checkpoint_steps and save_checkpoint_num must be >= 1, got {every} and {keep}")
        self.train_cell, self.plan, self.progress, self.lineage = train_cell, plan, progress, lineage
        self.directory, self.prefix, self.every, self.keep, self.log = directory, prefix, every, keep, log
        self._last_step = progress.micro_step // plan.accumulation_steps
        self._resumed_step = self._last_step
        self._pending = False
        self._ours: Dict[str, bool] = {}  # path -> whether this training wrote it (checked once per file)

    def on_train_step_end(self, run_context) -> None:
        """Save once a multiple of `every` was passed, at the first step that ends an accumulation window."""
        step = self.progress.micro_step // self.plan.accumulation_steps
        at_end = self.progress.micro_step >= self.plan.total_micro_steps
        self._pending = self._pending or step // self.every > self._last_step // self.every or at_end
        self._last_step = step
        if self._pending and self.progress.micro_step % self.plan.accumulation_steps == 0:
            self.save(step)
            self._pending = False

    def save(self, step: int) -> str:
        path = os.path.join(self.directory, f"{self.prefix}-{step}.ckpt")
        extra = {"micro_step": self.progress.micro_step, "overflow_count": self.progress.overflow_count,
                 **self.plan.signature(), RUN_ID_KEY: self.lineage.run_id, **self.identity}
        self._check_finite(step)
        if os.path.lexists(path):
            self._move_aside(path)
        try:
            save_checkpoint_atomic(self.train_cell, path, append_dict=extra)
        except OSError as err:
            newest = self.newest()
            raise UserError(f"could not write checkpoint {path}: {err.strerror or err}; "
                            f"{f'the newest complete checkpoint is {newest}' if newest else 'no checkpoint was kept'}"
                            f" (free space, then start the run again to resume)") from err
        self._ours[path] = True
        for old in self._lineage()[:-self.keep]:
            os.remove(old)
            del self._ours[old]
        self.log(f"saved {path}")
        return path

    def _check_finite(self, step: int) -> None:
        """A checkpoint is the state a run resumes from: one holding inf/nan would make every restart diverge."""
        bad = nonfinite_parameters(self.train_cell)
        if bad:
            newest = self.newest()
            raise UserError(f"step {step}: the weights or optimizer state hold inf/nan ({', '.join(bad[:3])}"
                            f"{' ...' if len(bad) > 3 else ''}): training diverged and was stopped without saving; "
                            f"{f'the last finite checkpoint is {newest}' if newest else 'no checkpoint was kept'}. "
                            f"Lower the learning rate or set clip_norm")

    def files_to_come(self) -> int:
        """How many more of its checkpoint files this training holds at its fullest: a save is written before the
        oldest is deleted, so `keep` + 1, fewer when it saves fewer times, less those already in the folder."""
        steps_left = self.plan.total_steps - self._last_step
        saves = max(1, -(-steps_left // self.every))
        return max(1, min(saves, self.keep + 1 - len(self._lineage())))

    def newest(self) -> Optional[str]:
        """This training's newest checkpoint in the folder (None when it has none)."""
        lineage = self._lineage()
        return lineage[-1] if lineage else None

    def _lineage(self) -> List[str]:
        """This training's checkpoints in the folder, oldest first; warns once about each other file named like
        one."""
        found = []
        for step, path in list_checkpoints(self.directory, self.prefix):
            if path not in self._ours:
                self._ours[path] = step <= self._resumed_step and self.lineage.owns(path, self.plan)
                if not self._ours[path]:
                    self.log(f"warning: {path} is not a checkpoint of this run (damaged, of another run, or newer "
                             f"than the step it resumed from): left in place, never deleted or counted in "
                             f"save_checkpoint_num")
            if self._ours[path]:
                found.append(path)
        return found

    def _move_aside(self, path: str) -> None:
        """A file under the name of the checkpoint about to be written was not written by this training (it would
        have resumed from it): keep its bytes under another name."""
        aside = move_aside(path, "replaced")
        self._ours.pop(path, None)
        self.log(f"warning: {path} is not a checkpoint of this run: moved aside to {aside}")


class NonFiniteGuard(Callback):
    """Stops a run whose loss turned inf/nan, before `CheckpointSaver` could save the step, so the newest
    checkpoint is the last good one. Without loss scaling at the first such step, or the first inf/nan gradient
    (fp32 does not overflow otherwise); with loss scaling once the loss stayed inf/nan for `patience` batches in a
    row (an overflowing step is skipped and the scale lowered, so some are expected; a loss that stays inf/nan
    means the weights are gone, and the run would otherwise skip every step to its end)."""

    def __init__(self, plan: StepPlan, progress: Progress, patience: int, loss_scaling: bool,
                 saver: Optional[CheckpointSaver] = None, save_dir: str = ""):
        super().__init__()
        self.plan, self.progress, self.patience, self.loss_scaling = plan, progress, patience, loss_scaling
        self.saver, self.save_dir = saver, save_dir
        self.streak = 0  # batches in a row with an inf/nan loss

    def on_train_step_end(self, run_context) -> None:
        loss = self.progress.window_sums[0]
        if math.isfinite(loss) and (self.loss_scaling or not self.progress.window_overflows):
            self.streak = 0
            return
        self.streak += self.progress.window_steps
        if self.loss_scaling and math.isfinite(loss):
            return
        if self.loss_scaling and self.streak < self.patience:
            return
        step = (self.progress.micro_step - 1) // self.plan.accumulation_steps + 1
        if self.loss_scaling:
            what = f"the loss has been {loss} for {self.streak} batches in a row (nonfinite_stop_steps {self.patience})"
        else:
            what = (f"the loss is {loss}" if not math.isfinite(loss) else "the gradients hold inf/nan") + \
                " with loss scaling off"
        raise UserError(f"step {step}: {what}: training diverged and was stopped; {self._kept()}. Lower the "
                        f"learning rate or set clip_norm{'' if self.loss_scaling else ', or set enable_lossscale true'}")

    def _kept(self) -> str:
        if not self.saver:  # only rank 0 saves
            return f"rank 0 keeps the checkpoints in {self.save_dir}" if self.save_dir else "no checkpoint was written"
        newest = self.saver.newest()
        return f"the last good checkpoint is {newest}" if newest else "no checkpoint was written"


def nonfinite_parameters(cell: nn.Cell) -> List[str]:
    """Names of the cell's floating-point parameters (weights, optimizer state, loss scale) holding inf/nan."""
    return [param.name for param in cell.get_parameters() if not _finite(param)]


def _finite(param: Parameter) -> bool:
    return param.dtype not in ms.dtype.float_type or bool(np.isfinite(param.asnumpy()).all())


def trim_metrics(path: str, step: int, log: Callable[[str], None] = print) -> None:
    """Before a resumed run appends to metrics.jsonl: drop the rows after the resumed step (the run logs them again)
    and a last line a kill cut short, so every step appears once and every line parses. Other lines that are no
    metrics row (damaged, or edited by hand) are left out too, said in a warning, the file as it was kept aside."""
    if not os.path.lexists(path):
        return
    with open_regular(path) as handle:
        handle.reconfigure(errors="surrogateescape")  # a damaged byte spoils its line only
        lines = handle.readlines()
    kept, damaged = [], []
    for number, line in enumerate(lines, 1):
        row = _metrics_row(line)
        if row is None:
            if number < len(lines) or line.endswith("\n"):  # not the last line a kill cut short
                damaged.append(number)
        elif row["step"] <= step:
            kept.append(line if line.endswith("\n") else line + "\n")
    if damaged:
        aside = free_name(path, "damaged")
        shutil.copyfile(path, aside)
        shown = ", ".join(map(str, damaged[:5])) + (f" and {len(damaged) - 5} more" if len(damaged) > 5 else "")
        log(f"warning: {path} line(s) {shown} are no metrics rows (a JSON object with a numeric 'step'): left out; "
            f"the file as it was: {aside}")
    save_text_atomic("".join(kept).encode("utf-8", "surrogateescape").decode("utf-8", "replace"), path)


def _metrics_row(line: str) -> Optional[Record]:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    step = row.get("step") if isinstance(row, dict) else None
    return row if isinstance(step, (int, float)) and not isinstance(step, bool) else None


# Rows a rank reads per dataset (MindSpore's SubsetSampler keeps its indices as a Python list, ~45 bytes a row):
# a run longer than that builds its dataset anew (and compiles its graph again on GPU/Ascend) every 2^24 rows.
MAX_ROWS_PER_DATASET = 1 << 24


def train(make_dataset: Callable[[np.ndarray], object], plan: StepPlan, progress: Progress,
          callbacks: Sequence[Callback], device: Device, data_sink: bool, sink_steps: int,
          log: Callable[[str], None] = print) -> None:
    """Run the rest of `plan` from `progress.micro_step`: one dataset holding the rows of every remaining epoch in
    the plan's order and one Model.train call, so the graph compiles once (up to MAX_ROWS_PER_DATASET rows).

    `callbacks` come from `make_callbacks` (the first, StepCounter, holds the network to run). Data sink runs on
    GPU/Ascend only (MindSpore silently ignores it on CPU), in sinks of `sink_size` batches.
    """
    counter = callbacks[0]
    if not isinstance(counter, StepCounter):
        raise TypeError("train() needs the callbacks of make_callbacks (StepCounter first)")
    model = Model(counter.network)
    sink = data_sink and device.target != "CPU"
    if data_sink and not sink:
        log("data sink is not available on CPU: running step by step")
    max_batches = max(MAX_ROWS_PER_DATASET // plan.batch_size // plan.accumulation_steps, 1) * plan.accumulation_steps
    for rows in plan.segments(progress.micro_step, max_batches):
        dataset = make_dataset(rows)
        batches = len(rows) // plan.batch_size
        if sink:
            size = sink_size(batches, sink_steps, plan.accumulation_steps)
            if size != sink_steps:
                log(f"data sink: {size} batches per sink (data_sink_steps {sink_steps}: sinks must divide the "
                    f"{batches} batches left and hold whole accumulation windows)")
            model.train(batches // size, dataset, callbacks=list(callbacks), dataset_sink_mode=True, sink_size=size)
        else:
            model.train(1, dataset, callbacks=list(callbacks), dataset_sink_mode=False)


def sink_size(batches: int, requested: int, accumulation_steps: int) -> int:
    """Batches per sink: the largest multiple of `accumulation_steps` not above `requested` (at least one window)
    that divides `batches`, so the run takes exactly its planned steps and checkpoints fall on window ends."""
    windows = batches // accumulation_steps
    per_sink = next(count for count in range(max(requested // accumulation_steps, 1), 0, -1) if windows % count == 0)
    return per_sink * accumulation_steps


def build_train_cell(config: Config, network: nn.Cell, total_steps: int, target: str,
                     use_kernels: bool) -> Tuple[nn.Optimizer, nn.Cell]:
    """The optimizer named by `config.optimizer` and the train-step cell around `network` (a network with loss),
    from the yaml keys every training script shares (loss scaling, clipping, accumulation), for the device `target`;
    `use_kernels` when the network was built with the compiled CPU kernels."""
    section = config.optimizer_cfg[config.optimizer].to_dict()
    optimizer = build_optimizer(config.optimizer, network.trainable_params(), section, total_steps)
    cell = AlbertTrainOneStepCell(network, optimizer,
                                  loss_scale=float(config.loss_scale_value) if config.enable_lossscale else None,
                                  scale_factor=float(config.scale_factor), scale_window=int(config.scale_window),
                                  clip_norm=float(config.clip_norm), accumulation_steps=int(config.accumulation_steps),
                                  float_status=overflow_needs_float_status(target), use_kernels=use_kernels)
    return optimizer, cell


def make_callbacks(cell: nn.Cell, optimizer: nn.Optimizer, plan: StepPlan, progress: Progress, device: Device,
                   seq_length: int, settings: TrainSettings, lineage: Lineage, log: Callable[[str], None],
                   summaries: Optional[Summaries] = None, identity: Optional[RunIdentity] = None) -> List[Callback]:
    """The step totals, progress lines and metrics.jsonl (a fresh run starts a new file, a resumed one appends;
    each row also to `summaries` under train/, and to a FlatLoss check in a fresh run), a stop on an inf/nan loss,
    and checkpoints of `lineage` (recording `identity`) when the run saves them (checked to fit in the save folder
    first); files are written by rank 0 only."""
    config = settings.config
    metrics = os.path.join(settings.output_dir, "metrics.jsonl")
    if device.is_main and progress.micro_step == 0 and os.path.lexists(metrics):
        log(f"{metrics} of an earlier run moved aside to {move_aside(metrics, 'previous')}")
    elif device.is_main:
        trim_metrics(metrics, progress.micro_step // plan.accumulation_steps, log)
    observers: List[Callable[[Record], None]] = []
    if summaries is not None:
        curves = ("loss", *settings.part_names, "lr", "loss_scale", "overflow_count", "samples_per_s",
                  "tokens_per_s", "epoch")
        observers.append(lambda record: summaries.scalars("train", {key: record[key] for key in curves},
                                                          record["step"]))
    if progress.micro_step == 0:
        observers.append(FlatLoss(plan.total_steps, log))
    callbacks: List[Callback] = [StepCounter(cell, progress, len(settings.part_names)),
                                 TrainMonitor(plan, progress, config.log_steps, seq_length,
                                              lr_function(optimizer.learning_rate),
                                              metrics if device.is_main else None, log, settings.part_names,
                                              observers)]
    saver = None
    if settings.save_dir and device.is_main:
        saver = CheckpointSaver(cell, plan, progress, settings.save_dir, settings.checkpoint_prefix,
                                config.save_checkpoint_steps, config.save_checkpoint_num, lineage, log, identity)
        check_checkpoint_space(settings.save_dir, cell, settings.flag("save_dir"), saver.files_to_come())
    # before the saver: a diverged step is never saved
    callbacks.append(NonFiniteGuard(plan, progress, config.nonfinite_stop_steps, cell.use_loss_scale, saver,
                                    settings.save_dir))
    if saver:
        callbacks.append(saver)
    callbacks.append(StopBetweenSteps())
    return callbacks


def fit(settings: TrainSettings, make_network: Callable[[Runtime], nn.Cell], net: AlbertConfig, device: Device,
        seq_length: int, make_dataset: Callable[[np.ndarray], object], log: Callable[[str], None] = print) -> int:
    """Pretraining and fine-tuning alike: the step plan (checked before any cell is built), the train cell around
    `make_network(runtime)` (a network with loss, built for `device` and net's compute type), warnings about a
    learning-rate schedule that cannot do what its settings suggest, resume or initial weights, the output folders
    (created only once all of that worked, so a run that cannot start leaves nothing behind) and the run's log in
    them, the callbacks, TensorBoard summaries and the loop. Returns the run's optimizer steps (the step of its last
    checkpoint); every rank prints the digest of its final weights."""
    config = settings.config
    plan = StepPlan.create(count_rows(settings.data), settings.batch_size, config.train_steps, settings.epochs,
                           device.group_size, device.rank, config.accumulation_steps, settings.shuffle, config.seed,
                           settings.flag)
    log(f"plan: {plan.describe()}")
    runtime = model_runtime(device.target, net.compute_type)
    note = precision_note(device.target, net.compute_type, bool(config.enable_lossscale))
    if note:
        log(note)
    with as_user_error():
        network = make_network(runtime)
        optimizer, cell = build_train_cell(config, network, plan.total_steps, device.target, runtime.kernels)
    for warning in schedule_warnings(optimizer.learning_rate, plan.total_steps, f"optimizer_cfg.{config.optimizer}"):
        log(f"warning: {warning}")
    meta = load_data_meta(settings.data)
    identity = RunIdentity(net.to_dict(), config.optimizer, rows_fingerprint(settings.data), settings.checkpoint_prefix,
                           run_settings(config.to_dict()), trained_tokenizer(meta), trained_data_task(meta))
    for folder, key in ((settings.output_dir, "output_dir"), (settings.save_dir, "save_dir")):
        if folder:  # before reading a checkpoint a running run may be replacing
            check_not_in_use(folder, f"{settings.flag(key)} {folder}")
    progress, lineage = resume_or_init(cell, network, plan, settings, identity, log)
    check_same_start(progress, device, settings)
    if device.is_main:
        _create_outputs(settings, net, lineage)
        log_to(settings.output_dir)
    if progress.micro_step >= plan.total_micro_steps:
        log(f"nothing to train: the checkpoint already completed all {plan.total_steps} steps")
    else:
        summaries = _start_summaries(settings, device, progress, plan, log)
        callbacks: List[Callback] = []
        try:
            callbacks = make_callbacks(cell, optimizer, plan, progress, device, seq_length, settings, lineage, log,
                                       summaries, identity)
            with stops_deferred():
                train(make_dataset, plan, progress, callbacks, device, config.enable_data_sink,
                      config.data_sink_steps, log)
        except KeyboardInterrupt as stop:
            log(_stopped_line(stop, progress, plan, callbacks))
            raise
        finally:
            if summaries is not None:
                summaries.close()
    bad = nonfinite_parameters(cell)
    if bad:
        raise UserError(f"training ended with inf/nan in {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''}: it "
                        f"diverged; lower the learning rate or set clip_norm")
    print(f"rank {device.rank}: final weights sha256 {weights_digest(cell)}", flush=True)
    log(f"done: {plan.total_steps} steps; outputs in {settings.output_dir}"
        + (f", checkpoints in {settings.save_dir}" if settings.save_dir else ""))
    return plan.total_steps


def _stopped_line(stop: KeyboardInterrupt, progress: Progress, plan: StepPlan, callbacks: Sequence[Callback]) -> str:
    """Where a run stopped by Ctrl-C or SIGTERM (between steps) stands, and how it goes on."""
    savers = [callback for callback in callbacks if isinstance(callback, CheckpointSaver)]
    newest = savers[0].newest() if savers else None
    if newest:
        goes_on = f"the newest checkpoint is {newest}: the same command resumes from it"
    elif savers:
        goes_on = "no checkpoint of this run yet: the same command starts it again"
    else:  # stopped before its callbacks existed, or a rank that saves nothing
        goes_on = "the same command resumes from the save folder's newest checkpoint, or starts again without one"
    return (f"stopped by {'SIGTERM (or Ctrl-C)' if isinstance(stop, Stopped) else 'Ctrl-C'} after step "
            f"{progress.micro_step // plan.accumulation_steps} of {plan.total_steps}; {goes_on}")


def _start_summaries(settings: TrainSettings, device: Device, progress: Progress, plan: StepPlan,
                     log: Callable[[str], None]) -> Optional[Summaries]:
    """Rank 0's TensorBoard summaries, the settings first. A fresh run moves an earlier run's folder aside (as
    metrics.jsonl); a resumed one continues it, dropping what was logged after its checkpoint (purge_step)."""
    config = settings.config
    if not (device.is_main and config.enable_tensorboard):
        return None
    folder = summaries_folder(settings.output_dir)
    step = progress.micro_step // plan.accumulation_steps
    if progress.micro_step == 0 and os.path.lexists(folder):
        log(f"{folder} of an earlier run moved aside to {move_aside(folder, 'previous')}")
    summaries = open_summaries(config, settings.output_dir, step + 1 if step else None)
    summaries.text("settings", settings_text(config), step)
    return summaries


def _create_outputs(settings: TrainSettings, net: AlbertConfig, lineage: Lineage) -> None:
    """The output folder and the save folder, each claimed for this run (locked, and cleared of what a killed run
    left: see claim_folder) and given albert_config.json (the network, for evaluation and fine-tuning); the save
    folder records the run's lineage."""
    for folder, key in ((settings.output_dir, "output_dir"), (settings.save_dir, "save_dir")):
        if folder:
            claim_folder(folder, f"{settings.flag(key)} {folder}")
    net.to_json_file(os.path.join(settings.output_dir, "albert_config.json"))
    if settings.save_dir:
        net.to_json_file(os.path.join(settings.save_dir, "albert_config.json"))
        if Lineage.read(settings.save_dir) != lineage:
            lineage.write(settings.save_dir)


def lr_function(schedule: nn.Cell) -> Callable[[int], float]:
    """The learning rate the optimizer uses at a (0-based) global step, read from its schedule cell."""
    def lr_at(step: int) -> float:
        return float(schedule(Tensor(step, ms.int32)).asnumpy())
    return lr_at
