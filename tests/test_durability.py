"""Outputs survive a power cut and a second run: data files reach the disk before the meta that vouches for them,
one run at a time writes an output (a flock the kernel drops when its holder dies), file modes come from the
umask without changing it process-wide, and a .meta.json cannot point a reader outside its folder."""
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterable, Iterator, List

import numpy as np
import pytest

from model_utils.errors import UserError
from src.common import atomic_files
from src.data import mindrecord_io
from tests.pretrain_helpers import ENV, ROOT

SCHEMA = {"input_ids": {"type": "int32", "shape": [4]}}
HOLDER = ("import sys, time; from src.common.atomic_files import lock_output; lock_output(sys.argv[1], 'x'); "
          "print('locked', flush=True); time.sleep(300)")


def hold_lock(lock_file: Path) -> subprocess.Popen:
    """Another process holding `lock_file` (as a first run would), once this returns."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_file)], cwd=ROOT, env=ENV,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    return holder


def write_data(output: Path, values: Iterable[int] = range(3), partitions: int = 1, overwrite: bool = False) -> None:
    with mindrecord_io.RecordWriter(output, SCHEMA, partition_number=partitions, overwrite=overwrite) as out:
        out.write({"input_ids": np.full(4, i, np.int32)} for i in values)
        out.publish({"kind": "test"})


def test_a_second_writer_stops_naming_the_first_runs_pid_and_a_killed_holder_blocks_nothing(tmp_path):
    output = tmp_path / "data" / "train.mindrecord"
    output.parent.mkdir()
    holder = hold_lock(output.with_name(".train.mindrecord.lock"))
    try:
        with pytest.raises(UserError, match=rf"output_file {output} is in use by another run \(pid {holder.pid},"):
            write_data(output)
        assert sorted(p.name for p in output.parent.iterdir()) == [".train.mindrecord.lock"]  # nothing touched
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    write_data(output)  # the crashed holder's lock went with it
    assert sorted(p.name for p in output.parent.iterdir()) == [
        "train.mindrecord", "train.mindrecord.db", "train.mindrecord.meta.json"]  # the lock file removed on exit


def test_parts_of_one_data_set_are_written_at_once_into_one_folder(tmp_path):
    """The lock is per data set: a part being made does not stop another part in the same folder."""
    holder = hold_lock(tmp_path / ".pt-00000-of-00002.mindrecord.lock")
    try:
        write_data(tmp_path / "pt-00001-of-00002.mindrecord")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()


def test_data_files_reach_the_disk_before_the_meta_is_published(tmp_path, monkeypatch):
    """Each file is fsynced before its rename, and the folder after the data's renames and before the meta's:
    otherwise after a power cut the meta ("the data is complete") can stand beside empty files."""
    events = []
    real_place = mindrecord_io.place
    monkeypatch.setattr(mindrecord_io, "fsync_path", lambda path: events.append(("fsync", Path(path).name)))
    monkeypatch.setattr(mindrecord_io, "place", lambda src, dst, replace: (events.append(("rename", Path(dst).name)),
                                                                          real_place(src, dst, replace)))
    write_data(tmp_path / "train.mindrecord")
    renames = [name for kind, name in events if kind == "rename"]
    assert renames[-1] == "train.mindrecord.meta.json"
    assert sorted(renames[:-1]) == ["train.mindrecord", "train.mindrecord.db"]
    for name in renames:
        assert events.index(("fsync", name)) < events.index(("rename", name)), name
    folder_syncs = [i for i, event in enumerate(events) if event == ("fsync", tmp_path.name)]
    assert folder_syncs and events.index(("rename", renames[-2])) < folder_syncs[0] \
        < events.index(("rename", renames[-1])) < folder_syncs[-1]


@pytest.mark.parametrize("entry", ["../train.mindrecord", "/etc/passwd", "sub/train.mindrecord", "..", "", 5])
def test_meta_file_entries_must_be_plain_names(tmp_path, entry):
    from src.data.pipelines import resolve_mindrecord_files

    output = tmp_path / "train.mindrecord"
    write_data(output)
    meta = json.loads(Path(f"{output}.meta.json").read_text())
    Path(f"{output}.meta.json").write_text(json.dumps(dict(meta, files=[entry])))
    with pytest.raises(UserError, match=r"train.mindrecord.meta.json: files entry .* is not a plain file name"):
        resolve_mindrecord_files(output)


def test_modes_follow_the_umask_without_changing_it(tmp_path, monkeypatch):
    """A process's umask is read once without os.umask (process-wide: a thread creating a file while it is 0 would
    make it world-writable); files still get 0666 / 0644 minus the umask."""
    script = ("import os, sys; from src.common.atomic_files import default_file_mode, make_readable, save_text_atomic; "
              "save_text_atomic('x', sys.argv[1]); make_readable(sys.argv[2]); "
              "print(oct(default_file_mode()), oct(os.stat(sys.argv[1]).st_mode & 0o777), "
              "oct(os.stat(sys.argv[2]).st_mode & 0o777))")
    (tmp_path / "ckpt").write_bytes(b"")
    os.chmod(tmp_path / "ckpt", 0o400)  # as MindSpore writes it
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "a.txt"), str(tmp_path / "ckpt")], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, preexec_fn=lambda: os.umask(0o027), check=True)
    assert done.stdout.split() == ["0o640", "0o640", "0o640"]

    def forbidden(mask):
        raise AssertionError("os.umask changes the umask of every thread of the process")

    monkeypatch.setattr(os, "umask", forbidden)
    atomic_files.save_text_atomic("x", str(tmp_path / "b.txt"))
    atomic_files.make_readable(str(tmp_path / "ckpt"))
    assert atomic_files.default_file_mode() == 0o666 & ~atomic_files.UMASK


# ------------------------------------------------------------------------------------- lock and log files
def plant(kind: str, path: Path, victim: Path) -> None:
    """Something other than our lock file at `path`: a link to `victim`, a second name of it, a file holding data
    of its own, a FIFO or a folder."""
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "dangling symlink":
        path.symlink_to(victim.with_name("absent"))
    elif kind == "hard link":
        os.link(victim, path)
    elif kind == "file with other data":
        path.write_text("not a pid\n")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "hard link", "file with other data", "fifo",
                                  "folder"])
def test_a_lock_file_is_never_opened_through_a_link_nor_truncated(kind, tmp_path):
    """A run's lock (.albert-run.lock, or a data set's .NAME.lock) planted as a link to the user's file would have
    been truncated and given our pid; anything but our own lock file stops the run with one line, untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file\n")
    lock = tmp_path / "out" / atomic_files.RUN_LOCK
    lock.parent.mkdir()
    plant(kind, lock, victim)
    with pytest.raises(UserError, match=re.escape(str(lock)) + " is (a symbolic link|not a lock file of this package|"
                                         "not a regular file)"):
        atomic_files.claim_folder(str(lock.parent), "output_dir out")
    assert victim.read_text() == "the user's file\n"
    assert os.path.lexists(lock) and str(lock) not in atomic_files._HELD
    if kind == "dangling symlink":
        assert not victim.with_name("absent").exists()  # not created through the link


