"""GPU/Ascend readiness, tested on CPU as far as MindSpore allows: why a present GPU is not used (fake nvidia-smi and
nvcc), which compute types each device refuses (with the installed wheel's own files as evidence), how networks are
built for each device (model_runtime: a function of target, compute type and the kernel library), the float-status
overflow path of the train cell, and the data-sink step accounting (MindSpore's sink loop emulated by
tests/sink_emulation.py) against a step-by-step run, including exact resume."""
import json
import os
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest

from model_utils.errors import UserError
from src.devices import device_checks
from src.devices.device_setup import kernels_status, model_runtime, pick_device_target
from src.model import cpu_kernels
from src.model.albert import Runtime
from tests.pretrain_helpers import ok, pretrain, run, weights

MINDSPORE = Path(ms.__file__).parent


def fake_gpu_host(tmp_path: Path, monkeypatch, cuda: str, gpu: str = "NVIDIA H100 80GB HBM3, 9.0") -> Path:
    """nvidia-smi listing `gpu` on PATH, and a CUDA_HOME whose nvcc reports release `cuda`."""
    bin_dir, cuda_home = tmp_path / "bin", tmp_path / f"cuda-{cuda}"
    (cuda_home / "bin").mkdir(parents=True)
    bin_dir.mkdir()
    for path, text in ((bin_dir / "nvidia-smi", gpu), (cuda_home / "bin" / "nvcc",
                                                      f"Cuda compilation tools, release {cuda}, V{cuda}.1")):
        path.write_text(f"#!/bin/sh\necho '{text}'\n")
        path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("CUDA_HOME", str(cuda_home))
    return cuda_home


def test_a_gpu_without_a_cuda_11_toolkit_is_named_with_the_reason(tmp_path, monkeypatch):
    cuda_home = fake_gpu_host(tmp_path, monkeypatch, "12.4")
    reason = device_checks.gpu_unavailable_reason()
    assert reason.startswith("GPU NVIDIA H100 80GB HBM3 found but not usable: ")
    assert f"CUDA_HOME={cuda_home} is CUDA 12.4" in reason and "CUDA 11.1 and 11.6 builds" in reason
    lines = []
    assert pick_device_target("auto", lines.append) == "CPU"
    assert lines == [f"warning: {reason}: running on CPU"]
    with pytest.raises(UserError, match="device_target GPU is not available here: GPU NVIDIA H100 .* CUDA 12.4"):
        pick_device_target("GPU")


@pytest.mark.parametrize("cuda, expected", [
    ("11.6", "a compute capability 9 GPU needs CUDA >= 11.8"),
    (None, f"CUDA_HOME is not set; MindSpore {ms.__version__} needs a CUDA 11.1 or 11.6 toolkit")])
def test_hopper_needs_cuda_11_8_and_cuda_home_must_be_set(cuda, expected, tmp_path, monkeypatch):
    fake_gpu_host(tmp_path, monkeypatch, cuda or "11.6")
    if cuda is None:
        monkeypatch.delenv("CUDA_HOME")
    assert expected in device_checks.gpu_unavailable_reason()


