"""Outputs survive a power cut and a second run: data files reach the disk before the meta that vouches for them,
one run at a time writes an output (a flock the kernel drops when its holder dies), file modes come from the
umask without changing it process-wide, and a .meta.json cannot point a reader outside its folder."""
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from model_utils.errors import UserError
from src import atomic_files, mindrecord_io
from tests.pretrain_helpers import ENV, ROOT

SCHEMA = {"input_ids": {"type": "int32", "shape": [4]}}
HOLDER = ("import sys, time; from src.atomic_files import lock_output; lock_output(sys.argv[1], 'x'); "
          "print('locked', flush=True); time.sleep(300)")


def hold_lock(lock_file: Path) -> subprocess.Popen:
    """Another process holding `lock_file` (as a first run would), once this returns."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock_file)], cwd=ROOT, env=ENV,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    return holder


def write_data(output: Path) -> None:
    with mindrecord_io.RecordWriter(output, SCHEMA) as out:
        out.write({"input_ids": np.full(4, i, np.int32)} for i in range(3))
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
    real_replace = os.replace
    monkeypatch.setattr(mindrecord_io, "fsync_path", lambda path: events.append(("fsync", Path(path).name)))
    monkeypatch.setattr(mindrecord_io.os, "replace",
                        lambda src, dst: (events.append(("rename", Path(dst).name)), real_replace(src, dst)))
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
    from src.dataset import resolve_mindrecord_files

    output = tmp_path / "train.mindrecord"
    write_data(output)
    meta = json.loads(Path(f"{output}.meta.json").read_text())
    Path(f"{output}.meta.json").write_text(json.dumps(dict(meta, files=[entry])))
    with pytest.raises(UserError, match=rf"train.mindrecord.meta.json: files entry .* is not a plain file name"):
        resolve_mindrecord_files(output)


def test_modes_follow_the_umask_without_changing_it(tmp_path, monkeypatch):
    """A process's umask is read once without os.umask (process-wide: a thread creating a file while it is 0 would
    make it world-writable); files still get 0666 / 0644 minus the umask."""
    script = ("import os, sys; from src.atomic_files import default_file_mode, make_readable, save_text_atomic; "
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
