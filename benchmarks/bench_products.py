"""The dense layers' products alone, three ways through the libdnnl MindSpore ships: a matmul primitive reading the
operands as stored (what src/model/kernels does in bfloat16 but where the BLAS-style call measured faster: see
kBf16BlasFromTerms and kAmdBlasGradOutputs in dnnl_matmul.cc), a matmul primitive on a right-hand operand reordered
into the layout oneDNN picks for it ("packed", the reorder timed apart), and the BLAS-style call
(dnnl_gemm_bf16bf16f32; dnnl_sgemm, what the kernels do in float32), in one run, interleaved.

    python benchmarks/bench_products.py [--batch_size 8] [--seq_length 128] [--hidden_size 768]
        [--intermediate_size 3072] [--num_hidden_layers 12] [--embedding_size 128] [--vocab_size 30000]
        [--max_predictions_per_seq 20] [--dtypes bf16,f32] [--threads 2] [--steps 10] [--rounds 5]
        [--output results.json]

Why: packing the weights once per optimizer step (training) or once at load (serving) instead of inside every call
is the usual lever around products on a matrix unit; ALBERT shares one layer's weights across all its layers, so one
packed copy would serve every layer and every thread. Whether it pays, and whether the BLAS-style call beats the
primitive for a shape, is a property of the CPU and of the oneDNN build: measured here, not assumed.

What is measured, for each dense layer of a pretraining step but the pooler's (the embedding projection; the
encoder layer's query/key/value/attention output, hidden x hidden, and its feed-forward network's two, intermediate x
hidden and back; the masked-LM head's dense layer and its decoder, on the masked positions), its three products:
forward (x w^T + bias), input gradient (dy w) and weight gradient (dy^T x, where "packed" must reorder x on every
call). Each of --threads Python threads runs its own primitive, single-threaded, on its slice of the product at the
same time, as the kernels split and lay it out (rows; a forward of fewer than 512 rows by columns; 64 or more per
slice). Per call: the median over rounds of the wall time of `steps` calls on every thread at once, operands hot in
cache; GFLOP/s are the whole product's, all threads together. `step_ms`: what one training step spends on the
product, its calls per step (the encoder's: --num_hidden_layers x layers of its kind) x a call, plus for "packed"
its reorders (once per step per weight; per call for x). Every side's result is checked against numpy on the same
(bfloat16-rounded) operands.
"""
import argparse
import ctypes
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as common  # noqa: E402
from bench_common import UserError  # noqa: E402

F32, BF16 = 3, 2  # dnnl_data_type_t
FORMAT_ANY = 1  # dnnl_format_tag_any
QUERY_IMPL_INFO, QUERY_WEIGHTS_MD = 8, 131
ARG_SRC, ARG_DST, ARG_WEIGHTS, ARG_BIAS, ARG_FROM, ARG_TO = 1, 17, 33, 41, 1, 17
COLUMN_SPLIT_BELOW_ROWS = 512  # the kernels' rules (src/model/kernels/dnnl_matmul.cc)
MIN_SLICE = 64
SIDES = ("plain", "packed", "blas")
TOLERANCE = {"bf16": 1e-4, "f32": 1e-4}  # largest |difference| / largest |reference| (operands rounded alike)


class ExecArg(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_int), ("memory", ctypes.c_void_p)]


class Version(ctypes.Structure):
    _fields_ = [("major", ctypes.c_int), ("minor", ctypes.c_int), ("patch", ctypes.c_int), ("hash", ctypes.c_char_p)]


def libdnnl_path() -> Path:
    """MindSpore's bundled libdnnl, the one the kernels run on."""
    from src.model import cpu_kernels

    found = cpu_kernels.dnnl_library()
    if found is None:
        raise UserError("no libdnnl.so in the installed mindspore package (pip install mindspore)")
    return found


