"""The one way this package writes a file that others may read: under a temporary name in the same folder, renamed
into place when complete, so a reader (or a run resumed after a crash) never sees half a file; and the lock that
keeps a second run off an output while a first one writes it."""
import atexit
import contextlib
import fcntl
import itertools
import json
import os
import shutil
import tempfile
from typing import Callable, Dict, Iterator

from model_utils.errors import UserError


def _read_umask() -> int:
    """The process's umask, read without changing it where Linux reports it (/proc/self/status); elsewhere set and
    restored once, here at import, rather than whenever a file is written (os.umask is process-wide: a thread
    creating a file meanwhile would get mode 0666)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    umask = os.umask(0o077)
    os.umask(umask)
    return umask


UMASK = _read_umask()


def default_file_mode() -> int:
    """Mode a plainly created file gets under the user's umask (temporary files are created 0600)."""
    return 0o666 & ~UMASK


def make_readable(path: str) -> None:
    """Give `path` (and, for a folder, everything in it) 0644 (folders 0755) minus the umask: MindSpore writes
    checkpoints and exports 0400, which another user (a model server) cannot read."""
    if not os.path.isdir(path):
        os.chmod(path, 0o644 & ~UMASK)
        return
    for folder, _, files in os.walk(path):
        os.chmod(folder, 0o755 & ~UMASK)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644 & ~UMASK)


def fsync_path(path: str) -> None:
    """Flush a file's (or a folder's entries') data to the disk: after a power cut a renamed file must not be
    found empty."""
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def move_aside(path: str, tag: str) -> str:
    """Rename `path` to the first free `path.<tag>`, `path.<tag>-1`, ...: an output in the way is kept, never
    deleted. Returns the new name."""
    names = (f"{path}.{tag}" + (f"-{n}" if n else "") for n in itertools.count())
    aside = next(name for name in names if not os.path.lexists(name))
    os.rename(path, aside)
    return aside


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
            fsync_path(tmp)
        os.replace(tmp, path)
        if durable:
            fsync_path(folder)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def publish_folder(folder: str, fill: Callable[[str], None]) -> None:
    """Make `folder` whole or not at all: `fill(staging)` writes the files into a hidden folder beside it, which is
    made readable by others (see make_readable), flushed to the disk and renamed into place. An existing `folder`
    (the caller has decided it may be replaced) is renamed aside first and removed after; if the rename into place
    fails, it is put back. A failed fill leaves nothing behind."""
    target = os.path.abspath(folder)
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".tmp-export-", dir=parent)
    aside = staging + ".old"
    try:
        fill(staging)
        make_readable(staging)
        for name in os.listdir(staging):
            fsync_path(os.path.join(staging, name))
        fsync_path(staging)
        if os.path.lexists(target):
            os.rename(target, aside)
        try:
            os.rename(staging, target)
        except OSError:
            if os.path.lexists(aside):
                os.rename(aside, target)
            raise
        fsync_path(parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(aside, ignore_errors=True)


def save_text_atomic(text: str, path: str) -> None:
    """Write text through a temporary file and a rename, so readers never see half a file."""
    with atomic_path(path, os.path.splitext(path)[1]) as tmp, open(tmp, "w", encoding="utf-8") as out:
        out.write(text)


def save_json_atomic(values: object, path: str) -> None:
    """Write json through a temporary file and a rename, so readers never see half a file."""
    save_text_atomic(json.dumps(values, indent=2) + "\n", path)


_HELD: Dict[str, int] = {}  # lock file -> open descriptor holding its lock


def lock_output(lock_file: str, what: str) -> None:
    """Hold an exclusive lock on `lock_file` (created beside the output) until `release_output` or the end of the
    process: the kernel drops a flock when its holder dies, crash included, so no stale lock ever blocks a run.
    A second run on the same output stops here with one line naming the first run's pid, instead of deleting the
    temporaries the first one is writing. Taking a lock this process holds already is a no-op."""
    path = os.path.abspath(lock_file)
    while path not in _HELD:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            owner = os.pread(handle, 32, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(handle)
            raise UserError(f"{what} is in use by another run (pid {owner}, lock {path}): wait for it to end, or "
                            f"write to another output") from None
        if _is_file_at(handle, path):
            os.ftruncate(handle, 0)
            os.pwrite(handle, f"{os.getpid()}\n".encode("ascii"), 0)
            _HELD[path] = handle
        else:  # the holder released (and removed) it between our open and our lock: take the new file
            os.close(handle)


def _is_file_at(handle: int, path: str) -> bool:
    try:
        return os.path.samestat(os.fstat(handle), os.stat(path))
    except FileNotFoundError:
        return False


def release_output(lock_file: str) -> None:
    """Give up a lock of `lock_output` and remove its file (removed while held, so no run ever locks a stale one)."""
    handle = _HELD.pop(os.path.abspath(lock_file), None)
    if handle is not None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(lock_file)
        os.close(handle)


@atexit.register
def _release_all() -> None:
    for path in list(_HELD):
        release_output(path)
