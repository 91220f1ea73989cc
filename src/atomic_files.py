"""The one way this package writes a file that others may read: under a temporary name in the same folder, renamed
into place when complete, so a reader (or a run resumed after a crash) never sees half a file."""
import contextlib
import json
import os
import tempfile
from typing import Iterator


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def default_file_mode() -> int:
    """Mode a plainly created file gets under the user's umask (temporary files are created 0600)."""
    return 0o666 & ~_umask()


def make_readable(path: str) -> None:
    """Give `path` (and, for a folder, everything in it) 0644 (folders 0755) minus the umask: MindSpore writes
    checkpoints and exports 0400, which another user (a model server) cannot read."""
    umask = _umask()
    if not os.path.isdir(path):
        os.chmod(path, 0o644 & ~umask)
        return
    for folder, _, files in os.walk(path):
        os.chmod(folder, 0o755 & ~umask)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644 & ~umask)


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = "", plain_mode: bool = True, durable: bool = False) -> Iterator[str]:
    """Yield a temporary file name beside `path` (`.tmp-*<suffix>`, created empty); when the block ends without an
    exception the file becomes `path`, otherwise it is removed. `plain_mode`: give it the mode a plainly created
    file would have (not mkstemp's 0600). `durable`: fsync the file before the rename and the folder after, so a
    power cut cannot leave an empty file under the final name."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=suffix, dir=folder)
    os.close(handle)
    try:
        yield tmp
        if plain_mode:
            os.chmod(tmp, default_file_mode())
        if durable:
            _fsync(tmp)
        os.replace(tmp, path)
        if durable:
            _fsync(folder)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _fsync(path: str) -> None:
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def save_text_atomic(text: str, path: str) -> None:
    """Write text through a temporary file and a rename, so readers never see half a file."""
    with atomic_path(path, os.path.splitext(path)[1]) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write(text)


def save_json_atomic(values: object, path: str) -> None:
    """Write json through a temporary file and a rename, so readers never see half a file."""
    save_text_atomic(json.dumps(values, indent=2) + "\n", path)