@pytest.mark.parametrize("kind", ["symlink", "dangling symlink", "fifo", "folder"])
def test_metrics_are_never_read_or_appended_through_a_link(kind, tmp_path):
    """metrics.jsonl (read back by a resumed run, appended at every log line) is opened like a lock file: a link
    planted there stops the run with one line instead of sending rows into its target."""
    from src.training.train_loop import trim_metrics

    victim = tmp_path / "victim.jsonl"
    victim.write_text('{"step": 9}\n')
    metrics = tmp_path / "metrics.jsonl"
    plant(kind, metrics, victim)
    with pytest.raises(UserError, match=re.escape(str(metrics))):
        trim_metrics(str(metrics), 3)
    with pytest.raises(UserError, match=re.escape(str(metrics))):
        atomic_files.open_regular(str(metrics), "a")
    assert victim.read_text() == '{"step": 9}\n' and not victim.with_name("absent").exists()


def test_open_regular_appends_to_what_is_there():
    """The one way a log grows: created when absent, appended when present, never truncated."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "metrics.jsonl")
        for row in ("a\n", "b\n"):
            with atomic_files.open_regular(path, "a") as handle:
                handle.write(row)
        with atomic_files.open_regular(path) as handle:
            assert handle.read() == "a\nb\n"
        assert os.stat(path).st_mode & 0o777 == atomic_files.default_file_mode()


# -------------------------------------------------------------------------------- leftovers of killed runs
OURS = [".tmp-k1ll3d_x.ckpt", ".tmp-k1ll3d_x.tmp", ".tmp-0123abcd.json", ".tmp-space-k1ll3d_x",
        ".tmp-export-k1ll3d_x/", ".tmp-export-k1ll3d_x.old/"]
THEIRS = [".tmp-mine.ckpt", ".tmp-K1LL3D_X.ckpt", ".tmp-k1ll3d_x.ckpt.bak", "tmp-k1ll3d_x.ckpt", "notes.txt",
          ".tmp-export-mine/", ".train.mindrecord.tmp-k1ll3d_x/", ".other.lock"]


def make_entries(folder: Path, names: List[str]) -> None:
    for name in names:
        if name.endswith("/"):
            (folder / name).mkdir(parents=True)
            (folder / name / "model.safetensors").write_bytes(b"x" * 100)
        else:
            (folder / name).write_bytes(b"x" * 100)


def test_the_next_training_start_removes_what_a_killed_one_left(tmp_path, monkeypatch):
    """A save killed mid-write leaves MindSpore's own temporary (ms.save_checkpoint writes `<name>.tmp` and renames
    it to our `.tmp-*.ckpt`), besides our `.tmp-*` files, the space probe and export staging: the next run on the
    folder removes exactly these (a small disk would otherwise fail its space check), nothing else."""
    import mindspore as ms
    from mindspore.train import serialization

    from src.model.albert import AlbertConfig
    from src.training.checkpoints import Lineage
    from src.training.settings import TrainSettings
    from src.training.train_loop import _create_outputs

    save_dir = tmp_path / "out" / "checkpoints"
    save_dir.mkdir(parents=True)

    def killed(*args):
        raise KeyboardInterrupt  # as far as the folder is concerned, a kill before MindSpore's rename

    with monkeypatch.context() as patch:  # MindSpore's writer as save_checkpoint_atomic calls it, killed (a kill
        patch.setattr(serialization.os, "rename", killed)  # skips the cleanup an exception gets)
        with pytest.raises(KeyboardInterrupt):
            ms.save_checkpoint([{"name": "w", "data": ms.Tensor(np.ones(4, np.float32))}],
                               str(save_dir / ".tmp-k1lled42.ckpt"))
    mindspore_leftover = [p.name for p in save_dir.iterdir()]
    assert len(mindspore_leftover) == 1 and re.fullmatch(r"\.tmp-[a-z0-9_]{8}\.tmp", mindspore_leftover[0])
    make_entries(save_dir, OURS + THEIRS)
    settings = TrainSettings(config=None, data="", batch_size=1, epochs=1, shuffle=False,
                             output_dir=str(tmp_path / "out"), save_dir=str(save_dir),
                             checkpoint_prefix="albert_pretrain", init_checkpoint="")
    try:
        _create_outputs(settings, AlbertConfig(), Lineage.new())
    finally:
        for folder in (settings.output_dir, settings.save_dir):
            atomic_files.release_output(os.path.join(folder, atomic_files.RUN_LOCK))
    assert sorted(p.name for p in save_dir.iterdir()) == sorted([name.rstrip("/") for name in THEIRS] +
                                                                 ["albert_config.json", "run_lineage.json"])


def test_a_folder_in_use_is_refused_before_anything_in_it_is_read(tmp_path):
    """A second run on a folder in use printed "resumed from" the first run's newest checkpoint before the lock
    stopped it: check_not_in_use probes the lock first, creating and changing nothing, and passes once it is free."""
    folder = tmp_path / "out"
    atomic_files.check_not_in_use(str(folder), "output_dir out")  # no folder: nothing to refuse, nothing made
    assert not folder.exists()
    folder.mkdir()
    holder = hold_lock(folder / atomic_files.RUN_LOCK)
    try:
        with pytest.raises(UserError, match=rf"^output_dir out is in use by another run \(pid {holder.pid}, "):
            atomic_files.check_not_in_use(str(folder), "output_dir out")
        assert (folder / atomic_files.RUN_LOCK).read_text() == f"{holder.pid}\n"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    atomic_files.check_not_in_use(str(folder), "output_dir out")  # the killed holder's lock went with it


def test_leftovers_go_only_under_the_lock_of_their_folder(tmp_path):
    """A second run must not remove the temporaries a live first run is writing: it is stopped by the lock before
    removing anything, and removing without holding the lock is a bug, refused."""
    make_entries(tmp_path, OURS)
    holder = hold_lock(tmp_path / atomic_files.RUN_LOCK)
    try:
        with pytest.raises(UserError, match="is in use by another run"):
            atomic_files.claim_folder(str(tmp_path), "output_dir out")
        with pytest.raises(RuntimeError, match="without holding"):
            atomic_files.remove_leftovers(str(tmp_path / atomic_files.RUN_LOCK))
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([atomic_files.RUN_LOCK] +
                                                                    [name.rstrip("/") for name in OURS])
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The killed holder's lock is taken over (its temporaries removed), and removed when the run is done.
    with atomic_files.claimed_folder_of(str(tmp_path / "answers.jsonl"), "--output_file"):
        assert sorted(p.name for p in tmp_path.iterdir()) == [atomic_files.RUN_LOCK]
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------------ no-clobber publish
@pytest.mark.parametrize("hard_links", [True, False])
def test_an_output_that_appears_while_the_run_writes_is_kept(hard_links, tmp_path, monkeypatch):
    """An output checked absent at the start and created before the end (by another run, by the user) is kept:
    the run stops with one line, where os.replace would have clobbered it; on a file system without hard links
    the name is reserved with O_EXCL instead."""
    if not hard_links:
        monkeypatch.setattr(atomic_files.os, "link", lambda *args: (_ for _ in ()).throw(PermissionError(1, "no")))
    output = tmp_path / "answers.jsonl"
    with pytest.raises(UserError, match=f"{output} appeared while this run was writing it: kept"):
        with atomic_files.atomic_path(str(output), replace=False) as tmp:
            Path(tmp).write_text("ours\n")
            output.write_text("theirs\n")  # checked absent at the start, created before the end
    assert [p.name for p in tmp_path.iterdir()] == ["answers.jsonl"] and output.read_text() == "theirs\n"
    atomic_files.save_text_atomic("ours\n", str(tmp_path / "new.jsonl"), replace=False)
    assert (tmp_path / "new.jsonl").read_text() == "ours\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl", "new.jsonl"]


# ------------------------------------------------------------------------------------------ data set overwrite
def files_of(folder: Path) -> Dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def test_overwrite_replaces_the_files_of_that_data_set_only(tmp_path):
    """`--overwrite` of data set `train` (2 partitions: train0, train1) by a 1-file one: its shards, indexes and
    meta go; the data set `train2` beside it (named like a third shard) and the user's files stay. A data set whose
    third shard would take `train2`'s place is refused before anything moves."""
    from src.data.pipelines import read_column

    write_data(tmp_path / "train", range(6), partitions=2)
    write_data(tmp_path / "train2", range(10, 12))
    (tmp_path / "train.notes").write_text("mine")
    old = {"train0", "train0.db", "train1", "train1.db", "train.meta.json"}
    others = {name: data for name, data in files_of(tmp_path).items() if name not in old}
    write_data(tmp_path / "train", range(20, 22), overwrite=True)
    after = files_of(tmp_path)
    assert sorted(after) == sorted([*others, "train", "train.db", "train.meta.json"])
    assert all(after[name] == data for name, data in others.items())
    assert [int(row[0]) for row in read_column(tmp_path / "train", "input_ids")] == [20, 21]
    assert [int(row[0]) for row in read_column(tmp_path / "train2", "input_ids")] == [10, 11]
    before = files_of(tmp_path)
    with pytest.raises(UserError, match=f"{tmp_path / 'train2'} is in the way: it is no file of the earlier data set "
                                        f"train "):
        write_data(tmp_path / "train", range(6), partitions=3, overwrite=True)  # its third shard would be train2
    assert files_of(tmp_path) == before


