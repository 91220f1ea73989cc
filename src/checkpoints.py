"""Train checkpoints: naming and listing, resuming a run (`resume_or_init`), which files a run may delete
(`of_this_training`), and the checks that keep a run from losing work (space for a checkpoint before the first
step, ranks that would resume from different steps).

A run killed at any point resumes to the uninterrupted run's trajectory: `resume_or_init` restores weights,
optimizer state, loss scale and progress from the newest readable checkpoint in the save folder or the
checkpoint the run starts from; damaged checkpoints are skipped with a warning.
"""
import errno
import hashlib
import os
import re
import shutil
import tempfile
from typing import Callable, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import nn

from model_utils.errors import UserError
from src.device_setup import Device, all_ranks_sum
from src.settings import TrainSettings
from src.step_plan import PLAN_KEYS, Progress, StepPlan
from src.utils import load_weights, read_checkpoint

# Progress stored beside the weights in every checkpoint (never under the name `global_step`, the optimizer's).
PROGRESS_KEYS = ("micro_step", "overflow_count")


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


def of_this_training(path: str, plan: StepPlan) -> bool:
    """Whether `path` is a checkpoint a run of this training wrote: it reads back, holds training progress and the
    same data plan (what resuming from it needs). Only such files, and the run's own, may ever be deleted by it.
    Reads only the progress and plan values (MindSpore still parses the whole file)."""
    wanted = set(PROGRESS_KEYS + PLAN_KEYS)
    try:
        values = ms.load_checkpoint(path, choice_func=wanted.__contains__)
    except Exception:  # MindSpore raises ValueError/RuntimeError for damaged or foreign files
        return False
    return all(key in values for key in PROGRESS_KEYS) and all(
        int(_scalar(values[key])) == value for key, value in plan.signature().items() if key in values)


def _scalar(value) -> float:
    return float(value.asnumpy()) if hasattr(value, "asnumpy") else float(value)


def resume_or_init(train_cell: nn.Cell, network: nn.Cell, plan: StepPlan, settings: TrainSettings,
                   log: Callable[[str], None] = print) -> Progress:
    """Restore the run's state, or start fresh.

    - the newest readable train checkpoint in `settings.save_dir` (this run's own, written by `CheckpointSaver`):
      weights, optimizer state, loss scale and progress are restored, whatever `settings.init_checkpoint` says, so
      a restarted run continues instead of starting over; its data plan must match. Unreadable files (a disk
      that lost data, a foreign file under our name) are skipped with a warning, never resumed from.
    - else a train checkpoint in `init_checkpoint` (not when `init_only`) is resumed the same way;
    - else `init_checkpoint` holding weights only (a converted public checkpoint or a network checkpoint), or any
      checkpoint when `init_only` (fine-tuning from a pretraining run): the network's weights are loaded (names
      starting with `allow_missing`, a new task head, may be absent) and training starts at step 0.
    """
    save_dir, start = settings.save_dir, settings.init_checkpoint
    own = newest_train_checkpoint(save_dir, settings.checkpoint_prefix, log) if save_dir else None
    if own:
        path, values = own
        if start:
            log(f"{save_dir} already holds this run's checkpoints: continuing from them, not from {start}")
        return _resume(train_cell, values, plan, path, settings, log)
    if not start:
        return Progress()
    values = read_checkpoint(start)
    if not settings.init_only and all(key in values for key in PROGRESS_KEYS):
        return _resume(train_cell, values, plan, start, settings, log)
    report = load_weights(network, values, allow_missing=settings.allow_missing, name=start)
    new = f"; new head: {', '.join(report.missing)}" if report.missing else ""
    log(f"initialised the network from {start} (weights only: training starts at step 0{new})")
    return Progress()


def check_same_start(progress: Progress, device: Device, settings: TrainSettings) -> None:
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
                        f"checkpoints in {settings.save_dir or settings.flag('init_checkpoint')}; put it on storage "
                        f"all nodes "
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


def _resume(train_cell: nn.Cell, values: Dict, plan: StepPlan, path: str, settings: TrainSettings,
            log: Callable[[str], None]) -> Progress:
    """Weights, optimizer state, loss scale and progress from a train checkpoint written for this plan."""
    _check_plan(values, plan, path, settings)
    load_weights(train_cell, {k: v for k, v in values.items() if k not in PROGRESS_KEYS + PLAN_KEYS}, name=path)
    progress = Progress(micro_step=int(_scalar(values["micro_step"])),
                        overflow_count=int(_scalar(values["overflow_count"])))
    log(f"resumed from {path}: optimizer step {progress.micro_step // plan.accumulation_steps} of "
        f"{plan.total_steps}")
    return progress


def _check_plan(values: Dict, plan: StepPlan, path: str, settings: TrainSettings) -> None:
    mine = plan.signature()
    changed = [f"{key}: checkpoint {int(_scalar(values[key]))}, now {mine[key]}"
               for key in PLAN_KEYS if key in values and int(_scalar(values[key])) != mine[key]]
    if changed:
        raise UserError(f"{path} was written by a run that read its data differently ({'; '.join(changed)}); "
                        f"resume with the same settings, or start a new run in another {settings.flag('save_dir')}")


def check_checkpoint_space(directory: str, cell: nn.Cell, save_flag: str = "save_checkpoint_path") -> None:
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
                                f"{size / 2 ** 20:.1f} MiB); free space or set {save_flag}") from err
            free = shutil.disk_usage(directory).free  # a file system without fallocate
            if free < size:
                raise UserError(f"cannot write checkpoints to {directory}: one checkpoint needs "
                                f"{size / 2 ** 20:.1f} MiB, {free / 2 ** 20:.1f} free")
    finally:
        os.close(handle)
        os.remove(probe)


def weights_digest(cell: nn.Cell) -> str:
    """sha256 of every trainable parameter's bytes: equal on all ranks when data parallel kept them in sync."""
    digest = hashlib.sha256()
    for param in cell.trainable_params():
        digest.update(param.name.encode())
        digest.update(np.ascontiguousarray(param.asnumpy()).tobytes())
    return digest.hexdigest()
