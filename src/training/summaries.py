"""TensorBoard summaries of a run in OUTPUT_DIR/tensorboard (`tensorboard --logdir OUTPUT_DIR/tensorboard`): the
training curves (each metrics.jsonl row under train/), evaluation metrics (eval/ after fine-tuning, pretrain_eval/)
and the run's settings as text. `enable_tensorboard: false` turns them off; rank 0 writes.

Written with tensorboardX's event-file format (MindSpore's SummaryRecord writes MindInsight's, which TensorBoard cannot
read), synchronously: every event is on disk when `scalars` returns, so a killed run loses none it logged. Each writer
gets a file of its own, named in the order they were made. A resumed run's writer starts with
`purge_step`, TensorBoard's restart marker: what the interrupted run logged after its checkpoint is dropped and the
re-logged steps replace it, so the curves continue without a doubled stretch.
"""
import math
import os
import sys
import time
from types import SimpleNamespace
from typing import Mapping, Optional

from model_utils.config import Config
from model_utils.errors import UserError

FOLDER = "tensorboard"


def _tensorboardx() -> SimpleNamespace:
    """The parts of tensorboardX these summaries use, imported when a run first writes (not for `--help`). Its package
    imports torch where torch is installed (2 s), only to accept torch tensors, which are never passed here: unless
    torch is loaded already, that import is made to fail (tensorboardX goes on without it) and then allowed again."""
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # `import torch` raises ImportError
    try:
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.proto.summary_pb2 import Summary
        from tensorboardX.summary import text
    finally:
        if blocked:
            del sys.modules["torch"]
    return SimpleNamespace(EventsWriter=EventsWriter, Event=Event, SessionLog=SessionLog, Summary=Summary, text=text)


class Summaries:
    """One event file in `folder` (created when absent; never a symbolic link)."""

    def __init__(self, folder: str, purge_step: Optional[int] = None):
        if os.path.islink(folder) or (os.path.lexists(folder) and not os.path.isdir(folder)):
            raise UserError(f"{folder} is a symbolic link or not a folder: TensorBoard summaries are never written "
                            f"through one; remove it (or set enable_tensorboard false)")
        self._tb = _tensorboardx()
        os.makedirs(folder, exist_ok=True)
        # TensorBoard reads a folder's files in name order, which must be the order they were written in (a resumed
        # run's purge marker comes after what it replaces): tensorboardX names them by the second only.
        self._events = self._tb.EventsWriter(os.path.join(folder, "events"), f".{time.time_ns():020d}.{os.getpid()}")
        if purge_step is not None:
            start = self._tb.SessionLog(status=self._tb.SessionLog.START)
            self._write(self._tb.Event(step=purge_step, session_log=start))

    def scalars(self, prefix: str, values: Mapping[str, object], step: int) -> None:
        """`values`' finite numbers as `prefix/name` at `step` (nan, text and flags are left out)."""
        summary = self._tb.Summary
        numbers = [summary.Value(tag=f"{prefix}/{name}", simple_value=float(value)) for name, value in values.items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)]
        if numbers:
            self._write(self._tb.Event(step=step, summary=summary(value=numbers)))

    def text(self, tag: str, text: str, step: int) -> None:
        self._write(self._tb.Event(step=step, summary=self._tb.text(tag, text)))

    def close(self) -> None:
        self._events.close()

    def _write(self, event) -> None:
        event.wall_time = time.time()
        self._events.write_event(event)
        self._events.flush()


def summaries_folder(output_dir: str) -> str:
    return os.path.join(output_dir, FOLDER)


def open_summaries(config: Config, output_dir: str, purge_step: Optional[int] = None) -> Optional[Summaries]:
    """The run's summaries, or None when the yaml turns them off."""
    return Summaries(summaries_folder(output_dir), purge_step) if config.enable_tensorboard else None


def settings_text(config: Config) -> str:
    """The settings as TensorBoard shows text (markdown): `key: value` lines, preformatted."""
    return "\n".join(f"    {line}" for line in str(config).splitlines())


def write_metrics(config: Config, output_dir: str, prefix: str, metrics: Mapping[str, object], step: int) -> None:
    """An evaluation's real-valued metrics (counts left out) as `prefix/name` at `step`, the step of the evaluated
    weights."""
    summaries = open_summaries(config, output_dir)
    if summaries is not None:
        try:
            summaries.scalars(prefix, {name: value for name, value in metrics.items() if isinstance(value, float)},
                              step)
        finally:
            summaries.close()
