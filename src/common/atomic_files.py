"""The one way this package writes a file that others may read: under a temporary name in the same folder, renamed
into place when complete, so a reader (or a run resumed after a crash) never sees half a file; what `--overwrite` may
replace (only the command's own files, never its inputs or a folder's other contents); and the lock that keeps a
second run off an output while a first one writes it, under which the next run removes what a killed one left.

Temporary names (all removed by `remove_leftovers`; XXXXXXXX is tempfile's random part):
- `.tmp-XXXXXXXX[.suffix]`: `atomic_path`; MindSpore's `ms.save_checkpoint` writes into `.tmp-XXXXXXXX.tmp` and
  renames that to our `.tmp-XXXXXXXX.ckpt`;
- `.tmp-space-XXXXXXXX`: the checkpoint-size probe of src.training.checkpoints.check_checkpoint_space;
- `.tmp-export-XXXXXXXX` and its `.old` twin: `publish_folder` and export.py's staging folders;
- `.NAME.tmp-XXXXXXXX`: the staging folder of the data set NAME (src.data.mindrecord_io).
"""
import atexit
import contextlib
import errno
import fcntl
import itertools
import json
import math
import os
import re
import shutil
import stat
import tempfile
from typing import IO, Callable, Dict, Iterable, Iterator, Mapping, Optional

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


def free_name(path: str, tag: str) -> str:
    """The first of `path.<tag>`, `path.<tag>-1`, ... that does not exist."""
    names = (f"{path}.{tag}" + (f"-{n}" if n else "") for n in itertools.count())
    return next(name for name in names if not os.path.lexists(name))


def move_aside(path: str, tag: str) -> str:
    """Rename `path` to `free_name(path, tag)`: an output in the way is kept, never deleted. Returns the new name."""
    aside = free_name(path, tag)
    os.rename(path, aside)
    return aside


# ------------------------------------------------------------------------------------------- what may be replaced
def check_outputs(paths: Iterable[str], overwrite: bool, inputs: Optional[Mapping[str, str]] = None,
                  flag: str = "--overwrite true") -> None:
    """Output files: an existing one stops the run unless `overwrite`, and even then only a file is replaced,
    never a folder, an input of the run, the working directory or the home folder (see check_not_inputs)."""
    existing = [str(path) for path in paths if os.path.lexists(path)]
    if existing and not overwrite:
        raise UserError(f"output already exists: {existing[0]} (pass {flag} to replace it)")
    check_not_inputs(existing, inputs)
    folders = [path for path in existing if os.path.isdir(path) and not os.path.islink(path)]
    if folders:
        raise UserError(f"{folders[0]} is a folder: --overwrite replaces only the files this command writes; "
                        f"name another output")


def check_file_output(path: str, inputs: Mapping[str, str]) -> None:
    """An output file that each run replaces (an evaluation's json, a plot): never one of the run's `inputs` (by
    flag) and never a folder, checked before the run's work, so a mistaken path costs nothing."""
    check_not_inputs([path], inputs)
    if os.path.isdir(path):
        raise UserError(f"{path} is a folder: name the file to write")


def check_folder_output(folder: str, overwrite: bool, ours: Callable[[str], bool],
                        inputs: Optional[Mapping[str, str]] = None, flag: str = "--overwrite true") -> None:
    """A folder output (an HF model folder): absent or empty, it is free; with `overwrite`, one holding only
    regular files named as `ours` accepts (an earlier output of the same command) is replaced; anything else in it
    is named and kept. Never a link, an input of the run, the working directory or the home folder."""
    check_not_inputs([folder], inputs)
    if not os.path.lexists(folder):
        return
    if os.path.islink(folder) or not os.path.isdir(folder):
        raise UserError(f"{folder} is {'a symbolic link' if os.path.islink(folder) else 'not a folder'}: name a "
                        f"folder")
    if os.listdir(folder) and not overwrite:
        raise UserError(f"output already exists: {folder} (a folder that is not empty; pass {flag} to replace it)")
    refuse_foreign(folder, folder, ours)


