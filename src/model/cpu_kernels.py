"""An optional CPU fast path: the network's hot operations as compiled C++ kernels run by MindSpore's Custom op.

Why: on CPU, MindSpore 2.10 runs a float32 ALBERT train step far below the machine's speed outside the matrix
products, and some products too:
- MatMul runs some of ALBERT's products at half the machine's matmul speed (the gradients of the feed-forward output
  layer); here dense layers call oneDNN's sgemm from the libdnnl inside the MindSpore wheel, bias added in the call,
  gradients as products reading their operands transposed in place (`src/model/kernels/dnnl_matmul.cc`);
- LayerNormGrad and BiasAddGrad ran at ~8 and ~2 ms per call on [1024, 768] (17% of a train step), GELU and softmax
  are chains of element-wise kernels forward and backward, and the overflow check and clipping of the train step
  made three copies of every gradient; here each is one pass (`src/model/kernels/row_ops.cc`; the softmax runs inside
  the attention products, on each head's scores while they are in cache).

Nothing new is installed: the sources are compiled once with the system C++ compiler (for this CPU) into a per-user
cache (`$ALBERT_CACHE_DIR`, default `~/.cache/albert_mindspore`, created 0700; the file's name is a hash of what it
depends on, oneDNN's content included) and loaded as Custom ops of type "aot", each with its own backward. A library
is code this process runs: it is loaded from the cache only when this user owns it and its folder, neither is a
symlink and nobody else can write them; otherwise it is built in a private folder of the process. Cells use them
when their `albert_model.Runtime` says so: `src.devices.device_setup.model_runtime` asks for them on CPU in float32, and
in bfloat16 for their products (`set_bf16`), when `available()`; `serving_runtime` for a checkpoint served with int8
dense products (`int8_support()`), their weights quantized and packed at load (`convert_weights`). MindSpore's own
operations are used instead, with results equal up to float32 rounding, on other devices, in float16, and when no C++
compiler or oneDNN library is found, the compilation fails, the library does not load (a cached one that does not is
built again, once), `MS_CUSTOM_AOT_WHITE_LIST` excludes the cache, or `ALBERT_CPU_KERNELS=0` is set (`status()` says
which; bfloat16 and int8 are then refused). Exported models never use them (export.py's `export_runtime`), so a MINDIR
never needs the .so.
"""
import atexit
import ctypes
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops

from src.common.atomic_files import atomic_path

KERNELS = Path(__file__).resolve().parent / "kernels"
SOURCES = (KERNELS / "dnnl_matmul.cc", KERNELS / "row_ops.cc")
HEADERS = (KERNELS / "dnnl_primitives.h", KERNELS / "parallel.h", KERNELS / "profile.h", KERNELS / "vector_math.h")
# -march=native: the library is built on, and for, the machine that runs it (the CPU is part of the cache key).
# Reassociating float sums lets GCC vectorise the row reductions; NaN and inf still propagate (no -ffinite-math).
# On x86, loops are vectorised 512 bits wide where the CPU has AVX-512 (GCC's tuning for recent Xeons picks 256):
# on a Xeon with AMX (2 threads, 2026-11-28) the feed-forward GELU took 49-52 instead of 89 ms of CPU time per
# bfloat16 train step at batch 8, seq 128, attention's softmax 15 instead of 22 (benchmarks/results).
VECTOR_WIDTH = ("-mprefer-vector-width=512",) if platform.machine() in ("x86_64", "AMD64") else ()
FLAGS = ("-O3", "-march=native", *VECTOR_WIDTH, "-std=c++14", "-shared", "-fPIC", "-pthread", "-fno-math-errno",
         "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros")


def dnnl_library() -> Optional[Path]:
    """The libdnnl inside the installed MindSpore wheel (the kernels link it; benchmarks/bench_products.py loads it)."""
    found = sorted((Path(ms.__file__).resolve().parent / "lib").glob("libdnnl.so*"))
    return found[0] if found else None


def _cache_dir() -> Path:
    return Path(os.environ.get("ALBERT_CACHE_DIR") or Path.home() / ".cache" / "albert_mindspore")


CPUINFO = Path("/proc/cpuinfo")
# The lines of CPUINFO that say which CPU this is: x86's model and flags, ARM's implementer, part and features.
CPU_LINES = ("model name", "flags", "Features", "CPU implementer", "CPU architecture", "CPU variant", "CPU part")


def _cpu_identity() -> bytes:
    """The CPU model and feature flags, so that a cache shared between different machines holds one build each."""
    try:
        lines = CPUINFO.read_text(errors="replace").splitlines()
    except OSError:
        return platform.processor().encode()
    wanted = [line for line in lines if line.startswith(CPU_LINES)]
    return "\n".join(sorted(set(wanted))).encode()


def _compiler_identity(compiler: str) -> bytes:
    """The compiler's version (first line of --version), its target machine (-dumpmachine) and what -march=native
    resolves to on this CPU (-march/-mtune/-mcpu and the enabled instruction sets): a library built by another
    compiler, or for a CPU with other instructions, must not be loaded here (an instruction the CPU lacks is a
    SIGILL, not an error)."""
    def output(*args: str) -> List[str]:
        try:
            return subprocess.run([compiler, *args], capture_output=True, text=True, timeout=60).stdout.splitlines()
        except (OSError, subprocess.SubprocessError) as err:
            return [f"{' '.join(args)}: {err}"]

    target = [" ".join(line.split()) for line in output("-march=native", "-Q", "--help=target")
              if line.strip().startswith(("-march=", "-mtune=", "-mcpu=")) or line.rstrip().endswith("[enabled]")]
    return "\n".join([*output("--version")[:1], *output("-dumpmachine"), *target]).encode()


