"""src/model/cpu_kernels.py: the compiled CPU kernels (oneDNN products, attention, the feed-forward network,
LayerNorm, GELU, cross entropy, column sums), each forward and gradient checked against an independent reference
(numpy in float64, PyTorch autograd in float64, MindSpore's own cells), and their cache and fallbacks (the cache key,
an untrusted cache, switched off, no compiler, a failing build or load, white list)."""
import ctypes
import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
torch = pytest.importorskip("torch")
from mindspore import Parameter, Tensor, nn, ops  # noqa: E402

from src.model import cpu_kernels  # noqa: E402

# The reason's wording makes this skip a failure in CI (tests/ci_skips.py), where .ci/run installs a compiler.
FIXTURES = Path(__file__).resolve().parent / "fixtures"
needs_kernels = pytest.mark.skipif(not cpu_kernels.available(),
                                   reason=f"compiled CPU kernels unavailable: {cpu_kernels.status()}")
# Serving's int8 products need oneDNN's exact int8 sums (VNNI or AMX-INT8); elsewhere --precision int8 is refused.
needs_int8 = pytest.mark.skipif(not cpu_kernels.int8_support()[0],
                                reason=f"int8 products: {cpu_kernels.int8_support()[1]}")


# Per test, not per module: a test here switches to PyNative itself (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("graph_mode_each_test")


@pytest.fixture(params=[1, 2, 3], ids=lambda n: f"threads{n}")
def threads(request):
    """Work is split over threads once there are enough rows, columns (x w^T of under 512 rows) or elements per
    thread: results must not change."""
    cpu_kernels.set_threads(request.param)
    yield request.param
    cpu_kernels.set_threads(0)


class Call(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, *inputs):
        return self.op(*inputs)


def forward_and_input_grads(op, inputs, sens):
    """op(*inputs) and d(sum(op * sens))/d(inputs), through MindSpore's autodiff (so through the op's bprop)."""
    cell = Call(op)
    tensors = [Tensor(value) for value in inputs]
    grads = ops.GradOperation(get_all=True, sens_param=True)(cell)(*tensors, Tensor(sens))
    return cell(*tensors), [grad.asnumpy() for grad in grads]


def torch_reference(function, inputs, sens):
    """function(*inputs) and the gradients of sum(function * sens) by PyTorch autograd in float64."""
    leaves = [torch.tensor(value, dtype=torch.float64, requires_grad=True) for value in inputs]
    output = function(*leaves)
    output.backward(torch.tensor(sens, dtype=torch.float64))
    return output.detach().numpy(), [leaf.grad.numpy() for leaf in leaves]


def assert_close(got, want, tolerance=1e-5):
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got - want).max() <= tolerance * scale, f"max abs diff {np.abs(got - want).max()}"


@needs_kernels
@pytest.mark.parametrize("m, k, n", [(1, 5, 3), (63, 17, 9), (200, 70, 130), (257, 33, 64), (70, 33, 200),
                                     (600, 20, 70)])
def test_products_equal_numpy_in_float64(m, k, n, threads):
    rng = np.random.default_rng(m + k + n)
    x, w, b, dy = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,), (m, n)))
    x64, w64, dy64 = x.astype(np.float64), w.astype(np.float64), dy.astype(np.float64)
    # The gradients are the NN and TN products and the column sums: dx = dy w, dw = dy^T x, db = sum of dy's rows.
    y, (dx, dw) = forward_and_input_grads(cpu_kernels.matmul_nt(), (x, w), dy)
    assert_close(y.asnumpy(), x64 @ w64.T)
    assert_close(dx, dy64 @ w64)
    assert_close(dw, dy64.T @ x64)
    y, (dx, dw, db) = forward_and_input_grads(cpu_kernels.matmul_nt_bias(), (x, w, b), dy)
    assert_close(y.asnumpy(), x64 @ w64.T + b)
    assert_close(dx, dy64 @ w64)
    assert_close(dw, dy64.T @ x64)
    assert_close(db, dy64.sum(0))


@needs_kernels
def test_subnormal_operands_are_read_as_zero_on_every_thread(threads):
    """x w^T with x subnormal (1e-39) and w 1e30: with subnormals flushed, as every kernel part runs (see
    parallel.h), y is 0 on every row, whichever thread made it, whether MindSpore's thread or this one called; read as
    they are, x w^T would be k * 1e-9. (Was: each part ran in the mode of whichever thread started its worker, and on
    Intel subnormal operands made the products ~20x slower: a fine-tuned SQuAD head served at a sixth of its speed.)"""
    m, k, n = 600, 64, 8
    x = np.full((m, k), 1e-39, np.float32)
    w = np.full((n, k), 1e30, np.float32)
    assert x[0, 0] != 0 and (x.astype(np.float64) @ w.T.astype(np.float64))[0, 0] == pytest.approx(k * 1e-9)
    for mode in (ms.GRAPH_MODE, ms.PYNATIVE_MODE):
        ms.set_context(mode=mode)
        y = Call(cpu_kernels.matmul_nt())(Tensor(x), Tensor(w)).asnumpy()
        np.testing.assert_array_equal(y, np.zeros((m, n), np.float32))


class WithCopies(nn.Cell):
    """A product that takes its weights' bfloat16 copies after them, called on the weights alone: the copies made in
    the graph (cpu_kernels.bf16_copy, or with `packed` cpu_kernels.bf16_packed), as the network makes them."""

    def __init__(self, op, weights: int, first: int = 1, packed: bool = False):
        super().__init__()
        self.op, self.weights, self.first = op, weights, first
        self.make = cpu_kernels.bf16_packed if packed else cpu_kernels.bf16_copy

    def construct(self, *inputs):
        weights = inputs[self.first:self.first + self.weights]
        copies = tuple(self.make(weight) for weight in weights)
        return self.op(*inputs[:self.first + self.weights], *copies, *inputs[self.first + self.weights:])


def dense_grads(cell, tensors, sens):
    return ops.GradOperation(get_all=True, sens_param=True)(cell)(*tensors, sens)


def run_dense_qkv(rng: np.random.Generator, m: int, k: int, n: int, copies: str = ""):
    """Random x [m, k], three weights [n, k], biases and output gradients through `dense_qkv` (reading the weights'
    bfloat16 copies with `copies` "copy", or the same packed with "packed"): (x, weights, biases, output gradients,
    outputs, input gradients)."""
    x = rng.standard_normal((m, k)).astype(np.float32)
    weights = [rng.standard_normal((n, k)).astype(np.float32) for _ in range(3)]
    biases = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    sens = [rng.standard_normal((m, n)).astype(np.float32) for _ in range(3)]
    cell = (WithCopies(cpu_kernels.dense_qkv(True), 3, packed=copies == "packed") if copies
            else Call(cpu_kernels.dense_qkv()))
    tensors = [Tensor(value) for value in (x, *weights, *biases)]
    grads = dense_grads(cell, tensors, tuple(Tensor(d) for d in sens))
    return x, weights, biases, sens, cell(*tensors), grads


@needs_kernels
@pytest.mark.parametrize("m, k, n", [(1, 5, 3), (200, 70, 130), (70, 33, 200), (600, 20, 70)])
def test_dense_qkv_equals_numpy_in_float64(m, k, n, threads):
    """Three dense layers of one input in one call (attention's query, key and value); its input gradient is the
    three products summed in place."""
    x, weights, biases, sens, outputs, grads = run_dense_qkv(np.random.default_rng(m + k), m, k, n)
    x64, w64, dy64 = x.astype(np.float64), [w.astype(np.float64) for w in weights], [d.astype(np.float64)
                                                                                      for d in sens]
    for output, w, b in zip(outputs, w64, biases):
        assert_close(output.asnumpy(), x64 @ w.T + b)
    assert_close(grads[0].asnumpy(), sum(dy @ w for dy, w in zip(dy64, w64)))
    for i, dy in enumerate(dy64):
        assert_close(grads[1 + i].asnumpy(), dy.T @ x64)
        assert_close(grads[4 + i].asnumpy(), dy.sum(0))


def bf16_rounded(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest, ties to even) by their bits: an independent reference."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return bits.astype(np.uint32).view(np.float32)


@pytest.fixture
def bf16_products():
    supported, why = cpu_kernels.bf16_support()
    if not supported:
        pytest.skip(f"bfloat16 products: {why}")
    cpu_kernels.set_bf16(True)
    yield
    cpu_kernels.set_bf16(False)


def _bf16_status() -> str:
    return cpu_kernels.onednn().partition("bfloat16: ")[2].partition(";")[0]


def _bf16_part(described: str) -> str:
    return described.partition("bfloat16: ")[2].partition("; int8")[0]


def amx_bf16() -> bool:
    """Whether oneDNN runs the bfloat16 primitives on AMX here (the kernels' status line names the ISA): the BLAS-style
    call for long sums, measured faster only there, applies only there."""
    return "amx" in _bf16_status()


def amd_bf16() -> bool:
    """Whether this is an AMD CPU whose bfloat16 primitives run on AVX512-BF16 (Zen 4 and later): the BLAS-style call
    for large weight gradients, measured faster only there, applies only there."""
    return amd_cpu() and "avx512_core_bf16" in _bf16_status()


def batched_attention() -> str:
    """Where attention's products run in batched bfloat16 primitives, as the kernels' status line says: "training and
    int8 serving" (AMX), "training" (AMD's AVX512-BF16) or "" (float32 per pair everywhere)."""
    return _bf16_status().partition("batched attention: ")[2]


def amd_cpu(vendor: str = "") -> bool:
    """Whether the kernels take this CPU for AMD's: `vendor` (ALBERT_KERNELS_VENDOR's value) where given, else
    whether /proc/cpuinfo names AMD as this CPU's vendor."""
    if vendor:
        return vendor == "amd"
    return any(line.split(":")[-1].strip() == "AuthenticAMD"
               for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("vendor_id"))


def assert_bf16_product(got, bf16_operands, float32_operands):
    """A product in bfloat16 with float32 sums: the float64 product of the operands rounded to bfloat16, up to
    float32 accumulation, and measurably not the float32 product (bfloat16 keeps 8 bits of mantissa)."""
    scale = max(1.0, float(np.abs(bf16_operands).max()))
    assert np.abs(got - bf16_operands).max() <= 1e-5 * scale, f"max abs diff {np.abs(got - bf16_operands).max()}"
    assert np.abs(got - float32_operands).max() > 1e-4 * scale, "the float32 product, not the bfloat16 one"


@needs_kernels
@pytest.mark.parametrize("copy", ["", "copy", "packed"], ids=["float32_weights", "bf16_copy", "bf16_packed"])
@pytest.mark.parametrize("m, k, n", [(63, 17, 9), (200, 70, 130), (600, 20, 70), (1024, 256, 384),
                                     (1100, 2048, 40), (600, 30, 2048), (256, 1024, 3072)])
def test_bf16_products_are_bfloat16_operands_with_float32_sums(m, k, n, copy, threads, bf16_products):
    """Under set_bf16(True) every dense product (x w^T forward, dy w and dy^T x backward, read in place or
    transposed), whatever its size and whether a primitive or the BLAS-style call runs it (on AMX, k >= 2048 and
    k >= 4 x the block's columns: the forward of (1100, 2048, 40) on one or two threads, the input gradient of
    (600, 30, 2048); on AMD's AVX512-BF16 the weight gradient of (256, 1024, 3072)), is the float64 product of the
    operands rounded to bfloat16: with float32 weights (each call rounds them), with the weights' bfloat16 copy
    made in the graph (the network's way) and with the same packed (a shared layer's way), whose weights still get
    their gradient, in float32."""
    rng = np.random.default_rng(m * k)
    x, w, b, dy = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,), (m, n)))
    xb, wb, dyb = (bf16_rounded(a).astype(np.float64) for a in (x, w, dy))
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    cell = (WithCopies(cpu_kernels.matmul_nt_bias(True), 1, packed=copy == "packed") if copy
            else Call(cpu_kernels.matmul_nt_bias()))
    tensors = [Tensor(x), Tensor(w), Tensor(b)]
    dx, dw, db = (grad.asnumpy() for grad in dense_grads(cell, tensors, Tensor(dy)))
    assert_bf16_product(cell(*tensors).asnumpy(), xb @ wb.T + b, x64 @ w64.T + b)
    assert_bf16_product(dx, dyb @ wb, dy64 @ w64)
    assert_bf16_product(dw, dyb.T @ xb, dy64.T @ x64)
    assert dw.dtype == np.float32
    assert_close(db, dy64.sum(0))


@needs_kernels
@pytest.mark.parametrize("m, k, n, on_amx", [(1536, 2048, 192, 1), (1536, 64, 2048, 1), (1536, 960, 192, 0),
                                             (1536, 2048, 768, 0), (300, 2048, 192, 0), (2048, 64, 192, 0),
                                             (256, 1024, 3072, 0)],
                         ids=["forward", "input_grad", "few_terms", "few_per_column", "forward_of_few_rows",
                              "weight_grad", "large_weight_grad"])
