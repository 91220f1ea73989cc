"""One way for every entry point to report a user's mistake: one line on stderr, a non-zero exit.

A traceback tells a user nothing about which file or key was wrong, so entry points raise `UserError`
with a message naming the culprit and `run_cli` prints just that line. `--verbose` shows the traceback, and
MindSpore's own warnings (its plugin loader's lines about absent Ascend/GPU libraries on every start), which are
hidden otherwise unless GLOG_v is set. `run_cli` also tees the command's output into its log (src/common/run_log.py).
The model's config and cells refuse a value with ValueError, in their own terms; entry points wrap the calls that
load a config or build a network from the user's values in `as_user_error()`.
"""
import codecs
import os
import signal
import sys
import traceback
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Sequence

from model_utils.signals import Stopped, signals_taken, stop_with_script

EXIT_USER_ERROR = 2
QUIET_GLOG_LEVEL = "3"  # MindSpore's GLOG_v: errors only (it reads the variable when it is imported)


class UserError(Exception):
    """Bad input from the user (file, key, value): printed as one line, exit code 2."""


def utf16_hint(sample: bytes) -> str:
    """The end of a message about text that is not UTF-8: UTF-16 (Excel's "Unicode text", what Windows calls
    "Unicode") starts with its byte-order mark or, for Latin text without one, holds NUL bytes (was: read as text,
    every other character a NUL, into garbage records)."""
    if sample.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)) or b"\x00" in sample:
        return "; it looks like UTF-16 text: save it as UTF-8"
    return ""


@contextmanager
def as_user_error() -> Iterator[None]:
    """A ValueError raised inside becomes a UserError with the same message. Only around calls whose values come
    from the user (a network config, a head's options): elsewhere a ValueError is a bug and keeps its traceback."""
    try:
        yield
    except ValueError as err:
        raise UserError(str(err)) from err


def run_cli(main: Callable[[List[str]], Optional[int]], argv: Optional[Sequence[str]] = None) -> int:
    """Run `main(argv)` and turn errors into a one-line message and an exit code.

    `--verbose` anywhere in argv is removed before `main` sees it and makes errors show their traceback and
    MindSpore log its warnings. Entry points import MindSpore inside `main`, after this sets GLOG_v.
    Returns the exit code; callers do `sys.exit(run_cli(main))`.
    """
    from src.common.run_log import captured_output, command_name  # src imports this module: not at the top

    args = list(sys.argv[1:] if argv is None else argv)
    verbose = "--verbose" in args
    args = [a for a in args if a != "--verbose"]
    if not verbose:
        os.environ.setdefault("GLOG_v", QUIET_GLOG_LEVEL)
    with captured_output(command_name(main), args), signals_taken():
        stop_with_script()  # its SIGTERM then finds the handler
        return _run(main, args, verbose)


def _run(main: Callable[[List[str]], Optional[int]], args: List[str], verbose: bool) -> int:
    try:
        code = main(args)
        return int(code or 0)
    except UserError as err:
        if verbose:
            traceback.print_exc()
        print(f"error: {err}", file=sys.stderr)
        return EXIT_USER_ERROR
    except OSError as err:  # missing or unwritable files, a full disk: the file and the reason are enough
        if verbose:
            traceback.print_exc()
        name = getattr(err, "filename", None)
        reason = err.strerror or str(err)
        print(f"error: {name}: {reason}" if name else f"error: {reason}", file=sys.stderr)
        return EXIT_USER_ERROR
    except Stopped:
        print("stopped (SIGTERM, or Ctrl-C during a MindSpore graph run, which MindSpore turns into SIGTERM)",
              file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 128 + signal.SIGINT
