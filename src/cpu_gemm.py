"""An optional CPU fast path for the dense layers' matrix products: oneDNN's sgemm as a MindSpore Custom op.

Why: on CPU, MindSpore 2.10's MatMul runs some of ALBERT's products far below the machine's matmul speed (the
gradients of the feed-forward output layer, [1024 x 3072] x [3072 x 768] at batch 8 x seq 128, ran at 90-110
GFLOP/s on 2 threads where oneDNN's sgemm ran them at 190-210); the dense layers' products are most of a train
step. The oneDNN library is the one inside the MindSpore wheel (`mindspore/lib/libdnnl.so.*`), so nothing new is
installed: `src/kernels/dnnl_matmul.cc` is compiled once with the system C++ compiler into a per-user cache
(`$ALBERT_CACHE_DIR`, default `~/.cache/albert_mindspore`) and loaded as a Custom op of type "aot", with its
gradients made of the same op (no transposed copies: each product reads its operands transposed in place).

It is a fast path only. MindSpore's own MatMul is used instead, with results equal up to float32 rounding, when
the device target is not CPU, compute_type is not float32, no C++ compiler or oneDNN library is found, the
compilation fails, `MS_CUSTOM_AOT_WHITE_LIST` excludes the cache, or `ALBERT_CPU_GEMM=0` is set; `status()` says
which. Exported models always use MindSpore's MatMul (`use_native_products`), so a MINDIR never needs the .so.
"""
import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Optional, Tuple

import mindspore as ms
from mindspore import nn, ops

SOURCE = Path(__file__).resolve().parent / "kernels" / "dnnl_matmul.cc"


def _dnnl_library() -> Optional[Path]:
    found = sorted((Path(ms.__file__).resolve().parent / "lib").glob("libdnnl.so*"))
    return found[0] if found else None


def _cache_dir() -> Path:
    return Path(os.environ.get("ALBERT_CACHE_DIR") or Path.home() / ".cache" / "albert_mindspore")


def _allowed_by_white_list(path: Path) -> bool:
    """MindSpore loads AOT libraries only from the folders in MS_CUSTOM_AOT_WHITE_LIST when it is set."""
    allowed = [entry for entry in os.environ.get("MS_CUSTOM_AOT_WHITE_LIST", "").split(":") if entry]
    return not allowed or any(str(path).startswith(str(Path(entry).resolve())) for entry in allowed)


@lru_cache(maxsize=None)
def _build() -> Tuple[Optional[str], str]:
    """(path of the compiled kernel library, "") or (None, why not). Compiled once per source/library/MindSpore
    version; concurrent processes (data-parallel workers) each write a temporary file and rename it into place."""
    if os.environ.get("ALBERT_CPU_GEMM", "1") == "0":
        return None, "ALBERT_CPU_GEMM=0"
    dnnl = _dnnl_library()
    if dnnl is None:
        return None, f"no libdnnl.so in {Path(ms.__file__).resolve().parent / 'lib'}"
    compiler = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    if compiler is None:
        return None, "no C++ compiler (g++ or c++) on PATH"
    key = hashlib.sha256(SOURCE.read_bytes() + str(dnnl).encode() + ms.__version__.encode()).hexdigest()[:16]
    target = _cache_dir() / f"dnnl_matmul-{key}.so"
    if not _allowed_by_white_list(target):
        return None, f"MS_CUSTOM_AOT_WHITE_LIST does not include {target.parent}"
    if target.is_file():
        return str(target), ""
    partial = ""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, partial = tempfile.mkstemp(prefix=".tmp-", suffix=".so", dir=target.parent)
        os.close(handle)
        command = [compiler, "-O2", "-std=c++14", "-shared", "-fPIC", "-pthread", "-o", partial, str(SOURCE),
                   f"-L{dnnl.parent}", f"-l:{dnnl.name}", f"-Wl,-rpath,{dnnl.parent}"]
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            lines = (result.stderr or result.stdout).strip().splitlines()
            return None, f"compiling {SOURCE.name} failed: {lines[0] if lines else result.returncode}"
        os.replace(partial, target)
    except (OSError, subprocess.SubprocessError) as err:
        return None, f"compiling {SOURCE.name} failed: {err}"
    finally:
        if partial and os.path.exists(partial):  # a failed or timed-out build leaves nothing behind
            os.remove(partial)
    return str(target), ""


def status() -> str:
    """One line for logs: whether dense layers use the oneDNN fast path, and if not, why."""
    if ms.get_context("device_target") != "CPU":
        return "MindSpore MatMul (not on CPU)"
    path, why = _build()
    return f"oneDNN sgemm ({path})" if path else f"MindSpore MatMul ({why})"


def active() -> bool:
    """True when dense layers built now take the oneDNN path."""
    return ms.get_context("device_target") == "CPU" and _build()[0] is not None


def set_threads(threads: int) -> None:
    """Threads each product is split over (cpu_threads; 0 = the CPUs this process may run on)."""
    path = _build()[0]
    if path:
        ctypes.CDLL(path).SetThreads(int(threads) or len(os.sched_getaffinity(0)))


def _product(kind: str, out_shape, bprop=None) -> ops.Custom:
    return ops.Custom(f"{_build()[0]}:MatMul{kind}", out_shape=out_shape, out_dtype=lambda a, b: a,
                      func_type="aot", bprop=bprop)


@lru_cache(maxsize=None)
def matmul_nt() -> ops.Custom:
    """x [M, K], w [N, K] -> x w^T [M, N] (nn.Dense's product), with gradients dx = dy w, dw = dy^T x."""
    nn_product = _product("NN", lambda a, b: (a[0], b[1]))
    tn_product = _product("TN", lambda a, b: (a[1], b[1]))

    def bprop(x, w, out, dout):
        return nn_product(dout, w), tn_product(dout, x)
    return _product("NT", lambda a, b: (a[0], b[0]), bprop)


class Dense(nn.Dense):
    """nn.Dense (same parameters, names and initialisation) whose product is `matmul_nt` when `use_gemm`."""

    def __init__(self, in_channels: int, out_channels: int, use_gemm: bool, **kwargs):
        super().__init__(in_channels, out_channels, **kwargs)
        self.use_gemm = use_gemm
        self.gemm = matmul_nt() if use_gemm else None

    def construct(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        y = self.gemm(flat, self.weight) if self.use_gemm else self.matmul(flat, self.weight)
        if self.has_bias:
            y = self.bias_add(y, self.bias)
        return y.reshape(shape[:-1] + (self.out_channels,))


def use_native_products(network: nn.Cell) -> None:
    """Switch every Dense of `network` to MindSpore's MatMul (before export: a MINDIR must not need the .so)."""
    for _, cell in network.cells_and_names():
        if isinstance(cell, Dense):
            cell.use_gemm = False