class Dnnl:
    """The few oneDNN C API calls the measurement needs, each checked."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        for name in ("dnnl_memory_desc_get_size",):
            getattr(self.lib, name).restype = ctypes.c_size_t
        self.lib.dnnl_primitive_desc_query_md.restype = ctypes.c_void_p
        self.lib.dnnl_version.restype = ctypes.POINTER(Version)
        for name in ("dnnl_gemm_bf16bf16f32", "dnnl_sgemm"):
            getattr(self.lib, name).argtypes = [ctypes.c_char, ctypes.c_char] + [ctypes.c_int64] * 3 + [
                ctypes.c_float, ctypes.c_void_p, ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float,
                ctypes.c_void_p, ctypes.c_int64]
        self.engine = self.handle("dnnl_engine_create", 1, ctypes.c_size_t(0))  # the CPU engine

    def call(self, name: str, *args: Any) -> None:
        status = getattr(self.lib, name)(*args)
        if status != 0:
            raise RuntimeError(f"{name} returned status {status}")

    def handle(self, name: str, *args: Any) -> ctypes.c_void_p:
        out = ctypes.c_void_p()
        self.call(name, ctypes.byref(out), *args)
        return out

    def version(self) -> str:
        v = self.lib.dnnl_version().contents
        return f"{v.major}.{v.minor}.{v.patch}"

    def desc(self, rows: int, cols: int, ld: int, transposed: bool, dtype: int) -> ctypes.c_void_p:
        """A row-major [rows, cols] matrix with leading dimension ld, or read column-major when transposed."""
        dims = (ctypes.c_int64 * 2)(rows, cols)
        strides = (ctypes.c_int64 * 2)(*((1, ld) if transposed else (ld, 1)))
        return self.handle("dnnl_memory_desc_create_with_strides", 2, dims, dtype, strides)

    def any_desc(self, rows: int, cols: int, dtype: int) -> ctypes.c_void_p:
        dims = (ctypes.c_int64 * 2)(rows, cols)
        return self.handle("dnnl_memory_desc_create_with_tag", 2, dims, dtype, FORMAT_ANY)

    def primitive(self, description: ctypes.c_void_p) -> Tuple[ctypes.c_void_p, str]:
        name = ctypes.c_char_p()
        self.call("dnnl_primitive_desc_query", description, QUERY_IMPL_INFO, 0, ctypes.byref(name))
        return self.handle("dnnl_primitive_create", description), (name.value or b"").decode()

    def memory(self, desc: ctypes.c_void_p, array: np.ndarray) -> ctypes.c_void_p:
        return self.handle("dnnl_memory_create", desc, self.engine,
                           ctypes.c_void_p(array.ctypes.data))

    def execute(self, stream: ctypes.c_void_p, primitive: ctypes.c_void_p, args: Any) -> None:
        """Runs `primitive` on `args` (an ExecArg array, built once) and waits for it."""
        self.call("dnnl_primitive_execute", primitive, stream, len(args), args)
        self.call("dnnl_stream_wait", stream)


def exec_args(*args: Tuple[int, ctypes.c_void_p]) -> Any:
    return (ExecArg * len(args))(*[ExecArg(arg, memory) for arg, memory in args])


def to_bf16(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits (uint16), rounded as the kernels round (cpu_kernels.round_to_bf16)."""
    from src.model import cpu_kernels

    return (cpu_kernels.round_to_bf16(values).view(np.uint32) >> 16).astype(np.uint16)