def test_bf16_products_where_the_blas_style_call_measured_faster_take_it(m, k, n, on_amx, threads, bf16_products):
    """The rules measured per CPU (dnnl_matmul.cc, benchmarks/bench_products.py). On AMX (`on_amx`): a forward or
    input gradient with k >= 2048 and k >= 4 x its block's output columns runs through dnnl_gemm_bf16bf16f32,
    everything else through a primitive: the weight gradient always ("weight_grad": k = 2048 tokens over 64 columns,
    kept only by that), a forward of under 512 rows (split by columns), and "few_per_column" (k = 2048 < 4 x 768). On
    AMD's AVX512-BF16: only a weight gradient dw [n, k] whose block on each thread (n / threads rows) has 2^20 outputs
    or more, each a sum over 64 tokens (m) or more ("large_weight_grad" on any of the three thread counts,
    "few_per_column" on one thread). Elsewhere every product keeps the primitive, and the kernels' status line says
    which rule applies. Counted with the kernels' profile over one forward and backward: each of the three products
    split over every thread."""
    amx, amd = amx_bf16(), amd_bf16()
    assert ("dnnl_gemm_bf16bf16f32 for long sums" in cpu_kernels.onednn()) == amx
    assert ("dnnl_gemm_bf16bf16f32 for large weight gradients" in cpu_kernels.onednn()) == amd
    large_weight_grad = m >= 64 and n // threads * k >= 2 ** 20
    blas_products = int((on_amx and amx) or (large_weight_grad and amd))
    rng = np.random.default_rng(k)
    x, w, b, dy = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,), (m, n)))
    cell, tensors = Call(cpu_kernels.matmul_nt_bias()), [Tensor(x), Tensor(w), Tensor(b)]
    cpu_kernels.start_profile()
    try:
        cell(*tensors).asnumpy()  # the backward graph needs no forward product: run apart
        for grad in dense_grads(cell, tensors, Tensor(dy)):
            grad.asnumpy()  # waits for the graph
    finally:
        counts = cpu_kernels.stop_profile()
    blas = counts.get("thread: gemm_bf16bf16f32", (0, 0.0))[0]
    primitives = counts.get("thread: matmul primitive bf16", (0, 0.0))[0]
    assert (blas, primitives) == (blas_products * threads, (3 - blas_products) * threads), counts


@needs_kernels
def test_status_says_where_attention_runs_batched_in_bfloat16():
    """Batched bfloat16 attention where it measured faster than float32 per pair (dnnl_matmul.cc): training and int8
    serving on AMX; training only on an AMD CPU whose bfloat16 primitive is AVX512-BF16's (Zen 4 and later; at batch
    1 int8 serving was no faster there); nowhere else (an Intel CPU without AMX, a CPU without bfloat16 products)."""
    bf16 = _bf16_status()
    if amx_bf16():
        assert batched_attention() == "training and int8 serving", bf16
    elif amd_cpu() and "avx512_core_bf16" in bf16:
        assert batched_attention() == "training", bf16
    else:
        assert batched_attention() == "" and "batched attention" not in bf16, bf16


@needs_kernels
@pytest.mark.parametrize("copies", ["", "copy", "packed"], ids=["float32_weights", "bf16_copies", "bf16_packed"])
def test_bf16_dense_qkv_sums_its_input_gradient_in_the_primitive(copies, threads, bf16_products):
    """The query, key and value layers under set_bf16(True): their input gradient is three primitive products, the
    second and third added to the first by the primitive's sum post-op; with the weights' bfloat16 copies too, and
    with the same packed."""
    x, weights, biases, sens, outputs, grads = run_dense_qkv(np.random.default_rng(11), 1024, 256, 256, copies)
    xb, wb, dyb = (bf16_rounded(x).astype(np.float64), [bf16_rounded(w).astype(np.float64) for w in weights],
                   [bf16_rounded(d).astype(np.float64) for d in sens])
    x64, w64, dy64 = x.astype(np.float64), [w.astype(np.float64) for w in weights], [d.astype(np.float64)
                                                                                      for d in sens]
    for output, w, w_, b in zip(outputs, wb, w64, biases):
        assert_bf16_product(output.asnumpy(), xb @ w.T + b, x64 @ w_.T + b)
    assert_bf16_product(grads[0].asnumpy(), sum(d @ w for d, w in zip(dyb, wb)), sum(d @ w for d, w in zip(dy64, w64)))
    for i in range(3):
        assert_bf16_product(grads[1 + i].asnumpy(), dyb[i].T @ xb, dy64[i].T @ x64)
        assert_close(grads[4 + i].asnumpy(), dy64[i].sum(0))


BF16_PACKED_LABEL = "thread: matmul primitive bf16, packed weights"
BF16_PRIMITIVE_LABEL = "thread: matmul primitive bf16"


def bf16_packing() -> bool:
    """Whether the kernels' status line says shared layers' bfloat16 weights are packed once per step here."""
    return "shared weights packed once per step" in _bf16_status()


def profiled(run):
    """run()'s result and the kernels' profile counts while it ran."""
    cpu_kernels.start_profile()
    try:
        result = run()
    finally:
        counts = cpu_kernels.stop_profile()
    return result, counts


class TwoLayers(nn.Cell):
    """Two dense layers sharing weights w (x1 w^T + b and x2 w^T + b), reading the weights' packed form (`packed`) or
    their bfloat16 copy, made in the graph once per use: as ALBERT's shared layers read them."""

    def __init__(self, packed: bool):
        super().__init__()
        self.product, self.packed = cpu_kernels.matmul_nt_bias(True), packed

    def construct(self, x1, x2, w, b):
        form = cpu_kernels.bf16_packed if self.packed else cpu_kernels.bf16_copy
        return self.product(x1, w, form(w), b) + self.product(x2, w, form(w), b)


@needs_kernels
def test_bf16_shared_weights_are_packed_once_and_read_packed_both_ways(threads, bf16_products):
    """bf16_packed rounds a layer's weights and reorders them for oneDNN's primitive once, for every product reading
    them: two layers sharing the weights make one packing (MindSpore merges the identical calls). Where the status
    line says it packs, each forward and each input gradient (a block of all columns on each thread: rows split)
    reads the packed forms, the weight gradients read no weights; the numbers are those of the bfloat16 copy, bit
    for bit (the same primitive on the same bfloat16 operands), and bfloat16 products (checked against numpy)."""
    rng = np.random.default_rng(21)
    m, k, n = 1024, 256, 384
    x1, x2, w, b, dy = (rng.standard_normal(shape).astype(np.float32)
                        for shape in ((m, k), (m, k), (n, k), (n,), (m, n)))
    tensors = [Tensor(x1), Tensor(x2), Tensor(w), Tensor(b)]
    runs = {}
    for packed in (True, False):
        cell = TwoLayers(packed)
        cell(*tensors).asnumpy()  # compiled outside the counts
        y, forward = profiled(lambda: cell(*tensors).asnumpy())
        grads, backward = profiled(lambda: [g.asnumpy() for g in dense_grads(cell, tensors, Tensor(dy))])
        runs[packed] = (y, grads, forward, backward)
    (y, grads, forward, backward), (copy_y, copy_grads, *_) = runs[True], runs[False]
    reads = 2 * threads if bf16_packing() else 0  # two layers' forwards; two input gradients
    assert forward.get(BF16_PACKED_LABEL, (0,))[0] == reads and forward["PackBf16Weights"][0] == 1, forward
    assert backward.get(BF16_PACKED_LABEL, (0,))[0] == reads, backward
    assert backward[BF16_PRIMITIVE_LABEL][0] == 2 * threads + 2 * threads - reads, backward  # + the weight gradients
    np.testing.assert_array_equal(y, copy_y)
    for got, want in zip(grads, copy_grads):
        np.testing.assert_array_equal(got, want)
    xb1, xb2, wb, dyb = (bf16_rounded(a).astype(np.float64) for a in (x1, x2, w, dy))
    x64, w64 = x1.astype(np.float64), w.astype(np.float64)
    assert_bf16_product(y, xb1 @ wb.T + xb2 @ wb.T + 2 * b, x64 @ w64.T + x2.astype(np.float64) @ w64.T + 2 * b)
    assert_bf16_product(grads[0], dyb @ wb, dy.astype(np.float64) @ w64)


class GivenPacked(nn.Cell):
    """x w'^T + b with w' a packed tensor given as an input, moved by the graph first (an Add of zeros): MindSpore
    places it on its cache line as it places the packing's own output."""

    def __init__(self):
        super().__init__()
        self.product = cpu_kernels.matmul_nt_bias(True)

    def construct(self, x, w, packed, b, zeros):
        return self.product(x, w, packed + zeros, b)


def header_field(packed: np.ndarray, field: int, value=None) -> int:
    """Field `field` (an int64 of the 64-byte header: 2 n, 3 k, 4 offset, 5 and 6 the packed forms' sizes) of a
    `bf16_packed` tensor, set to `value` when given (in place)."""
    if value is not None:
        packed[8 * field:8 * field + 8] = np.array([value], np.int64).view(np.int8)
    return int(packed[8 * field:8 * field + 8].view(np.int64)[0])


def relaid(packed: np.ndarray, offset: int) -> np.ndarray:
    """The same packed tensor with its rounded and packed weights moved to start `offset` bytes in (64-127)."""
    moved, start = np.zeros_like(packed), header_field(packed, 4)
    moved[:64] = packed[:64]
    data = packed[start:start + packed.size - 128]  # the tensor holds 128 bytes besides them
    moved[offset:offset + data.size] = data
    header_field(moved, 4, offset)
    return moved


@needs_kernels
def test_a_packed_tensor_from_elsewhere_is_read_as_rounded_weights_or_refused(bf16_products, request):
    """The products trust a packed tensor's layout only where it is this process's and on a cache line: of the same
    tensor with its weights moved 0, 16, 32 and 48 bytes along (MindSpore places tensors on 16-byte boundaries),
    exactly the one landing on a cache line is read packed (where the status line says this CPU packs), every one
    gives the bfloat16 copy's numbers; one naming another process is read as rounded weights, same numbers; one
    whose header names another shape, another magic or a packed size the layout does not have is refused (the call
    fails), never read."""
    rng = np.random.default_rng(31)
    m, k, n = 1024, 64, 96
    x, w, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,)))
    packed = Call(cpu_kernels._pack_bf16())(Tensor(w)).asnumpy()
    assert packed.dtype == np.int8 and packed.size == cpu_kernels.bf16_pack_bytes(n, k)
    assert (header_field(packed, 2), header_field(packed, 3)) == (n, k)
    want = WithCopies(cpu_kernels.matmul_nt_bias(True), 1)(Tensor(x), Tensor(w), Tensor(b)).asnumpy()
    given = GivenPacked()
    cpu_kernels.set_threads(2)
    request.addfinalizer(lambda: cpu_kernels.set_threads(0))

    def run(tensor):
        y, counts = profiled(lambda: given(Tensor(x), Tensor(w), Tensor(tensor), Tensor(b),
                                           Tensor(np.zeros_like(tensor))).asnumpy())
        return y, counts.get(BF16_PACKED_LABEL, (0,))[0]

    reads = []
    for offset in (64, 80, 96, 112):
        y, read = run(relaid(packed, offset))
        np.testing.assert_array_equal(y, want)
        reads.append(read)
    if not bf16_packing():
        assert reads == [0] * 4
        return
    assert sorted(reads) == [0, 0, 0, 2], reads  # each thread's rows
    aligned = relaid(packed, (64, 80, 96, 112)[int(np.argmax(reads))])
    stranger = aligned.copy()
    stranger[8:16] ^= np.int8(0x5A)  # the packing process's token
    y, read = run(stranger)
    assert read == 0
    np.testing.assert_array_equal(y, want)
    for field, value in ((2, n + 1), (3, k - 1), (5, header_field(aligned, 5) + 64)):
        wrong = aligned.copy()
        header_field(wrong, field, value)
        with pytest.raises(RuntimeError):
            run(wrong)
    wrong = aligned.copy()
    wrong[:8] = np.frombuffer(b"ALBERTP8", np.int8)  # int8 serving's magic
    with pytest.raises(RuntimeError):
        run(wrong)


class Served(nn.Cell):
    """x w'^T + b with w' a constant of the network (a Parameter, placed where MindSpore places it), as a checkpoint
    served in bfloat16 reads its weights packed at load."""

    def __init__(self, w, packed):
        super().__init__()
        self.w = Parameter(Tensor(w), name="w", requires_grad=False)
        self.packed = Parameter(Tensor(packed), name="w_bf16", requires_grad=False)
        self.product = cpu_kernels.matmul_nt_bias(True)

    def construct(self, x, b):
        return self.product(x, self.w, self.packed, b)


