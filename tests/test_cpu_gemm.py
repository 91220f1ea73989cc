"""src/cpu_gemm.py: the oneDNN sgemm fast path of the dense layers, checked against numpy in float64 and against
MindSpore's own MatMul (values and gradients), and its fallbacks (switched off, no compiler, a failing build)."""
import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn, ops  # noqa: E402

from src import cpu_gemm  # noqa: E402

needs_kernel = pytest.mark.skipif(not cpu_gemm.active(), reason=f"fast path unavailable: {cpu_gemm.status()}")


@pytest.fixture(autouse=True)
def graph_mode():
    previous = ms.get_context("mode")
    ms.set_context(mode=ms.GRAPH_MODE)
    yield
    ms.set_context(mode=previous)


class Product(nn.Cell):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def construct(self, a, b):
        return self.op(a, b)


class WithGrads(nn.Cell):
    def __init__(self, dense):
        super().__init__()
        self.dense, self.weights = dense, dense.trainable_params()
        self.grad = ops.GradOperation(get_all=True, get_by_list=True, sens_param=True)

    def construct(self, x, sens):
        return self.dense(x), self.grad(self.dense, self.weights)(x, sens)


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("m, k, n", [(1, 5, 3), (63, 17, 9), (200, 70, 130), (257, 33, 64)])
def test_products_equal_numpy_in_float64(m, k, n, threads):
    cpu_gemm.set_threads(threads)  # rows are split over threads once there are 64 per thread
    rng = np.random.default_rng(m + k + n)
    x, w, dy = (rng.standard_normal(shape).astype(np.float32) for shape in ((m, k), (n, k), (m, n)))
    nt = Product(cpu_gemm.matmul_nt())
    np.testing.assert_allclose(nt(Tensor(x), Tensor(w)).asnumpy(), x.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)
    # The gradients are the NN and TN products of the same kernel: dx = dy w, dw = dy^T x.
    dx, dw = ops.GradOperation(get_all=True, sens_param=True)(nt)(Tensor(x), Tensor(w), Tensor(dy))
    np.testing.assert_allclose(dx.asnumpy(), dy.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(dw.asnumpy(), dy.astype(np.float64).T @ x, rtol=1e-5, atol=1e-5)
    cpu_gemm.set_threads(0)


@needs_kernel
def test_dense_equals_mindspore_dense_values_and_gradients():
    rng = np.random.default_rng(0)
    fast, native = cpu_gemm.Dense(96, 200, True), nn.Dense(96, 200)
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


@needs_kernel
def test_float32_networks_use_it_and_exports_do_not():
    from src.albert_model import AlbertConfig, AlbertModel

    config = AlbertConfig.from_preset("albert_tiny", vocab_size=100, hidden_size=32, embedding_size=16,
                                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    model = AlbertModel(config, is_training=False)
    dense = [cell for _, cell in model.cells_and_names() if isinstance(cell, cpu_gemm.Dense)]
    assert dense and all(cell.use_gemm for cell in dense)
    cpu_gemm.use_native_products(model)
    assert not any(cell.use_gemm for cell in dense)
    half = AlbertConfig.from_dict({**config.to_dict(), "compute_type": "float16"})
    assert not any(cell.use_gemm for _, cell in AlbertModel(half, False).cells_and_names()
                   if isinstance(cell, cpu_gemm.Dense))


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """An empty kernel cache and a forgotten build result; the real one is restored afterwards."""
    monkeypatch.setenv("ALBERT_CACHE_DIR", str(tmp_path / "cache"))
    cpu_gemm._build.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    cpu_gemm._build.cache_clear()


def test_switched_off_it_falls_back_and_says_why(fresh_build, monkeypatch):
    monkeypatch.setenv("ALBERT_CPU_GEMM", "0")
    assert not cpu_gemm.active()
    assert cpu_gemm.status() == "MindSpore MatMul (ALBERT_CPU_GEMM=0)"
    from src.albert_model import AlbertConfig, dense_layer

    assert not dense_layer(8, 8, AlbertConfig(vocab_size=10)).use_gemm


def test_without_a_compiler_it_falls_back(fresh_build, monkeypatch):
    monkeypatch.setattr(cpu_gemm.shutil, "which", lambda name: None)
    assert not cpu_gemm.active() and "no C++ compiler" in cpu_gemm.status()


def test_a_failing_build_falls_back_and_leaves_no_partial_library(fresh_build, monkeypatch):
    if cpu_gemm.shutil.which("g++") is None and cpu_gemm.shutil.which("c++") is None:
        pytest.skip("no C++ compiler")
    broken = fresh_build / "broken.cc"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(cpu_gemm, "SOURCE", broken)
    assert not cpu_gemm.active() and "compiling broken.cc failed" in cpu_gemm.status()
    assert list((fresh_build / "cache").iterdir()) == []


def test_a_white_list_without_the_cache_falls_back(fresh_build, monkeypatch):
    monkeypatch.setenv("MS_CUSTOM_AOT_WHITE_LIST", str(fresh_build / "elsewhere"))
    assert not cpu_gemm.active() and "MS_CUSTOM_AOT_WHITE_LIST" in cpu_gemm.status()