def _cache_key(compiler: str, dnnl: Path) -> str:
    """Hash of everything the built library depends on: sources, flags, oneDNN (where it is, for the rpath, and
    what it is: another libdnnl at the same path has another ABI), MindSpore, compiler, libc, CPU."""
    info = dnnl.stat()
    described = "\n".join([str(dnnl), _file_digest(str(dnnl), info.st_size, info.st_mtime_ns), ms.__version__,
                            " ".join(FLAGS), repr(platform.libc_ver())])
    digest = hashlib.sha256(described.encode() + _cpu_identity() + _compiler_identity(compiler))
    for path in SOURCES + HEADERS:
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=None)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    """sha256 of the file at `path`, read again only when its size or modification time changes (oneDNN's 60 MB
    are hashed once per process)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _untrusted(path: Path) -> str:
    """Why the library or its folder at `path` cannot be trusted ("" when it can): whoever can write either, or
    point a symlink elsewhere, would run their code in this process."""
    try:
        info = os.lstat(path)
    except OSError as err:
        return f"cannot inspect {path} ({err.strerror})"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symlink"
    if info.st_uid != os.geteuid():
        return f"{path} is owned by another user (uid {info.st_uid})"
    if info.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):o})"
    return ""


def _close_own_folder(folder: Path) -> None:
    """Take the group's write bit off this user's cache folder as an earlier version made it under a umask of 002:
    mode 0775, holding nothing but its libraries. Nobody else can then place a file in it, and a library already
    there is still checked for its own owner and mode before it is loaded. Any other folder that others can write
    (a shared temporary folder, a project folder) is left as it is, and not trusted."""
    info = os.lstat(folder)
    earlier = stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) == 0o775
    if earlier and all(name.startswith(("albert_kernels-", ".tmp-")) for name in os.listdir(folder)):
        os.chmod(folder, 0o755)


PRIVATE_PREFIX = "albert_kernels-pid"  # + the pid of the process whose private folder it is


def _remove_orphaned_private_folders() -> None:
    """Remove this user's private build folders whose process is gone: one removes its own at exit, but not when
    killed (SIGTERM, SIGKILL), which would leave a library (~1 MB) in the temporary folder per killed run."""
    temp = Path(tempfile.gettempdir())
    for folder in temp.glob(f"{PRIVATE_PREFIX}*-*"):
        pid = folder.name[len(PRIVATE_PREFIX):].split("-", 1)[0]
        try:
            info = os.lstat(folder)
            if not (pid.isdigit() and stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid()):
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # gone meanwhile, or a live process of another user (a reused pid)
            continue


def _library_folder(name: str) -> Tuple[Optional[Path], str]:
    """The folder to load (or build) the library `name` in, and why not the cache ("" when the cache): the cache,
    created 0700, when this user owns it and its `name` and nobody else can write either; else a private folder of
    this process, removed at exit; else None."""
    cache = _cache_dir()
    try:
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        _close_own_folder(cache)
        why = _untrusted(cache) or (_untrusted(cache / name) if os.path.lexists(cache / name) else "")
    except OSError as err:
        why = f"cannot create {cache} ({err.strerror})"
    if not why:
        return cache, ""
    _remove_orphaned_private_folders()
    try:
        private = Path(tempfile.mkdtemp(prefix=f"{PRIVATE_PREFIX}{os.getpid()}-"))
    except OSError as err:
        return None, f"{why}, and no private folder ({err.strerror})"
    atexit.register(shutil.rmtree, private, True)
    return private, f"{why}: built in a private folder"


def _allowed_by_white_list(path: Path) -> bool:
    """MindSpore loads AOT libraries only from inside the folder MS_CUSTOM_AOT_WHITE_LIST names, when it is set:
    decided as MindSpore decides it (ops.Custom: one path, both resolved, compared by whole path components)."""
    allowed = os.environ.get("MS_CUSTOM_AOT_WHITE_LIST")
    if allowed is None:
        return True
    legal = os.path.realpath(allowed)
    return os.path.commonpath([os.path.realpath(path), legal]) == legal


SWITCH_OFF, SWITCH_ON = ("0", "false", "no", "off"), ("1", "true", "yes", "on")


def _switched_off() -> bool:
    return os.environ.get("ALBERT_CPU_KERNELS", "1").strip().lower() in SWITCH_OFF


VENDORS = ("amd", "intel")  # ALBERT_KERNELS_VENDOR's values (dnnl_matmul.cc, AmdCpu)


def switch_problem() -> str:
    """Why the value of ALBERT_CPU_KERNELS or ALBERT_KERNELS_VENDOR is not understood ("" when both are, or unset): a
    setting read as neither on nor off is refused (setup_device) rather than taken as on, and a vendor other than
    amd or intel rather than taken as intel (the kernels' measured rules for AMD apply with amd, whatever the CPU)."""
    value = os.environ.get("ALBERT_CPU_KERNELS", "1")
    if value.strip().lower() not in SWITCH_OFF + SWITCH_ON:
        return f"ALBERT_CPU_KERNELS={value!r} is neither 0 (MindSpore's operations) nor 1 (the compiled kernels)"
    vendor = os.environ.get("ALBERT_KERNELS_VENDOR", "")
    if vendor and vendor.lower() not in VENDORS:
        return (f"ALBERT_KERNELS_VENDOR={vendor!r} is neither amd nor intel (whose measured rules the compiled kernels "
                "apply; unset: this CPU's vendor)")
    return ""


def _build() -> Tuple[Optional[str], str]:
    """(path of the loaded kernel library, "" or why it is not the cache's) or (None, why not). ALBERT_CPU_KERNELS
    is read on every call (was: cached with the library, so a process that first asked while it was 0 had no
    kernels after it was unset)."""
    problem = switch_problem()
    if problem or _switched_off():
        return None, problem or f"ALBERT_CPU_KERNELS={os.environ['ALBERT_CPU_KERNELS']}"
    return _built()


@lru_cache(maxsize=None)
def _built() -> Tuple[Optional[str], str]:
    """_build's library: compiled once per source/library/MindSpore version/compiler/libc/CPU; concurrent processes
    (data-parallel workers) each write a temporary file and rename it into place."""
    dnnl = dnnl_library()
    if dnnl is None:
        return None, f"no libdnnl.so in {Path(ms.__file__).resolve().parent / 'lib'}"
    compiler, why = _compiler()
    if compiler is None:
        return None, why
    name = f"albert_kernels-{_cache_key(compiler, dnnl)}.so"
    folder, note = _library_folder(name)
    if folder is None:
        return None, note
    target = folder / name
    if not _allowed_by_white_list(target):
        return None, f"{note + '; ' if note else ''}MS_CUSTOM_AOT_WHITE_LIST does not include {target.parent}"
    # Not built yet, or a cached library that does not load (cut short by a crash or a full disk, say): built
    # (again) for this user, once; it replaces the broken file atomically.
    failure = _load(target) if target.is_file() else "not built"
    if failure:
        failure = _compile(compiler, dnnl, target) or _load(target)
        if failure:
            return None, failure
    return str(target), note


def _compiler() -> Tuple[Optional[str], str]:
    """(the C++ compiler to build with, "") or (None, why not): $CXX when set, as build tools take it (one it does
    not find is named, not replaced by another), else g++, else c++ on PATH."""
    chosen = os.environ.get("CXX")
    if chosen:
        found = shutil.which(chosen)
        return (found, "") if found else (None, f"CXX={chosen} is not a compiler found on PATH")
    found = shutil.which("g++") or shutil.which("c++")
    return (found, "") if found else (None, "no C++ compiler (g++ or c++) on PATH")


def _load(path: Path) -> str:
    """"" when the library at `path` loads in this process, else why not. A file cut short is refused before it is
    mapped: the loader would map pages the file does not have, and the first touch of one kills the process
    (SIGBUS), which no exception catches."""
    try:
        cut = _cut_short(path)
        if cut:
            return f"cannot load {path} ({cut})"
        _library(str(path))
    except OSError as err:
        return f"cannot load {path} ({err})"
    return ""


def _cut_short(path: Path) -> str:
    """Why a 64-bit little-endian ELF file at `path` is not whole ("" when it is, or is no such file: the loader
    then gives its own reason): its program headers, loaded segments or section headers reach past its end."""
    import struct

    size = path.stat().st_size
    with open(path, "rb") as handle:
        header = handle.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF" or header[4:6] != b"\x02\x01":
            return ""
        phoff, shoff = struct.unpack_from("<QQ", header, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", header, 0x36)
        ends = [phoff + phentsize * phnum, shoff + shentsize * shnum]
        if ends[0] <= size:
            handle.seek(phoff)
            table = handle.read(phentsize * phnum)
            try:
                for index in range(phnum):
                    kind, _, offset, _, _, filesz = struct.unpack_from("<IIQQQQ", table, index * phentsize)
                    ends += [offset + filesz] if kind == 1 else []  # PT_LOAD
            except struct.error:
                return f"damaged ELF program headers ({phentsize} bytes each)"
    return f"{size} bytes, cut short: its ELF headers reach byte {max(ends)}" if max(ends) > size else ""


def _compile(compiler: str, dnnl: Path, target: Path) -> str:
    """Build the library at `target`, for this user only; "" or why it failed."""
    names = ", ".join(path.name for path in SOURCES)
    try:
        with atomic_path(str(target), ".so", plain_mode=False) as partial:  # a failed build leaves nothing behind
            command = [compiler, *FLAGS, "-o", partial, *map(str, SOURCES), f"-L{dnnl.parent}", f"-l:{dnnl.name}",
                       f"-Wl,-rpath,{dnnl.parent}", "-ldl"]
            result = subprocess.run(command, capture_output=True, text=True, timeout=300)
            if result.returncode != 0:
                lines = (result.stderr or result.stdout).strip().splitlines()
                raise subprocess.SubprocessError(lines[0] if lines else f"exit code {result.returncode}")
            os.chmod(partial, 0o700)  # the linker gives it the umask's mode, which may let the group write it
    except (OSError, subprocess.SubprocessError) as err:
        return f"compiling {names} failed: {err}"
    return ""


def status() -> str:
    """One line for logs: whether networks on CPU use the compiled kernels (and where, when not from the cache),
    with oneDNN's version and the implementations it picks on this CPU (onednn()), and if not, why."""
    path, why = _build()
    if path is None:
        return f"MindSpore operations ({why})"
    return f"compiled CPU kernels, {onednn()} ({path}{'; ' + why if why else ''})"


@lru_cache(maxsize=None)
def onednn() -> str:
    """oneDNN's version and the matmul implementation it picks here for bfloat16 products (which names the ISA, e.g.
    brg_matmul:avx10_1_512_amx), or why they use the BLAS-style call; "" without the kernels. Respects
    ONEDNN_MAX_CPU_ISA, as the products do."""
    return _library_text("DnnlDescribe")


def _library_text(function: str) -> str:
    """The text the kernel library's `function` writes (its convention: (out, size) -> the length it needs); "" without
    the kernels."""
    path = _build()[0]
    if path is None:
        return ""
    write = getattr(_library(path), function)
    text = ctypes.create_string_buffer(write(None, 0) + 1)
    write(text, len(text))
    return text.value.decode()


def available() -> bool:
    """True when the kernel library is built (or was built now) and loadable by MindSpore on this machine."""
    return _build()[0] is not None


# The last cpu_threads given (empty: never given, the library's default of all hardware threads applies).
_requested_threads: List[int] = []
# Whether products run in bfloat16 (set_bf16); float32 unless asked.
_requested_bf16: List[bool] = [False]
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo names of the native bfloat16 dot products


@lru_cache(maxsize=None)
def _library(path: str) -> ctypes.CDLL:
    """The kernel library as loaded in this process (MindSpore's Custom ops share it), with the thread count and
    the products' precision set."""
    library = ctypes.CDLL(path)
    if _requested_threads:
        library.SetThreads(_requested_threads[0])
    library.SetBf16(int(_requested_bf16[0]))
    return library


def bf16_features() -> List[str]:
    """The native bfloat16 dot-product features this CPU reports (`BF16_FLAGS` found in /proc/cpuinfo)."""
    try:
        flags = {flag for line in CPUINFO.read_text(errors="replace").splitlines()
                 if line.startswith(("flags", "Features")) for flag in line.split(":", 1)[1].split()}
    except OSError:
        return []
    return [flag for flag in BF16_FLAGS if flag in flags]


def bf16_implementation() -> str:
    """The implementation oneDNN picks here for bfloat16 products when it runs on native bfloat16 dot products
    (AVX512-BF16, AVX10 or AMX: its name says the ISA; with a libdnnl lacking the primitive API, the BLAS-style
    call's name), "" when the kernels are not available or oneDNN would emulate bfloat16 (e.g. capped below
    AVX512_CORE_BF16 by ONEDNN_MAX_CPU_ISA)."""
    return _library_text("Bf16Implementation")


def bf16_attention() -> bool:
    """Whether training in bfloat16 runs attention's products in bfloat16 here (oneDNN's batched bfloat16 primitives
    on AMX or AMD's AVX512-BF16; elsewhere float32 per pair, which measured faster): then `dense_qkv` hands query, key
    and value over in bfloat16 and attention's gradients come back in it."""
    path = _build()[0]
    return path is not None and bool(_library(path).BatchedBf16Attention())


def bf16_support() -> Tuple[bool, str]:
    """(True, "") when this CPU has native bfloat16 dot products (AVX512_BF16 or AMX-BF16) and, where the kernels
    are available, oneDNN uses them, else (False, why): elsewhere oneDNN would emulate them, slower than float32."""
    if not CPUINFO.is_file():
        return False, f"cannot read the CPU's features ({CPUINFO} not found)"
    if not bf16_features():
        return False, "this CPU has no native bfloat16 dot products (neither AVX512_BF16 nor AMX-BF16 in /proc/cpuinfo)"
    if available() and not bf16_implementation():
        cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "")
        products = onednn().partition("bfloat16: ")[2].partition("; int8")[0]
        return False, (f"oneDNN would emulate bfloat16 here ({products}"
                       f"{'; ONEDNN_MAX_CPU_ISA=' + cap if cap else ''})")
    return True, ""


def int8_implementation() -> str:
    """The implementation oneDNN picks here for the int8 products (e.g. brg_matmul:avx10_1_512_amx: its name says
    the ISA), "" when the kernels are not available or oneDNN has none with exact int32 sums (AMX-INT8 or VNNI:
    elsewhere its int8 kernels saturate 16-bit intermediate sums)."""
    return _library_text("Int8Implementation")


def int8_support() -> Tuple[bool, str]:
    """(True, "") when the kernels can run int8 products here (a oneDNN int8 matmul primitive with exact int32 sums),
    else (False, why)."""
    if not available():
        return False, f"the compiled CPU kernels are not available ({_build()[1]})"
    if not int8_implementation():
        return False, f"oneDNN's int8 products here: {onednn().partition('; int8: ')[2][:-1]}"
    return True, ""


def set_bf16(on: bool) -> None:
    """The dense layers' products of the kernels (and, on AMX and AMD's AVX512-BF16, the fused attention's) in
    bfloat16 with float32 accumulation (on), or in float32; the rest of the network (softmax, LayerNorm, GELU,
    losses) stays float32 either way. Process-wide, like set_threads."""
    _requested_bf16[0] = bool(on)
    path = _build()[0] if _built.cache_info().currsize else None
    if path:
        _library(path).SetBf16(int(on))


def set_threads(threads: int) -> None:
    """Threads each kernel call is split over (cpu_threads; 0 = the CPUs this process may run on). Kept until the
    kernels are first used, so that setting it never compiles them (export and serving never use them)."""
    _requested_threads[:] = [int(threads) or len(os.sched_getaffinity(0))]
    path = _build()[0] if _built.cache_info().currsize else None
    if path:
        _library(path).SetThreads(_requested_threads[0])


def start_profile() -> None:
    """Count the kernels' time from now on (src/model/kernels/profile.h): per kernel (wall time) and per part inside the
    threads (CPU time of the conversions to bfloat16, the products, the attention softmax)."""
    path = _build()[0]
    if path is None:
        raise RuntimeError(f"the compiled CPU kernels are not available here ({_build()[1]})")
    _library(path).SetProfile(1)


def stop_profile() -> Dict[str, Tuple[int, float]]:
    """The counts since start_profile, {name: (calls, milliseconds)}; profiling off again."""
    report = _library_text("ProfileReport")
    _library(_build()[0]).SetProfile(0)
    counts = {}
    for line in report.splitlines():
        name, calls, nanos = line.rsplit(" ", 2)
        counts[name] = (int(calls), int(nanos) / 1e6)
    return counts


def _kernel(name: str, out_shape, out_dtype=None, bprop=None, **variant) -> ops.Custom:
    """The kernel `name` as a MindSpore op. `variant`: the values its out_shape and out_dtype functions depend on
    besides their inputs, as attributes of the op: in PyNative mode MindSpore reuses the shapes and dtypes it inferred
    for one op on any op with the same attributes (so, without them, a second `fused_attention` of another head count
    in the same process got the first one's probabilities shape)."""
    path, why = _build()
    if path is None:
        raise RuntimeError(f"the compiled CPU kernels are not available here ({why})")
    _library(path)  # the thread count applies from the first call
    op = ops.Custom(f"{path}:{name}", out_shape=out_shape, out_dtype=out_dtype or (lambda *types: types[0]),
                    func_type="aot", bprop=bprop)
    for key, value in variant.items():
        op.add_prim_attr(key, value)
    return op


@lru_cache(maxsize=None)
def _dense_grads(count: int, biases: bool) -> ops.Custom:
    """(dy_1..dy_count [M, N], x [M, K], w_1..w_count [N, K] float32, or their bfloat16 copies or `bf16_packed`
    forms) -> (dx = sum_i dy_i w_i, dw_i = dy_i^T x, and with `biases` db_i = column sums of dy_i): the gradients of
    dense layers sharing their input, each dy read once (src/model/kernels/dnnl_matmul.cc, DenseGrads). The shapes
    come from dy and x (a packed w is 1-D)."""
    name = {(1, True): "DenseGrad", (1, False): "DenseGradNoBias", (3, True): "DenseQKVGrad"}[(count, biases)]

    def shapes(*tensors):
        dy, x = tensors[0], tensors[count]
        return (x,) + ([dy[1], x[1]],) * count + (((dy[1],),) * count if biases else ())

    def dtypes(*types):  # float32, as x is (dy may come in bfloat16: `dense_qkv`'s bf16_outputs)
        return (types[count],) * (1 + count * (2 if biases else 1))
    return _kernel(name, shapes, dtypes)


@lru_cache(maxsize=None)
def _round_to_bf16() -> ops.Custom:
    return _kernel("RoundToBf16", lambda x: x, lambda x: ms.bfloat16)


def bf16_copy(weight):
    """`weight` rounded to bfloat16 (nearest even) for the products' `copy` operand, outside differentiation (the
    products give the float32 weight its gradient). In a graph, MindSpore merges the identical calls on one weight
    (the layers that share it) into one per step."""
    return ops.stop_gradient(_round_to_bf16()(weight))


def bf16_pack_bytes(rows: int, columns: int) -> int:
    """Bytes of `bf16_packed`'s tensor for weights [rows, columns] in this process."""
    library = _library(_build()[0])
    library.Bf16PackBytes.restype = ctypes.c_int64
    return int(library.Bf16PackBytes(ctypes.c_int64(rows), ctypes.c_int64(columns)))


@lru_cache(maxsize=None)
def _pack_bf16() -> ops.Custom:
    return _kernel("PackBf16Weights", lambda w: [bf16_pack_bytes(*w)], lambda w: ms.int8)


def bf16_packed(weight):
    """`bf16_copy` for weights that several layers read (a shared layer's): an int8 tensor holding `weight` rounded
    to bfloat16 and the same reordered into the layouts oneDNN's primitive reads for the forward and for the input
    gradient (src/model/kernels/dnnl_matmul.cc, Bf16PackHeader), which the products read instead of reordering
    the weights on every call; made once per step (MindSpore merges the identical calls) and passed where the copy
    would be."""
    return ops.stop_gradient(_pack_bf16()(weight))


@lru_cache(maxsize=None)
def matmul_nt(copy: bool = False) -> ops.Custom:
    """x [M, K], w [N, K] -> x w^T [M, N], with gradients dx = dy w, dw = dy^T x. With `copy`, (x, w, w') where w'
    is w's `bf16_copy`: the products read w' (forward and dx), w gets its float32 gradient."""
    grads = _dense_grads(1, False)

    def bprop(x, w, out, dout):
        return grads(dout, x, w)

    def copy_bprop(x, w, w16, out, dout):
        dx, dw = grads(dout, x, w16)
        return dx, dw, ops.zeros_like(w16)
    if copy:
        return _kernel("MatMulNTCopy", lambda a, b, c: (a[0], b[0]), lambda a, b, c: a, copy_bprop)
    return _kernel("MatMulNT", lambda a, b: (a[0], b[0]), bprop=bprop)


@lru_cache(maxsize=None)
def matmul_nt_bias(copy: bool = False) -> ops.Custom:
    """x [M, K], w [N, K], b [N] -> x w^T + b [M, N], with gradients dy w, dy^T x and the column sums of dy. With
    `copy`, (x, w, w', b) as in `matmul_nt`."""
    grads = _dense_grads(1, True)

    def bprop(x, w, b, out, dout):
        return grads(dout, x, w)

    def copy_bprop(x, w, w16, b, out, dout):
        dx, dw, db = grads(dout, x, w16)
        return dx, dw, ops.zeros_like(w16), db
    if copy:
        return _kernel("MatMulNTBiasCopy", lambda a, b, c, d: (a[0], b[0]), lambda a, b, c, d: a, copy_bprop)
    return _kernel("MatMulNTBias", lambda a, b, c: (a[0], b[0]), bprop=bprop)


@lru_cache(maxsize=None)
def dense_qkv(copies: bool = False, bf16_outputs: bool = False) -> ops.Custom:
    """(x [M, K], wq, wk, wv [N, K], bq, bk, bv [N]) -> (q, k, v) [M, N]: attention's query, key and value layers in
    one call, their gradients in one call too (x read and rounded once, the input gradient summed in place). With
    `copies`, the weights' `bf16_copy`s follow the weights, (x, wq, wk, wv, wq', wk', wv', bq, bk, bv): the products
    read the copies, the weights get their float32 gradients. With `bf16_outputs` too, q, k and v come in bfloat16,
    the form `fused_attention` reads where `bf16_attention()` (rounded once here, not on each read), and their
    gradients come back in it (the bias gradients summed from those, as PyTorch's bfloat16 autocast does)."""
    grads = _dense_grads(3, True)

    def bprop(x, wq, wk, wv, bq, bk, bv, out, dout):
        return grads(*dout, x, wq, wk, wv)

    def copies_bprop(x, wq, wk, wv, wq16, wk16, wv16, bq, bk, bv, out, dout):
        dx, dwq, dwk, dwv, dbq, dbk, dbv = grads(*dout, x, wq16, wk16, wv16)
        return dx, dwq, dwk, dwv, ops.zeros_like(wq16), ops.zeros_like(wk16), ops.zeros_like(wv16), dbq, dbk, dbv
    if copies:
        out_dtypes = (lambda *_: (ms.bfloat16,) * 3) if bf16_outputs else (lambda x, *_: (x, x, x))
        return _kernel("DenseQKVCopy", lambda x, w, *_: ((x[0], w[0]),) * 3, out_dtypes, copies_bprop,
                       bf16_outputs=bf16_outputs)
    return _kernel("DenseQKV", lambda x, w, *_: ((x[0], w[0]),) * 3, lambda x, *_: (x, x, x), bprop)


@lru_cache(maxsize=None)
def attention(num_heads: int) -> Tuple[ops.Custom, ops.Custom]:
    """(probs, context) of multi-head attention on activations in [B, S, H] (heads never moved to [B, N, S, D]):
    probs(q, k, bias, scale [1]) -> [B, N, S, S] = softmax(scale q_n k_n^T + bias) per head n, the mask bias
    [B, 1, 1, S] or [B, N, S, S] (no gradient: it is the mask); context(p [B, N, S, S], v, scale [1]) -> [B, S, H]
    = scale p_n v_n, each head's result in its own columns. Each with its gradients; the softmax and its gradient run
    inside the products (src/model/kernels/dnnl_matmul.cc)."""
    def square_shape(x, y, *_):
        return x[0], num_heads, x[1], x[1]

    def context_shape(p, v, scale):
        return v

    probs_grad = _kernel("HeadProbsGrad", lambda p, dp, q, k, s: (q, k), lambda p, dp, q, k, s: (q, k))
    dprobs, dvalue = _kernel("HeadScores", square_shape, num_heads=num_heads), _kernel("HeadContextT", context_shape)

    def probs_bprop(q, k, bias, scale, out, dout):
        dq, dk = probs_grad(out, dout, q, k, scale)
        return dq, dk, ops.zeros_like(bias), ops.zeros_like(scale)

    def context_bprop(p, v, scale, out, dout):
        return dprobs(dout, v, scale), dvalue(p, dout, scale), ops.zeros_like(scale)
    return (_kernel("HeadProbs", square_shape, bprop=probs_bprop, num_heads=num_heads),
            _kernel("HeadContext", context_shape, bprop=context_bprop))


@lru_cache(maxsize=None)
def _attention_grad() -> ops.Custom:
    """(probs [B, N, S, S], dcontext, q, k, v [B, S, H], scale [1]) -> (dq, dk, dv): attention's backward per pair."""
    return _kernel("FusedAttentionGrad", lambda p, dc, q, k, v, s: (q, q, q), lambda p, dc, q, k, v, s: (q, q, q))


@lru_cache(maxsize=None)
def fused_attention(num_heads: int, bf16_probs: bool = False) -> ops.Custom:
    """(q, k, v [B, S, H], bias [B, 1, 1, S] or [B, N, S, S], scale [1]) -> (context [B, S, H], probs [B, N, S, S]):
    `attention` without dropout between the softmax and the context, each (batch row, head) pair's scores, softmax and
    context computed while its S x S block is in cache, the probabilities kept for the backward, which is one call
    too (no [B, N, S, S] gradient of the probabilities in memory). Under set_bf16 on AMX and AMD's AVX512-BF16 its
    products run in bfloat16 instead, a group of a batch row's heads in one oneDNN call per product (AttentionBf16,
    AttentionGradBf16: as many heads as keep their scores in cache). q, k and v come in float32 or all three in
    bfloat16 (`dense_qkv`'s bf16_outputs), their gradients in the same dtype, the context in float32; q, k, v and
    the context may also be [B * S, H] (`dense_qkv`'s outputs as they are: MindSpore's CPU Reshape takes no
    bfloat16). The probabilities come in float32, or with `bf16_probs` (the network sets it with bfloat16 q, k and v)
    in bfloat16, the form the backward's products read them in (its softmax gradient widens them): half the memory,
    no rounding pass. They are for the backward only: the gradient reaching them as an output is taken as zero."""
    def shapes(q, k, v, bias, scale):  # q [B, S, H], or [B * S, H] (B and S from the mask's shape)
        return q, [bias[0], num_heads, bias[-1], bias[-1]]

    grad = _attention_grad()

    def bprop(q, k, v, bias, scale, out, dout):
        dq, dk, dv = grad(out[1], dout[0], q, k, v, scale)
        return dq, dk, dv, ops.zeros_like(bias), ops.zeros_like(scale)
    return _kernel("FusedAttention", shapes, lambda *_: (ms.float32, ms.bfloat16 if bf16_probs else ms.float32), bprop,
                   num_heads=num_heads, bf16_probs=bf16_probs)


@lru_cache(maxsize=None)
def attention_inference(num_heads: int, bf16: bool = False) -> ops.Custom:
    """(q, k, v [B, S, H], bias, scale [1], heads [1] int32 = num_heads) -> context [B, S, H]: `fused_attention`
    for networks built for evaluation and serving, writing no probabilities (each pair's live in the thread's
    scratch); differentiated all the same (the backward computes the probabilities again, in float32). With `bf16`
    (int8 serving), on AMX its products in bfloat16, a batch row's heads in one oneDNN call each (AttentionBf16);
    elsewhere float32 per pair (faster there)."""
    probs, _ = attention(num_heads)
    grad = _attention_grad()

    def bprop(q, k, v, bias, scale, heads, out, dout):
        dq, dk, dv = grad(probs(q, k, bias, scale), dout, q, k, v, scale)
        return dq, dk, dv, ops.zeros_like(bias), ops.zeros_like(scale), ops.zeros_like(heads)
    return _kernel("FusedAttentionInferenceBf16" if bf16 else "FusedAttentionInference", lambda q, *_: q,
                   lambda q, *_: q, bprop)


@lru_cache(maxsize=None)
def gelu_tanh() -> ops.Custom:
    """Google's GELU (tanh form), any shape, with its gradient in one pass."""
    grad = _kernel("GeluTanhGrad", lambda x, dy: x)

    def bprop(x, out, dout):
        return (grad(x, dout),)
    return _kernel("GeluTanh", lambda x: x, bprop=bprop)


@lru_cache(maxsize=None)
def _feed_forward_grad(residual: bool) -> ops.Custom:
    """(dy [M, H], x [M, H], pre [M, I], h [M, I], w1 [I, H], w2 [H, I]) -> (dx, dw1, db1, dw2, db2): the gradients of
    `feed_forward`, h and the weights in float32 or bfloat16 (the copies, or `bf16_packed`: the shapes come from the
    activations); with `residual`, dx includes dy."""
    def shapes(dy, x, pre, h, w1, w2):
        return x, [pre[1], x[1]], (pre[1],), [dy[1], h[1]], (dy[1],)
    return _kernel("DenseGeluDenseResidualGrad" if residual else "DenseGeluDenseGrad", shapes,
                   lambda dy, *_: (dy,) * 5)


@lru_cache(maxsize=None)
def feed_forward(copies: bool = False, residual: bool = False) -> ops.Custom:
    """(x [M, H], w1 [I, H], b1 [I], w2 [H, I], b2 [H]) -> (y, pre, h): a block's feed-forward network y =
    gelu(x w1^T + b1) w2^T + b2 (the tanh GELU) in one call, with its pre-activations pre and activations h [M, I]
    kept for the backward (also one call: GELU's gradient, the bias gradients and the products' operands in one pass
    over the [M, I] gradient). With `copies`, each weight's `bf16_copy` follows it, (x, w1, w1', b1, w2, w2', b2),
    and h comes in bfloat16, the form the products read. pre and h are for the backward only: the gradient reaching
    them as outputs is taken as zero. With `residual`, y = x + that (a post-LN block's sum before its LayerNorm), and
    x's gradient includes y's: x then feeds one operation, so neither the sum nor the backward's sum of x's two
    gradients is a pass of its own."""
    grad = _feed_forward_grad(residual)

    def shapes(x, w1, *rest):
        return x, [x[0], w1[0]], [x[0], w1[0]]

    def bprop(x, w1, b1, w2, b2, out, dout):
        return grad(dout[0], x, out[1], out[2], w1, w2)

    def copies_bprop(x, w1, w1c, b1, w2, w2c, b2, out, dout):
        dx, dw1, db1, dw2, db2 = grad(dout[0], x, out[1], out[2], w1c, w2c)
        return dx, dw1, ops.zeros_like(w1c), db1, dw2, ops.zeros_like(w2c), db2
    name = "DenseGeluDenseResidual" if residual else "DenseGeluDense"
    if copies:
        return _kernel(name + "Copy", shapes, lambda x, *_: (x, x, ms.bfloat16), copies_bprop)
    return _kernel(name + "Float", shapes, lambda x, *_: (x, x, x), bprop)


@lru_cache(maxsize=None)
def cross_entropy() -> ops.Custom:
    """(logits [M, V] float32, labels [M] int32) -> (nll [M], logsumexp [M]): -log softmax(logits)[label] per row
    (0 for a label outside [0, V), like the one-hot product); the backward gives dlogits = (softmax - onehot) dnll."""
    grad = _kernel("CrossEntropyGrad", lambda x, t, s, d: x, lambda x, t, s, d: x)

    def bprop(logits, labels, out, dout):
        return grad(logits, labels, out[1], dout[0]), ops.zeros_like(labels)
    return _kernel("CrossEntropy", lambda x, t: ((x[0],), (x[0],)), lambda x, t: (x, x), bprop)


@lru_cache(maxsize=None)
def layer_norm() -> ops.Custom:
    """(x [M, C], gamma [C], beta [C], eps [1]) -> (y, mean [M], rstd [M]); the backward gives dx, dgamma, dbeta."""
    grad = _kernel("LayerNormGrad", lambda x, dy, m, r, g: (x, g, g), lambda x, dy, m, r, g: (x, x, x))

    def bprop(x, gamma, beta, eps, out, dout):
        dx, dgamma, dbeta = grad(x, dout[0], out[1], out[2], gamma)
        return dx, dgamma, dbeta, ops.zeros_like(eps)
    return _kernel("LayerNorm", lambda x, g, b, e: (x, x[:1], x[:1]), lambda x, g, b, e: (x, x, x), bprop)


@lru_cache(maxsize=None)
def keyed_dropout() -> ops.Custom:
    """(x float32, calls [1] int32, place [2] int32, scale [1] float32) -> x with row_ops.cc's counter-based
    dropout mask (see src/model/albert.py, LayerDropout); the backward applies the same mask to the gradient."""
    mask_gradient = _kernel("KeyedDropout", lambda x, *_: x)

    def bprop(x, calls, place, scale, out, dout):
        return mask_gradient(dout, calls, place, scale), ops.zeros_like(calls), ops.zeros_like(place), \
            ops.zeros_like(scale)
    return _kernel("KeyedDropout", lambda x, *_: x, bprop=bprop)


@lru_cache(maxsize=None)
def scaled_squared_norm() -> ops.Custom:
    """(x, scale []) -> [1]: sum((x / scale)^2), accumulated in double; not differentiable (used on gradients)."""
    return _kernel("ScaledSquaredNorm", lambda x, s: (1,))


@lru_cache(maxsize=None)
def divide_by_scalar() -> ops.Custom:
    """(x, divisor []) -> x / divisor; not differentiable (used on gradients)."""
    return _kernel("DivideByScalar", lambda x, d: x)


def quantize_int8(weights: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """A dense layer's weights [N, K] as int8 values and float32 scales [N], one per output channel, symmetric:
    q = round(w * 127 / max|w_n|), scale max|w_n| / 127 (a zero row: zeros, scale 0), as the kernels quantize
    activations per row (src/model/kernels/dnnl_matmul.cc)."""
    weights = np.asarray(weights, np.float32)
    largest = np.abs(weights).max(axis=1)
    inverse = np.divide(np.float32(127.0), largest, out=np.zeros_like(largest), where=largest > 0)
    values = np.clip(np.rint(weights * inverse[:, None]), -127, 127).astype(np.int8)
    return values, (largest / np.float32(127.0)).astype(np.float32)


def pack_int8(values: np.ndarray) -> np.ndarray:
    """int8 weights [N, K] (`quantize_int8`'s values) packed once, in this process, into the layout oneDNN's int8
    primitive reads here (AMX or VNNI tiles), for the int8 products to read instead of packing them on every call
    (src/model/kernels/dnnl_matmul.cc, PackedHeader): a 1-D int8 array, a 64-byte header then the packed weights.
    Where they cannot be packed, a header of zeros (with nothing or unused bytes after it), and the products read the
    weights as stored."""
    return _pack_at_load(values, np.int8, "PackedInt8Bytes", "PackInt8Weights")


def pack_bf16(weights: np.ndarray) -> np.ndarray:
    """float32 weights [N, K] rounded to bfloat16 and packed once, in this process, for the forward products of
    oneDNN's primitive (src/model/kernels/dnnl_matmul.cc, Bf16PackHeader): what a checkpoint served in bfloat16 reads
    instead of its weights' `bf16_copy`, so that no product packs them again. A 1-D int8 array: a 64-byte header, the
    rounded weights, then the packed form where this CPU has one (else the products read the rounded weights)."""
    return _pack_at_load(weights, np.float32, "Bf16ServingPackBytes", "PackBf16ServingWeights")


def _pack_at_load(weights: np.ndarray, dtype, size_function: str, pack_function: str) -> np.ndarray:
    """weights [N, K] as `dtype`, packed by the kernels' `pack_function` into a 1-D int8 array of
    `size_function`(N, K) bytes."""
    path = _build()[0]
    if path is None:
        raise RuntimeError(f"the compiled CPU kernels are not available here ({_build()[1]})")
    weights = np.ascontiguousarray(weights, dtype)
    n, k = weights.shape
    library = _library(path)
    getattr(library, size_function).restype = ctypes.c_int64
    packed = np.zeros(getattr(library, size_function)(ctypes.c_int64(n), ctypes.c_int64(k)), np.int8)
    getattr(library, pack_function)(weights.ctypes.data_as(ctypes.c_void_p), ctypes.c_int64(n), ctypes.c_int64(k),
                                    packed.ctypes.data_as(ctypes.c_void_p))
    return packed


def round_to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even, as the kernels' RoundToBf16), still float32
    (exactly representable in bfloat16, so a cast to it is exact); NaN stays NaN."""
    values = np.ascontiguousarray(values, np.float32)
    bits = values.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(values), values, rounded)


@lru_cache(maxsize=None)
def matmul_int8(bias: bool) -> ops.Custom:
    """(x [M, K] float32, w [N, K] int8, p (w packed: `pack_int8`), scales [N] float32[, b [N]]) -> x w^T (+ b)
    [M, N] float32: a dense layer with weights quantized and packed once at load (`quantize_int8`, `pack_int8`), x
    quantized per row on each call, summed exactly in int32 by oneDNN's int8 matmul primitive. Serving only: no
    gradient."""
    if bias:
        return _kernel("MatMulInt8Bias", lambda x, w, p, s, b: (x[0], w[0]), lambda x, *_: x)
    return _kernel("MatMulInt8", lambda x, w, p, s: (x[0], w[0]), lambda x, *_: x)


@lru_cache(maxsize=None)
def dense_qkv_int8() -> ops.Custom:
    """(x, wq, wk, wv int8, pq, pk, pv (packed), sq, sk, sv, bq, bk, bv) -> (q, k, v): `dense_qkv` with
    `matmul_int8`'s weights, x quantized once for the three."""
    return _kernel("DenseQKVInt8", lambda x, w, *_: ((x[0], w[0]),) * 3, lambda x, *_: (x, x, x))


@lru_cache(maxsize=None)
def feed_forward_int8(norm: bool = False) -> ops.Custom:
    """(x [M, H], w1 [I, H] int8, p1, s1, b1 [I], w2 [H, I] int8, p2, s2, b2 [H]) -> gelu(x w1^T + b1) w2^T + b2 [M, H]
    (the tanh GELU): a block's feed-forward network served in int8 in one call, its [M, I] activations kept in cache
    chunk by chunk (src/model/kernels/dnnl_matmul.cc, FeedForward). With `norm`, (..., gamma, beta [H], eps [1]) ->
    LayerNorm(x + that): a post-LN block's end too. Serving only: no gradient."""
    return _kernel("FeedForwardNormInt8" if norm else "FeedForwardInt8", lambda x, *_: x, lambda x, *_: x)


@lru_cache(maxsize=None)
def dense_residual_norm_int8() -> ops.Custom:
    """(x [M, K], w [N, K] int8, p, s, b [N], residual [M, N], gamma, beta [N], eps [1]) -> LayerNorm(residual +
    x w^T + b): attention's output layer, residual and LayerNorm (post-LN) served in int8 in one call."""
    return _kernel("DenseResidualNormInt8", lambda x, w, p, s, b, residual, *_: residual, lambda x, *_: x)


class Dense(nn.Dense):
    """nn.Dense (same parameters, names and initialisation) computed by `matmul_nt(_bias)` when `use_kernels`,
    reading the weights' `bf16_copy` with `bf16_weights`, or their `bf16_packed` form once `pack_weights` is set (the
    network sets it on layers that several of its layers run: see `pack_shared_weights`). `serving_weights`
    ("bfloat16" or "int8") makes the products' weights once, from the loaded values (`convert_weights`, before the
    first call), instead of per call: their bfloat16 copy packed for the forward (`pack_bf16`), or int8 values, their
    packed form and scales for `matmul_int8`."""

    def __init__(self, in_channels: int, out_channels: int, use_kernels: bool, bf16_weights: bool = False,
                 serving_weights: str = "", **kwargs):
        super().__init__(in_channels, out_channels, **kwargs)
        self.use_kernels = use_kernels
        self.bf16_weights = use_kernels and bf16_weights
        self.serving_weights = serving_weights if use_kernels else ""
        # Whether the products read a bfloat16 copy of the weights beside them (see weight_operands).
        self.reads_copy = self.serving_weights == "bfloat16" or (self.bf16_weights and not self.serving_weights)
        self.pack_weights = False
        if self.serving_weights == "int8":
            self.product = matmul_int8(self.has_bias)
        elif use_kernels:
            self.product = matmul_nt_bias(self.bf16_weights) if self.has_bias else matmul_nt(self.bf16_weights)

    def convert_weights(self) -> None:
        """The products' weights made once from the weights as loaded (serving_weights): int8 values, packed and
        with their scales, or the bfloat16 copy, packed; constants of the network (no gradient), named after the
        weights."""
        weight = self.weight.asnumpy()
        if self.serving_weights == "int8":
            values, scales = quantize_int8(weight)
            self.weight_int8 = Parameter(Tensor(values), name=f"{self.weight.name}_int8", requires_grad=False)
            self.weight_packed = Parameter(Tensor(pack_int8(values)), name=f"{self.weight.name}_int8_packed",
                                           requires_grad=False)
            self.weight_scales = Parameter(Tensor(scales), name=f"{self.weight.name}_scales", requires_grad=False)
        elif self.serving_weights == "bfloat16":
            self.weight_bf16 = Parameter(Tensor(pack_bf16(weight)), name=f"{self.weight.name}_bf16",
                                         requires_grad=False)

    def weight_operands(self) -> tuple:
        """What the product reads for the weights: (w,), (w, its bfloat16 copy or packed form) or (int8 values,
        packed, scales)."""
        if self.serving_weights == "int8":
            return self.weight_int8, self.weight_packed, self.weight_scales
        if self.serving_weights == "bfloat16":
            return self.weight, self.weight_bf16
        if self.bf16_weights:
            return self.weight, (bf16_packed if self.pack_weights else bf16_copy)(self.weight)
        return (self.weight,)

    def construct(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        if not self.use_kernels:
            y = self.matmul(flat, self.weight)
            if self.has_bias:
                y = self.bias_add(y, self.bias)
        elif self.has_bias:
            y = self.product(flat, *self.weight_operands(), self.bias)
        else:
            y = self.product(flat, *self.weight_operands())
        return y.reshape(shape[:-1] + (self.out_channels,))


def pack_shared_weights(runs: List[nn.Cell]) -> None:
    """Set `pack_weights` on the dense layers with bfloat16 weights (`bf16_weights`) that appear in more than one of
    `runs` (the cells a network runs in turn, e.g. its layer groups in layer order): their weights are then packed
    once per step for all their products. Weights read once per step are left as copies: a product saves about what
    packing costs (benchmarks/bench_products.py)."""
    seen = set()
    for run in runs:
        for _, cell in run.cells_and_names():
            if isinstance(cell, Dense) and cell.bf16_weights and not cell.serving_weights:
                cell.pack_weights = id(cell) in seen  # True from its second run on
                seen.add(id(cell))


def convert_weights(network: nn.Cell) -> int:
    """`Dense.convert_weights` on every dense layer of `network` that has serving weights (after its checkpoint is
    loaded, before its first call); returns how many."""
    layers = [cell for _, cell in network.cells_and_names() if isinstance(cell, Dense) and cell.serving_weights]
    for layer in layers:
        layer.convert_weights()
    return len(layers)


class LayerNorm(nn.LayerNorm):
    """nn.LayerNorm over the last axis (same parameters, names and initialisation) computed by `layer_norm` when
    `use_kernels`, or written as `_onnx_pattern` with `onnx_pattern`."""

    def __init__(self, size: int, epsilon: float, use_kernels: bool, onnx_pattern: bool = False):
        super().__init__((size,), epsilon=epsilon)
        self.use_kernels = use_kernels
        # For ONNX export: the same function in the operations ONNX Runtime's LayerNormFusion recognises
        # (MindSpore's converter writes its LayerNorm as a pattern ORT leaves unfused).
        self.onnx_pattern = onnx_pattern
        self.epsilon = epsilon
        if use_kernels:
            self.kernel = layer_norm()
            self.epsilon_tensor = Tensor([epsilon], ms.float32)

    def construct(self, x):
        if self.onnx_pattern:
            return self._onnx_pattern(x)
        if not self.use_kernels:
            return self.layer_norm(x, self.gamma.astype(x.dtype), self.beta.astype(x.dtype))[0]
        shape = x.shape
        y = self.kernel(x.reshape(-1, shape[-1]), self.gamma, self.beta, self.epsilon_tensor)[0]
        return y.reshape(shape)

    def _onnx_pattern(self, x):
        """ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta."""
        centered = x - x.mean(-1, keep_dims=True)
        variance = ops.pow(centered, 2.0).mean(-1, keep_dims=True)
        return centered / ops.sqrt(variance + self.epsilon) * self.gamma + self.beta