def test_no_gpu_no_reason(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert device_checks.gpu_unavailable_reason() == ""


def test_the_wheels_gpu_plugins_are_cuda_11_builds_without_bfloat16_kernels():
    """The evidence behind refusing bfloat16 on GPU and naming CUDA 11: the installed plugins themselves."""
    plugins = sorted((MINDSPORE / "lib" / "plugin").glob("libmindspore_gpu.so.*"))
    assert [path.name.rsplit(".so.", 1)[1] for path in plugins] == list(device_checks.GPU_PLUGIN_CUDA)
    for path in plugins:
        assert b"nv_bfloat16" not in path.read_bytes(), f"{path} has bfloat16 kernels now: revisit the refusal"


def test_compute_types_each_device_refuses(monkeypatch):
    from src.devices.device_setup import cpu_compute_type_problem
    from src.model import cpu_kernels

    # CPU: bfloat16 only as the compiled kernels' products, on a CPU with native bfloat16 dot products.
    monkeypatch.setattr(cpu_kernels, "bf16_support", lambda: (False, "no AVX512_BF16"))
    assert cpu_compute_type_problem("bfloat16") == ("compute_type bfloat16 on CPU needs native bfloat16 dot "
                                                    "products: no AVX512_BF16; use float32 (--net_cfg.compute_type "
                                                    "float32: a bfloat16 run's checkpoints are float32)")
    monkeypatch.setattr(cpu_kernels, "bf16_support", lambda: (True, ""))
    assert "the compiled CPU kernels, which this path does not use" in cpu_compute_type_problem("bfloat16", False)
    monkeypatch.setattr(cpu_kernels, "available", lambda: False)
    assert "runs only in the compiled CPU kernels, and this process has" in cpu_compute_type_problem("bfloat16")
    assert cpu_compute_type_problem("float32") == cpu_compute_type_problem("float16") == ""
    assert "CUDA 11 GPU plugins have no bfloat16" in device_checks.compute_type_problem("GPU", "bfloat16")
    assert device_checks.compute_type_problem("GPU", "float16") == ""
    monkeypatch.setattr(device_checks, "is_ascend_910a", lambda: True)
    assert "Ascend 910A" in device_checks.compute_type_problem("Ascend", "bfloat16")
    monkeypatch.setattr(device_checks, "is_ascend_910a", lambda: False)
    assert device_checks.compute_type_problem("Ascend", "bfloat16") == ""
    assert not device_checks.overflow_needs_float_status("CPU")


@pytest.mark.parametrize("built", [True, False], ids=["kernels_built", "no_kernels"])
def test_model_runtime_of_each_target_and_compute_type(built, monkeypatch):
    """CPU: the compiled kernels for float32 when they are built (heads read in place, the mask added inside their
    softmax), otherwise heads split and stacked and the mask broadcast once; GPU and Ascend: MindSpore's operations
    as they are, heads by transposes. Counter-based dropout on CPU only (MindSpore's dropout elsewhere)."""
    monkeypatch.setattr(cpu_kernels, "available", lambda: built)
    monkeypatch.setattr(device_checks, "is_ascend_910a", lambda: False)
    native_cpu = Runtime(split_heads=True, broadcast_mask=True, keyed_dropout=True)
    assert model_runtime("CPU", "float32") == (Runtime(kernels=True, keyed_dropout=True) if built else native_cpu)
    assert model_runtime("CPU", "float16") == native_cpu
    assert model_runtime("CPU", "float32", kernels=False) == native_cpu  # what exports use
    for target, compute_type in (("GPU", "float32"), ("GPU", "float16"), ("Ascend", "float32"),
                                 ("Ascend", "bfloat16")):
        assert model_runtime(target, compute_type) == Runtime(), (target, compute_type)


def test_model_runtime_refuses_what_the_device_cannot_run(monkeypatch):
    from src.model import cpu_kernels

    monkeypatch.setattr(cpu_kernels, "bf16_support", lambda: (False, "no AVX512_BF16"))
    with pytest.raises(UserError, match=r"^compute_type bfloat16 on CPU needs native bfloat16 dot products: no "
                                        r"AVX512_BF16; use float32 \(--net_cfg.compute_type float32: "
                                        r"a bfloat16 run's checkpoints are float32\)$"):
        model_runtime("CPU", "bfloat16")
    with pytest.raises(UserError, match="compute_type bfloat16 is not available on GPU"):
        model_runtime("GPU", "bfloat16")
    monkeypatch.setattr(device_checks, "is_ascend_910a", lambda: True)
    with pytest.raises(UserError, match="not available on Ascend 910A"):
        model_runtime("Ascend", "bfloat16")
    assert kernels_status("GPU") == "MindSpore operations (not on CPU)"


def test_a_float16_run_on_cpu_is_not_said_to_use_the_kernels():
    """float16 networks are built from MindSpore's operations on every device (model_runtime); the log said
    "compiled CPU kernels" for them on CPU."""
    from src.devices.device_setup import precision_note

    assert not model_runtime("CPU", "float16").kernels
    assert kernels_status("CPU", "float16").startswith("MindSpore operations (float16")
    assert "MindSpore operations" in precision_note("CPU", "float16", True)
    assert precision_note("GPU", "float16", True) == ""


def test_the_float_status_overflow_path_compiles_and_skips_an_overflowing_step():
    """On 910A the train cell adds mindspore.amp.all_finite (the float-status register there; IsFinite on CPU):
    the same graph, run here, must skip an update whose gradients overflow and apply a finite one."""
    from mindspore import Tensor, nn

    from src.training.train_step import AlbertTrainOneStepCell

    ms.set_context(mode=ms.GRAPH_MODE)

    class Square(nn.Cell):
        def __init__(self):
            super().__init__()
            self.weight = ms.Parameter(Tensor(np.ones(3, np.float32)), name="weight")

        def construct(self, x):
            return (self.weight * x).sum() ** 2

    network = Square()
    cell = AlbertTrainOneStepCell(network, nn.SGD(network.trainable_params(), learning_rate=0.1), loss_scale=None,
                                  clip_norm=None, float_status=True)
    loss, overflow, _ = cell(Tensor(np.array([1e30, 1.0, 1.0], np.float32)))
    assert bool(overflow.asnumpy()) and np.array_equal(network.weight.asnumpy(), np.ones(3, np.float32))
    loss, overflow, _ = cell(Tensor(np.array([1.0, 0.0, 0.0], np.float32)))
    assert not bool(overflow.asnumpy())  # d/dw (w.x)^2 = 2 (w.x) x = [2, 0, 0]; SGD lr 0.1
    np.testing.assert_allclose(network.weight.asnumpy(), [0.8, 1.0, 1.0], rtol=1e-6)


# float16 with the default loss scale 2^32 overflows at once, then 2^16 does not: the overflow count must survive sinks.
SINK_RUN = ["--train_steps", "12", "--log_steps", "2", "--save_checkpoint_steps", "4", "--save_checkpoint_num", "5",
            "--accumulation_steps", "2", "--enable_lossscale", "true", "--net_cfg.compute_type", "float16",
            "--scale_factor", "65536", "--data_sink_steps", "4"]
TIMING = ("samples_per_s", "tokens_per_s", "eta_s", "elapsed_s")


def metrics(out: Path) -> list:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [{key: value for key, value in row.items() if key not in TIMING} for row in rows]


def assert_same_metrics(got: list, expected: list) -> None:
    assert len(got) == len(expected)
    for ours, reference in zip(got, expected):
        assert ours.keys() == reference.keys()
        for key in reference:
            assert ours[key] == pytest.approx(reference[key], rel=1e-6), (key, ours, reference)


@pytest.fixture(scope="module")
def step_by_step(data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("steps")
    ok(run(pretrain(data, out, *SINK_RUN)))
    return out


@pytest.mark.slow
def test_sinks_count_every_step_and_resume_exactly(data, step_by_step, tmp_path):
    """Sinks of 4 micro-steps (2 optimizer steps): one Model.train call for the run, log lines every 2 steps with
    loss means over every micro-batch, the overflow of the first step counted, checkpoints every 4 steps - all equal
    to the step-by-step run; removing the last checkpoint and starting again resumes to the same weights."""
    out = tmp_path / "sink"
    sink = ok(run(["-m", "tests.sink_emulation", *pretrain(data, out, *SINK_RUN)]))
    calls = [line for line in sink.stdout.splitlines() if line.startswith("sink emulation: Model.train")]
    assert calls == ["sink emulation: Model.train epoch=6 sink_size=4 batches=24 sink=True"]
    expected = metrics(step_by_step)
    assert [row["step"] for row in expected] == [2, 4, 6, 8, 10, 12]
    assert expected[0]["overflow_count"] == 1 and expected[0]["loss_scale"] == 65536  # the first update overflowed
    assert_same_metrics(metrics(out), expected)
    reference_weights = weights(step_by_step / "checkpoints" / "albert_pretrain-12.ckpt")
    for step in (4, 8, 12):
        assert (out / "checkpoints" / f"albert_pretrain-{step}.ckpt").is_file()
    for name, value in weights(out / "checkpoints" / "albert_pretrain-12.ckpt").items():
        assert np.array_equal(value, reference_weights[name]), name

    (out / "checkpoints" / "albert_pretrain-12.ckpt").unlink()
    resumed = ok(run(["-m", "tests.sink_emulation", *pretrain(data, out, *SINK_RUN)]))
    assert "sink emulation: Model.train epoch=2 sink_size=4 batches=8 sink=True" in resumed.stdout
    for name, value in weights(out / "checkpoints" / "albert_pretrain-12.ckpt").items():
        assert np.array_equal(value, reference_weights[name]), name
    assert_same_metrics(metrics(out), expected)  # rows after step 8 dropped, then logged again


def test_a_run_over_several_epochs_builds_one_dataset_and_calls_model_train_once(data, tmp_path):
    """3 epochs of the data (MindDataset refuses more sampler indices than rows: the files are listed per epoch)."""
    from src.data.pipelines import count_rows

    rows = count_rows(data["train"])
    result = ok(run(["-m", "tests.sink_emulation", *pretrain(data, tmp_path, "--batch_size", "256", "--epoch_size", "3",
                                                             "--log_steps", "100", "--enable_save_ckpt", "false",
                                                             "--enable_data_sink", "false")]))
    calls = [line for line in result.stdout.splitlines() if line.startswith("sink emulation: Model.train")]
    assert calls == [f"sink emulation: Model.train epoch=1 sink_size=-1 batches={3 * (rows // 256)} sink=False"]
    assert f"step {3 * (rows // 256)}/{3 * (rows // 256)}" in result.stdout


def test_the_scheduler_does_not_repeat_mindspores_misleading_list_of_timed_out_nodes():
    """A killed rank 1 made the scheduler say "Timed out node list is: {0, 1}, worker 0 is the first one timed out"
    (MindSpore's words) before the script's last line named rank 1 correctly."""
    from src.devices.device_setup import cluster_problem

    said = cluster_problem("Timed out node list is: {0, 1}, worker 0 is the first one timed out.\nC++ stack", "MS_SCHED")
    assert "worker 0" not in said and said.startswith("the scheduler stopped: a worker or node failed")
    joined = cluster_problem("Failed to connect to the scheduler.\nC++ stack", "MS_WORKER")
    assert joined.endswith("failed (MindSpore: Failed to connect to the scheduler.)")