def refuse_foreign(folder: str, shown: str, ours: Callable[[str], bool]) -> None:
    """Stop, naming them, when `folder` (shown as `shown`) holds entries other than regular files `ours` names."""
    foreign = sorted(entry.name for entry in os.scandir(folder)
                     if not (ours(entry.name) and entry.is_file(follow_symlinks=False)))
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise UserError(f"{shown} holds {', '.join(foreign[:3])}{more}, which this command does not write: "
                        f"--overwrite replaces only its own files; move them away or write to another folder")


def check_not_inputs(outputs: Iterable[str], inputs: Optional[Mapping[str, str]] = None) -> None:
    """An output that may be replaced is never what the run reads (each input named by its flag), the working
    directory or the home folder, nor a folder holding one of them."""
    protected = [(what, path) for what, path in (inputs or {}).items() if path]
    protected += [("the working directory", os.getcwd()), ("the home folder", os.path.expanduser("~"))]
    for output in outputs:
        for what, path in protected:
            relation = _relation(output, path)
            if relation:
                raise UserError(f"{output} {relation} {what} ({path}): an output never replaces what the run reads "
                                f"or works in; name another output")


def _relation(output: str, path: str) -> str:
    """"holds" when `path` lies inside the folder `output`, "is" when it is `output` (by name, or by inode: a hard
    link), else ""."""
    real, held = os.path.realpath(output), os.path.realpath(path)
    if held.startswith(real.rstrip(os.sep) + os.sep):
        return "holds"
    try:
        return "is" if held == real or os.path.samefile(output, path) else ""
    except OSError:  # one of them does not exist
        return ""


# ---------------------------------------------------------------------------------------------- writing and placing
@contextlib.contextmanager
def atomic_path(path: str, suffix: str = "", plain_mode: bool = True, durable: bool = False,
                replace: bool = True) -> Iterator[str]:
    """Yield a temporary file name beside `path` (`.tmp-*<suffix>`, created empty); when the block ends without an
    exception the file becomes `path`, otherwise it is removed, with its `.tmp` twin (MindSpore's save_checkpoint
    writes `.tmp-*.tmp` and renames that: a write that failed, on a full disk say, left it behind, holding the
    space). `plain_mode`: give it the mode a plainly created
    file would have (not mkstemp's 0600). `durable`: fsync the file before the rename and the folder after, so a
    power cut cannot leave an empty file under the final name. `replace` False: a file that appeared at `path`
    meanwhile is kept and the run stops (see place_new)."""
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
        place(tmp, path, replace)
        if durable:
            fsync_path(folder)
    finally:
        for leftover in (tmp, os.path.splitext(tmp)[0] + ".tmp"):
            if os.path.isfile(leftover):
                os.remove(leftover)


def place(source: str, target: str, replace: bool) -> None:
    """Rename the finished `source` to `target`: over what is there when `replace`, else only onto nothing."""
    if replace:
        os.replace(source, target)
    else:
        place_new(source, target)


_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def place_new(source: str, target: str) -> None:
    """Give the finished file or folder `source` the name `target` only while nothing (a folder: nothing but an
    empty folder) has it: an output checked absent at the start may appear before the end, and os.replace would
    clobber it. A file is hard-linked (EEXIST when the name is taken) and its temporary name dropped; where the file
    system has no hard links the name is reserved with O_EXCL first. A folder is renamed (which never replaces a
    file or a folder that is not empty)."""
    try:
        if os.path.isdir(source):
            os.rename(source, target)
            return
        try:
            os.link(source, target)
        except OSError as err:
            if err.errno not in _NO_HARD_LINKS:
                raise
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.replace(source, target)
            return
    except OSError as err:
        if err.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
            raise UserError(f"{target} appeared while this run was writing it: kept; pass --overwrite to replace "
                            f"it") from None
        raise
    os.remove(source)


def replace_folder(new: str, target: str, aside: str, ours: Callable[[str], bool]) -> None:
    """Put the folder `new` in the place of the folder `target`, an earlier output holding only files `ours` names:
    `target` is renamed to `aside` and checked again there (an entry that appeared since the run's first check puts
    it back and stops the run), then removed once `new` is in place."""
    os.rename(target, aside)
    try:
        refuse_foreign(aside, target, ours)
        os.rename(new, target)
    except BaseException:
        os.rename(aside, target)
        raise
    shutil.rmtree(aside, ignore_errors=True)