def test_an_overwrite_that_fails_midway_keeps_the_old_data_set_whole(tmp_path):
    """The new data set is written whole under temporary names before any file of the old one goes: a run that
    fails while writing (a bad row, a full disk) leaves the old data set as it was."""
    from src.data.pipelines import read_column

    write_data(tmp_path / "train", range(5), partitions=2)
    before = files_of(tmp_path)

    def rows_then_failure() -> Iterator[int]:
        yield from range(100, 103)
        raise UserError("data.tsv line 4: malformed row")

    with pytest.raises(UserError, match="malformed row"):
        write_data(tmp_path / "train", rows_then_failure(), partitions=2, overwrite=True)
    assert files_of(tmp_path) == before
    assert sorted(int(row[0]) for row in read_column(tmp_path / "train", "input_ids")) == [0, 1, 2, 3, 4]


def test_an_interrupted_data_set_is_told_apart_from_its_neighbours(tmp_path):
    """Shards a killed publish left (no meta) are refused without --overwrite and replaced with it; the data set
    `train2` beside them is no leftover of `train`."""
    write_data(tmp_path / "train2", range(2))
    kept = files_of(tmp_path)
    for name in ("train0", "train0.db", "train1", "train1.db"):
        (tmp_path / name).write_bytes(b"half a data set")
    with pytest.raises(UserError, match=f"{tmp_path / 'train0'} was left by an interrupted run"):
        write_data(tmp_path / "train")
    write_data(tmp_path / "train", overwrite=True)
    assert sorted(files_of(tmp_path)) == sorted([*kept, "train", "train.db", "train.meta.json"])
    assert all((tmp_path / name).read_bytes() == data for name, data in kept.items())