@needs_kernels
def test_bf16_weights_served_are_packed_once_at_load_and_read_packed(bf16_products, request):
    """pack_bf16 rounds and packs a served checkpoint's weights once, at load: a header naming the shape, this process
    and a serial number, the rounded weights, the forward's packed form and no input gradient's (serving has none).
    MindSpore may place the tensor off a cache line: its packed form is then copied onto one once, not per call.
    Every product gives the bfloat16 copy's numbers bit for bit; where the status line says this CPU packs, each
    thread's block reads the packed form, wherever the tensor's data lies (moved 0-48 bytes along). One naming
    another process reads the rounded weights, same numbers, also where that process packed no form (a shorter
    tensor; one whose header claims more bytes than it holds is refused); a header whose serial is cleared (a per-step tensor's,
    which holds both forms: another size) is refused."""
    rng = np.random.default_rng(41)
    m, k, n = 1024, 64, 96
    x, w, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,)))
    packed = cpu_kernels.pack_bf16(w)
    library = cpu_kernels._library(cpu_kernels._build()[0])
    library.Bf16ServingPackBytes.restype = ctypes.c_int64
    size = library.Bf16ServingPackBytes(ctypes.c_int64(n), ctypes.c_int64(k))
    assert packed.dtype == np.int8 and packed.size == size
    assert (header_field(packed, 2), header_field(packed, 3), header_field(packed, 6)) == (n, k, 0)
    assert header_field(packed, 7) > 0 and header_field(cpu_kernels.pack_bf16(w), 7) > header_field(packed, 7)
    assert (header_field(packed, 5) > 0) == bf16_packing()
    offset = header_field(packed, 4)
    np.testing.assert_array_equal(packed[offset:offset + 2 * n * k].view(np.uint16),
                                  (bf16_rounded(w).view(np.uint32) >> 16).astype(np.uint16).ravel())
    want = WithCopies(cpu_kernels.matmul_nt_bias(True), 1)(Tensor(x), Tensor(w), Tensor(b)).asnumpy()
    cpu_kernels.set_threads(2)
    request.addfinalizer(lambda: cpu_kernels.set_threads(0))

    def run(tensor):
        served = Served(w, tensor)
        served(Tensor(x), Tensor(b)).asnumpy()  # compiled, and the packed form copied where it must be
        copies = library.PackedCopies()
        y, counts = profiled(lambda: [served(Tensor(x), Tensor(b)).asnumpy() for _ in range(2)][-1])
        assert library.PackedCopies() == copies  # none per call
        return y, counts.get(BF16_PACKED_LABEL, (0,))[0]

    for moved in (64, 80, 96, 112):  # the data 0-48 bytes past where it was: all but one off a cache line
        y, read = run(relaid(packed, moved))
        np.testing.assert_array_equal(y, want)
        assert read == (4 if bf16_packing() else 0)  # two calls, each thread's rows
    stranger = packed.copy()
    stranger[8:16] ^= np.int8(0x5A)  # the packing process's token
    y, read = run(stranger)
    assert read == 0
    np.testing.assert_array_equal(y, want)
    elsewhere = stranger[:128 + -(-2 * n * k // 64) * 64].copy()  # packed where no form could be: header and weights
    header_field(elsewhere, 5, 0)
    y, read = run(elsewhere)
    assert read == 0
    np.testing.assert_array_equal(y, want)
    header_field(elsewhere, 5, 2 ** 62)  # a size no tensor of its length holds
    with pytest.raises(RuntimeError):
        run(elsewhere)
    if bf16_packing():
        cleared = packed.copy()
        header_field(cleared, 7, 0)
        with pytest.raises(RuntimeError):
            run(cleared)


@needs_kernels
def test_bf16_attention_products_stay_float32_and_so_does_softmax(bf16_products):
    """With dropout on the probabilities (attention in two calls around it) the per-head products are float32 sgemm
    even with bfloat16 products on (see src/model/kernels/dnnl_matmul.cc); the softmax runs on the float32 scores
    (rows sum to 1)."""
    batch, seq, heads, size = 2, 16, 2, 8
    rng = np.random.default_rng(5)
    q, k = (rng.standard_normal((batch, seq, heads * size)).astype(np.float32) for _ in range(2))
    bias, scale = np.zeros((batch, 1, 1, seq), np.float32), np.array([0.5], np.float32)
    probs = Call(cpu_kernels.attention(heads)[0])(*map(Tensor, (q, k, bias, scale))).asnumpy()
    split = lambda a: a.reshape(batch, seq, heads, size).transpose(0, 2, 1, 3).astype(np.float64)  # noqa: E731
    scores = split(q) @ split(k).transpose(0, 1, 3, 2) * 0.5
    want = np.exp(scores - scores.max(-1, keepdims=True))
    assert_close(probs, want / want.sum(-1, keepdims=True))
    assert np.abs(probs.sum(-1) - 1).max() < 1e-5


def int8_rows(x):
    """x [M, K] quantized per row as the int8 products define it (independently restated here): symmetric, scale
    max|row| / 127, q = round-half-even(x * (127 / max|row|)) in float32 arithmetic; a zero row: zeros, scale 0."""
    x = np.asarray(x, np.float32)
    largest = np.abs(x).max(axis=1)
    inverse = np.array([np.float32(127) / value if value > 0 else np.float32(0) for value in largest], np.float32)
    return np.rint(x * inverse[:, None]).astype(np.int64), largest.astype(np.float64) / 127


def int8_reference(x, w, b):
    """The int8 dense layer in exact integers: (q_x q_w^T) s_x s_w (+ b), both operands quantized per row."""
    (qx, sx), (qw, sw) = int8_rows(x), int8_rows(w)
    y = (qx @ qw.T).astype(np.float64) * sx[:, None] * sw[None, :]
    return y if b is None else y + b


def int8_operands(w, packed=True):
    """(values, packed values, scales) of weights w as the int8 products read them; without `packed`, a header of
    zeros in place of the packed values (what pack_int8 gives where packing is not available)."""
    values, scales = cpu_kernels.quantize_int8(w)
    qw, sw = int8_rows(w)
    assert values.dtype == np.int8 and np.array_equal(values, qw) and np.allclose(scales, sw, rtol=1e-7, atol=0)
    return Tensor(values), Tensor(cpu_kernels.pack_int8(values) if packed else np.zeros(64, np.int8)), Tensor(scales)


@needs_kernels
@needs_int8
@pytest.mark.parametrize("m, k, n", [(1, 5, 3), (63, 17, 9), (300, 70, 130), (700, 96, 40)])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_int8_products_are_the_exact_integer_product_of_the_quantized_operands(m, k, n, bias, threads):
    """Serving's int8 dense layers: the weights quantized per output channel (quantize_int8), the input per row inside
    the call; the sums exact in int32, then scaled: equal to the integer reference up to float32 rounding, and near
    the float product (a row 50x larger keeps its own scale). Rows and columns split over the threads alike."""
    rng = np.random.default_rng(m + n)
    x, w, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,)))
    x[m // 2] *= 50
    if m > 2:
        x[-1] = 0  # a zero row: zeros (plus the bias)
    inputs = (Tensor(x), *int8_operands(w)) + ((Tensor(b),) if bias else ())
    y = Call(cpu_kernels.matmul_int8(bias))(*inputs).asnumpy()
    want = int8_reference(x, w, b if bias else None)
    assert_close(y, want, 1e-6)
    exact = x.astype(np.float64) @ w.T.astype(np.float64) + (b if bias else 0)
    assert 0 < np.abs(y - exact).max() < 0.05 * np.abs(exact).max()


PACKED_LABEL, STORED_LABEL = "thread: matmul primitive int8, packed weights", "thread: matmul primitive int8"


def int8_reads(run):
    """run()'s result and how many of its int8 products read packed weights and how many the weights as stored (the
    kernels' profile)."""
    cpu_kernels.start_profile()
    try:
        result = run()
    finally:
        counts = cpu_kernels.stop_profile()
    return result, counts.get(PACKED_LABEL, (0, 0))[0], counts.get(STORED_LABEL, (0, 0))[0]


@needs_kernels
@needs_int8
def test_int8_products_read_the_weights_packed_at_load_and_nothing_else(threads):
    """pack_int8 lays the weights out once for oneDNN's primitive: the products whose block holds every column (rows
    split over the threads) read it and give the numbers the weights as stored give, bit for bit. A packed tensor of
    another process (its token), of weights of another shape, one whose header's size disagrees with the layout's
    (and the tensor cut to match) or a bare header (packing not available) is not read: the products read the
    weights as stored, same numbers."""
    rng = np.random.default_rng(11)
    m, k, n = 700, 96, 160
    x, w, b = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,)))
    values, packed, scales = int8_operands(w)
    product = Call(cpu_kernels.matmul_int8(True))

    def run(blob):
        return int8_reads(lambda: product(Tensor(x), values, Tensor(blob), scales, Tensor(b)).asnumpy())

    y, read_packed, read_stored = run(packed.asnumpy())
    assert read_packed > 0 and read_stored == 0, (read_packed, read_stored)
    assert_close(y, int8_reference(x, w, b), 1e-6)
    stranger = packed.asnumpy().copy()
    stranger[8:16] ^= np.int8(0x5A)  # the packing process's token
    other = cpu_kernels.pack_int8(cpu_kernels.quantize_int8(w[:, :64])[0])
    short = packed.asnumpy()[:-64].copy()
    short[40:48] = (np.frombuffer(short[40:48].tobytes(), np.int64) - 64).view(np.int8)  # the header's size field
    for blob in (stranger, other, short, np.zeros(64, np.int8)):
        got, read_packed, read_stored = run(blob)
        assert read_packed == 0 and read_stored > 0, (read_packed, read_stored)
        np.testing.assert_array_equal(got, y)


def test_packing_without_the_kernels_says_why(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "_build", lambda: (None, "no C++ compiler found"))
    with pytest.raises(RuntimeError) as raised:
        cpu_kernels.pack_int8(np.ones((2, 3), np.int8))
    assert str(raised.value) == "the compiled CPU kernels are not available here (no C++ compiler found)"


@needs_kernels
@needs_int8
def test_packed_weights_copied_onto_a_cache_line_stay_bounded():
    """MindSpore places a tensor 16 bytes off a cache line as often as not: the kernels copy such packed weights onto
    one, once per packing, keeping at most 256 copies however many weights are served."""
    library = cpu_kernels._library(cpu_kernels._build()[0])
    product = Call(cpu_kernels.matmul_int8(False))
    rng = np.random.default_rng(12)
    x = Tensor(rng.standard_normal((4, 16)).astype(np.float32))
    for _ in range(420):
        product(x, *int8_operands(rng.standard_normal((8, 16)).astype(np.float32))).asnumpy()
    assert 0 < library.PackedCopies() <= 256


@needs_kernels
@needs_int8
def test_int8_query_key_value_layers_share_the_quantized_input(threads):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((200, 64)).astype(np.float32)
    ws = [rng.standard_normal((48, 64)).astype(np.float32) for _ in range(3)]
    bs = [rng.standard_normal(48).astype(np.float32) for _ in range(3)]
    operands = [int8_operands(w) for w in ws]
    outputs = Call(cpu_kernels.dense_qkv_int8())(Tensor(x), *(o[0] for o in operands), *(o[1] for o in operands),
                                                 *(o[2] for o in operands), *map(Tensor, bs))
    for got, w, b in zip(outputs, ws, bs):
        assert_close(got.asnumpy(), int8_reference(x, w, b), 1e-6)


def _layer_norm(x, gamma, beta, eps):
    return torch.nn.functional.layer_norm(torch.tensor(x), x.shape[-1:], torch.tensor(gamma, dtype=torch.float64),
                                          torch.tensor(beta, dtype=torch.float64), eps).numpy()


@needs_kernels
@needs_int8
@pytest.mark.parametrize("m", [1, 130, 700])
@pytest.mark.parametrize("norm", [False, True], ids=["plain", "residual_norm"])
def test_int8_feed_forward_in_one_call_equals_its_steps(m, norm, threads):
    """gelu(x w1^T + b1) w2^T + b2 with both products in int8, the activations quantized per row between them (and
    with `norm`, LayerNorm(x + that)): the integer reference of each product around Google's GELU formula (float64;
    a value on a rounding boundary may quantize one step apart, hence the tolerance), and near the float network."""
    rng = np.random.default_rng(m)
    hidden, inner = 48, 160
    x = rng.standard_normal((m, hidden)).astype(np.float32)
    w1, w2 = (rng.standard_normal(shape).astype(np.float32) * 0.2 for shape in ((inner, hidden), (hidden, inner)))
    b1, b2, gamma, beta = (rng.standard_normal(size).astype(np.float32) for size in (inner, hidden, hidden, hidden))
    extra = (Tensor(gamma), Tensor(beta), Tensor([1e-6], ms.float32)) if norm else ()
    y = Call(cpu_kernels.feed_forward_int8(norm))(Tensor(x), *int8_operands(w1), Tensor(b1), *int8_operands(w2),
                                                   Tensor(b2), *extra).asnumpy()
    gelu = _gelu_tanh(torch.tensor(int8_reference(x, w1, b1))).numpy()
    want = int8_reference(gelu.astype(np.float32), w2, b2)
    exact_gelu = _gelu_tanh(torch.tensor(x.astype(np.float64) @ w1.T.astype(np.float64) + b1)).numpy()
    exact = exact_gelu @ w2.T.astype(np.float64) + b2
    if norm:
        want, exact = (_layer_norm(x + value, gamma, beta, 1e-6) for value in (want, exact))
    assert_close(y, want, 1e-4)
    assert 0 < np.abs(y - exact).max() < 0.05 * np.abs(exact).max()


@needs_kernels
@needs_int8
@pytest.mark.parametrize("m", [1, 300])
def test_int8_output_layer_with_residual_and_layer_norm_in_one_call(m, threads):
    rng = np.random.default_rng(m + 1)
    x, residual = (rng.standard_normal((m, 64)).astype(np.float32) for _ in range(2))
    w = rng.standard_normal((64, 64)).astype(np.float32) * 0.2
    b, gamma, beta = (rng.standard_normal(64).astype(np.float32) for _ in range(3))
    y = Call(cpu_kernels.dense_residual_norm_int8())(Tensor(x), *int8_operands(w), Tensor(b), Tensor(residual),
                                                      Tensor(gamma), Tensor(beta),
                                                      Tensor([1e-12], ms.float32)).asnumpy()
    assert_close(y, _layer_norm(residual + int8_reference(x, w, b), gamma, beta, 1e-12), 1e-5)