def from_bf16(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def on_cache_line(array: np.ndarray) -> np.ndarray:
    """A copy of `array` starting on a 64-byte boundary, as the kernels place operands and scratchpads
    (dnnl_primitives.h, Aligned): numpy's 16-byte alignment made packed weights run at about half their speed."""
    storage = np.empty(array.nbytes + 64, np.uint8)
    start = -storage.ctypes.data % 64
    placed = storage[start:start + array.nbytes].view(array.dtype).reshape(array.shape)
    placed[...] = array
    return placed


class Product:
    """One thread's slice c[m, n] = op(a) b' (+ bias), laid out as the kernels lay it out, checked against numpy.
    The kinds of a dense layer y = x w^T + bias: forward (a = x [m, k], b' = w^T with w stored [n, k], plus the
    bias; split by columns, c's rows are `ldc` wide), input gradient (a = dy [m, k], b' = w stored [k, n]) and weight
    gradient (a = dy stored [k, lda] and read transposed from its first column, b' = x stored [k, n]: the kernels'
    split puts the weight's rows on the threads, each over all the tokens). The BLAS-style call adds the bias as the
    kernels do: copied into c first, then summed onto (beta 1)."""

    def __init__(self, dnnl: Dnnl, m: int, n: int, k: int, kind: str, dtype: str, seed: int,
                 lda: Optional[int] = None, ldc: Optional[int] = None):
        self.dnnl, self.m, self.n, self.k, self.kind, self.dtype = dnnl, m, n, k, kind, dtype
        self.ta, self.tb = kind == "weight grad", kind == "forward"
        self.lda = lda or (m if self.ta else k)
        self.ldc = ldc or n
        rng = np.random.default_rng(seed)
        a = rng.standard_normal((k, self.lda) if self.ta else (m, k), dtype=np.float32)
        b = rng.standard_normal((n, k) if self.tb else (k, n), dtype=np.float32) * 0.05
        self.bias = rng.standard_normal(n, dtype=np.float32) if self.tb else None
        type_id = BF16 if dtype == "bf16" else F32
        if dtype == "bf16":
            self.a, self.b = on_cache_line(to_bf16(a)), on_cache_line(to_bf16(b))
            a, b = from_bf16(self.a), from_bf16(self.b)
        else:
            self.a, self.b = on_cache_line(a), on_cache_line(b)
        self.reference = (a[:, :m].T if self.ta else a).astype(np.float64) @ (b.T if self.tb else b).astype(np.float64)
        if self.bias is not None:
            self.reference += self.bias
        self.c = on_cache_line(np.zeros((m, self.ldc), np.float32))
        self.stream = dnnl.handle("dnnl_stream_create", dnnl.engine, 1)
        a_desc = dnnl.desc(m, k, self.lda, self.ta, type_id)
        b_desc = dnnl.desc(k, n, k if self.tb else n, self.tb, type_id)
        c_desc = dnnl.desc(m, n, self.ldc, False, F32)
        bias_desc = dnnl.desc(1, n, n, False, F32) if self.tb else None
        plain = dnnl.handle("dnnl_matmul_primitive_desc_create", dnnl.engine, a_desc, b_desc, bias_desc, c_desc, None)
        self.plain, self.plain_impl = dnnl.primitive(plain)
        packed = dnnl.handle("dnnl_matmul_primitive_desc_create", dnnl.engine, a_desc,
                             dnnl.any_desc(k, n, type_id), bias_desc, c_desc, None)
        self.packed, self.packed_impl = dnnl.primitive(packed)
        packed_desc = ctypes.c_void_p(dnnl.lib.dnnl_primitive_desc_query_md(packed, QUERY_WEIGHTS_MD, 0))
        self.b_packed = on_cache_line(np.zeros(dnnl.lib.dnnl_memory_desc_get_size(packed_desc) // 4 + 16, np.int32))
        reorder = dnnl.handle("dnnl_reorder_primitive_desc_create", b_desc, dnnl.engine, packed_desc, dnnl.engine,
                              None)
        self.reorder, self.reorder_impl = dnnl.primitive(reorder)
        a_mem, b_mem, c_mem = dnnl.memory(a_desc, self.a), dnnl.memory(b_desc, self.b), dnnl.memory(c_desc, self.c)
        packed_mem = dnnl.memory(packed_desc, self.b_packed)
        bias = [(ARG_BIAS, dnnl.memory(bias_desc, self.bias))] if self.tb else []
        self.args = {"plain": exec_args((ARG_SRC, a_mem), (ARG_WEIGHTS, b_mem), (ARG_DST, c_mem), *bias),
                     "packed": exec_args((ARG_SRC, a_mem), (ARG_WEIGHTS, packed_mem), (ARG_DST, c_mem), *bias),
                     "reorder": exec_args((ARG_FROM, b_mem), (ARG_TO, packed_mem))}

    def run(self, side: str) -> None:
        if side != "blas":
            self.dnnl.execute(self.stream, getattr(self, side), self.args[side])
            return
        beta = 0.0
        if self.bias is not None:
            self.c[:, :self.n] = self.bias
            beta = 1.0
        gemm = self.dnnl.lib.dnnl_gemm_bf16bf16f32 if self.dtype == "bf16" else self.dnnl.lib.dnnl_sgemm
        status = gemm(b"T" if self.ta else b"N", b"T" if self.tb else b"N", self.m, self.n, self.k, 1.0,
                      self.a.ctypes.data, self.lda, self.b.ctypes.data, self.k if self.tb else self.n, beta,
                      self.c.ctypes.data, self.ldc)
        if status != 0:
            raise RuntimeError(f"BLAS-style call returned status {status}")

    def error(self, side: str) -> float:
        """Largest |difference from numpy| / largest |reference| of `side`'s result."""
        self.c.fill(np.nan)
        if side == "packed":
            self.run("reorder")
        self.run(side)
        got = self.c[:, :self.n]
        return float(np.max(np.abs(got - self.reference)) / max(np.max(np.abs(self.reference)), 1e-30))


def slices(m: int, n: int, kind: str, threads: int) -> List[Tuple[int, int]]:
    """Each thread's (rows, columns) of a product c[m, n], split as the kernels split it (ParallelFor in
    src/model/kernels/parallel.h): by rows, except a forward of fewer than 512 rows, by columns; at most one part per
    64 of them."""
    by_columns = kind == "forward" and m < COLUMN_SPLIT_BELOW_ROWS
    total = n if by_columns else m
    parts = max(1, min(threads, total // MIN_SLICE))
    sizes = [total * (p + 1) // parts - total * p // parts for p in range(parts)]
    return [(m, size) if by_columns else (size, n) for size in sizes]


def timed_together(products: List[Product], side: str, steps: int) -> float:
    """ms per call: `steps` calls on every thread's product at once (ctypes releases the GIL in each call)."""
    barrier = threading.Barrier(len(products) + 1)
    failures: List[BaseException] = []

    def work(product: Product) -> None:
        barrier.wait()
        try:
            for _ in range(steps):
                product.run(side)
        except BaseException as error:  # reported by the caller
            failures.append(error)

    workers = [threading.Thread(target=work, args=(product,)) for product in products]
    for worker in workers:
        worker.start()
    barrier.wait()
    start = time.perf_counter()
    for worker in workers:
        worker.join()
    if failures:
        raise failures[0]
    return (time.perf_counter() - start) * 1e3 / steps


def dense_layers(args: argparse.Namespace) -> List[Tuple[str, int, int, int, int, int]]:
    """ALBERT's dense layers in a pretraining step: (name, output features, input features, rows, calls per step,
    weights): the embedding projection, the encoder layer's (shared: called once per layer), the masked-LM head's
    dense layer and its decoder (the tied word embeddings) on the masked positions."""
    tokens, masked = args.batch_size * args.seq_length, args.batch_size * args.max_predictions_per_seq
    hidden, inner, embedding = args.hidden_size, args.intermediate_size, args.embedding_size
    layers = args.num_hidden_layers
    return [("embedding projection", hidden, embedding, tokens, 1, 1),
            ("query/key/value/output", hidden, hidden, tokens, 4 * layers, 4),
            ("ffn", inner, hidden, tokens, layers, 1), ("ffn_output", hidden, inner, tokens, layers, 1),
            ("masked-LM dense", embedding, hidden, masked, 1, 1),
            ("masked-LM decoder", args.vocab_size, embedding, masked, 1, 1)]


def measure(dnnl: Dnnl, layer: Tuple[str, int, int, int, int, int], kind: str, dtype: str,
            args: argparse.Namespace) -> Dict[str, Any]:
    """One product of `layer` (dense_layers)."""
    name, out_features, in_features, rows, calls, weights = layer
    m, n, k = {"forward": (rows, out_features, in_features), "input grad": (rows, in_features, out_features),
               "weight grad": (out_features, in_features, rows)}[kind]
    # A thread's slice reads dy's columns out of the full rows (weight gradient) and writes c's columns into the
    # full rows (a forward split by columns), as the kernels do.
    products = [Product(dnnl, part_m, part_n, k, kind, dtype, args.seed + t, lda=m if kind == "weight grad" else None,
                        ldc=n) for t, (part_m, part_n) in enumerate(slices(m, n, kind, args.threads))]
    errors = {side: max(product.error(side) for product in products) for side in SIDES}
    bad = {side: e for side, e in errors.items() if not e <= TOLERANCE[dtype]}
    if bad:
        raise RuntimeError(f"{name} {kind} {dtype}: results differ from numpy's: {bad}")
    times: Dict[str, List[float]] = {side: [] for side in (*SIDES, "reorder")}
    order = (*SIDES, "reorder")
    for round_index in range(args.rounds):
        for side in order if round_index % 2 == 0 else order[::-1]:
            times[side].append(timed_together(products, side, args.steps))
    ms = {side: statistics.median(values) for side, values in times.items()}
    step = {side: calls * ms[side] for side in SIDES}
    # Weights are reordered once per step (each of the layer's weights); an activation on every call.
    step["packed"] += (calls if kind == "weight grad" else weights) * ms["reorder"]
    return {"product": f"{name} {kind}", "dtype": dtype, "m": m, "n": n, "k": k, "calls_per_step": calls,
            "slices": [[p.m, p.n] for p in products], "call_ms": {s: round(v, 4) for s, v in ms.items()},
            "gflops": {side: round(2.0 * m * n * k / ms[side] / 1e6, 1) for side in SIDES},
            "step_ms": {side: round(v, 3) for side, v in step.items()},
            "packed_vs_plain": round(step["plain"] / step["packed"], 3),
            "blas_vs_plain": round(ms["plain"] / ms["blas"], 3),
            "implementation": {"plain": products[0].plain_impl, "packed": products[0].packed_impl,
                               "reorder": products[0].reorder_impl},
            "max_relative_error": {side: float(f"{e:.3g}") for side, e in errors.items()}}


def totals(results: List[Dict[str, Any]]) -> Dict[str, Dict[str, float]]:
    """Per dtype, ms per training step of all the products on each side, and with each product's fastest side."""
    out: Dict[str, Dict[str, float]] = {}
    for r in results:
        total = out.setdefault(r["dtype"], {side: 0.0 for side in (*SIDES, "fastest")})
        for side in SIDES:
            total[side] += r["step_ms"][side]
        total["fastest"] += min(r["step_ms"].values())
    return {dtype: {side: round(v, 2) for side, v in total.items()} for dtype, total in out.items()}


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    parser = common.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False,
                                   formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--seq_length", type=int, default=128)
    parser.add_argument("--hidden_size", type=int, default=768, help="ALBERT-base's by default")
    parser.add_argument("--intermediate_size", type=int, default=3072)
    parser.add_argument("--num_hidden_layers", type=int, default=12, help="calls per step of each encoder product")
    parser.add_argument("--embedding_size", type=int, default=128)
    parser.add_argument("--vocab_size", type=int, default=30000)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20, help="masked positions per sequence")
    parser.add_argument("--dtypes", type=common.compare_list(("bf16", "f32"), none=False), default=["bf16", "f32"],
                        help="bf16 (bfloat16 operands, float32 results) and/or f32")
    parser.add_argument("--threads", type=int, default=2, help="threads, each on its slice (the kernels' split)")
    parser.add_argument("--steps", type=int, default=10, help="calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per side, alternating")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="", help="write the results as JSON here")
    args = parser.parse_args(argv)
    for name in ("batch_size", "seq_length", "hidden_size", "intermediate_size", "num_hidden_layers",
                 "embedding_size", "vocab_size", "max_predictions_per_seq", "threads", "steps", "rounds"):
        if getattr(args, name) < 1:
            raise UserError(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.max_predictions_per_seq > args.seq_length:
        raise UserError(f"--max_predictions_per_seq {args.max_predictions_per_seq} is above --seq_length "
                        f"{args.seq_length}: a row has no more positions to mask")
    common.check_output(args.output)
    return args


def print_table(results: List[Dict[str, Any]]) -> None:
    print(f"{'product':<34} {'dtype':<5} {'slice':>10} | {'plain ms':>9} {'packed ms':>9} {'reorder':>8} "
          f"{'blas ms':>8} | {'packed/plain':>12} {'blas/plain':>10} | plain GFLOP/s")
    for r in results:
        ms = r["call_ms"]
        print(f"{r['product']:<34} {r['dtype']:<5} {'x'.join(map(str, r['slices'][0])):>10} | {ms['plain']:9.3f} "
              f"{ms['packed']:9.3f} {ms['reorder']:8.3f} {ms['blas']:8.3f} | {r['packed_vs_plain']:11.2f}x "
              f"{r['blas_vs_plain']:9.2f}x | {r['gflops']['plain']:.0f}")
    print("packed/plain, blas/plain: > 1 means faster than the primitive on the operands as stored (per training "
          "step for packed, its reorders included)")


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    library = libdnnl_path()
    dnnl = Dnnl(library)
    results = [measure(dnnl, layer, kind, dtype, args) for dtype in args.dtypes for layer in dense_layers(args)
               for kind in ("forward", "input grad", "weight grad")]
    print_table(results)
    for dtype, total in totals(results).items():
        print(f"{dtype}: ms per training step of these products: " +
              ", ".join(f"{side} {value:.1f}" for side, value in total.items()))
    if args.output:
        report = {"benchmark": "bench_products", "settings": vars(args), "onednn": dnnl.version(),
                  "step_totals_ms": totals(results),
                  "libdnnl": library.name, "environment": common.provenance(), "results": results}
        common.write_json(args.output, report)
    return 0


if __name__ == "__main__":
    from model_utils.errors import run_cli

    sys.exit(run_cli(main))