def test_a_resume_leaves_out_damaged_metrics_lines_and_keeps_the_file_as_it_was(tmp_path):
    """A metrics.jsonl line `null`, `[1, 2]`, `{"step": "3"}` or bytes that are not UTF-8 stopped the resume with a
    traceback (AttributeError, TypeError, UnicodeDecodeError) until the file was edited by hand."""
    from src.training.train_loop import trim_metrics

    metrics = tmp_path / "metrics.jsonl"
    original = (b'{"step": 1, "loss": 3.0}\nnull\n[1, 2]\n{"step": "3"}\n\xff\xfe\n{"step": 2, "loss": 2.0}\n'
                b'{"step": 4, "loss": 1.0}\n{"step": 5, "lo')
    metrics.write_bytes(original)
    said = []
    trim_metrics(str(metrics), 3, said.append)
    assert metrics.read_text() == '{"step": 1, "loss": 3.0}\n{"step": 2, "loss": 2.0}\n'
    assert said == [f"warning: {metrics} line(s) 2, 3, 4, 5 are no metrics rows (a JSON object with a numeric 'step'): "
                    f"left out; the file as it was: {metrics}.damaged"]
    assert (tmp_path / "metrics.jsonl.damaged").read_bytes() == original
    metrics.write_text('{"step": 1}\n{"step": 2, "lo')  # only a last line a kill cut short: nothing to say
    trim_metrics(str(metrics), 3, said.append)
    assert metrics.read_text() == '{"step": 1}\n' and len(said) == 1


