"""Every command's output in a log file beside what it writes, as well as on the terminal.

`run_cli` (model_utils/errors.py) runs each command inside `captured_output`: the lines Python writes to stdout and
stderr are also kept in memory until the command knows its output folder and has checked its inputs (never before:
a run that fails its checks creates no folder); `log_to(folder)` then writes them to FOLDER/logs/<command>.log and
appends every later line, the final error line included. The file is opened as src/atomic_files.open_regular opens
logs (never through a symbolic link) and appended to, so a resumed run continues its log.

The scripts/*.sh write that log themselves (the shell's `tee`, which also catches MindSpore's C++ output) and say so
with ALBERT_LOG_TEED=1: then the command writes no log of its own, and nothing is written twice.
"""
import contextlib
import os
import sys
import threading
import time
import traceback
from typing import IO, Callable, Iterator, List, Optional, TextIO

from src.common.atomic_files import open_regular

LOGS_FOLDER = "logs"
TEED_BY_SCRIPT = "ALBERT_LOG_TEED"
# Output kept before the log opens (a command that prints its results on stdout never opens one).
PENDING_LIMIT = 1 << 20


class _Log:
    """What the tees write: kept (up to PENDING_LIMIT characters) until `open`, then appended to the file."""

    def __init__(self, command: str, header: str):
        self.command, self.header = command, header
        self.pending: Optional[List[str]] = []  # None: no longer kept (written, or not wanted)
        self.kept = 0
        self.dropped = False
        self.handle: Optional[IO[str]] = None
        self.path: Optional[str] = None
        self.lock = threading.Lock()

    def add(self, text: str) -> None:
        with self.lock:
            if self.handle is not None:
                self.handle.write(text)
                if "\n" in text:
                    self.handle.flush()
            elif self.pending is not None:
                if self.kept + len(text) > PENDING_LIMIT:
                    self.dropped = True
                    return
                self.pending.append(text)
                self.kept += len(text)

    def open(self, path: str) -> str:
        with self.lock:
            if self.path is None:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                self.handle = open_regular(path, "a")
                self.path = path
                self.handle.write(self.header)
                if self.dropped:
                    self.handle.write(f"(the first {PENDING_LIMIT} characters of output only)\n")
                self.handle.write("".join(self.pending or []))
                self.handle.flush()
                self.pending = None
            return self.path

    def stop(self) -> None:
        with self.lock:
            self.pending = None

    def close(self) -> None:
        with self.lock:
            if self.handle is not None:
                self.handle.close()
                self.handle = None


class _Tee:
    """A text stream writing to `terminal` and to the log; everything else (isatty, fileno, encoding) is the
    terminal's."""

    def __init__(self, terminal: TextIO, log: _Log):
        self.terminal, self._log = terminal, log

    def write(self, text: str) -> int:
        written = self.terminal.write(text)
        self._log.add(text)
        return written

    def flush(self) -> None:
        self.terminal.flush()

    def __getattr__(self, name: str):
        return getattr(self.terminal, name)


_current: Optional[_Log] = None


@contextlib.contextmanager
def captured_output(command: str, args: List[str]) -> Iterator[None]:
    """Tee sys.stdout and sys.stderr for the block (restored after it); `command` names the log file, the log's
    first line shows `args`. An exception leaving the block (a bug) puts its traceback in the log too: Python prints
    it on the terminal after the streams are restored."""
    global _current
    header = f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {command} {' '.join(args)}\n"
    log = _Log(command, header)
    saved = sys.stdout, sys.stderr, _current
    sys.stdout, sys.stderr, _current = _Tee(sys.stdout, log), _Tee(sys.stderr, log), log
    try:
        yield
    except Exception:
        log.add(traceback.format_exc())
        raise
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout, sys.stderr, _current = saved
        log.close()


def command_name(main: Callable) -> str:
    """The name of a command's log: its module (`run_` dropped, as the scripts name their logs: pretrain.log,
    classifier.log), the script file's when it runs as __main__."""
    module = main.__module__
    name = os.path.splitext(os.path.basename(sys.argv[0]))[0] if module == "__main__" else module.rsplit(".", 1)[-1]
    return name[len("run_"):] if name.startswith("run_") else name


def log_to(folder: str) -> Optional[str]:
    """Write the command's output so far, and from now on, to FOLDER/logs/<command>.log; returns that path (the
    first call decides it), or None when there is no capture (a command called in-process) or a script writes the
    log (ALBERT_LOG_TEED=1)."""
    log = _current
    if log is None:
        return None
    if os.environ.get(TEED_BY_SCRIPT) == "1":
        log.stop()
        return None
    return log.open(os.path.join(os.path.abspath(folder), LOGS_FOLDER, f"{log.command}.log"))


def terminal(stream: TextIO) -> TextIO:
    """The stream beneath a tee: where a live progress bar goes (its redraws would clutter the log)."""
    return getattr(stream, "terminal", stream)
