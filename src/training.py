"""The training driver every run_*.py shares: device and distributed setup, the step plan, resume, and the
callbacks that log progress and write checkpoints.

- `setup_device` turns `device_target` auto|CPU|GPU|Ascend into a configured MindSpore context (GRAPH mode), and
  under `distribute` initialises the collective group *before* any cell is built (the train cell reads the
  parallel context when it is created). A distributed worker dies with its launcher, reports a cluster that does
  not form and a peer that stops (a collective op that fails) in one line, and exits 3 in the latter case
  (src/distributed_launch.py names the failed rank or node for the scripts); `check_same_start` refuses ranks
  that would resume from different checkpoints.
- `StepPlan` is the one place step counts are computed: optimizer steps (`train_steps`) versus micro-batches
  (`accumulation_steps`), epochs from the dataset size, and the exact rows each rank reads in which order. The
  order is a function of (seed, epoch) only, so a resumed run reads the rows the uninterrupted run would have read.
- `train` runs one `Model.train` over one dataset of the plan's remaining rows (so a GPU/Ascend graph compiles
  once), with `StepCounter` (exact step totals kept on the device, also per data sink), `TrainMonitor` (log lines +
  JSON lines) and `CheckpointSaver` (atomic checkpoints of weights, optimizer state, loss scale and progress,
  newest N kept).
- `resume_or_init` restores all of that from the newest readable checkpoint in the save folder or
  `load_checkpoint_path`. A run killed at any point resumes to the uninterrupted run's trajectory; a run whose
  loss turns inf/nan without loss scaling stops with its last good checkpoint (`NonFiniteGuard`).
"""
import atexit
import ctypes
import errno
import hashlib
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.context import ParallelMode
from mindspore.train import Callback, Model

from dataset import check_data_meta, load_data_meta
from model_utils.config import Config
from model_utils.errors import UserError
from src import cpu_kernels
from src.albert_model import AlbertConfig
from src.device_checks import ascend_unavailable_reason, gpu_unavailable_reason, overflow_needs_float_status
from src.distributed_launch import EXIT_CLUSTER_FAILED, EXIT_USER_ERROR
from src.utils import load_weights, read_checkpoint, save_checkpoint_atomic, save_text_atomic

DEVICE_TARGETS = ("auto", "CPU", "GPU", "Ascend")
UNAVAILABLE_REASON = {"GPU": gpu_unavailable_reason, "Ascend": ascend_unavailable_reason}
# Progress stored beside the weights in every checkpoint (never under the name `global_step`, the optimizer's).
PROGRESS_KEYS = ("micro_step", "overflow_count")
# What a checkpoint's data position depends on: resuming with other values would read other rows.
PLAN_KEYS = ("rows", "batch_size", "group_size", "accumulation_steps", "seed", "shuffle")


