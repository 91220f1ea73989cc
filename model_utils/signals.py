"""How every command stops when it is told to: Ctrl-C and SIGTERM (a scheduler's stop, `docker stop`, `kill`, the
end of the script that started it) become exceptions, so a stopped command cleans up as after an error (temporary
files removed, locks released), prints one last line and exits 130 or 143. Without this, SIGTERM killed a command
on the spot, and after MindSpore's first graph execution Ctrl-C did too (MindSpore 2.10's runtime takes SIGINT and
ends the process by SIGTERM, silently). No MindSpore import here."""
import ctypes
import os
import signal
import threading
from contextlib import contextmanager
from typing import Iterator, Optional, Set

PR_SET_PDEATHSIG = 1
_commands_running = 0  # signals_taken blocks open: take_signals acts only inside one (a command's run)
_deferring = 0  # stops_deferred blocks open
_pending: Optional[KeyboardInterrupt] = None  # a stop asked for inside one, not raised yet
_ignored: Set[int] = set()  # signals ignored when the command started (a background job's SIGINT): left so


class Stopped(KeyboardInterrupt):
    """SIGTERM as an exception: handled like Ctrl-C's KeyboardInterrupt, exit code 143."""


def _stop(signum: int, frame) -> None:
    """The handler of both: raise now, or inside stops_deferred keep the first stop for stop_if_asked."""
    global _pending
    stop = Stopped() if signum == signal.SIGTERM else KeyboardInterrupt()
    if not _deferring or _pending is not None:  # a second stop does not wait (a step that never ends)
        raise stop
    _pending = stop


def take_signals() -> None:
    """Ctrl-C as KeyboardInterrupt and SIGTERM as Stopped from now on, in the main thread of a command (inside
    `signals_taken`; a program using the package's functions keeps its own handlers). MindSpore's runtime takes
    SIGINT back at some graph executions, so stop_if_asked calls this again at every step (a microsecond). A
    launcher's workers (msrun: MS_ROLE, mpirun: OMPI_COMM_WORLD_RANK) keep SIGTERM's default: the launcher stops
    them with it and waits, and a worker blocked in a collective operation would never reach the exception."""
    if not _commands_running or threading.current_thread() is not threading.main_thread():
        return
    if signal.SIGINT not in _ignored:
        signal.signal(signal.SIGINT, _stop)
    if signal.SIGTERM not in _ignored and not (os.environ.get("MS_ROLE") or os.environ.get("OMPI_COMM_WORLD_RANK")):
        signal.signal(signal.SIGTERM, _stop)


@contextmanager
def stops_deferred() -> Iterator[None]:
    """Inside the block a stop waits for `stop_if_asked()`, which a loop calls between its steps, or for the
    block's end: raised wherever the signal lands, it cut the log's last line in two (inside a print) or left a
    step half reported."""
    global _deferring
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
    stop_if_asked()


def stop_if_asked() -> None:
    """Raise the stop asked for since the last call (Stopped for SIGTERM, KeyboardInterrupt for Ctrl-C), after
    taking the signals back from MindSpore (see take_signals)."""
    global _pending
    take_signals()
    if _pending is not None:
        stop, _pending = _pending, None
        raise stop


@contextmanager
def signals_taken() -> Iterator[None]:
    """take_signals() for the block, the previous handlers back after it (a command run inside another program,
    as the tests do, leaves that program's handlers as they were)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _commands_running, _pending, _ignored
    previous = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    if not _commands_running:
        _ignored = {number for number, handler in previous.items() if handler == signal.SIG_IGN}
    _commands_running += 1
    take_signals()
    try:
        yield
    finally:
        _commands_running -= 1
        _pending = None
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)


def die_with_parent(signum: int) -> bool:
    """Have the kernel send `signum` to this process when its parent dies (Linux PR_SET_PDEATHSIG, kept across
    exec); False where that is not available."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def stop_with_script() -> None:
    """A command started by one of scripts/*.sh (which export ALBERT_SCRIPT_PID=$$) gets SIGTERM when the script
    dies: a script stopped by a scheduler (SIGTERM to the script alone) left the training running on, detached, and
    holding its output folder, so that running the script again was refused."""
    script = os.environ.get("ALBERT_SCRIPT_PID", "")
    if script.isdigit() and int(script) == os.getppid():
        die_with_parent(signal.SIGTERM)
