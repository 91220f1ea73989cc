"""Training in bfloat16 on CPU (`net_cfg.compute_type: bfloat16`): the compiled kernels' products in bfloat16 with
float32 accumulation, everything else float32.

The float32 path is the reference (it equals HF transformers within 1e-6: tests/test_model_parity.py): the first
loss and the gradients of a step stay within bfloat16's rounding of it; a kill -9 resume stays bit-identical and the
checkpoints float32; on a CPU without native bfloat16 the run stops in one line naming the missing feature. The
learning test's bfloat16 twin (tests/test_pretrain_learning.py), data parallel (tests/test_multi_machine.py) and
bench_train (tests/test_benchmarks.py) are beside their float32 versions.
"""
import json

import numpy as np
import pytest

from src.model import cpu_kernels
from tests.finetune_helpers import make_glue
from tests.pretrain_helpers import digest, metrics_by_step, ok, pretrain, run

BF16, WHY_NOT = cpu_kernels.bf16_support()
needs_bf16 = [pytest.mark.skipif(not cpu_kernels.available(), reason="compiled CPU kernels unavailable"),
              pytest.mark.skipif(not BF16, reason=WHY_NOT or "native bfloat16")]
TINY = dict(vocab_size=300, embedding_size=16, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0)


@pytest.fixture
def float32_afterwards():
    """The kernels' precision is process-wide: leave it float32 for the tests that follow."""
    yield
    cpu_kernels.set_bf16(False)


