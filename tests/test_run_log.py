"""The shared plumbing of the run reports, in-process: the log every command tees its output into
(src/common/run_log.py), progress lines (src/common/progress.py) and TensorBoard summaries (src/training/summaries.py),
the latter read back with TensorBoard's own EventAccumulator. The entry points' use of them is tested on real runs
(test_run_pretrain.py, test_finetune_e2e.py, test_crash_safety.py, test_pretrain_scripts.py)."""
import io
import os
import sys
import time

import pytest

from model_utils.errors import UserError, run_cli
from src.common import run_log
from src.common.progress import counting, progress


def command(folder, lines, fail=None):
    """A command printing `lines` (the first one before its folder is known), then failing with `fail`."""
    def main(argv):
        print(lines[0])
        run_log.log_to(str(folder))
        for line in lines[1:]:
            print(line, file=sys.stderr if line.startswith("warning") else sys.stdout)
        if fail:
            raise fail
        return 0
    return main


def test_the_log_holds_what_was_printed_before_and_after_the_folder_was_known(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(run_log.TEED_BY_SCRIPT, raising=False)
    main = command(tmp_path / "out", ["checked the inputs", "step 1", "warning: slow"], UserError("disk full"))
    assert run_cli(main, ["--flag", "1"]) == 2
    printed = capsys.readouterr()
    assert printed.out == "checked the inputs\nstep 1\n" and printed.err == "warning: slow\nerror: disk full\n"
    log = (tmp_path / "out" / "logs" / "test_run_log.log").read_text().splitlines()
    assert log[0].startswith("--- ") and log[0].endswith(" test_run_log --flag 1")
    assert log[1:] == ["checked the inputs", "step 1", "warning: slow", "error: disk full"]
    assert run_log.terminal(sys.stdout) is sys.stdout  # the tees are gone
    # A second run appends (a resumed run continues its log).
    assert run_cli(command(tmp_path / "out", ["again"]), []) == 0
    assert (tmp_path / "out" / "logs" / "test_run_log.log").read_text().splitlines()[-1] == "again"


def test_a_run_that_fails_its_checks_creates_no_folder_and_a_script_keeps_its_own_log(tmp_path, monkeypatch):
    def fails_early(argv):
        print("reading")
        raise UserError("bad key")
    assert run_cli(fails_early, []) == 2
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(run_log.TEED_BY_SCRIPT, "1")
    assert run_cli(command(tmp_path / "out", ["a", "b"]), []) == 0
    assert not (tmp_path / "out").exists()


def test_a_crash_traceback_goes_to_the_log_and_a_planted_link_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(run_log.TEED_BY_SCRIPT, raising=False)
    with pytest.raises(ZeroDivisionError):
        run_cli(command(tmp_path, ["x"], ZeroDivisionError("bug")), [])
    assert "ZeroDivisionError: bug" in (tmp_path / "logs" / "test_run_log.log").read_text()
    victim = tmp_path / "victim.txt"
    victim.write_text("mine\n")
    (tmp_path / "linked" / "logs").mkdir(parents=True)
    (tmp_path / "linked" / "logs" / "test_run_log.log").symlink_to(victim)
    assert run_cli(command(tmp_path / "linked", ["x"]), []) == 2
    assert victim.read_text() == "mine\n"


def test_mindspore_logs_errors_only_unless_verbose_or_the_user_chose(monkeypatch):
    seen = []

    def main(argv):
        seen.append(os.environ.get("GLOG_v"))
        return 0
    for given, argv, expected in ((None, [], "3"), (None, ["--verbose"], None), ("1", [], "1")):
        if given is None:
            monkeypatch.delenv("GLOG_v", raising=False)
        else:
            monkeypatch.setenv("GLOG_v", given)
        run_cli(main, argv)
        assert seen[-1] == expected, (given, argv)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("live", [False, True])
def test_progress_is_a_bar_on_a_terminal_and_plain_lines_elsewhere(live, monkeypatch):
    stream = Terminal() if live else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    with progress("eval", 100, " rows", interval_s=0) as bar:
        answer = counting(lambda items: [item * 2 for item in items], bar)
        assert answer([1, 2]) == [2, 4]
        time.sleep(0.6 if live else 0)  # a live bar appears after half a second
        bar.update(98)
    text = stream.getvalue()
    assert text.endswith("\n") and text.splitlines()[-1].startswith("eval: 100 rows in ")
    assert ("\r" in text) == live
    if not live:  # every status a line of its own, with rate and ETA
        assert "eval: 2/100 rows (2%), " in text and ", eta " in text
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with progress("eval", 10, " rows", enabled=False) as bar:
        bar.update(10)
    assert sys.stderr.getvalue() == ""


def test_summaries_are_read_back_by_tensorboard_and_a_resumed_writer_replaces_the_redone_steps(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from src.training.summaries import Summaries

    first = Summaries(str(tmp_path))
    first.text("settings", "    train_steps: 4", 0)
    for step in (1, 2, 3, 4):
        first.scalars("train", {"loss": 10.0 - step, "lr": float("nan"), "flag": True, "epoch": step / 2}, step)
    first.close()  # steps 3 and 4 were after the checkpoint at step 2: the resumed run redoes them
    resumed = Summaries(str(tmp_path), purge_step=3)
    for step in (3, 4):
        resumed.scalars("train", {"loss": 1.0 * step}, step)
    resumed.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    assert [(e.step, e.value) for e in events.Scalars("train/loss")] == [(1, 9.0), (2, 8.0), (3, 3.0), (4, 4.0)]
    assert [e.step for e in events.Scalars("train/epoch")] == [1, 2]
    assert "train/lr" not in events.Tags()["scalars"] and "train/flag" not in events.Tags()["scalars"]
    assert events.Tensors("settings/text_summary")[0].tensor_proto.string_val == [b"    train_steps: 4"]
    link = tmp_path / "linked"
    link.symlink_to(tmp_path)
    with pytest.raises(UserError, match="symbolic link"):
        Summaries(str(link))