@needs_kernels
@needs_int8
def test_int8_products_keep_nan_and_inf_visible():
    """A row holding NaN or inf cannot be quantized: its outputs are NaN, the other rows as usual."""
    x = np.ones((4, 32), np.float32)
    x[1, 3], x[2, 7] = np.nan, np.inf
    y = Call(cpu_kernels.matmul_int8(False))(Tensor(x), *int8_operands(np.ones((8, 32), np.float32))).asnumpy()
    assert np.isnan(y[1:3]).all() and np.allclose(y[[0, 3]], 32.0)


@needs_kernels
def test_the_primitive_cache_stays_bounded_as_shapes_change(bf16_products):
    """Serving with ever new batch sizes creates a primitive per shape: the cache keeps at most its capacity."""
    library = cpu_kernels._library(cpu_kernels._build()[0])
    product = Call(cpu_kernels.matmul_nt())
    w = Tensor(np.ones((8, 16), np.float32))
    ms.set_context(mode=ms.PYNATIVE_MODE)
    for rows in range(1, 300):
        product(Tensor(np.ones((rows, 16), np.float32)), w)
    assert 200 < library.PrimitiveCacheSize() <= 256


@needs_kernels
@pytest.mark.parametrize("isa, vendor", [("AVX2", ""), ("AVX512_CORE", ""), ("AVX512_CORE_VNNI", ""),
                                         ("AVX512_CORE_BF16", "amd"), ("AVX512_CORE_BF16", "intel")])
def test_products_on_a_lower_isa_forced(isa, vendor):
    """ONEDNN_MAX_CPU_ISA caps what oneDNN may use (as on an older CPU; AVX512_CORE_BF16 is AMD Zen 4's): the kernels
    still compute every dense product right, float32, bfloat16 and int8, run attention as in float32 (no AMX; on an AMD
    CPU with AVX512-BF16 training's in batched bfloat16), and say which implementations oneDNN picked
    (tests/kernel_products.py). ALBERT_KERNELS_VENDOR has the kernels apply AMD's rules (large weight gradients through
    the BLAS-style call, training's batched attention) on any CPU with AVX512-BF16, or none on an AMD one: both sets
    of paths run on whichever CPU the tests have."""
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA=isa, GLOG_v="3", ALBERT_KERNELS_VENDOR=vendor)
    result = subprocess.run([sys.executable, str(Path(__file__).with_name("kernel_products.py"))], env=env,
                            capture_output=True, text=True, timeout=240, cwd=Path(__file__).resolve().parents[1])
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    *_, allowed, described = result.stdout.strip().splitlines()
    assert described.startswith("oneDNN 3.") and "; bfloat16: " in described and "; int8: " in described, described
    # bfloat16 runs only on native bfloat16 dot products: below AVX512_CORE_BF16 oneDNN emulates them, refused
    native = isa == "AVX512_CORE_BF16" and "avx512_core_bf16" in described
    why = (f"oneDNN would emulate bfloat16 here ({_bf16_part(described)}; ONEDNN_MAX_CPU_ISA={isa})"
           if cpu_kernels.bf16_features() else cpu_kernels.bf16_support()[1])
    assert json.loads(allowed) == ([True, ""] if native else [False, why]), allowed
    assert native or any(says in _bf16_part(described) for says in ("(emulated: no native bfloat16 dot products)",
                                                                    "(oneDNN has no bfloat16 matmul primitive)"))
    assert "amx" not in described and (isa != "AVX2" or "avx512" not in described), described
    assert "for long sums" not in described  # the BLAS-style rule was measured on AMX only
    # shared layers' bfloat16 weights are packed wherever a bfloat16 primitive reads them
    assert ("shared weights packed once per step" in described) == ("bfloat16: matmul primitive" in described)
    amd = isa == "AVX512_CORE_BF16" and amd_cpu(vendor) and "avx512_core_bf16" in described  # AMD's rules apply
    assert ("batched attention: training" in described) == amd and "int8 serving" not in described, described
    assert ("for large weight gradients" in described) == amd, described
    assert (f"rules for ALBERT_KERNELS_VENDOR={vendor}" in described) == bool(vendor), described
    # int8 only with exact int32 sums: VNNI (where the CPU has it) or AMX-INT8, never below
    int8 = described.split("; int8: ")[1]
    vnni = isa in ("AVX512_CORE_VNNI", "AVX512_CORE_BF16")
    assert int8.startswith("none (") if not vnni else "none" in int8 or "vnni" in int8, described
    assert ("weights packed at load" in int8) == ("vnni" in int8), described  # laid out for that ISA


def _gelu_tanh(x):
    """Google's formula as written in its code: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    return 0.5 * x * (1.0 + torch.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


@needs_kernels
def test_gelu_equals_the_tanh_formula_values_and_gradient(threads):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((70, 1000)) * 3).astype(np.float32)  # split over threads from 16384 elements each
    x[0, :8] = [0.0, -1e-6, 1e-6, -20.0, 20.0, -100.0, 100.0, -3.0]
    dy = rng.standard_normal(x.shape).astype(np.float32)
    want, (want_dx,) = torch_reference(_gelu_tanh, (x,), dy)
    got, (got_dx,) = forward_and_input_grads(cpu_kernels.gelu_tanh(), (x,), dy)
    assert_close(got.asnumpy(), want)
    assert_close(got_dx, want_dx)


@needs_kernels
def test_gelu_keeps_nan_and_inf_visible():
    """The train step's overflow check looks for inf/nan in the gradients: the kernels must not hide them."""
    x = np.array([np.nan, np.inf, -np.inf, 1.0], np.float32)
    dy = np.array([1.0, 1.0, 1.0, np.nan], np.float32)
    y, (dx,) = forward_and_input_grads(cpu_kernels.gelu_tanh(), (x,), dy)
    y = y.asnumpy()
    assert np.isnan(y[0]) and y[1] == np.inf and not np.isfinite(y[2]) and np.isfinite(y[3])
    assert np.isnan(dx[0]) and np.isnan(dx[3])


class FeedForward(nn.Cell):
    """A block's feed-forward network (x, w1, b1, w2, b2) by the kernels as the network runs it: `feed_forward` in
    one call, (y, pre, h), or (`steps`) the three kernels it replaces, dense, GELU and dense, ((y, pre, h) as they
    make it); with `copies`, reading the weights' bfloat16 copies made in the graph (`packed`: the same packed); with
    `residual`, y plus x (steps: MindSpore's Add after them)."""

    def __init__(self, copies: bool, steps: bool = False, packed: bool = False, residual: bool = False):
        super().__init__()
        self.copies, self.steps, self.residual = copies, steps, residual
        self.make = cpu_kernels.bf16_packed if packed else cpu_kernels.bf16_copy
        self.fused, self.dense, self.gelu = (cpu_kernels.feed_forward(copies, residual),
                                             cpu_kernels.matmul_nt_bias(copies), cpu_kernels.gelu_tanh())

    def construct(self, x, w1, b1, w2, b2):
        first, second = ((self.make(w1),), (self.make(w2),)) if self.copies else ((), ())
        if not self.steps:
            return self.fused(x, w1, *first, b1, w2, *second, b2)
        pre = self.dense(x, w1, *first, b1)
        h = self.gelu(pre)
        y = self.dense(h, w2, *second, b2)
        return (x + y if self.residual else y), pre, h


def run_feed_forward(cell, inputs, dy):
    """cell's (y, pre, h) as numpy float32 and the gradients of sum(y * dy) for its five inputs."""
    tensors = [Tensor(value) for value in inputs]
    outputs = cell(*tensors)
    sens = (Tensor(dy), ops.zeros_like(outputs[1]), ops.zeros_like(outputs[2]))
    grads = dense_grads(cell, tensors, sens)
    return [out.astype(ms.float32).asnumpy() for out in outputs], [grad.asnumpy() for grad in grads]


def feed_forward_operands(m: int, hidden: int, inner: int):
    rng = np.random.default_rng(m + hidden + inner)
    shapes = ((m, hidden), (inner, hidden), (inner,), (hidden, inner), (hidden,), (m, hidden))
    return [rng.standard_normal(shape).astype(np.float32) for shape in shapes]


@needs_kernels
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("m, hidden, inner", [(1, 5, 7), (63, 17, 40), (600, 32, 128), (200, 48, 300),
                                             (200, 160, 96)])
def test_feed_forward_in_one_call_equals_torch_values_and_gradients(m, hidden, inner, residual, threads):
    """gelu(x w1^T + b1) w2^T + b2 (with `residual`, plus x) with its pre-activations and activations, and all five
    gradients, against PyTorch autograd in float64 (the tanh GELU as Google writes it). The last shape splits the
    second product by columns into one block per thread (as serving at batch 1 does), each block its part of x."""
    *inputs, dy = feed_forward_operands(m, hidden, inner)
    x, w1, b1 = (torch.tensor(value, dtype=torch.float64) for value in inputs[:3])
    want_pre = (x @ w1.T + b1).numpy()

    def reference(x, w1, b1, w2, b2):
        y = _gelu_tanh(x @ w1.T + b1) @ w2.T + b2
        return x + y if residual else y
    want, want_grads = torch_reference(reference, inputs, dy)
    (y, pre, h), grads = run_feed_forward(FeedForward(copies=False, residual=residual), inputs, dy)
    assert_close(y, want)
    assert_close(pre, want_pre)
    assert_close(h, _gelu_tanh(torch.tensor(want_pre)).numpy())
    for got, expected in zip(grads, want_grads):
        assert_close(got, expected)


@needs_kernels
def test_bf16_feed_forward_on_packed_weights_adds_its_residual_right_at_albert_base_size(threads, bf16_products):
    """ALBERT-base's feed-forward (1024 rows, 768 -> 3072 -> 768) on packed weights, with its residual: y = x + ... and
    dx = dy + ... came out wrong on AMX (relative error 0.8) since the residual was summed by oneDNN's sum post-op,
    which its primitive on packed weights gets wrong there for sums of 1280 terms and more (the next test's shapes
    stay right); the first loss of ALBERT-base's bfloat16 benchmark step moved from 12.278 (PyTorch's) to 11.52. Now
    y and dx are float64's from the bfloat16-rounded operands and those of the three kernels followed by MindSpore's
    Add, to float32 roundings, and every other output and gradient theirs bit for bit."""
    *inputs, dy = feed_forward_operands(1024, 768, 3072)
    (y, pre, h), grads = run_feed_forward(FeedForward(True, packed=True, residual=True), inputs, dy)
    (step_y, step_pre, step_h), step_grads = run_feed_forward(
        FeedForward(True, steps=True, packed=True, residual=True), inputs, dy)
    wants = [step_y, step_pre, bf16_rounded(step_h), *step_grads]
    for index, (got, want) in enumerate(zip([y, pre, h, *grads], wants)):
        summed = index in (0, 3)  # y and dx
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max() if summed else 1e-35)
    # y and dx against float64 as well: y = x + h w2^T + b2 from the kernel's bfloat16 h and the rounded w2; dx = dy +
    # dpre w1, dpre = (dy w2) * gelu'(pre) unrounded (bfloat16's rounding of dpre stays within 1%)
    x, b2 = (value.astype(np.float64) for value in (inputs[0], inputs[4]))
    w1, w2 = (bf16_rounded(value).astype(np.float64) for value in (inputs[1], inputs[3]))
    want_y = x + h.astype(np.float64) @ w2.T + b2
    pre64 = torch.tensor(pre.astype(np.float64), requires_grad=True)
    _gelu_tanh(pre64).backward(torch.tensor(bf16_rounded(dy).astype(np.float64) @ w2))
    want_dx = dy.astype(np.float64) + pre64.grad.numpy() @ w1
    for got, want, share in ((y, want_y, 1e-5), (grads[0], want_dx, 1e-2)):
        assert np.abs(got - want).max() <= share * np.abs(want).max(), np.abs(got - want).max() / np.abs(want).max()


@needs_kernels
@pytest.mark.parametrize("residual", [False, True], ids=["", "residual"])
@pytest.mark.parametrize("copies", ["", "copy", "packed"], ids=["float32_weights", "bf16_copies", "bf16_packed"])
@pytest.mark.parametrize("m, hidden, inner", [(63, 17, 40), (1024, 64, 2048), (200, 160, 96)])
def test_bf16_feed_forward_in_one_call_is_the_three_kernels_it_replaces(m, hidden, inner, copies, residual, threads,
                                                                        bf16_products):
    """Under set_bf16(True) (the first and third shapes split by columns, the third's second product into one block per
    thread; the second by rows, its input gradient summing 2048 terms: on AMX the BLAS-style call): every output and gradient what the dense, GELU and dense kernels give in
    turn (each checked against numpy or torch above), bit for bit but for GELU's outputs under 1e-35 (inputs under
    about -10, where e^z nears float32's largest number, which a vectorised loop and its scalar remainder may round
    to that number or to infinity: an output of ~1e-37 or 0), and its products bfloat16 products: pre is
    that of x and w1 rounded, and w2's gradient that of dy and the activations h as kept, which come in bfloat16
    when the weights' copies do (rounded once, where GELU makes them). The same with the copies packed. With
    `residual`, y and x's gradient are those of the same followed by MindSpore's Add to float32 roundings (the sum
    made in the product's accumulation, or before it where the BLAS-style call runs it: another order)."""
    *inputs, dy = feed_forward_operands(m, hidden, inner)
    packed = copies == "packed"
    (y, pre, h), grads = run_feed_forward(FeedForward(bool(copies), packed=packed, residual=residual), inputs, dy)
    (step_y, step_pre, step_h), step_grads = run_feed_forward(
        FeedForward(bool(copies), steps=True, packed=packed, residual=residual), inputs, dy)
    step_h = bf16_rounded(step_h) if copies else step_h  # the second product reads it so
    for index, (got, want) in enumerate(zip([y, pre, h, *grads], [step_y, step_pre, step_h, *step_grads])):
        summed = residual and index in (0, 3)  # y and dx
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max() if summed else 1e-35)
    x, w1, b1 = inputs[:3]
    assert_bf16_product(pre, bf16_rounded(x).astype(np.float64) @ bf16_rounded(w1).T + b1,
                        x.astype(np.float64) @ w1.T.astype(np.float64) + b1)
    assert_bf16_product(grads[3], bf16_rounded(dy).astype(np.float64).T @ bf16_rounded(h),
                        dy.astype(np.float64).T @ h)
    assert (FeedForward(bool(copies))(*map(Tensor, inputs))[2].dtype == ms.bfloat16) == bool(copies)