def pretraining_batch(rng: np.random.Generator, batch: int = 8, seq: int = 64, masked: int = 8) -> list:
    """The 7 pretraining columns: full rows, two segments, `masked` distinct positions per row."""
    segments = (np.arange(seq) >= seq // 2).astype(np.int32)
    positions = np.stack([np.sort(rng.choice(np.arange(1, seq), masked, replace=False)) for _ in range(batch)])
    return [rng.integers(0, TINY["vocab_size"], (batch, seq)).astype(np.int32), np.ones((batch, seq), np.int32),
            np.tile(segments, (batch, 1)), rng.integers(0, 2, (batch, 1)).astype(np.int32), positions.astype(np.int32),
            rng.integers(0, TINY["vocab_size"], (batch, masked)).astype(np.int32), np.ones((batch, masked), np.float32)]


def loss_and_gradients(compute_type: str, weights: dict, batch: list):
    import mindspore as ms
    from mindspore import Tensor

    from src.common.checkpoint_io import load_weights
    from src.devices.device_setup import model_runtime
    from src.model.albert import AlbertConfig
    from src.model.pretraining_heads import AlbertNetworkWithLoss

    net = AlbertNetworkWithLoss(AlbertConfig(**TINY, compute_type=compute_type), is_training=True,
                                runtime=model_runtime("CPU", compute_type))
    load_weights(net, weights)
    params = net.trainable_params()
    loss, grads = ms.value_and_grad(net, None, params)(*[Tensor(column) for column in batch])
    return float(loss.asnumpy()), {p.name: g.asnumpy() for p, g in zip(params, grads)}


pytestmark = needs_bf16


def test_first_loss_and_gradients_stay_within_bfloat16_rounding_of_float32(float32_afterwards):
    import mindspore as ms

    from src.model.albert import AlbertConfig
    from src.model.pretraining_heads import AlbertNetworkWithLoss

    ms.set_context(mode=ms.PYNATIVE_MODE)
    ms.set_seed(3)
    weights = {p.name: p.asnumpy() for p in AlbertNetworkWithLoss(AlbertConfig(**TINY)).get_parameters()}
    batch = pretraining_batch(np.random.default_rng(0))
    loss32, grads32 = loss_and_gradients("float32", weights, batch)
    loss16, grads16 = loss_and_gradients("bfloat16", weights, batch)
    assert cpu_kernels._requested_bf16 == [True]
    # bfloat16 keeps 8 significant bits (relative rounding 2^-9 = 0.2% per operand); float32 accumulation keeps the
    # sums' error at that order: the loss within 0.5%, every gradient pointing the same way within a few percent.
    assert loss16 != loss32 and abs(loss16 - loss32) < 5e-3 * loss32, (loss16, loss32)
    largest = max(np.linalg.norm(g) for g in grads32.values())
    for name, g32 in grads32.items():
        g16 = grads16[name]
        if np.linalg.norm(g32) < 1e-4 * largest:  # zero up to rounding (the key's bias: softmax ignores it)
            assert np.linalg.norm(g16) < 1e-3 * largest, name
            continue
        cosine = float((g16 * g32).sum() / (np.linalg.norm(g16) * np.linalg.norm(g32) + 1e-30))
        assert cosine > 0.995, (name, cosine)
        assert abs(np.linalg.norm(g16) / np.linalg.norm(g32) - 1) < 0.03, name


def test_each_weight_is_rounded_to_bfloat16_once_per_step_whatever_the_layers_sharing_it(float32_afterwards):
    """In a bfloat16 train step (GRAPH mode) every dense layer's weights and the tied decoder table are rounded to
    bfloat16 once (the layers sharing them share the copy), while the products run once per layer; the shared
    layer's six weights are rounded and packed in one call each (PackBf16Weights), the others copied."""
    import mindspore as ms
    from mindspore import ParameterTuple, Tensor, nn, ops

    from src.devices.device_setup import model_runtime
    from src.model.albert import AlbertConfig
    from src.model.pretraining_heads import AlbertNetworkWithLoss

    class Gradients(nn.Cell):
        def __init__(self, net):
            super().__init__()
            self.net, self.params = net, ParameterTuple(net.trainable_params())
            self.grad = ops.GradOperation(get_by_list=True)

        def construct(self, *batch):
            return self.grad(self.net, self.params)(*batch)

    ms.set_context(mode=ms.GRAPH_MODE)
    config = AlbertConfig(**dict(TINY, num_hidden_layers=3), compute_type="bfloat16")
    net = AlbertNetworkWithLoss(config, is_training=True, runtime=model_runtime("CPU", "bfloat16"))
    dense_weights = {id(cell.weight) for _, cell in net.cells_and_names() if isinstance(cell, cpu_kernels.Dense)}
    step, batch = Gradients(net), [Tensor(column) for column in pretraining_batch(np.random.default_rng(1))]
    step(*batch)  # compiled outside the count
    cpu_kernels.start_profile()
    for _ in range(2):
        step(*batch)
    counts = cpu_kernels.stop_profile()
    packed = {id(cell.weight) for _, cell in net.cells_and_names()
              if isinstance(cell, cpu_kernels.Dense) and cell.pack_weights}
    assert len(packed) == 6  # query, key, value, attention's output, the feed-forward network's two
    assert counts["PackBf16Weights"][0] == 2 * len(packed)
    assert counts["RoundToBf16"][0] == 2 * (len(dense_weights) - len(packed) + 1)  # + the decoder's table
    assert counts["DenseQKVCopy"][0] == 2 * 3  # the query, key and value products: once per layer


@pytest.mark.parametrize("share_type, groups, packed", [
    ("all", 1, ["query", "key", "value", "dense", "ffn", "ffn_output"]), ("all", 3, []),
    ("attention", 1, ["query", "key", "value", "dense"]), ("ffn", 1, ["ffn", "ffn_output"]), ("none", 1, [])])
def test_the_weights_of_layers_several_layers_run_are_packed_the_rest_copied(share_type, groups, packed,
                                                                           float32_afterwards):
    """Packing pays where several layers read the weights in a step (benchmarks/bench_products.py: a product saves
    about what packing its weights costs): the dense layers of a shared group or shared part, never the embeddings'
    projection, the pooler or the heads, nor the layers of a group run once (3 groups for 3 layers, share_type
    none). Float32 networks pack nothing."""
    from src.devices.device_setup import model_runtime
    from src.model.albert import AlbertConfig, AlbertModel

    config = dict(TINY, num_hidden_layers=3, num_hidden_groups=groups, share_type=share_type)
    for compute_type in ("bfloat16", "float32"):
        model = AlbertModel(AlbertConfig(**config, compute_type=compute_type), is_training=True,
                            runtime=model_runtime("CPU", compute_type))
        names = {name.rsplit(".", 1)[-1] for name, cell in model.cells_and_names()
                 if isinstance(cell, cpu_kernels.Dense) and cell.pack_weights}
        assert names == (set(packed) if compute_type == "bfloat16" else set()), compute_type


def test_a_cpu_without_native_bfloat16_is_refused_in_one_line(data, tmp_path, monkeypatch, capsys,
                                                            float32_afterwards):
    import run_pretrain
    import src.devices.device_setup
    from model_utils.errors import run_cli

    # In this process MindSpore's runtime is already started: the device setup is taken as done.
    monkeypatch.setattr(src.devices.device_setup, "setup_device", lambda *args, **kwargs: src.devices.device_setup.Device("CPU"))
    why = "this CPU has no native bfloat16 dot products (neither AVX512_BF16 nor AMX-BF16 in /proc/cpuinfo)"
    monkeypatch.setattr(cpu_kernels, "bf16_support", lambda: (False, why))
    argv = pretrain(data, tmp_path / "out", "--train_steps", "1", "--net_cfg.compute_type", "bfloat16")[1:]
    assert run_cli(run_pretrain.main, argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: compute_type bfloat16 on CPU needs native bfloat16 dot products: {why}; use float32 "
        f"(--net_cfg.compute_type float32: a bfloat16 run's checkpoints are float32)")
    assert not (tmp_path / "out").exists()


BF16_RUN = ["--net_cfg.compute_type", "bfloat16", "--train_steps", "90", "--log_steps", "1",
            "--save_checkpoint_steps", "30", "--save_checkpoint_num", "2", "--optimizer", "Lamb",
            "--optimizer_cfg.Lamb.learning_rate", "3e-3", "--optimizer_cfg.Lamb.warmup_steps", "10"]


@pytest.mark.slow
def test_a_bfloat16_run_killed_mid_step_resumes_bit_identically_with_float32_checkpoints(data, tmp_path):
    from tests.test_crash_safety import killed_after_rows

    reference = ok(run(pretrain(data, tmp_path / "reference", *BF16_RUN)))
    assert "precision: bfloat16 products with float32 accumulation (AVX512_BF16" in reference.stdout or \
        "precision: bfloat16 products with float32 accumulation (AMX_BF16" in reference.stdout
    assert "loss scaling kept as configured, not needed" in reference.stdout
    expected = metrics_by_step(tmp_path / "reference" / "metrics.jsonl")
    out = tmp_path / "killed"
    args = pretrain(data, out, *BF16_RUN)
    killed_after_rows(args, out / "metrics.jsonl", 45)
    resumed = ok(run(args))
    got = metrics_by_step(out / "metrics.jsonl")
    assert sorted(got) == sorted(expected) == list(range(1, 91))
    assert all(got[step]["loss"] == expected[step]["loss"] for step in expected)  # bit-identical, not close
    assert digest(resumed.stdout) == digest(reference.stdout)

    import mindspore as ms

    saved = ms.load_checkpoint(str(out / "checkpoints" / "albert_pretrain-90.ckpt"))
    assert {value.dtype for value in saved.values()
            if not isinstance(value, str) and value.dtype not in (ms.int32, ms.int64, ms.bool_)} == \
        {ms.float32}  # weights, optimizer state, loss scale: float32
    config = json.loads((out / "checkpoints" / "albert_config.json").read_text())
    assert config["compute_type"] == "bfloat16"


@pytest.mark.slow
def test_a_converted_hf_model_fine_tuned_in_bfloat16_ends_where_float32_does(tmp_path):
    """A model in HF's format (random weights made by transformers, converted by src.convert_checkpoint)
    fine-tuned 250 steps on 200 real CoLA rows in float32 and in bfloat16: both fit the rows, their accuracies within 3
    points and their predictions the same on 97% of the rows (measured: accuracy 0.980 and 0.975, 99.5% the same)."""
    transformers = pytest.importorskip("transformers")
    import torch

    torch.manual_seed(0)
    hf = transformers.AlbertForPreTraining(transformers.AlbertConfig(
        vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64, hidden_act="gelu_new"))
    hf.save_pretrained(str(tmp_path / "hf"))
    ok(run(["-m", "src.convert_checkpoint", "--src", "hf", "--input", str(tmp_path / "hf"),
            "--output", str(tmp_path / "converted.ckpt")]))
    cola = make_glue(tmp_path, "cola", 200, 40, seq=32)
    results = {}
    for compute_type in ("float32", "bfloat16"):
        out = tmp_path / compute_type
        ok(run(["run_classifier.py", "--output_dir", str(out), "--device_target", "CPU", "--log_steps", "50",
                "--load_pretrain_checkpoint_path", str(tmp_path / "converted.ckpt"),
                "--train_data_file_path", str(cola["train"]), "--eval_data_file_path", str(cola["train"]),
                "--train_batch_size", "16", "--epoch_num", "20", "--assessment_method", "mcc",
                "--optimizer_cfg.AdamWeightDecay.learning_rate", "5e-4", "--net_cfg.hidden_dropout_prob", "0",
                "--classifier_dropout_prob", "0", "--net_cfg.compute_type", compute_type]))
        predictions = (out / "eval" / "predictions.tsv").read_text().splitlines()[1:]
        results[compute_type] = ([line.split("\t")[1] for line in predictions],
                                 json.loads((out / "eval" / "eval_results.json").read_text()))
    labels = [line.split("\t")[1] for line in (cola["train"].with_suffix(".tsv")).read_text().splitlines()]
    accuracy = {k: float(np.mean(np.array(p) == np.array(labels))) for k, (p, _) in results.items()}
    assert min(accuracy.values()) >= 0.9, accuracy  # both fit the rows (float32 alone is tests/test_finetune_e2e)
    assert abs(accuracy["bfloat16"] - accuracy["float32"]) <= 0.03, accuracy
    agreement = np.mean(np.array(results["bfloat16"][0]) == np.array(results["float32"][0]))
    print(f"accuracy {accuracy}, agreement {agreement}")
    assert agreement >= 0.97, agreement
