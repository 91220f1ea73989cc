"""`StepPlan`, the one place step counts are computed: optimizer steps (`train_steps`) versus micro-batches
(`accumulation_steps`), epochs from the dataset size, and the exact rows each rank reads in which order. The order
is a function of (seed, epoch) only, so a resumed run reads the rows the uninterrupted run would have read.
`Progress` holds the counters the training callbacks share and checkpoints keep.
"""
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, Tuple

import numpy as np

from model_utils.errors import UserError
from src.training.settings import PRETRAIN_FLAGS

# What a checkpoint's data position depends on: resuming with other values would read other rows.
PLAN_KEYS = ("rows", "batch_size", "group_size", "accumulation_steps", "seed", "shuffle")


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
               rank: int = 0, accumulation_steps: int = 1, shuffle: bool = True, seed: int = 0,
               flag: Callable[[str], str] = lambda name: PRETRAIN_FLAGS.get(name, name)) -> "StepPlan":
        """`train_steps` > 0 counts optimizer steps; otherwise the run lasts `epoch_size` epochs. `flag` gives the
        user's flag for `batch_size` and `epochs` (TrainSettings.flag; pretrain_config.yaml's by default), which
        messages name."""
        batch, epochs = flag("batch_size"), flag("epochs")
        if batch_size < 1 or accumulation_steps < 1:
            raise UserError(f"{batch} and accumulation_steps must be >= 1, got {batch_size} and "
                            f"{accumulation_steps}")
        batches = (rows // group_size) // batch_size
        if batches == 0:
            raise UserError(f"the data has {rows} rows, fewer than {batch} x device count = "
                            f"{batch_size} x {group_size}: lower {batch} or create more data")
        if train_steps > 0:
            total = train_steps
        elif epoch_size > 0:
            total = epoch_size * batches // accumulation_steps
            if total == 0:
                raise UserError(f"{epoch_size} epoch(s) of {batches} batches is less than one optimizer step of "
                                f"{accumulation_steps} accumulated batches; raise {epochs} or train_steps")
        else:
            raise UserError(f"set train_steps > 0 or {epochs} > 0 (got {train_steps} and {epoch_size})")
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