@needs_kernels
@pytest.mark.parametrize("batch, seq, heads, head_size, mask", [
    (2, 5, 3, 4, "row"), (3, 16, 4, 8, "broadcast"), (1, 1, 2, 3, "row"), (4, 33, 2, 16, "row")])
def test_attention_equals_torch_values_and_gradients(batch, seq, heads, head_size, mask, threads):
    """softmax(scale q k^T + mask) and the context with the heads read in place in [B, S, H]: compared with torch's
    reshape/permute/matmul/softmax; the mask as the model passes it ([B, 1, 1, S]) or already broadcast."""
    hidden = heads * head_size
    rng = np.random.default_rng(batch * 100 + seq)
    q, k, v = (rng.standard_normal((batch, seq, hidden)).astype(np.float32) for _ in range(3))
    padding = rng.random((batch, 1, 1, seq)) < 0.3
    padding[..., 0] = False  # every row attends to something, as with real data ([CLS] is never padding)
    bias = np.where(padding, -10000.0, 0.0).astype(np.float32)
    if mask == "broadcast":
        bias = np.ascontiguousarray(np.broadcast_to(bias, (batch, heads, seq, seq)))
    scale = np.array([0.37], np.float32)

    def split(x):
        return x.reshape(batch, seq, heads, head_size).permute(0, 2, 1, 3)

    def reference_probs(a, b):
        return torch.softmax(split(a) @ split(b).transpose(-1, -2) * 0.37 + torch.tensor(bias, dtype=torch.float64),
                             -1)

    probs_op, context_op = cpu_kernels.attention(heads)
    sens = rng.standard_normal((batch, heads, seq, seq)).astype(np.float32)
    want, want_grads = torch_reference(reference_probs, (q, k), sens)
    got, got_grads = forward_and_input_grads(probs_op, (q, k, bias, scale), sens)
    assert_close(got.asnumpy(), want)
    for got_grad, want_grad in zip(got_grads[:2], want_grads):
        assert_close(got_grad, want_grad)
    assert not got_grads[2].any()  # the mask is data: no gradient

    probs = want.astype(np.float32)
    sens = rng.standard_normal((batch, seq, hidden)).astype(np.float32)
    merge = lambda x: x.permute(0, 2, 1, 3).reshape(batch, seq, hidden)  # noqa: E731
    want, want_grads = torch_reference(lambda p, b, s: merge(p @ split(b)) * s, (probs, v, scale), sens)
    got, got_grads = forward_and_input_grads(context_op, (probs, v, scale), sens)
    assert_close(got.asnumpy(), want)
    for got_grad, want_grad in zip(got_grads[:2], want_grads[:2]):
        assert_close(got_grad, want_grad)


class FusedContext(nn.Cell):
    """The context output of `fused_attention` (its probabilities output is for its own backward)."""

    def __init__(self, heads: int, bf16_probs: bool = False):
        super().__init__()
        self.op = cpu_kernels.fused_attention(heads, bf16_probs)

    def construct(self, q, k, v, bias, scale):
        return self.op(q, k, v, bias, scale)[0]


@needs_kernels
@pytest.mark.parametrize("kind", ["fused", "inference"])
@pytest.mark.parametrize("batch, seq, heads, head_size, mask", [
    (2, 5, 3, 4, "row"), (3, 16, 4, 8, "broadcast"), (1, 1, 2, 3, "row"), (4, 33, 2, 16, "row")])
def test_attention_in_one_call_equals_torch_values_and_gradients(batch, seq, heads, head_size, mask, kind, threads):
    """The whole of attention per (batch row, head) in one call, softmax(scale q k^T + mask) v with the heads read in
    place in [B, S, H], and its backward in one call: the context and the gradients of q, k and v equal torch's
    reshape/permute/matmul/softmax in float64, for training (probabilities kept) and for inference (none kept, the
    backward computes them again); the probabilities kept equal torch's."""
    hidden = heads * head_size
    rng = np.random.default_rng(batch * 10 + seq)
    q, k, v = (rng.standard_normal((batch, seq, hidden)).astype(np.float32) for _ in range(3))
    padding = rng.random((batch, 1, 1, seq)) < 0.3
    padding[..., 0] = False
    bias = np.where(padding, -10000.0, 0.0).astype(np.float32)
    if mask == "broadcast":
        bias = np.ascontiguousarray(np.broadcast_to(bias, (batch, heads, seq, seq)))
    sens = rng.standard_normal((batch, seq, hidden)).astype(np.float32)

    def split(x):
        return x.reshape(batch, seq, heads, head_size).permute(0, 2, 1, 3)

    def reference(a, b, c):
        probs = torch.softmax(split(a) @ split(b).transpose(-1, -2) * 0.37 + torch.tensor(bias, dtype=torch.float64), -1)
        return (probs @ split(c)).permute(0, 2, 1, 3).reshape(batch, seq, hidden)

    want, want_grads = torch_reference(reference, (q, k, v), sens)
    inputs = [q, k, v, bias, np.array([0.37], np.float32)]
    if kind == "inference":
        op = cpu_kernels.attention_inference(heads)
        inputs.append(np.array([heads], np.int32))
    else:
        op = FusedContext(heads)
    got, got_grads = forward_and_input_grads(op, inputs, sens)
    assert_close(got.asnumpy(), want)
    for got_grad, want_grad in zip(got_grads[:3], want_grads):
        assert_close(got_grad, want_grad)
    assert not got_grads[3].any()  # the mask is data: no gradient
    if kind == "fused":
        probs = Call(cpu_kernels.fused_attention(heads))(*map(Tensor, inputs))[1].asnumpy()
        want_probs = torch.softmax(split(torch.tensor(q, dtype=torch.float64)) @ split(torch.tensor(
            k, dtype=torch.float64)).transpose(-1, -2) * 0.37 + torch.tensor(bias, dtype=torch.float64), -1)
        assert_close(probs, want_probs.numpy())


def attention_operands(batch: int, seq: int, heads: int, head_size: int, mask: str, count: int):
    """`count` random [B, S, H] tensors, an additive mask ("full": [B, N, S, S] of random values; else [B, 1, 1, S]
    padding, the first position kept) and the scale 1 / sqrt(head size)."""
    rng = np.random.default_rng(batch * 100 + seq)
    tensors = [rng.standard_normal((batch, seq, heads * head_size)).astype(np.float32) for _ in range(count)]
    if mask == "full":
        bias = (rng.standard_normal((batch, heads, seq, seq)) * 3).astype(np.float32)
    else:
        bias = np.where(rng.random((batch, 1, 1, seq)) < 0.3, -10000.0, 0.0).astype(np.float32)
        bias[..., 0] = 0.0
    return tensors, bias, np.float32(head_size ** -0.5)