@dataclass
class Device:
    """Where this process runs: the resolved target and its place in the data-parallel group."""

    target: str
    rank: int = 0
    group_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the logs, metrics and checkpoints; the other ranks hold the same weights."""
        return self.rank == 0


def pick_device_target(requested: str, log: Callable[[str], None] = print) -> str:
    """`auto` picks Ascend, then GPU, then CPU, whichever this MindSpore can use, and says why a device the host has
    was passed over (a CUDA 12 toolkit, no CUDA_HOME, a plugin that did not load); explicit targets are checked."""
    if requested not in DEVICE_TARGETS:
        raise UserError(f"device_target must be one of {', '.join(DEVICE_TARGETS)}, got {requested!r}")
    if requested == "CPU":
        return requested
    candidates = ("Ascend", "GPU") if requested == "auto" else (requested,)
    for target in candidates:
        try:
            if ms.hal.is_available(target):
                return target
        except (RuntimeError, ValueError):
            continue
    reasons = [reason for reason in (UNAVAILABLE_REASON[target]() for target in candidates) if reason]
    if requested != "auto":
        raise UserError(f"device_target {requested} is not available here: "
                        f"{reasons[0] if reasons else f'no device or no MindSpore {requested} plugin'}; "
                        f"use --device_target auto or CPU")
    for reason in reasons:
        log(f"warning: {reason}: running on CPU")
    return "CPU"


def setup_device(device_target: str, device_id: int = 0, distribute: bool = False, device_num: int = 0,
                 cpu_threads: int = 0, seed: Optional[int] = None) -> Device:
    """GRAPH mode on the chosen target; with `distribute`, join the launcher's group (msrun or mpirun) and set
    data-parallel gradient averaging. `device_num` > 0 must equal the launcher's worker count."""
    from mindspore.communication import get_group_size, get_rank, init

    target = pick_device_target(device_target)
    ms.set_context(mode=ms.GRAPH_MODE)
    if cpu_threads > 0:
        ms.device_context.cpu.op_tuning.threads_num(cpu_threads)
    if distribute:
        ms.set_device(target)  # the launcher's local rank picks the device
        join_cluster(init)
        rank, group_size = get_rank(), get_group_size()
        stop_in_one_line_on_cluster_failure(rank)
        if device_num not in (0, group_size):
            raise UserError(f"device_num is {device_num} but the launcher started {group_size} workers; "
                            f"set device_num to 0 (take the launcher's) or {group_size}")
        ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True,
                                     device_num=group_size)
    else:
        if device_num > 1:
            raise UserError(f"device_num={device_num} needs distribute=true and a launcher "
                            f"(scripts/run_pretrain_distribute.sh)")
        if target == "CPU":
            ms.set_device(target)
        else:
            ms.set_device(target, device_id)
        rank, group_size = 0, 1
    if target == "CPU":
        cpu_kernels.set_threads(cpu_threads)
    if seed is not None:
        ms.set_seed(seed)
    return Device(target=target, rank=rank, group_size=group_size)


