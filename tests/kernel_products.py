"""Run by tests/test_cpu_kernels.py::test_products_on_a_lower_isa_forced in a process whose ONEDNN_MAX_CPU_ISA caps
what oneDNN may use: the dense products (forward and both gradients) against float64 numpy, in float32 and in
bfloat16 (weights rounded per call, their bfloat16 copy from the graph and the same packed), and serving's int8
products (where oneDNN has exact int8 sums: VNNI or AMX-INT8) against the exact integer product of the quantized
operands, reading the weights packed at load, on 1 and 2 threads (and bfloat16 weights served packed at load as the
bfloat16 copy, at batch 1 and above); the feed-forward network in one call under bfloat16 as the three kernels it
replaces (copies and packed; packed with the residual too); a large weight gradient by the BLAS-style call where
AMD's rule applies (tests/test_cpu_kernels.py runs this with ALBERT_KERNELS_VENDOR=amd too); below AMX, attention (int8 serving's, and training's in bfloat16 but where the status
line says it runs batched) as the float32 attention, bit for bit. The last line printed is the kernels' oneDNN
description."""
import ctypes
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from src.model import cpu_kernels  # noqa: E402
from tests.test_cpu_kernels import (Call, FeedForward, FusedContext, Served, WithCopies, amx_bf16,  # noqa: E402
                                    assert_bf16_product, assert_close, attention_operands, batched_attention,
                                    bf16_rounded, dense_grads, feed_forward_operands, forward_and_input_grads,
                                    int8_operands, int8_reads, int8_reference, run_feed_forward)


def feed_forward(copies: bool, packed: bool = False, residual: bool = False) -> None:
    """The fused feed-forward network (bfloat16 products on) gives what dense, GELU and dense give in turn (with
    `residual`, and MindSpore's Add of the input: y and dx to float32 roundings, the sums made in another order)."""
    *inputs, dy = feed_forward_operands(600, 32, 128)
    fused = run_feed_forward(FeedForward(copies, packed=packed, residual=residual), inputs, dy)
    steps = run_feed_forward(FeedForward(copies, steps=True, packed=packed, residual=residual), inputs, dy)
    steps[0][2] = bf16_rounded(steps[0][2])  # with the copies h comes rounded, as the second product reads it
    for index, (got, want) in enumerate(zip([*fused[0], *fused[1]], [*steps[0], *steps[1]])):
        summed = residual and index in (0, 3)  # y and dx
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6 * np.abs(want).max() if summed else 1e-35)


def attention_below_amx() -> None:
    """Without AMX int8 serving's attention is the float32 attention, bit for bit, and so is the attention of training
    in bfloat16 (set_bf16 on), forward and backward, unless the status line says training runs it batched (AMD's
    AVX512-BF16; test_cpu_kernels checks those numerics): then within bfloat16's error of float32."""
    import mindspore as ms
    from mindspore import Tensor

    assert not amx_bf16(), "run under ONEDNN_MAX_CPU_ISA below AMX"
    assert "int8 serving" not in batched_attention()
    heads = 4
    (q, k, v, dc), bias, scale = attention_operands(2, 40, heads, 16, "row", 4)
    inputs = [q, k, v, bias, np.array([scale], np.float32)]
    bf16, bf16_grads = forward_and_input_grads(FusedContext(heads), inputs, dc)
    cpu_kernels.set_bf16(False)
    float32, float32_grads = forward_and_input_grads(FusedContext(heads), inputs, dc)
    for got, want in zip([bf16.asnumpy(), *bf16_grads[:3]], [float32.asnumpy(), *float32_grads[:3]]):
        if "training" in batched_attention():
            assert 0 < np.abs(got - want).max() < 0.03 * max(1.0, np.abs(want).max())
        else:
            np.testing.assert_array_equal(got, want)
    served = [Tensor(q), Tensor(k), Tensor(v), Tensor(bias), Tensor([scale], ms.float32), Tensor([heads], ms.int32)]
    np.testing.assert_array_equal(Call(cpu_kernels.attention_inference(heads, bf16=True))(*served).asnumpy(),
                                  Call(cpu_kernels.attention_inference(heads))(*served).asnumpy())
    cpu_kernels.set_bf16(True)