def rounded_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """[B, S, H] rounded to bfloat16 -> its heads [B, N, S, D] in float64."""
    batch, seq, hidden = x.shape
    return bf16_rounded(x).astype(np.float64).reshape(batch, seq, heads, hidden // heads).transpose(0, 2, 1, 3)


@needs_kernels
@pytest.mark.parametrize("batch, seq, heads, head_size, mask", [
    (2, 33, 3, 16, "row"), (3, 128, 12, 64, "row"), (2, 40, 2, 8, "full"), (1, 1, 2, 4, "row"), (2, 300, 6, 8, "full")])
def test_int8_serving_attention_runs_bfloat16_products_around_a_float32_softmax(batch, seq, heads, head_size,
                                                                                mask, threads):
    """Int8 serving's attention on AMX: each batch row's heads in two bfloat16 products, q * scale, k, v and the
    softmax's probabilities rounded to bfloat16 (ties to even), softmax(q k^T + mask) in float32: equal to that
    computation in float64 from the rounded operands (a probability on a rounding boundary may round one step apart),
    and close to the float32 attention. Without AMX (no faster there, dnnl_matmul.cc) it is the float32 attention."""
    (q, k, v), bias, scale = attention_operands(batch, seq, heads, head_size, mask, 3)
    hidden = heads * head_size
    inputs = [Tensor(q), Tensor(k), Tensor(v), Tensor(bias), Tensor([scale], ms.float32), Tensor([heads], ms.int32)]
    got = Call(cpu_kernels.attention_inference(heads, bf16=True))(*inputs).asnumpy()
    float32 = Call(cpu_kernels.attention_inference(heads))(*inputs).asnumpy()
    if "int8 serving" not in batched_attention():
        np.testing.assert_array_equal(got, float32)
        return

    def split(x):
        return rounded_heads(x, heads)

    scores = split(q * scale) @ split(k).transpose(0, 1, 3, 2) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    want = (bf16_rounded(probs).astype(np.float64) @ split(v)).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
    assert_close(got, want, 1e-3)
    assert np.abs(got - float32).max() < 0.02 * max(1.0, np.abs(float32).max())


@needs_kernels
@pytest.mark.parametrize("batch, seq, heads, head_size, mask", [
    (2, 33, 3, 16, "row"), (3, 128, 12, 64, "row"), (2, 40, 2, 8, "full"), (1, 1, 2, 4, "row"), (2, 300, 6, 8, "full")])
@pytest.mark.parametrize("kept_dtype", ["float32", "bfloat16"])
def test_bf16_training_attention_runs_bfloat16_products_forward_and_backward(batch, seq, heads, head_size, mask,
                                                                             kept_dtype, threads, bf16_products):
    """Under set_bf16(True) (training in bfloat16), on AMX and AMD's AVX512-BF16, the fused attention's products run in
    bfloat16 too, a batch row's heads in batched calls (in groups: seq 300), softmax and its gradient in float32:
    forward as int8 serving's (q * scale, k, v and the probabilities rounded), the probabilities kept in float32 or
    (`bf16_probs`) rounded; backward dprobs = dc v^T, dv = p^T dc, ds = scale p (dprobs - rowsum(p dprobs)), dq = ds
    k, dk = ds^T q with dc, q, k, v, p and ds rounded. Equal to that computation in float64 from the rounded operands
    (a value on a rounding boundary may round one step apart), close to the float32 attention and measurably not it.
    Elsewhere (slower there, dnnl_matmul.cc) it is the float32 attention."""
    (q, k, v, dc), bias, scale = attention_operands(batch, seq, heads, head_size, mask, 4)
    hidden = heads * head_size
    inputs = [q, k, v, bias, np.array([scale], np.float32)]
    bf16_kept = kept_dtype == "bfloat16"
    got, (dq, dk, dv, *_) = forward_and_input_grads(FusedContext(heads, bf16_kept), inputs, dc)
    kept = Call(cpu_kernels.fused_attention(heads, bf16_kept))(*map(Tensor, inputs))[1].asnumpy().astype(np.float32)
    cpu_kernels.set_bf16(False)
    float32, float32_grads = forward_and_input_grads(FusedContext(heads, bf16_kept), inputs, dc)
    if "training" not in batched_attention():
        for bf16, want in zip([got.asnumpy(), dq, dk, dv], [float32.asnumpy(), *float32_grads[:3]]):
            np.testing.assert_array_equal(bf16, want)
        return

    def split(x):
        return rounded_heads(x, heads)

    def merge(x):
        return x.transpose(0, 2, 1, 3).reshape(batch, seq, hidden)

    def rounded(x):
        return bf16_rounded(x.astype(np.float32)).astype(np.float64)

    scores = split(q * scale) @ split(k).transpose(0, 1, 3, 2) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    if bf16_kept:
        one_step_of(kept, probs)
    else:
        assert_close(kept, probs)
    backward_probs = rounded(probs) if bf16_kept else probs  # what the softmax's gradient reads
    assert_close(got.asnumpy(), merge(rounded(probs) @ split(v)), 1e-3)
    dprobs = split(dc) @ split(v).transpose(0, 1, 3, 2)
    ds = rounded(scale * backward_probs * (dprobs - (backward_probs * dprobs).sum(-1, keepdims=True)))
    assert_close(dv, merge(rounded(probs).transpose(0, 1, 3, 2) @ split(dc)), 1e-3)
    assert_close(dq, merge(ds @ split(k)), 1e-3)
    assert_close(dk, merge(ds.transpose(0, 1, 3, 2) @ split(q)), 1e-3)
    for bf16, want in zip([got.asnumpy(), dq, dk, dv], [float32.asnumpy(), *float32_grads[:3]]):
        assert np.abs(bf16 - want).max() < 0.03 * max(1.0, np.abs(want).max())
        if seq > 1:  # (one position: the query and key gradients are zero either way)
            assert np.abs(bf16 - want).max() > 1e-5 * max(1.0, np.abs(want).max()), "the float32 attention ran"


def one_step_of(got: np.ndarray, want: np.ndarray) -> None:
    """bfloat16 values `got` within one rounding step (2^-8 relative) of `want`, computed in float64."""
    got = got.astype(np.float64)
    limit = 2.0 ** -8 * np.abs(want) + 1e-6 * max(1.0, float(np.abs(want).max()))
    assert (np.abs(got - want) <= limit).all(), f"max abs diff {np.abs(got - want).max()}"


def bf16_tensor(x: np.ndarray) -> Tensor:
    return Tensor(x.astype(np.float32), ms.bfloat16)


def flat_heads(x: np.ndarray, batch: int, heads: int) -> np.ndarray:
    """[B * S, H] in float64 -> [B, N, S, D]."""
    return x.astype(np.float64).reshape(batch, -1, heads, x.shape[1] // heads).transpose(0, 2, 1, 3)


@needs_kernels
@pytest.mark.parametrize("copies", ["copy", "packed"])
@pytest.mark.parametrize("m", [200, 600])
def test_bf16_query_key_value_come_out_in_bfloat16_and_take_their_gradients_in_it(m, copies, threads, bf16_products):
    """Training in bfloat16 with bfloat16 attention (`bf16_attention`): the query, key and value layers hand q, k
    and v over in bfloat16 (the float32 products of the bfloat16 operands, rounded once; split by columns under 512
    rows, by rows above), and their gradients come back in bfloat16: the bias gradients are the column sums of those
    values, dx and dw the bfloat16 products."""
    rng = np.random.default_rng(21)
    k, n = 96, 160
    x = rng.standard_normal((m, k)).astype(np.float32)
    weights = [rng.standard_normal((n, k)).astype(np.float32) for _ in range(3)]
    biases = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    sens = [bf16_rounded(rng.standard_normal((m, n)).astype(np.float32)) for _ in range(3)]
    cell = WithCopies(cpu_kernels.dense_qkv(True, True), 3, packed=copies == "packed")
    tensors = [Tensor(value) for value in (x, *weights, *biases)]
    outputs = cell(*tensors)
    grads = dense_grads(cell, tensors, tuple(bf16_tensor(d) for d in sens))
    xb, wb = bf16_rounded(x).astype(np.float64), [bf16_rounded(w).astype(np.float64) for w in weights]
    x64, w64, dy = x.astype(np.float64), [w.astype(np.float64) for w in weights], [d.astype(np.float64) for d in sens]
    for output, w, b in zip(outputs, wb, biases):
        assert output.dtype == ms.bfloat16 and output.shape == (m, n)
        one_step_of(output.asnumpy().astype(np.float32), xb @ w.T + b)
    assert all(grad.dtype == ms.float32 for grad in grads)
    assert_bf16_product(grads[0].asnumpy(), sum(d @ w for d, w in zip(dy, wb)), sum(d @ w for d, w in zip(dy, w64)))
    for i in range(3):
        assert_bf16_product(grads[1 + i].asnumpy(), dy[i].T @ xb, dy[i].T @ x64)
        assert_close(grads[4 + i].asnumpy(), dy[i].sum(0), 1e-6)


@needs_kernels
@pytest.mark.parametrize("batch, seq, heads, head_size, mask", [(2, 33, 3, 16, "row"), (3, 128, 12, 64, "row"),
                                                                (2, 40, 2, 8, "full"), (2, 300, 6, 8, "full")])
@pytest.mark.parametrize("path", ["batched", "float32"])
@pytest.mark.parametrize("kept", ["float32", "bfloat16"])
def test_attention_reads_bfloat16_query_key_value_as_they_come(batch, seq, heads, head_size, mask, path, kept,
                                                                threads):
    """`fused_attention` on q, k and v in bfloat16 as `dense_qkv` hands them over, [B * S, H]: with batched bfloat16
    products (set_bf16, where `bf16_attention`), the scale on the float32 scores, the probabilities rounded for the
    context's product, the backward as with float32 inputs less their rounding, dq, dk and dv rounded once from
    float32; on the float32 path (set_bf16 off, or a CPU without them) the same attention on the bfloat16 values
    widened. With `bf16_probs` the probabilities are kept rounded (as the training network keeps them) and the
    softmax's gradient starts from those. Each against float64 from the same bfloat16 values; the gradients come out
    in bfloat16."""
    if path == "batched":
        if not cpu_kernels.bf16_support()[0] or not cpu_kernels.bf16_attention():
            pytest.skip("no batched bfloat16 attention here")
        cpu_kernels.set_bf16(True)
    (q, k, v, dc), bias, scale = attention_operands(batch, seq, heads, head_size, mask, 4)
    hidden = heads * head_size
    q, k, v = (bf16_rounded(x).reshape(batch * seq, hidden) for x in (q, k, v))
    dc = dc.reshape(batch * seq, hidden)
    try:  # read back before set_bf16 changes: MindSpore may run the kernels when the values are read
        cell = FusedContext(heads, kept == "bfloat16")
        tensors = [bf16_tensor(q), bf16_tensor(k), bf16_tensor(v), Tensor(bias), Tensor([scale], ms.float32)]
        output = cell(*tensors)
        grads = ops.GradOperation(get_all=True, sens_param=True)(cell)(*tensors, Tensor(dc))
        got, (dq, dk, dv) = output.asnumpy(), (grad.asnumpy().astype(np.float32) for grad in grads[:3])
        kept_probs = cell.op(*tensors)[1]
        probs_got = kept_probs.asnumpy().astype(np.float32)
    finally:
        cpu_kernels.set_bf16(False)
    if path == "batched":  # the float32 path on the same inputs: the batched calls must have run, not it
        fallback = ops.GradOperation(get_all=True, sens_param=True)(cell)(*tensors, Tensor(dc))
        for grad, other in zip((dq, dk, dv), fallback[:3]):
            assert np.abs(grad - other.asnumpy().astype(np.float32)).max() > 0, "the float32 attention ran"
    assert output.dtype == ms.float32 and got.shape == (batch * seq, hidden)
    assert all(grad.dtype == ms.bfloat16 and grad.shape == (batch * seq, hidden) for grad in grads[:3])
    assert kept_probs.dtype == (ms.bfloat16 if kept == "bfloat16" else ms.float32)
    q64, k64, v64 = (flat_heads(x, batch, heads) for x in (q, k, v))

    def merge(x):
        return x.transpose(0, 2, 1, 3).reshape(batch * seq, hidden)

    def rounded(x):
        return bf16_rounded(x.astype(np.float32)).astype(np.float64)

    scores = scale * q64 @ k64.transpose(0, 1, 3, 2) + bias
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    if kept == "bfloat16":
        one_step_of(probs_got, probs)
    else:
        assert_close(probs_got, probs)
    backward_probs = rounded(probs) if kept == "bfloat16" else probs  # what the softmax's gradient reads
    if path == "float32":
        dc64 = flat_heads(dc, batch, heads)
        dprobs = dc64 @ v64.transpose(0, 1, 3, 2)
        ds = scale * backward_probs * (dprobs - (backward_probs * dprobs).sum(-1, keepdims=True))
        assert_close(got, merge(probs @ v64))
        for grad, want in zip((dq, dk, dv), (ds @ k64, ds.transpose(0, 1, 3, 2) @ q64,
                                             backward_probs.transpose(0, 1, 3, 2) @ dc64)):
            assert_close(grad, merge(want), 2.0 ** -8)
        return

    dc64 = rounded(flat_heads(dc, batch, heads))
    dprobs = dc64 @ v64.transpose(0, 1, 3, 2)
    ds = rounded(scale * backward_probs * (dprobs - (backward_probs * dprobs).sum(-1, keepdims=True)))
    assert_close(got, merge(rounded(probs) @ v64), 1e-3)
    assert np.abs(got - merge(probs @ v64)).max() > 1e-5, "the float32 attention, not the bfloat16 one"
    for grad, want in zip((dq, dk, dv), (ds @ k64, ds.transpose(0, 1, 3, 2) @ q64,
                                         rounded(probs).transpose(0, 1, 3, 2) @ dc64)):
        assert_close(grad, merge(want), 1e-2)


@needs_kernels
@pytest.mark.parametrize("mode", ["graph", "pynative"])
def test_one_kernel_in_two_variants_in_one_process_keeps_each_variants_shapes_and_dtypes(mode):
    """MindSpore (PyNative mode) reuses the shapes and dtypes it inferred for an op on any other op with the same
    attributes: a second `fused_attention` of another head count (its probabilities [B, N, S, S]), or of the other
    dtype for them, and the query/key/value layers with and without bfloat16 outputs, each built after the other in
    one process, keep their own, in either mode."""
    ms.set_context(mode=ms.PYNATIVE_MODE if mode == "pynative" else ms.GRAPH_MODE)
    batch, seq, hidden = 2, 8, 16
    q = Tensor(np.ones((batch, seq, hidden), np.float32))
    q16 = Tensor(np.ones((batch * seq, hidden), np.float32), ms.bfloat16)
    bias, scale = Tensor(np.zeros((batch, 1, 1, seq), np.float32)), Tensor([0.5], ms.float32)
    for heads in (4, 2, 8):
        assert Call(cpu_kernels.fused_attention(heads))(q, q, q, bias, scale)[1].shape == (batch, heads, seq, seq)
    for kept in (ms.float32, ms.bfloat16, ms.float32):
        op = cpu_kernels.fused_attention(4, kept == ms.bfloat16)
        assert Call(op)(q16, q16, q16, bias, scale)[1].dtype == kept
    x, w, b = Tensor(np.ones((seq, hidden), np.float32)), Tensor(np.ones((hidden, hidden), np.float32)), \
        Tensor(np.zeros(hidden, np.float32))
    for outputs in (ms.float32, ms.bfloat16, ms.float32):
        cell = WithCopies(cpu_kernels.dense_qkv(True, outputs == ms.bfloat16), 3)
        assert all(y.dtype == outputs for y in cell(x, w, w, w, b, b, b))


@needs_kernels
def test_bf16_training_hands_query_key_value_over_in_bfloat16_where_attention_reads_it():
    """The network asks for bfloat16 q, k and v (and keeps the probabilities in bfloat16) only where they go straight
    into bfloat16 attention: training in bfloat16 (the weights' bfloat16 copies) with the fused attention, on a CPU
    where `bf16_attention`; never for float32, serving, or attention with dropout on its probabilities (two calls
    around the dropout, float32)."""
    from src.model.albert import AlbertAttention, AlbertConfig, Runtime

    config = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, embedding_size=16, num_hidden_layers=2)
    bf16 = Runtime(kernels=True, bf16_weights=True)
    attention = AlbertAttention(AlbertConfig(**config, compute_type="bfloat16"), True, bf16)
    assert attention.bf16_handover == cpu_kernels.bf16_attention()
    assert attention.fused_kernel.attrs["bf16_probs"] == attention.qkv_kernel.attrs["bf16_outputs"] == \
        cpu_kernels.bf16_attention()
    assert cpu_kernels.bf16_attention() == ("training" in batched_attention())
    for is_training, runtime, dropout in [(True, Runtime(kernels=True), 0.0), (False, bf16, 0.0), (True, bf16, 0.1),
                                          (False, Runtime(kernels=True, bf16_weights=True,
                                                          serving_weights="bfloat16"), 0.0)]:
        attention = AlbertAttention(AlbertConfig(**config, attention_probs_dropout_prob=dropout), is_training, runtime)
        assert not attention.bf16_handover


@needs_kernels
def test_post_ln_feed_forward_takes_its_residual_into_the_kernel_where_nothing_sits_between():
    """A post-LN block's x + FFN(x) is one `feed_forward` call (`fused_residual`) with the kernels' fused
    feed-forward network, in float32 and bfloat16, training and serving, but not with dropout on the network's output
    in training (it sits between the sum's two terms), nor in pre-LN blocks (the residual is not the network's
    input), nor without the kernels."""
    from src.model.albert import AlbertConfig, AlbertLayer, Runtime

    config = dict(hidden_size=32, num_attention_heads=4, intermediate_size=64, embedding_size=16, num_hidden_layers=2)
    fused = [(AlbertConfig(**config), True, Runtime(kernels=True)),
             (AlbertConfig(**config, compute_type="bfloat16"), True, Runtime(kernels=True, bf16_weights=True)),
             (AlbertConfig(**config, hidden_dropout_prob=0.1), False, Runtime(kernels=True))]
    for layer_config, is_training, runtime in fused:
        layer = AlbertLayer(layer_config, is_training, runtime)
        assert layer.fused_residual and layer.feed_forward_kernel.func.endswith(":DenseGeluDenseResidual" + (
            "Copy" if runtime.bf16_weights else "Float"))
    apart = [(AlbertConfig(**config, hidden_dropout_prob=0.1), True, Runtime(kernels=True)),
             (AlbertConfig(**config, ln_type="preln"), True, Runtime(kernels=True)),
             (AlbertConfig(**config), True, Runtime())]
    for layer_config, is_training, runtime in apart:
        layer = AlbertLayer(layer_config, is_training, runtime)
        assert not layer.fused_residual
        if layer.fused_feed_forward:
            assert layer.feed_forward_kernel.func.endswith(":DenseGeluDenseFloat")


@needs_kernels
def test_cross_entropy_equals_torch_and_the_one_hot_product(threads):
    """Per-row NLL over a vocabulary and its gradient as torch's cross_entropy; a label outside the vocabulary
    gives 0 and no gradient, as the portable path's one-hot product does."""
    rng = np.random.default_rng(5)
    logits = (rng.standard_normal((37, 1000)) * 6).astype(np.float32)
    labels = rng.integers(0, 1000, 37).astype(np.int32)
    labels[[3, 11]] = [-1, 1000]
    dnll = rng.standard_normal(37).astype(np.float32)
    inside = (labels >= 0) & (labels < 1000)

    def reference(x):
        nll = torch.nn.functional.cross_entropy(x, torch.tensor(np.where(inside, labels, 0), dtype=torch.long),
                                                reduction="none")
        return nll * torch.tensor(inside, dtype=torch.float64)

    want, (want_grad,) = torch_reference(reference, (logits,), dnll)
    kernel = cpu_kernels.cross_entropy()

    class FirstOutput(nn.Cell):
        def construct(self, x, t):
            return kernel(x, t)[0]

    nll, grads = forward_and_input_grads(FirstOutput(), (logits, labels), dnll)
    assert_close(nll.asnumpy(), want)
    logsumexp = Call(kernel)(Tensor(logits), Tensor(labels))[1].asnumpy()
    assert_close(logsumexp, torch.logsumexp(torch.tensor(logits, dtype=torch.float64), -1).numpy())
    assert_close(grads[0], want_grad)
    assert not grads[0][[3, 11]].any()


@needs_kernels
def test_scaled_squared_norm_equals_numpy_and_sees_inf_and_nan(threads):
    rng = np.random.default_rng(3)
    grad = (rng.standard_normal((300, 700)) * 1e30).astype(np.float32)  # squares beyond float32: summed in double
    norm = Call(cpu_kernels.scaled_squared_norm())
    for scale in (1e30, 1e38):
        want = ((grad.astype(np.float64) / scale) ** 2).sum()
        got = norm(Tensor(grad), Tensor(scale, ms.float32)).asnumpy()
        assert got.shape == (1,) and abs(got[0] - want) <= 1e-6 * want
    assert norm(Tensor(grad), Tensor(1.0, ms.float32)).asnumpy()[0] == np.inf  # 2e65: beyond float32's range
    for bad in (np.inf, -np.inf, np.nan):
        spoiled = grad.copy()
        spoiled[123, 45] = bad
        assert not np.isfinite(norm(Tensor(spoiled), Tensor(1e30, ms.float32)).asnumpy()).any()


class WithGrads(nn.Cell):
    """cell(x) and the gradients of sum(cell(x) * sens) with respect to x and the cell's parameters."""

    def __init__(self, cell):
        super().__init__()
        self.cell, self.weights = cell, cell.trainable_params()
        self.grad = ops.GradOperation(get_all=True, get_by_list=True, sens_param=True)

    def construct(self, x, sens):
        return self.cell(x), self.grad(self.cell, self.weights)(x, sens)


@needs_kernels
@pytest.mark.parametrize("rows, size, eps", [(130, 48, 1e-12), (7, 768, 1e-5), (1, 5, 1e-3)])
def test_layer_norm_equals_torch_values_and_gradients(rows, size, eps, threads):
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((2, rows, size)) * 2 + 1).astype(np.float32)
    gamma, beta = (rng.standard_normal(size).astype(np.float32) for _ in range(2))
    dy = rng.standard_normal(x.shape).astype(np.float32)
    cell = cpu_kernels.LayerNorm(size, eps, use_kernels=True)
    cell.gamma.set_data(Tensor(gamma))
    cell.beta.set_data(Tensor(beta))
    y, ((dx,), (dgamma, dbeta)) = WithGrads(cell)(Tensor(x), Tensor(dy))
    want, (want_dx, want_dgamma, want_dbeta) = torch_reference(
        lambda v, g, b: torch.nn.functional.layer_norm(v, (size,), g, b, eps), (x, gamma, beta), dy)
    for got, expected in ((y, want), (dx, want_dx), (dgamma, want_dgamma), (dbeta, want_dbeta)):
        assert_close(got.asnumpy(), expected, tolerance=2e-5)


