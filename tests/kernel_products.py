"""Run by tests/test_cpu_kernels.py::test_products_on_a_lower_isa_forced in a process whose ONEDNN_MAX_CPU_ISA caps
what oneDNN may use: the dense products (forward and both gradients) against float64 numpy, in float32 and in
bfloat16 (weights rounded per call, and their bfloat16 copy from the graph), and serving's int8 products (where oneDNN
has exact int8 sums: VNNI or AMX-INT8) against the exact integer product of the quantized operands, on 1 and 2
threads; the last line printed is the kernels' oneDNN
description."""
import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from src.model import cpu_kernels  # noqa: E402
from tests.test_cpu_kernels import (Call, WithCopies, assert_bf16_product, assert_close,  # noqa: E402
                                    bf16_rounded, dense_grads, forward_and_input_grads, int8_operands,
                                    int8_reference)


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
        # float32 weights rounded by each call, and the weights' bfloat16 copy made in the graph
        for cell in (Call(cpu_kernels.matmul_nt_bias()), WithCopies(cpu_kernels.matmul_nt_bias(True), 1)):
            tensors = [Tensor(x), Tensor(w), Tensor(b)]
            dx, dw, _ = (grad.asnumpy() for grad in dense_grads(cell, tensors, Tensor(dy)))
            assert_bf16_product(cell(*tensors).asnumpy(), xb @ wb.T + b, x64 @ w64.T + b)
            assert_bf16_product(dx, dyb @ wb, dy64 @ w64)
            assert_bf16_product(dw, dyb.T @ xb, dy64.T @ x64)
        cpu_kernels.set_bf16(False)
        if cpu_kernels.int8_support()[0]:  # int8 needs VNNI or AMX-INT8 (without, it is refused)
            y = Call(cpu_kernels.matmul_int8(True))(Tensor(x), *int8_operands(w), Tensor(b)).asnumpy()
            assert_close(y, int8_reference(x, w, b), 1e-6)
    library = cpu_kernels._library(cpu_kernels._build()[0])
    text = ctypes.create_string_buffer(400)
    library.DnnlDescribe(text, 400)
    print(text.value.decode())


if __name__ == "__main__":
    main()
