"""Progress, rate and ETA of the long loops (evaluation, prediction, data creation), through tqdm, on stderr (stdout
holds results).

On a terminal a live bar, drawn on the terminal only (see src/run_log.terminal: its redraws would fill the log);
elsewhere (a log file, the scripts' `tee`) a plain line every PLAIN_INTERVAL_S seconds, so logs stay readable. Either
way the loop ends with one line (what was done, in how long, at what rate), which the log keeps.
"""
import contextlib
import sys
from typing import Callable, Iterator, List, Optional, TypeVar

from tqdm import tqdm

from src.common.run_log import terminal

Item, Result = TypeVar("Item"), TypeVar("Result")
PLAIN_INTERVAL_S = 30.0
BAR = "{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt}{unit} [{elapsed}<{remaining}, {rate_fmt}]"
LINE = "{desc}: {n_fmt}/{total_fmt}{unit} ({percentage:.0f}%), {rate_fmt}, {elapsed} elapsed, eta {remaining}"
OPEN_ENDED = "{desc}: {n_fmt}{unit}, {rate_fmt}, {elapsed} elapsed"  # no total known
DONE = "{desc}: {n_fmt}{unit} in {elapsed} ({rate_fmt})"

tqdm.monitor_interval = 0  # no monitor thread: the data tools fork workers


class _Lines:
    """tqdm's output as whole lines: each status it would redraw in place (\\r) becomes a line of its own."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        line = text.replace("\r", "").rstrip()
        if line:
            self.stream.write(line + "\n")

    def flush(self) -> None:
        self.stream.flush()


@contextlib.contextmanager
def progress(what: str, total: Optional[float], unit: str, enabled: bool = True,
             unit_scale: bool = False, interval_s: float = PLAIN_INTERVAL_S) -> Iterator[tqdm]:
    """A tqdm bar (`update(n)` as work is done) for the block: `what` names the work, `unit` follows the counts
    (" rows", or "B" with `unit_scale` for bytes), `total` None when unknown. Disabled: nothing is shown. The last
    line is written when the block ends without an exception."""
    stream = sys.stderr
    live = bool(getattr(stream, "isatty", lambda: False)())
    if live:
        options = dict(file=terminal(stream), bar_format=BAR if total else OPEN_ENDED, mininterval=0.5, delay=0.5)
    else:
        options = dict(file=_Lines(stream), bar_format=LINE if total else OPEN_ENDED, mininterval=interval_s,
                       delay=interval_s, miniters=1)
    bar = tqdm(total=total, desc=what, unit=unit, unit_scale=unit_scale, leave=False, disable=not enabled,
               dynamic_ncols=True, **options)
    try:
        yield bar
    finally:
        done = dict(bar.format_dict) if enabled else None
        bar.close()
    if done is not None:
        print(tqdm.format_meter(**dict(done, bar_format=DONE)), file=stream, flush=True)


def counting(function: Callable[[List[Item]], List[Result]], bar: tqdm) -> Callable[[List[Item]], List[Result]]:
    """`function` (a batch of items in, their results out) advancing `bar` by each batch done."""
    def counted(items: List[Item]) -> List[Result]:
        results = function(items)
        bar.update(len(items))
        return results
    return counted