@needs_kernels
def test_dense_equals_mindspore_dense_values_and_gradients():
    rng = np.random.default_rng(0)
    fast, native = cpu_kernels.Dense(96, 200, True), nn.Dense(96, 200)
    native.weight.set_data(fast.weight.data)
    native.bias.set_data(Tensor(rng.standard_normal(200).astype(np.float32)))
    fast.bias.set_data(native.bias.data)
    assert [p.name for p in fast.get_parameters()] == [p.name for p in native.get_parameters()]
    x = Tensor(rng.standard_normal((4, 50, 96)).astype(np.float32))
    sens = Tensor(rng.standard_normal((4, 50, 200)).astype(np.float32))
    (y_fast, (inputs_fast, weights_fast)), (y_native, (inputs_native, weights_native)) = (
        WithGrads(fast)(x, sens), WithGrads(native)(x, sens))
    np.testing.assert_allclose(y_fast.asnumpy(), y_native.asnumpy(), rtol=1e-5, atol=1e-5)
    for got, want in zip(inputs_fast + weights_fast, inputs_native + weights_native):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-5, atol=1e-4)


def _kernel_flags(model):
    return [cell.use_kernels for _, cell in model.cells_and_names() if hasattr(cell, "use_kernels")]


@needs_kernels
def test_float32_networks_on_cpu_use_them_and_exports_and_float16_do_not():
    from export import export_runtime
    from src.devices.device_setup import model_runtime
    from src.model.albert import AlbertConfig, AlbertModel

    config = AlbertConfig.from_preset("albert_tiny", vocab_size=100, hidden_size=32, embedding_size=16,
                                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    model = AlbertModel(config, is_training=False, runtime=model_runtime("CPU", "float32"))
    kinds = {type(cell).__name__ for _, cell in model.cells_and_names() if getattr(cell, "use_kernels", False)}
    assert kinds == {"Dense", "LayerNorm", "Activation", "AlbertAttention"}
    for file_format in ("MINDIR", "ONNX"):
        exported = AlbertModel(config, runtime=export_runtime(file_format, "CPU", "float32"))
        assert _kernel_flags(exported) and not any(_kernel_flags(exported))
    half = config.replace(compute_type="float16")
    assert not any(_kernel_flags(AlbertModel(half, runtime=model_runtime("CPU", "float16"))))


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """An empty kernel cache and a forgotten build result (kernels not switched off); the real one is restored
    afterwards."""
    monkeypatch.setenv("ALBERT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("ALBERT_CPU_KERNELS", raising=False)
    cpu_kernels._built.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    cpu_kernels._built.cache_clear()


@needs_kernels
def test_the_thread_pool_runs_every_slice_once_under_concurrent_calls_and_after_fork(tmp_path):
    """tests/fixtures/thread_pool_check.cc drives src/model/kernels/parallel.h directly: four threads calling at once,
    part counts changing between calls, a forked child; it exits 0 only if every element got exactly one add per
    call, and if every slice ran with subnormals flushed while the caller's own mode stayed as it was."""
    compiler = shutil.which(os.environ.get("CXX", "g++")) or shutil.which("c++")
    program = tmp_path / "thread_pool_check"
    subprocess.run([compiler, "-O2", "-std=c++14", "-pthread", f"-I{cpu_kernels.KERNELS}",
                    str(FIXTURES / "thread_pool_check.cc"), "-o", str(program)], check=True, timeout=120)
    result = subprocess.run([str(program)], capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stdout + result.stderr


@needs_kernels
def test_the_switch_is_read_on_every_call(monkeypatch):
    """ALBERT_CPU_KERNELS=0 while the kernels are first asked for, then unset: they are available again (was: the
    answer was cached with the library, so the rest of the process ran without them)."""
    cpu_kernels._built.cache_clear()  # the library is loaded again from the cache, not compiled
    monkeypatch.setenv("ALBERT_CPU_KERNELS", "0")
    assert not cpu_kernels.available()
    monkeypatch.delenv("ALBERT_CPU_KERNELS")
    assert cpu_kernels.available()


def test_setting_the_thread_count_compiles_nothing(fresh_build):
    """Every CPU run sets cpu_threads up, export.py and serving too, which never use the kernels: the count waits for
    the kernels' first use instead of building the library."""
    cpu_kernels.set_threads(2)
    assert cpu_kernels._built.cache_info().currsize == 0
    assert not (fresh_build / "cache").exists()


def test_switched_off_they_fall_back_and_say_why(fresh_build, monkeypatch):
    monkeypatch.setenv("ALBERT_CPU_KERNELS", "0")
    assert not cpu_kernels.available()
    assert cpu_kernels.status() == "MindSpore operations (ALBERT_CPU_KERNELS=0)"
    from src.devices.device_setup import model_runtime
    from src.model.albert import AlbertConfig, AlbertModel

    config = AlbertConfig(vocab_size=10, hidden_size=8, embedding_size=4, num_hidden_layers=1,
                          num_attention_heads=2, intermediate_size=16)
    runtime = model_runtime("CPU", "float32")
    assert not runtime.kernels and runtime.split_heads
    model = AlbertModel(config, runtime=runtime)
    assert _kernel_flags(model) and not any(_kernel_flags(model))


@pytest.mark.parametrize("value", ["false", " Off", "no"])
def test_the_switch_takes_the_usual_spellings_of_off(fresh_build, monkeypatch, value):
    """`ALBERT_CPU_KERNELS=false` kept the kernels on: only "0" was read as off."""
    monkeypatch.setenv("ALBERT_CPU_KERNELS", value)
    assert not cpu_kernels.available()
    assert cpu_kernels.status() == f"MindSpore operations (ALBERT_CPU_KERNELS={value})"


def test_a_switch_value_read_as_neither_is_refused(fresh_build, monkeypatch):
    from model_utils.errors import UserError
    from src.devices.device_setup import setup_device

    monkeypatch.setenv("ALBERT_CPU_KERNELS", "yes please")
    with pytest.raises(UserError, match=r"^ALBERT_CPU_KERNELS='yes please' is neither 0 \(MindSpore's operations\) "
                                        r"nor 1 \(the compiled kernels\)$"):
        setup_device("CPU")
    assert not cpu_kernels.available() and "neither 0" in cpu_kernels.status()
    monkeypatch.setenv("ALBERT_CPU_KERNELS", "TRUE")
    assert cpu_kernels.switch_problem() == ""


@pytest.mark.parametrize("value", ["zen4", "AuthenticAMD", " amd"])
def test_a_vendor_other_than_amd_or_intel_is_refused(fresh_build, monkeypatch, value):
    """ALBERT_KERNELS_VENDOR chooses whose measured rules the kernels apply: any other value would have been read as
    intel, silently."""
    from model_utils.errors import UserError
    from src.devices.device_setup import setup_device

    monkeypatch.setenv("ALBERT_KERNELS_VENDOR", value)
    with pytest.raises(UserError, match=rf"^ALBERT_KERNELS_VENDOR='{value}' is neither amd nor intel \(whose"):
        setup_device("CPU")
    assert not cpu_kernels.available() and "neither amd nor intel" in cpu_kernels.status()
    for accepted in ("AMD", "intel", ""):
        monkeypatch.setenv("ALBERT_KERNELS_VENDOR", accepted)
        assert cpu_kernels.switch_problem() == ""


def test_without_a_compiler_they_fall_back(fresh_build, monkeypatch):
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr(cpu_kernels.shutil, "which", lambda name: None)
    assert not cpu_kernels.available() and "no C++ compiler" in cpu_kernels.status()


def test_a_cxx_that_is_not_found_is_named_not_replaced(fresh_build, monkeypatch):
    """CXX is the user's choice of compiler, as for build tools: one that is missing was silently replaced by c++."""
    monkeypatch.setenv("CXX", str(fresh_build / "missing-g++"))
    assert not cpu_kernels.available()
    missing = fresh_build / "missing-g++"
    assert cpu_kernels.status() == f"MindSpore operations (CXX={missing} is not a compiler found on PATH)"


def test_an_untrusted_cache_and_a_white_list_without_the_private_folder_say_both(fake_compiler, monkeypatch):
    cache = fake_compiler.parent / "cache"
    cache.mkdir(mode=0o777)
    cache.chmod(0o777)
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", str(cache))
    assert not cpu_kernels.available()
    assert cpu_kernels.status().startswith(f"MindSpore operations ({cache} is writable by group or others (mode 777): "
                                           f"built in a private folder; MS_CUSTOM_AOT_WHITE_LIST does not include ")


def test_a_failing_build_falls_back_and_leaves_no_partial_library(fresh_build, monkeypatch):
    if cpu_kernels.shutil.which("g++") is None and cpu_kernels.shutil.which("c++") is None:
        pytest.skip("compiled CPU kernels unavailable: no C++ compiler")
    broken = fresh_build / "broken.cc"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(cpu_kernels, "SOURCES", cpu_kernels.SOURCES + (broken,))
    assert not cpu_kernels.available() and "failed" in cpu_kernels.status() and "broken.cc" in cpu_kernels.status()
    assert list((fresh_build / "cache").iterdir()) == []


def test_a_white_list_without_the_cache_falls_back(fresh_build, monkeypatch):
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", str(fresh_build / "elsewhere"))
    assert not cpu_kernels.available() and "MS_CUSTOM_AOT_WHITE_LIST" in cpu_kernels.status()


@pytest.mark.parametrize("listed, allowed", [
    ("{tmp}/cache", True), ("{tmp}", True), ("{tmp}/link", True),  # the cache, a folder above it, a link to it
    ("{tmp}/cach", False),  # a name the cache's path starts with, not a folder above it
    ("/opt/other:{tmp}/cache", False),  # one path to MindSpore, not a list
])
def test_the_white_list_is_read_as_mindspore_reads_it(fresh_build, monkeypatch, listed, allowed):
    """MindSpore's Custom op refuses a library outside MS_CUSTOM_AOT_WHITE_LIST with a traceback: the kernels must
    agree with it beforehand (the reference: whether MindSpore's own ops.Custom accepts the library's path), or fall
    back where it would refuse."""
    (fresh_build / "cache").mkdir()
    (fresh_build / "link").symlink_to(fresh_build / "cache")
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", listed.format(tmp=fresh_build))
    library = fresh_build / "cache" / "albert_kernels-0.so"
    try:
        ops.Custom(f"{library}:MatMulNT", out_shape=lambda x: x, out_dtype=lambda x: x, func_type="aot")
        mindspore_accepts = True
    except TypeError as err:
        assert "the legal path for the file is" in str(err)
        mindspore_accepts = False
    assert cpu_kernels._allowed_by_white_list(library) == mindspore_accepts == allowed


@pytest.mark.parametrize("mode", [0o777, 0o1777, 0o775])
def test_a_folder_others_can_write_is_neither_changed_nor_trusted(fake_compiler, monkeypatch, mode):
    """ALBERT_CACHE_DIR naming a shared folder (here 0777, /tmp's 1777, or 0775 holding other files): its mode is
    left alone (it was set to 0755 under its owner's feet) and the library is built in a private folder."""
    shared = fake_compiler.parent / "shared"
    shared.mkdir()
    (shared / "notes.txt").write_text("someone else's file")
    shared.chmod(mode)
    monkeypatch.setenv("ALBERT_CACHE_DIR", str(shared))
    path, why = cpu_kernels._build()
    assert stat.S_IMODE(shared.stat().st_mode) == mode
    assert why == f"{shared} is writable by group or others (mode {mode:o}): built in a private folder"
    assert Path(path).parent != shared


FAKE_CXX = """#!/bin/sh
# g++ as a test wants it: its identity read from the files beside it; a build copies output.so to the -o path.
here=$(dirname "$0")
case "$1 $2" in
  "--version "*) cat "$here/version"; exit 0;;
  "-dumpmachine "*) cat "$here/machine"; exit 0;;
  "-march=native -Q") cat "$here/target"; exit 0;;
esac
while [ $# -gt 0 ]; do
  if [ "$1" = "-o" ]; then cp "$here/output.so" "$2"; exit $?; fi
  shift
done
exit 1
"""
TARGET = ("The following options are target specific:\n  -march=   \t\tskylake\n  -mtune=   \t\tskylake\n"
          "  -mavx2    \t\t[enabled]\n  -mavx512f \t\t[disabled]\n")


@pytest.fixture
def fake_compiler(fresh_build, monkeypatch):
    """CXX set to a stand-in for g++ (FAKE_CXX) whose builds are a small real library with the two entry points
    every load calls (SetThreads, SetBf16), so that where the library is built and loaded from can be watched in a
    fraction of a second; returns its folder."""
    real = shutil.which("g++") or shutil.which("c++")
    if real is None:
        pytest.skip("compiled CPU kernels unavailable: no C++ compiler")
    folder = fresh_build / "cxx"
    folder.mkdir()
    (folder / "stub.cc").write_text('extern "C" { void SetThreads(int) {} void SetBf16(int) {} }\n')
    subprocess.run([real, "-shared", "-fPIC", "-o", str(folder / "output.so"), str(folder / "stub.cc")], check=True,
                   timeout=120)
    (folder / "version").write_text("g++ (GCC) 13.2.0\nCopyright (C) 2023 Free Software Foundation, Inc.\n")
    (folder / "machine").write_text("x86_64-linux-gnu\n")
    (folder / "target").write_text(TARGET)
    (folder / "g++").write_text(FAKE_CXX)
    (folder / "g++").chmod(0o755)
    monkeypatch.setenv("CXX", str(folder / "g++"))
    (folder / "libdnnl.so.3").write_bytes(b"oneDNN 3.5")
    monkeypatch.setattr(cpu_kernels, "dnnl_library", lambda: folder / "libdnnl.so.3")
    return folder


def _key(folder: Path) -> str:
    return cpu_kernels._cache_key(str(folder / "g++"), folder / "libdnnl.so.3")


@pytest.mark.parametrize("part, before, after", [
    ("version", "13.2.0\n", "14.1.0\n"),  # another compiler
    ("machine", "x86_64-linux-gnu", "aarch64-linux-gnu"),  # another target
    ("target", "-march=   \t\tskylake", "-march=   \t\ticelake-server"),  # -march=native resolved on another CPU
    ("target", "-mavx512f \t\t[disabled]", "-mavx512f \t\t[enabled]"),  # an instruction set more
])
def test_the_cache_key_holds_compiler_target_and_resolved_cpu(fake_compiler, part, before, after):
    original = (fake_compiler / part).read_text()
    key = _key(fake_compiler)
    (fake_compiler / part).write_text(original.replace(before, after, 1))
    assert _key(fake_compiler) != key
    (fake_compiler / part).write_text(original)
    assert _key(fake_compiler) == key


def test_the_cache_key_holds_libc_but_not_the_compilers_copyright(fake_compiler, monkeypatch):
    key = _key(fake_compiler)
    (fake_compiler / "version").write_text("g++ (GCC) 13.2.0\nCopyright (C) 2024 Free Software Foundation, Inc.\n")
    assert _key(fake_compiler) == key
    monkeypatch.setattr(cpu_kernels.platform, "libc_ver", lambda *args, **kwargs: ("glibc", "2.17"))
    assert _key(fake_compiler) != key


def test_on_arm_the_cpu_is_told_by_its_part_and_features(tmp_path, monkeypatch):
    """aarch64's /proc/cpuinfo has no model name or flags line: its identity is the implementer, part and
    features, and nothing that varies between boots (BogoMIPS)."""
    cpuinfo = tmp_path / "cpuinfo"
    arm = ("processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd aes pmull sha1 sha2 crc32 atomics\n"
           "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x3\nCPU part\t: 0xd0c\n")
    monkeypatch.setattr(cpu_kernels, "CPUINFO", cpuinfo)
    cpuinfo.write_text(arm)
    identity = cpu_kernels._cpu_identity()
    for before, after in (("atomics", "atomics sve"), ("0xd0c", "0xd40")):
        cpuinfo.write_text(arm.replace(before, after))
        assert cpu_kernels._cpu_identity() != identity
    cpuinfo.write_text(arm.replace("50.00", "48.00"))
    assert cpu_kernels._cpu_identity() == identity


def test_the_cache_is_made_0700_and_its_library_is_loaded_from_it_once_built(fake_compiler):
    cache = fake_compiler.parent / "cache"
    path, why = cpu_kernels._build()
    assert (Path(path).parent, why) == (cache, "")
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert stat.S_IMODE(Path(path).stat().st_mode) & 0o077 == 0
    built = Path(path).read_bytes()
    (fake_compiler / "output.so").write_bytes(b"a rebuild")
    cpu_kernels._built.cache_clear()
    assert cpu_kernels._build() == (path, "") and Path(path).read_bytes() == built


def test_a_group_writable_cache_of_this_user_is_closed_and_used(fake_compiler):
    """A cache folder made 0775 by an earlier version (umask 002) loses its group write bit and stays the cache:
    no rebuild in a private folder on every run."""
    cache = fake_compiler.parent / "cache"
    path = cpu_kernels._build()[0]
    cache.chmod(0o775)
    cpu_kernels._built.cache_clear()
    assert cpu_kernels._build() == (path, "")
    assert stat.S_IMODE(cache.stat().st_mode) == 0o755


@pytest.mark.parametrize("plant", ["group-writable library", "symlinked library", "another user's cache"])
def test_an_untrusted_cache_is_not_loaded_the_library_is_built_privately(fake_compiler, monkeypatch, plant):
    """Whoever can write the cache or its library (or point it elsewhere) could run code as this user."""
    cache = fake_compiler.parent / "cache"
    planted = Path(cpu_kernels._build()[0])
    if plant == "group-writable library":
        planted.chmod(0o760)
        reason = f"{planted} is writable by group or others (mode 760)"
    elif plant == "symlinked library":
        planted.unlink()
        (fake_compiler / "evil.so").write_bytes(b"anyone's code")
        planted.symlink_to(fake_compiler / "evil.so")
        reason = f"{planted} is a symlink"
    else:
        me = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)
        reason = f"{cache} is owned by another user (uid {me})"
    cpu_kernels._built.cache_clear()
    path, why = cpu_kernels._build()
    assert why == f"{reason}: built in a private folder"
    assert Path(path).parent != cache and Path(path).name == planted.name
    assert stat.S_IMODE(Path(path).parent.stat().st_mode) == 0o700
    assert cpu_kernels.status() == f"compiled CPU kernels, {cpu_kernels.onednn()} ({path}; {why})"


def test_private_folders_of_killed_runs_are_removed_by_the_next(fake_compiler, monkeypatch):
    """A private build folder is removed at exit, but a run killed by SIGTERM or SIGKILL leaves it behind: the next
    run that builds privately removes those whose process is gone, and no other folder."""
    temp = fake_compiler.parent / "temp"
    temp.mkdir()
    monkeypatch.setattr(cpu_kernels.tempfile, "tempdir", str(temp))
    ended = subprocess.Popen(["true"])
    ended.wait()
    orphan, alive, other = (temp / f"albert_kernels-pid{ended.pid}-x1", temp / f"albert_kernels-pid{os.getpid()}-x2",
                            temp / "albert_kernels-pidless")
    for folder in (orphan, alive, other):
        folder.mkdir()
        (folder / "albert_kernels-0.so").write_bytes(b"a library")
    Path(cpu_kernels._build()[0]).chmod(0o760)  # the cache's library is no longer trusted: a private build
    cpu_kernels._built.cache_clear()
    path, why = cpu_kernels._build()
    assert why.endswith("built in a private folder") and Path(path).parent.parent == temp
    assert not orphan.exists() and alive.exists() and other.exists()


def test_without_a_trusted_or_private_folder_they_fall_back(fake_compiler, monkeypatch):
    cache = fake_compiler.parent / "cache"
    cache.mkdir()
    me = os.geteuid()
    monkeypatch.setattr(os, "geteuid", lambda: me + 1)  # the cache is another user's

    def no_space(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(cpu_kernels.tempfile, "mkdtemp", no_space)
    assert not cpu_kernels.available()
    assert cpu_kernels.status() == (f"MindSpore operations ({cache} is owned by another user (uid {me}), and "
                                    f"no private folder ({os.strerror(errno.ENOSPC)}))")


def test_a_library_that_does_not_load_falls_back_with_the_reason(fake_compiler):
    (fake_compiler / "output.so").write_bytes(b"not a shared library")
    assert not cpu_kernels.available()
    assert cpu_kernels.status().startswith(f"MindSpore operations (cannot load {fake_compiler.parent / 'cache'}/")


@pytest.mark.parametrize("kept", [200, 0.5, -1])
def test_a_cached_library_that_does_not_load_is_built_again_once(fake_compiler, kept):
    """A library cut short in the cache (a crash or a full disk while it was copied in) failed to load on every
    run, and the kernels were off for good; cut inside its loaded segments it got past the loader and the first
    touch of a missing page killed the process (SIGBUS): it is refused before it is mapped, built again, in the
    cache, and loads."""
    target = fake_compiler.parent / "cache" / f"albert_kernels-{_key(fake_compiler)}.so"
    target.parent.mkdir(mode=0o700)
    whole = (fake_compiler / "output.so").read_bytes()
    target.write_bytes(whole[:kept if isinstance(kept, int) else int(len(whole) * kept)])
    target.chmod(0o700)
    assert "cut short: its ELF headers reach byte" in cpu_kernels._load(target)
    assert cpu_kernels._build() == (str(target), "")
    assert target.read_bytes() == (fake_compiler / "output.so").read_bytes()
    assert stat.S_IMODE(target.stat().st_mode) & 0o077 == 0


def test_a_cached_library_that_still_does_not_load_falls_back_with_the_reason(fake_compiler):
    target = fake_compiler.parent / "cache" / f"albert_kernels-{_key(fake_compiler)}.so"
    target.parent.mkdir(mode=0o700)
    target.write_bytes(b"cut short")
    target.chmod(0o700)
    (fake_compiler / "output.so").write_bytes(b"not a shared library either")
    assert not cpu_kernels.available()
    assert cpu_kernels.status().startswith(f"MindSpore operations (cannot load {target} (")
    assert target.read_bytes() == b"not a shared library either"  # built again once, not more


def test_every_kernel_source_and_header_is_part_of_the_cache_key():
    """A file of src/kernels left out of the key would let a stale cached build run after that file changed."""
    assert sorted(cpu_kernels.KERNELS.iterdir()) == sorted(cpu_kernels.SOURCES + cpu_kernels.HEADERS)


def test_the_cache_key_holds_onednns_content_not_only_its_path(fake_compiler):
    """Another libdnnl at the same path (MindSpore reinstalled from another build) links to another ABI. Its hash
    is computed once per (path, size, modification time)."""
    dnnl = fake_compiler / "libdnnl.so.3"
    key = _key(fake_compiler)
    hashed = cpu_kernels._file_digest.cache_info().misses
    assert _key(fake_compiler) == key and cpu_kernels._file_digest.cache_info().misses == hashed
    dnnl.write_bytes(b"oneDNN 3.6.0")
    assert _key(fake_compiler) != key