def publish_folder(folder: str, fill: Callable[[str], None], ours: Optional[Callable[[str], bool]] = None) -> None:
    """Make `folder` whole or not at all: `fill(staging)` writes the files into a hidden folder beside it
    (`.tmp-export-*`), which is made readable by others (see make_readable), flushed to the disk and renamed into
    place. With `ours` (--overwrite) an existing `folder` holding only files `ours` names is replaced
    (replace_folder); without, only an absent or empty one is taken (place_new). A failed fill leaves nothing
    behind; a killed one leaves the staging folder to remove_leftovers."""
    target = os.path.abspath(folder)
    parent = os.path.dirname(target)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".tmp-export-", dir=parent)
    try:
        fill(staging)
        make_readable(staging)
        for name in os.listdir(staging):
            fsync_path(os.path.join(staging, name))
        fsync_path(staging)
        if ours is not None and os.path.lexists(target):
            replace_folder(staging, target, staging + ".old", ours)
        else:
            place_new(staging, target)
        fsync_path(parent)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def save_text_atomic(text: str, path: str, replace: bool = True) -> None:
    """Write text through a temporary file and a rename, so readers never see half a file."""
    with atomic_path(path, os.path.splitext(path)[1], replace=replace) as tmp, \
            open(tmp, "w", encoding="utf-8") as out:
        out.write(text)


def standard_json(values: object, **dumps_args) -> str:
    """JSON that every parser reads: a float that is not finite (an inf/nan loss or metric) becomes null, where
    Python's json would write NaN or Infinity, which JSON has not (JavaScript, Go, jq 1.6 and pandas refuse it)."""
    return json.dumps(_finite_or_null(values), allow_nan=False, **dumps_args)


def _finite_or_null(values: object) -> object:
    if isinstance(values, float):
        return values if math.isfinite(values) else None
    if isinstance(values, dict):
        return {key: _finite_or_null(value) for key, value in values.items()}
    if isinstance(values, (list, tuple)):
        return [_finite_or_null(value) for value in values]
    return values


def save_json_atomic(values: object, path: str, replace: bool = True) -> None:
    """Write json through a temporary file and a rename, so readers never see half a file."""
    save_text_atomic(standard_json(values, indent=2) + "\n", path, replace)


# -------------------------------------------------------------------------------------- lock, log and metrics files
def _open_regular(path: str, flags: int, mode: int = 0o666) -> int:
    """A descriptor of `path`, never opened through a symbolic link (one planted there would send our writes to
    its target) and only when it is a regular file (a FIFO would block, a device is no log)."""
    not_regular = UserError(f"{path} is not a regular file (a lock, log or metrics file is one); remove it")
    try:
        handle = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise UserError(f"{path} is a symbolic link: a lock, log or metrics file is never opened through one; "
                            f"remove it") from None
        if err.errno in (errno.EISDIR, errno.ENXIO):  # a folder; a FIFO without a reader
            raise not_regular from None
        raise
    if not stat.S_ISREG(os.fstat(handle).st_mode):
        os.close(handle)
        raise not_regular
    return handle


def open_regular(path: str, mode: str = "r") -> IO[str]:
    """`path` as UTF-8 text for reading ("r") or appending ("a", created when absent; what is there is kept),
    opened as _open_regular says: how log and metrics files are opened."""
    flags = os.O_RDONLY if mode == "r" else os.O_WRONLY | os.O_APPEND | os.O_CREAT
    return os.fdopen(_open_regular(path, flags), mode, encoding="utf-8")


RUN_LOCK = ".albert-run.lock"  # in a folder while a run writes there (training, export, convert, predict)
_HELD: Dict[str, int] = {}  # lock file -> open descriptor holding its lock
_LOCK_CONTENT = re.compile(rb"(\d+\n)?")  # what lock_output writes: the holder's pid