def large_weight_gradient(threads: int) -> None:
    """A weight gradient whose block on each thread has 2^20 outputs or more, each a sum over 64 tokens (AMD's rule,
    dnnl_matmul.cc kAmdBlasGradOutputs): through dnnl_gemm_bf16bf16f32 where the status line says that rule
    applies, through a primitive elsewhere; the bfloat16 product either way."""
    from mindspore import Tensor

    rng = np.random.default_rng(threads)
    x, w, b, dy = (rng.standard_normal(shape).astype(np.float32) for shape in ((64, 1024), (2048, 1024), (2048,),
                                                                              (64, 2048)))
    cell = Call(cpu_kernels.matmul_nt_bias())
    cpu_kernels.start_profile()
    try:
        _, dw, _ = (grad.asnumpy() for grad in dense_grads(cell, [Tensor(x), Tensor(w), Tensor(b)], Tensor(dy)))
    finally:
        counts = cpu_kernels.stop_profile()
    dyb, xb = (bf16_rounded(a).astype(np.float64) for a in (dy, x))
    assert_bf16_product(dw, dyb.T @ xb, dy.astype(np.float64).T @ x.astype(np.float64))
    blas = "for large weight gradients" in cpu_kernels.onednn()
    assert counts.get("thread: gemm_bf16bf16f32", (0, 0.0))[0] == (threads if blas else 0), counts


def main() -> None:
    import mindspore as ms
    from mindspore import Tensor

    ms.set_context(mode=ms.GRAPH_MODE)
    rng = np.random.default_rng(3)
    m, k, n = 1024, 96, 160
    x, w, b, dy = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (n,), (m, n)))
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    xb, wb, dyb = (bf16_rounded(a).astype(np.float64) for a in (x, w, dy))
    for threads in (1, 2):
        cpu_kernels.set_threads(threads)
        cpu_kernels.set_bf16(False)
        y, (dx, dw, _) = forward_and_input_grads(cpu_kernels.matmul_nt_bias(), (x, w, b), dy)
        assert_close(y.asnumpy(), x64 @ w64.T + b)
        assert_close(dx, dy64 @ w64)
        assert_close(dw, dy64.T @ x64)
        cpu_kernels.set_bf16(True)
        # float32 weights rounded by each call, the weights' bfloat16 copy made in the graph, the same packed
        for cell in (Call(cpu_kernels.matmul_nt_bias()), WithCopies(cpu_kernels.matmul_nt_bias(True), 1),
                     WithCopies(cpu_kernels.matmul_nt_bias(True), 1, packed=True)):
            tensors = [Tensor(x), Tensor(w), Tensor(b)]
            dx, dw, _ = (grad.asnumpy() for grad in dense_grads(cell, tensors, Tensor(dy)))
            assert_bf16_product(cell(*tensors).asnumpy(), xb @ wb.T + b, x64 @ w64.T + b)
            assert_bf16_product(dx, dyb @ wb, dy64 @ w64)
            assert_bf16_product(dw, dyb.T @ xb, dy64.T @ x64)
        # weights served in bfloat16, packed at load (batch 1: split by columns; 1024 rows: by rows)
        served = Served(w, cpu_kernels.pack_bf16(w))
        for rows in (x[:128], x):
            np.testing.assert_array_equal(served(Tensor(rows), Tensor(b)).asnumpy(), WithCopies(
                cpu_kernels.matmul_nt_bias(True), 1)(Tensor(rows), Tensor(w), Tensor(b)).asnumpy())
        feed_forward(copies=True)
        feed_forward(copies=True, packed=True)
        feed_forward(copies=True, packed=True, residual=True)
        if cpu_kernels.bf16_support()[0]:  # native bfloat16 (emulated, the primitive is refused: the BLAS-style call)
            large_weight_gradient(threads)
        attention_below_amx()
        cpu_kernels.set_bf16(False)
        if cpu_kernels.int8_support()[0]:  # int8 needs VNNI or AMX-INT8 (without, it is refused)
            y, read_packed, read_stored = int8_reads(
                lambda: Call(cpu_kernels.matmul_int8(True))(Tensor(x), *int8_operands(w), Tensor(b)).asnumpy())
            assert_close(y, int8_reference(x, w, b), 1e-6)
            assert read_packed > 0 and read_stored == 0, (read_packed, read_stored)  # packed for this ISA at load
    print(json.dumps(cpu_kernels.bf16_support()))  # bfloat16 runs allowed here, or why not
    library = cpu_kernels._library(cpu_kernels._build()[0])
    text = ctypes.create_string_buffer(400)
    library.DnnlDescribe(text, 400)
    print(text.value.decode())


if __name__ == "__main__":
    main()