def test_a_checkpoint_write_that_failed_leaves_no_temporary_file_and_the_start_asks_for_every_kept_one(tmp_path,
                                                                                                     monkeypatch):
    """MindSpore's save_checkpoint writes `.tmp-*.tmp` beside our temporary name and renames it: a write that failed
    (a full disk; here a 256 KiB file size limit) left it behind, filling the disk until the next start. And the
    check at the start asked for one checkpoint's space where a run keeping N holds N + 1 at once (a save is written
    before the oldest is deleted), so it passed and the run failed at its (N + 1)-th save."""
    writer = ("import resource, sys, numpy as np, mindspore as ms\n"
              "from src.common.checkpoint_io import save_checkpoint_atomic\n"
              "resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, resource.RLIM_INFINITY))\n"
              "try:\n"
              "    save_checkpoint_atomic([{'name': 'w', 'data': ms.Tensor(np.ones(1 << 18, np.float32))}], "
              "sys.argv[1])\n"
              "except OSError as err:\n"
              "    print('failed:', err.strerror)\n")
    result = subprocess.run([sys.executable, "-c", writer, str(tmp_path / "a.ckpt")], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=120)
    assert "failed: File too large" in result.stdout, result.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []

    import errno
    from types import SimpleNamespace

    from mindspore import nn

    from src.training.checkpoints import Lineage, check_checkpoint_space
    from src.training.train_loop import CheckpointSaver

    def saver(total_steps: int, every: int, keep: int) -> CheckpointSaver:
        plan = SimpleNamespace(total_steps=total_steps, accumulation_steps=1)
        return CheckpointSaver(None, plan, SimpleNamespace(micro_step=0), str(tmp_path), "albert_pretrain", every,
                               keep, Lineage.new())
    assert saver(300, 20, 2).files_to_come() == 3  # two kept, the third written before the oldest goes
    assert saver(300, 20, 5).files_to_come() == 6
    assert saver(30, 20, 5).files_to_come() == 2  # steps 20 and 30: two saves only

    def no_room(handle, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", no_room)
    cell = nn.Dense(512, 512)  # 1 MiB of weights: a checkpoint of 2.0 MiB with the framing
    with pytest.raises(UserError, match=r"No space left on device \(3 checkpoints of 2\.0 MiB need 6\.0 MiB\)"):
        check_checkpoint_space(str(tmp_path), cell, files=3)
    assert list(tmp_path.iterdir()) == []


def test_sigterm_stops_a_command_through_its_cleanup_and_leaves_other_programs_handlers_alone(
        tmp_path, stop_signals_as_started):
    """SIGTERM killed a command on the spot (its temporary files stayed); inside a training loop it waits for the
    end of the step (raised where it landed, it cut the log's last line in two); a program calling the package's
    functions keeps its own handlers, and a command run inside it gives them back."""
    from model_utils.errors import run_cli
    from model_utils.signals import stop_if_asked, stops_deferred, take_signals

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    take_signals()  # outside a command: nothing changes
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before

    def command(argv):
        with atomic_files.atomic_path(str(tmp_path / "out.txt")) as tmp:
            Path(tmp).write_text("half")
            take_signals()  # as a training loop does at every step
            os.kill(os.getpid(), signal.SIGTERM)
            Path(tmp).write_text("all")
    assert run_cli(command, []) == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before

    steps = []

    def loop(argv):
        with stops_deferred():
            for step in range(3):
                if step == 1:
                    os.kill(os.getpid(), signal.SIGINT)
                steps.append(f"step {step} reported")
                stop_if_asked()
    assert run_cli(loop, []) == 128 + signal.SIGINT and steps == ["step 0 reported", "step 1 reported"]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