def lock_output(lock_file: str, what: str) -> None:
    """Hold an exclusive lock on `lock_file` (created beside the output) until `release_output` or the end of the
    process: the kernel drops a flock when its holder dies, crash included, so no stale lock ever blocks a run (the
    next run takes it over and removes it when done). A second run on the same output stops here with one line
    naming the first run's pid, instead of deleting the temporaries the first one is writing. Taking a lock this
    process holds already is a no-op. The file is opened as _open_regular says, and one holding anything but a pid,
    or linked under another name too, is refused rather than overwritten."""
    path = os.path.abspath(lock_file)
    while path not in _HELD:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        handle = _open_regular(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _refuse_in_use(handle, path, what)
        if _is_file_at(handle, path):
            _check_lock_file(handle, path)
            os.ftruncate(handle, 0)
            os.pwrite(handle, f"{os.getpid()}\n".encode("ascii"), 0)
            _HELD[path] = handle
        else:  # the holder released (and removed) it between our open and our lock: take the new file
            os.close(handle)


def check_not_in_use(folder: str, what: str) -> None:
    """Stop now when another run holds `folder`'s RUN_LOCK, before this one reads anything there (a checkpoint the
    other is replacing, say): claim_folder takes the lock only once the run can start. Creates nothing."""
    path = os.path.abspath(os.path.join(folder, RUN_LOCK))
    if path in _HELD:
        return
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # no lock file (or a link, which lock_output refuses by name later)
        return
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        _refuse_in_use(handle, path, what)
    os.close(handle)  # releases the probe's shared lock


def _refuse_in_use(handle: int, path: str, what: str) -> None:
    owner = os.pread(handle, 32, 0).decode("ascii", "replace").strip() or "unknown"
    os.close(handle)
    raise UserError(f"{what} is in use by another run (pid {owner}, lock {path}): wait for it to end, or write to "
                    f"another output") from None


def _check_lock_file(handle: int, path: str) -> None:
    if os.fstat(handle).st_nlink != 1 or not _LOCK_CONTENT.fullmatch(os.pread(handle, 64, 0)):
        os.close(handle)
        raise UserError(f"{path} is not a lock file of this package (it holds other data, or has other names): "
                        f"move it away or write to another output")


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


# --------------------------------------------------------------------------------------- what killed runs left
_RANDOM = r"[a-z0-9_]{8}"  # tempfile's random part of a name
_FOLDER_LEFTOVERS = re.compile(rf"\.tmp-(space-|export-)?{_RANDOM}(\.[A-Za-z0-9_]+)?")


def remove_leftovers(lock_file: str) -> None:
    """Remove what killed runs left beside `lock_file`, a lock this process holds (lock_output), so no run ever
    removes the temporaries of a live one: under a folder's RUN_LOCK every temporary name of the module docstring
    but the data sets' (the folder is the run's); under a data set's `.NAME.lock` its staging folders
    `.NAME.tmp-XXXXXXXX`. The lock files of killed runs need no removal: the next run takes them over. Only these
    exact names are touched, never a user's file; one that cannot be removed is left (the run goes on)."""
    path = os.path.abspath(lock_file)
    if path not in _HELD:
        raise RuntimeError(f"remove_leftovers without holding {path}: a live run's temporaries could go")
    folder, name = os.path.split(path)
    pattern = _FOLDER_LEFTOVERS if name == RUN_LOCK else \
        re.compile(re.escape(name[:-len(".lock")]) + rf"\.tmp-{_RANDOM}")
    for entry in os.scandir(folder):
        if pattern.fullmatch(entry.name):
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.remove(entry.path)


def claim_folder(folder: str, what: str) -> None:
    """Take `folder`'s RUN_LOCK (see lock_output; `what` names it in the refusal) and remove what killed runs left
    there (remove_leftovers): how a run starts writing into a folder."""
    lock_file = os.path.join(folder, RUN_LOCK)
    lock_output(lock_file, what)
    remove_leftovers(lock_file)


@contextlib.contextmanager
def claimed_folder_of(output: str, flag: str) -> Iterator[None]:
    """claim_folder of the folder `output` goes into (`flag` names it in the refusal) for the block's duration (a
    lock this process held before is kept): commands run in-process (tests, benchmarks) leave no lock behind."""
    folder = os.path.dirname(os.path.abspath(output))
    lock_file = os.path.join(folder, RUN_LOCK)
    held = lock_file in _HELD
    claim_folder(folder, f"{folder} (the folder of {flag})")
    try:
        yield
    finally:
        if not held:
            release_output(lock_file)