def stop_with_launcher() -> None:
    """Die with the launcher (Linux `PR_SET_PDEATHSIG`): a worker whose msrun was killed would otherwise train on,
    orphaned, holding its node's place in the job. The scripts export the launcher's pid, which closes the window
    before this call: a worker whose launcher is already gone stops at once."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) != 0:  # 1 = PR_SET_PDEATHSIG
            return
    except (OSError, AttributeError):  # not Linux
        return
    launcher = os.environ.get("ALBERT_LAUNCHER_PID", "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        print("error: this worker's launcher is gone (killed before the worker started): stopping", flush=True)
        os._exit(EXIT_CLUSTER_FAILED)


def join_cluster(init: Callable[[], None]) -> None:
    """`init()` of the data-parallel group, its failures as one line (--verbose shows MindSpore's own message).

    Under msrun every process prints `worker pid P: rank R` first: scripts/common.sh names a worker msrun saw
    die (msrun reports pids only) by it."""
    role = os.environ.get("MS_ROLE", "")
    if role:
        stop_with_launcher()
    if role == "MS_WORKER":
        print(f"worker pid {os.getpid()}: rank {os.environ.get('MS_NODE_ID', '?')} of "
              f"{os.environ.get('MS_WORKER_NUM', '?')}", flush=True)
    try:
        init()
    except (RuntimeError, ValueError) as err:
        if not role and "OMPI_COMM_WORLD_SIZE" not in os.environ:
            raise UserError(f"distribute=true but this process was not started by a launcher: use "
                            f"scripts/run_*_distribute.sh (msrun or mpirun) (MindSpore: {first_line(str(err))})"
                            ) from err
        if not role:  # mpirun: the collective library (NCCL, HCCL) failed to start
            raise UserError(f"rank {os.environ['OMPI_COMM_WORLD_RANK']} of mpirun could not start the collective "
                            f"communication (MindSpore: {first_line(str(err))})") from err
        # Runs first at exit (atexit is last-in first-out): MindSpore's own exit handlers would spend ~20 s trying
        # to leave a cluster that never formed.
        atexit.register(_exit_now, EXIT_USER_ERROR)
        raise UserError(cluster_problem(str(err), role)) from err


def _exit_now(code: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def cluster_problem(message: str, role: str) -> str:
    """What MindSpore's failure to build the cluster means for the person who started the nodes."""
    where = f"{os.environ.get('MS_SCHED_HOST', '?')}:{os.environ.get('MS_SCHED_PORT', '?')}"
    if "Repeated registration" in message:
        return (f"another worker already joined the job as rank {os.environ.get('MS_NODE_ID', '?')}: two nodes "
                f"were started with the same NODE_RANK (or a worker of an earlier run is still alive); start "
                f"each node with its own NODE_RANK 0 .. NNODES-1")
    if "not successfully spawned" in message:
        return (f"the cluster did not form within CLUSTER_TIMEOUT ({os.environ.get('MS_TOPO_TIMEOUT', '?')} s): "
                f"fewer than {os.environ.get('MS_WORKER_NUM', '?')} workers joined the scheduler at {where}; start "
                f"every node (NODE_RANK 0 .. NNODES-1) with the same NNODES, MASTER_ADDR and MASTER_PORT")
    what = "the scheduler stopped: a worker or node failed" if role == "MS_SCHED" else \
        f"joining the job through the scheduler at {where} failed"
    return f"{what} (MindSpore: {first_line(message)})"


def first_line(message: str) -> str:
    """MindSpore's own first non-empty line of an error (its messages run to pages of C++ context)."""
    line = next((line.strip() for line in message.splitlines() if line.strip()), "no message")
    return line if len(line) <= 300 else line[:297] + "..."


# How MindSpore reports a collective op that could not complete (its peer is gone): the op's kernel failed.
COLLECTIVE_OP = re.compile(r"Launch kernel failed: \S*?\b(AllReduce|AllGather|ReduceScatter|Broadcast)-op")


def stop_in_one_line_on_cluster_failure(rank: int) -> None:
    """A collective op whose peer died fails after NODE_TIMEOUT with a long kernel traceback, and the process then
    hangs while MindSpore tries to say goodbye to a scheduler that may be gone. Instead: one line and exit code 3
    (EXIT_CLUSTER_FAILED: scripts/common.sh then looks for the cause on the other nodes)."""
    previous = sys.excepthook  # MindSpore's: marks this node as failed, prints the traceback

    def hook(kind, value, trace) -> None:
        found = COLLECTIVE_OP.search(str(value)) if issubclass(kind, RuntimeError) else None
        if not found:
            previous(kind, value, trace)
            return
        print(f"error: rank {rank}: {found.group(1)} with the other workers failed: a worker or node stopped, or "
              f"the network between them failed", file=sys.stderr)
        _exit_now(EXIT_CLUSTER_FAILED)

    sys.excepthook = hook


@dataclass
class StepPlan:
    """Step counts and data order of one training run.

    Every rank reads `batches_per_epoch` batches per epoch: the epoch's permutation of all rows (rows beyond a
    multiple of group_size dropped) dealt round-robin to the ranks, so ranks read disjoint rows. One optimizer step
    consumes `accumulation_steps` batches (micro-steps); windows may straddle epochs.
    """

    rows: int
    batch_size: int
    total_steps: int
    group_size: int = 1
    rank: int = 0
    accumulation_steps: int = 1
    shuffle: bool = True
    seed: int = 0

    @classmethod
    def create(cls, rows: int, batch_size: int, train_steps: int, epoch_size: int, group_size: int = 1,
               rank: int = 0, accumulation_steps: int = 1, shuffle: bool = True, seed: int = 0) -> "StepPlan":
        """`train_steps` > 0 counts optimizer steps; otherwise the run lasts `epoch_size` epochs."""
        if batch_size < 1 or accumulation_steps < 1:
            raise UserError(f"batch_size and accumulation_steps must be >= 1, got {batch_size} and "
                            f"{accumulation_steps}")
        batches = (rows // group_size) // batch_size
        if batches == 0:
            raise UserError(f"the data has {rows} rows, fewer than batch_size x device count = "
                            f"{batch_size} x {group_size}: lower batch_size or create more data")
        if train_steps > 0:
            total = train_steps
        elif epoch_size > 0:
            total = epoch_size * batches // accumulation_steps
            if total == 0:
                raise UserError(f"{epoch_size} epoch(s) of {batches} batches is less than one optimizer step of "
                                f"{accumulation_steps} accumulated batches; raise epoch_size or train_steps")
        else:
            raise UserError(f"set train_steps > 0 or epoch_size > 0 (got {train_steps} and {epoch_size})")
        return cls(rows, batch_size, total, group_size, rank, accumulation_steps, shuffle, seed)

    @property
    def batches_per_epoch(self) -> int:
        return (self.rows // self.group_size) // self.batch_size

    @property
    def total_micro_steps(self) -> int:
        return self.total_steps * self.accumulation_steps

    @property
    def epochs(self) -> float:
        return self.total_micro_steps / self.batches_per_epoch

    def signature(self) -> Dict[str, int]:
        return {key: int(getattr(self, key)) for key in PLAN_KEYS}

    def epoch_rows(self, epoch: int) -> np.ndarray:
        """This rank's rows of `epoch`, in reading order (batches_per_epoch * batch_size of them)."""
        usable = self.rows - self.rows % self.group_size
        order = np.random.RandomState(self.seed + epoch).permutation(self.rows) if self.shuffle \
            else np.arange(self.rows)
        return order[:usable][self.rank::self.group_size][:self.batches_per_epoch * self.batch_size]

    def segments(self, start_micro_step: int, max_batches: int) -> Iterator[np.ndarray]:
        """The rows of the rest of the run from micro-step `start_micro_step`, in reading order, in pieces of at
        most `max_batches` batches (the rows of all epochs, so a dataset needs building once per piece)."""
        step = start_micro_step
        while step < self.total_micro_steps:
            count = min(max_batches, self.total_micro_steps - step)
            yield np.concatenate(list(self._rows(step, step + count)))
            step += count

    def _rows(self, start: int, end: int) -> Iterator[np.ndarray]:
        """Rows of micro-steps start .. end-1, epoch by epoch."""
        step = start
        while step < end:
            epoch, first = divmod(step, self.batches_per_epoch)
            last = min(self.batches_per_epoch, first + end - step)
            yield self.epoch_rows(epoch)[first * self.batch_size:last * self.batch_size]
            step += last - first

    def describe(self) -> str:
        return (f"{self.rows} rows; per rank {self.batches_per_epoch} batches of {self.batch_size} per epoch; "
                f"{self.total_steps} optimizer steps x {self.accumulation_steps} micro-batch(es) "
                f"x {self.group_size} rank(s) = {self.epochs:.2f} epochs")


@dataclass
class Progress:
    """Counters shared by the callbacks (micro_step and overflow_count are saved in checkpoints). `StepCounter` fills
    them before the other callbacks run; `window_*` describe the micro-steps since the previous callback (one step,
    or a whole sink on GPU/Ascend)."""

    micro_step: int = 0
    overflow_count: int = 0
    started_at: float = field(default_factory=time.time)
    window_steps: int = 0
    window_overflows: int = 0
    window_sums: Tuple[float, ...] = ()


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


CHECKPOINT_NAME = re.compile(r"^(?P<prefix>[\w.]+)-(?P<step>\d+)\.ckpt$")


def list_checkpoints(directory: str, prefix: str) -> List[Tuple[int, str]]:
    """(optimizer step, path) of the finished checkpoints `<prefix>-<step>.ckpt` in `directory`, oldest first.

    Files still being written carry a temporary name (`.tmp-*`, see save_checkpoint_atomic) and never match.
    """
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        match = CHECKPOINT_NAME.match(name)
        if match and match["prefix"] == prefix:
            found.append((int(match["step"]), os.path.join(directory, name)))
    return sorted(found)


def latest_checkpoint(directory: str, prefix: str) -> Optional[str]:
    found = list_checkpoints(directory, prefix)
    return found[-1][1] if found else None


def _scalar(value) -> float:
    return float(value.asnumpy()) if hasattr(value, "asnumpy") else float(value)


def resume_or_init(train_cell: nn.Cell, network: nn.Cell, plan: StepPlan, load_checkpoint_path: str,
                   save_directory: str, prefix: str, log: Callable[[str], None] = print, init_only: bool = False,
                   allow_missing: Sequence[str] = ()) -> Progress:
    """Restore the run's state, or start fresh.

    - the newest readable train checkpoint in `save_directory` (this run's own, written by `CheckpointSaver`):
      weights, optimizer state, loss scale and progress are restored, whatever `load_checkpoint_path` says, so
      a restarted run continues instead of starting over; its data plan must match. Unreadable files (a disk
      that lost data, a foreign file under our name) are skipped with a warning, never resumed from.
    - else a train checkpoint in `load_checkpoint_path` (not when `init_only`) is resumed the same way;
    - else `load_checkpoint_path` holding weights only (a converted public checkpoint or a network checkpoint),
      or any checkpoint when `init_only` (fine-tuning from a pretraining run): the network's weights are loaded
      (names starting with `allow_missing`, a new task head, may be absent) and training starts at step 0.
    """
    own = newest_train_checkpoint(save_directory, prefix, log) if save_directory else None
    if own:
        path, values = own
        if load_checkpoint_path:
            log(f"{save_directory} already holds this run's checkpoints: continuing from them, not from "
                f"{load_checkpoint_path}")
        return _resume(train_cell, values, plan, path, log)
    if not load_checkpoint_path:
        return Progress()
    values = read_checkpoint(load_checkpoint_path)
    if not init_only and all(key in values for key in PROGRESS_KEYS):
        return _resume(train_cell, values, plan, load_checkpoint_path, log)
    report = load_weights(network, values, allow_missing=allow_missing, name=load_checkpoint_path)
    new = f"; new head: {', '.join(report.missing)}" if report.missing else ""
    log(f"initialised the network from {load_checkpoint_path} (weights only: training starts at step 0{new})")
    return Progress()


def check_same_start(progress: Progress, device: Device, save_directory: str) -> None:
    """Data parallel needs every rank to resume from the same step. A rank on a machine that cannot see rank 0's
    checkpoints (written on rank 0's machine) would start over from random weights, and the ranks would silently
    average gradients of different models: refuse on every rank at once. (float32 on the wire: exact up to 2^24.)"""
    if device.group_size < 2:
        return
    mine = np.zeros(device.group_size, np.float32)
    mine[device.rank] = progress.micro_step
    steps = all_ranks_sum(mine).astype(np.int64)
    if len(set(steps.tolist())) > 1:
        found = ", ".join(f"rank {rank}: micro-step {step}" for rank, step in enumerate(steps.tolist()))
        raise UserError(f"the ranks would resume from different steps ({found}): every node must see the same "
                        f"checkpoints in {save_directory or 'load_checkpoint_path'}; put it on storage all nodes "
                        f"share, or copy the newest checkpoint to the same path on every node")


def newest_train_checkpoint(directory: str, prefix: str, log: Callable[[str], None] = print
                            ) -> Optional[Tuple[str, Dict]]:
    """(path, values) of the newest checkpoint in `directory` that reads back whole and holds training progress;
    damaged ones are skipped with a warning (they stay on disk for the user to inspect)."""
    for _, path in reversed(list_checkpoints(directory, prefix)):
        try:
            values = read_checkpoint(path)
        except UserError as err:
            log(f"warning: skipping {path}: {err}")
            continue
        if all(key in values for key in PROGRESS_KEYS):
            return path, values
        log(f"warning: skipping {path}: it holds no training progress (not written by a training run)")
    return None


def _resume(train_cell: nn.Cell, values: Dict, plan: StepPlan, path: str, log: Callable[[str], None]) -> Progress:
    """Weights, optimizer state, loss scale and progress from a train checkpoint written for this plan."""
    _check_plan(values, plan, path)
    load_weights(train_cell, {k: v for k, v in values.items() if k not in PROGRESS_KEYS + PLAN_KEYS}, name=path)
    progress = Progress(micro_step=int(_scalar(values["micro_step"])),
                        overflow_count=int(_scalar(values["overflow_count"])))
    log(f"resumed from {path}: optimizer step {progress.micro_step // plan.accumulation_steps} of "
        f"{plan.total_steps}")
    return progress


def _check_plan(values: Dict, plan: StepPlan, path: str) -> None:
    mine = plan.signature()
    changed = [f"{key}: checkpoint {int(_scalar(values[key]))}, now {mine[key]}"
               for key in PLAN_KEYS if key in values and int(_scalar(values[key])) != mine[key]]
    if changed:
        raise UserError(f"{path} was written by a run that read its data differently ({'; '.join(changed)}); "
                        f"resume with the same settings, or start a new run in another save_checkpoint_path")


class TrainMonitor(Callback):
    """Every `log_steps` optimizer steps (and at the last): one line on stdout and one JSON object in `jsonl_path`.

    Loss values are means over every micro-batch since the previous line (from `progress.window_sums`, exact in
    data-sink mode too). Throughput counts all ranks; tokens are batch x seq_length (padding included). ETA
    extrapolates the mean step time since the first callback (whose steps include graph compilation).
    """

    def __init__(self, plan: StepPlan, progress: Progress, log_steps: int, seq_length: int,
                 lr_at: Callable[[int], float], jsonl_path: Optional[str], log: Callable[[str], None] = print,
                 part_names: Sequence[str] = ("mlm_loss", "sop_loss")):
        super().__init__()
        if log_steps < 1:
            raise UserError(f"log_steps must be >= 1, got {log_steps}")
        self.plan, self.progress, self.log_steps, self.seq_length = plan, progress, log_steps, seq_length
        self.lr_at, self.jsonl_path, self.log, self.part_names = lr_at, jsonl_path, log, tuple(part_names)
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
            self._report(step, float(_scalar(run_context.original_args().net_outputs[2])))

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
            with open(self.jsonl_path, "a", encoding="utf-8") as handle:
                handle.write(json.dumps(record) + "\n")


def _clock(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class CheckpointSaver(Callback):
    """Every `every` optimizer steps and at the end: the whole train cell (weights, optimizer moments, loss scale,
    accumulation buffers) plus progress and the data plan, written atomically; only the newest `keep` remain."""

    def __init__(self, train_cell: nn.Cell, plan: StepPlan, progress: Progress, directory: str, prefix: str,
                 every: int, keep: int, log: Callable[[str], None] = print):
        super().__init__()
        if every < 1 or keep < 1:
            raise UserError(f"save_checkpoint_steps and save_checkpoint_num must be >= 1, got {every} and {keep}")
        self.train_cell, self.plan, self.progress = train_cell, plan, progress
        self.directory, self.prefix, self.every, self.keep, self.log = directory, prefix, every, keep, log
        self._last_step = progress.micro_step // plan.accumulation_steps
        self._pending = False

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
                 **self.plan.signature()}
        try:
            save_checkpoint_atomic(self.train_cell, path, append_dict=extra)
        except OSError as err:
            newest = latest_checkpoint(self.directory, self.prefix)
            raise UserError(f"could not write checkpoint {path}: {err.strerror or err}; "
                            f"{f'the newest complete checkpoint is {newest}' if newest else 'no checkpoint was kept'}"
                            f" (free space, then start the run again to resume)") from err
        for _, old in list_checkpoints(self.directory, self.prefix)[:-self.keep]:
            os.remove(old)
        self.log(f"saved {path}")
        return path


class NonFiniteGuard(Callback):
    """With loss scaling off, an inf/nan loss or gradient means the run diverged (fp32 does not overflow
    otherwise): stop at once, before `CheckpointSaver` could save the step, so the newest checkpoint is the last
    good one. (With loss scaling on, overflows are expected: the train cell skips them, TrainMonitor counts them.)
    """

    def __init__(self, plan: StepPlan, progress: Progress, checkpoint_dir: str = "", prefix: str = ""):
        super().__init__()
        self.plan, self.progress, self.checkpoint_dir, self.prefix = plan, progress, checkpoint_dir, prefix

    def on_train_step_end(self, run_context) -> None:
        loss = self.progress.window_sums[0]
        if math.isfinite(loss) and not self.progress.window_overflows:
            return
        step = (self.progress.micro_step - 1) // self.plan.accumulation_steps + 1
        what = f"the loss is {loss}" if not math.isfinite(loss) else "the gradients hold inf/nan"
        newest = latest_checkpoint(self.checkpoint_dir, self.prefix) if self.checkpoint_dir else None
        kept = f"the last good checkpoint is {newest}" if newest else "no checkpoint was written"
        raise UserError(f"step {step}: {what} with loss scaling off: training diverged and was stopped; {kept}. "
                        f"Lower the learning rate, set clip_norm, or set enable_lossscale true")


def check_checkpoint_space(directory: str, cell: nn.Cell) -> None:
    """Fail before any training time is spent when a checkpoint of `cell` cannot be written to `directory`
    (unwritable, read-only, full): reserve a checkpoint's size in a temporary file there, then delete it."""
    size = sum(p.nbytes for p in cell.get_parameters()) + (1 << 20)  # tensors + names and framing
    try:
        handle, probe = tempfile.mkstemp(prefix=".tmp-space-", dir=directory)
    except OSError as err:
        raise UserError(f"cannot write checkpoints to {directory}: {err.strerror or err}") from err
    try:
        try:
            os.posix_fallocate(handle, 0, size)
        except OSError as err:
            if err.errno not in (errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL):
                raise UserError(f"cannot write checkpoints to {directory}: {err.strerror} (one checkpoint needs "
                                f"{size / 2 ** 20:.1f} MiB); free space or set save_checkpoint_path") from err
            free = shutil.disk_usage(directory).free  # a file system without fallocate
            if free < size:
                raise UserError(f"cannot write checkpoints to {directory}: one checkpoint needs "
                                f"{size / 2 ** 20:.1f} MiB, {free / 2 ** 20:.1f} free")
    finally:
        os.close(handle)
        os.remove(probe)


def trim_metrics(path: str, step: int) -> None:
    """Before a resumed run appends to metrics.jsonl: drop the rows after the resumed step (the run logs them again)
    and a last line a kill cut short, so every step appears once and every line parses."""
    if not os.path.exists(path):
        return
    kept = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue  # cut short by a kill
            if row.get("step", 0) <= step:
                kept.append(line if line.endswith("\n") else line + "\n")
    save_text_atomic("".join(kept), path)


def remove_stale_temporaries(directory: str) -> None:
    """Delete half-written checkpoints a killed run left behind (they never count as checkpoints)."""
    for path in Path(directory).glob(".tmp-*.ckpt"):
        path.unlink(missing_ok=True)


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


def build_train_cell(config: Config, network: nn.Cell, total_steps: int) -> Tuple[nn.Optimizer, nn.Cell]:
    """The optimizer named by `config.optimizer` and the train-step cell around `network` (a network with loss),
    from the yaml keys every training script shares (loss scaling, clipping, accumulation)."""
    from src.albert_for_pre_training import AlbertTrainOneStepCell
    from src.optimization import build_optimizer

    section = config.optimizer_cfg[config.optimizer].to_dict()
    optimizer = build_optimizer(config.optimizer, network.trainable_params(), section, total_steps)
    cell = AlbertTrainOneStepCell(network, optimizer,
                                  loss_scale=float(config.loss_scale_value) if config.enable_lossscale else None,
                                  scale_factor=float(config.scale_factor), scale_window=int(config.scale_window),
                                  clip_norm=float(config.clip_norm), accumulation_steps=int(config.accumulation_steps),
                                  float_status=overflow_needs_float_status(ms.get_context("device_target")))
    return optimizer, cell


def make_callbacks(cell: nn.Cell, optimizer: nn.Optimizer, plan: StepPlan, progress: Progress, device: Device,
                   seq_length: int, output_dir: str, log_steps: int, log: Callable[[str], None],
                   checkpoints: Optional[Tuple[str, str, int, int]] = None,
                   part_names: Sequence[str] = ()) -> List[Callback]:
    """Progress lines and metrics.jsonl (a fresh run starts a new file, a resumed one appends), a stop on inf/nan
    when loss scaling is off, and, when `checkpoints` = (directory, prefix, every, keep) is given, checkpoints
    (checked to fit in `directory` first); files are written by rank 0 only."""
    metrics = os.path.join(output_dir, "metrics.jsonl")
    if device.is_main and progress.micro_step == 0 and os.path.exists(metrics):
        os.remove(metrics)
    elif device.is_main:
        trim_metrics(metrics, progress.micro_step // plan.accumulation_steps)
    callbacks: List[Callback] = [StepCounter(cell, progress, len(part_names)),
                                 TrainMonitor(plan, progress, log_steps, seq_length,
                                              lr_function(optimizer.learning_rate),
                                              metrics if device.is_main else None, log, part_names)]
    directory, prefix, every, keep = checkpoints or ("", "", 0, 0)
    if not cell.use_loss_scale:
        callbacks.append(NonFiniteGuard(plan, progress, directory, prefix))
    if checkpoints and device.is_main:
        check_checkpoint_space(directory, cell)
        callbacks.append(CheckpointSaver(cell, plan, progress, directory, prefix, every, keep, log))
    return callbacks


def pad_batch(columns: List[np.ndarray], batch_size: int) -> List[np.ndarray]:
    """Append zero rows up to `batch_size` plus the example-weight column (1 real, 0 padding), so the last batch
    of an evaluation has the compiled shape and its padding can be told apart."""
    real = len(columns[0])
    padded = [np.concatenate([c, np.zeros((batch_size - real,) + c.shape[1:], c.dtype)]) for c in columns]
    weights = np.zeros(batch_size, np.float32)
    weights[:real] = 1.0
    return padded + [weights]


def all_ranks_sum(values: np.ndarray) -> np.ndarray:
    """Element-wise sum over the ranks of a data-parallel group (float32 on the wire; CPU AllReduce only sums)."""
    from mindspore import ops

    class _Sum(nn.Cell):
        def __init__(self):
            super().__init__()
            self.all_reduce = ops.AllReduce(ops.ReduceOp.SUM)

        def construct(self, x):
            return self.all_reduce(x)

    return _Sum()(Tensor(values.astype(np.float32))).asnumpy()


def weights_digest(cell: nn.Cell) -> str:
    """sha256 of every trainable parameter's bytes: equal on all ranks when data parallel kept them in sync."""
    digest = hashlib.sha256()
    for param in cell.trainable_params():
        digest.update(param.name.encode())
        digest.update(np.ascontiguousarray(param.asnumpy()).tobytes())
    return digest.hexdigest()


def lr_function(schedule: nn.Cell) -> Callable[[int], float]:
    """The learning rate the optimizer uses at a (0-based) global step, read from its schedule cell."""
    def lr_at(step: int) -> float:
        return float(schedule(Tensor(step, ms.int32)).asnumpy())
    return lr_at


def network_config(config: Config, data_vocab_size: Optional[int], config_file: str = "") -> AlbertConfig:
    """The AlbertConfig of a run: `albert_config_file`, else `config_file` (e.g. the albert_config.json saved beside
    a checkpoint), else the preset; then net_cfg overrides. A preset's vocab_size defaults to the data's
    vocabulary unless net_cfg.vocab_size sets it."""
    overrides = {key: value for key, value in config.net_cfg.to_dict().items() if value is not None}
    config_file = config.albert_config_file or config_file
    if config_file:
        base = AlbertConfig.from_json_file(config_file)
    else:
        base = AlbertConfig.from_preset(config.albert_network)
        if data_vocab_size is not None:
            overrides.setdefault("vocab_size", data_vocab_size)
    return base.replace(**overrides)


def config_beside(checkpoint: str) -> str:
    """The network config saved with a checkpoint: `<checkpoint>.json` (src.convert_checkpoint) or the
    albert_config.json that training runs write into their checkpoint folder; "" when there is none."""
    if not checkpoint:
        return ""
    for path in (checkpoint + ".json", os.path.join(os.path.dirname(os.path.abspath(checkpoint)), "albert_config.json")):
        if os.path.isfile(path):
            return path
    return ""


def check_data_fits(meta: dict, net: AlbertConfig, seq_shape: Sequence[int], data_dir: str) -> None:
    """Stop before building a model the data cannot feed (vocabulary, sequence length)."""
    if meta:
        try:
            check_data_meta(meta, vocab_size=net.vocab_size)
        except UserError as err:
            raise UserError(f"{data_dir}: {err}") from err
    if seq_shape and seq_shape[-1] > net.max_position_embeddings:
        raise UserError(f"{data_dir}: sequences of {seq_shape[-1]} tokens but the network's "
                        f"max_position_embeddings is {net.max_position_embeddings}")


def data_meta(data_dir: str) -> dict:
    """The creator's .meta.json when there is one (data from other tools may lack it)."""
    try:
        return load_data_meta(data_dir)
    except UserError:
        return {}
