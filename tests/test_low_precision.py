"""Low-precision serving: `export.py --file_format ONNX --quantize int8` writes a model that is really
int8 (the quantized operators, the dense layers' weights stored as 8-bit numbers) and stays close to the float32
export on real MRPC pairs, and src.predict serves it; `src.predict --precision bfloat16` and `int8` serve a checkpoint
with the kernels' products in that precision, close to float32, and say in one line why where they cannot.

The counts expected are the architecture's (which layers are dense, which stay float), not read from our code; the
float32 paths are the reference the low-precision ones are held to (the bfloat16 products themselves are checked
against numpy in tests/test_cpu_kernels.py).
"""
import json
from pathlib import Path

import numpy as np
import pytest

from tests.pretrain_helpers import ok
from tests.test_export import BATCH, NUM_CLASS, SEQ, export, heads, tiny_config  # noqa: F401 (heads: a fixture)


@pytest.fixture(scope="module")
def exports(heads, tmp_path_factory):  # noqa: F811
    """The tiny classifier head exported as float32 and as int8 ONNX (batch 2)."""
    pytest.importorskip("onnxruntime")
    folder = tmp_path_factory.mktemp("int8")
    checkpoint = heads["classifier"][1]
    ok(export("classifier", checkpoint, folder / "float", "--file_format", "ONNX", "--export_batch_size", str(BATCH)))
    done = ok(export("classifier", checkpoint, folder / "int8", "--file_format", "ONNX", "--quantize", "int8",
                     "--export_batch_size", str(BATCH)))
    assert "as ONNX int8:" in done.stdout
    # no intermediate file left, only the exports' log
    assert sorted(p.name for p in folder.iterdir()) == ["float.onnx", "int8.onnx", "logs"]
    return {"float": folder / "float.onnx", "int8": folder / "int8.onnx", "stdout": done.stdout}


def test_the_int8_file_is_int8(exports):
    import onnx

    config = tiny_config()
    model = onnx.load(str(exports["int8"]))
    ops = [node.op_type for node in model.graph.node]
    # dense layers: the embedding projection, 6 per layer (query, key, value, attention output, ffn, ffn output),
    # the pooler; the classifier (the head's last layer) and the 2 attention products per layer stay float
    quantized = 1 + 6 * config.num_hidden_layers + 1
    assert ops.count("MatMulInteger") == quantized
    assert ops.count("MatMul") == 1 + 2 * config.num_hidden_layers
    assert "DynamicQuantizeLinear" in ops
    assert f"int8: {quantized} dense layer(s) quantized, 1 kept float32" in exports["stdout"]
    int8_weights = [init for init in model.graph.initializer  # matrices; the zero points are int8 scalars
                    if init.data_type == onnx.TensorProto.INT8 and len(init.dims) == 2]
    h, e, i, groups = config.hidden_size, config.embedding_size, config.intermediate_size, config.num_hidden_groups
    elements = e * h + groups * (4 * h * h + 2 * h * i) + h * h  # the distinct matrices (layers of a group share)
    assert sum(int(np.prod(init.dims)) for init in int8_weights) == elements
    float_elements = {name: sum(int(np.prod(init.dims)) for init in onnx.load(str(exports[name])).graph.initializer
                                if init.data_type == onnx.TensorProto.FLOAT) for name in ("float", "int8")}
    assert float_elements["float"] - float_elements["int8"] == elements - len(int8_weights)  # + one scale each
    # 4 bytes a weight became 1; at this size the quantization's extra nodes take back part of it
    assert exports["int8"].stat().st_size < exports["float"].stat().st_size


# dense layers of each head (the architecture's): quantized = the embedding projection + 6 per layer + the head's
# inner dense layers (pooler for classifier and RACE; the end and answer-class hidden layers of SQuAD v2); kept float
# = the layers that give the outputs
HEAD_DENSE = {"race": (1, 1), "squad_v1": (0, 1), "squad_v2": (2, 3)}


@pytest.mark.parametrize("task", list(HEAD_DENSE))
def test_every_head_exports_int8_with_its_last_layers_float(task, heads, tmp_path):  # noqa: F811
    import onnx
    import onnxruntime

    from tests.test_export import INPUTS, outputs_of, random_inputs

    head, checkpoint = heads[task]
    done = ok(export(task, checkpoint, tmp_path / "int8", "--file_format", "ONNX", "--quantize", "int8",
                     "--export_batch_size", str(BATCH)))
    inner, last = HEAD_DENSE[task]
    quantized = 1 + 6 * tiny_config().num_hidden_layers + inner
    assert f"int8: {quantized} dense layer(s) quantized, {last} kept float32" in done.stdout
    ops = [node.op_type for node in onnx.load(str(tmp_path / "int8.onnx")).graph.node]
    assert ops.count("MatMulInteger") == quantized
    session = onnxruntime.InferenceSession(str(tmp_path / "int8.onnx"), providers=["CPUExecutionProvider"])
    arrays = random_inputs(task, BATCH, seed=4)
    got = session.run(None, dict(zip([i.name for i in session.get_inputs()], arrays[:INPUTS[task]])))
    want = outputs_of(head, arrays)
    assert [g.shape for g in got] == [w.shape for w in want]
    if task != "squad_v2":  # its outputs are top-k choices, which may reorder under int8
        spread = max(np.abs(w).max() for w in want)  # weights of std 0.3 (the export tests' heads): a coarse case
        assert 0 < max(np.abs(g - w).max() for g, w in zip(got, want)) < 0.3 * spread


def _mrpc_features(assets, tokenizer, rows: int):
    from src.data.features import InputExample, classifier_feature
    from src.data.input_text import read_tsv

    pairs = [fields for _, fields in read_tsv(assets / "glue" / "MRPC" / "dev.tsv")][1:rows + 1]
    features = [classifier_feature(InputExample(str(n), f[3], f[4], None, ""), tokenizer, {}, SEQ)
                for n, f in enumerate(pairs)]
    return pairs, [np.stack([f[k] for f in features]).astype(np.int32) for k in ("input_ids", "segment_ids",
                                                                                  "input_mask")]


def test_int8_logits_stay_close_to_float32_on_real_pairs(exports, assets, tokenizer):
    import onnxruntime

    _, columns = _mrpc_features(assets, tokenizer, 40)
    sessions = {name: onnxruntime.InferenceSession(str(exports[name]), providers=["CPUExecutionProvider"])
                for name in ("float", "int8")}
    logits = {name: np.concatenate([session.run(None, dict(zip(("input_ids", "token_type_ids", "input_mask"),
                                                                [c[s:s + BATCH] for c in columns])))[0]
                                    for s in range(0, 40, BATCH)]) for name, session in sessions.items()}
    spread = np.abs(logits["float"]).max()
    assert spread > 0.5  # a model whose outputs move with the input
    assert np.abs(logits["int8"] - logits["float"]).max() < 0.2 * spread  # weights of std 0.3: a coarse case
    assert not np.array_equal(logits["int8"], logits["float"])  # it did compute in int8
    agreement = (logits["int8"].argmax(1) == logits["float"].argmax(1)).mean()
    assert agreement >= 0.9


def test_predict_serves_the_int8_file(exports, assets, tokenizer, spm_path, tmp_path):
    from tests.test_export import predict_lines, requests_file

    pairs, _ = _mrpc_features(assets, tokenizer, 5)
    requests = requests_file(tmp_path / "pairs.jsonl", [{"text_a": f[3], "text_b": f[4]} for f in pairs])
    answers = {name: predict_lines("--model", str(exports[name]), "--task", "classifier", "--spm_model_file",
                                   spm_path, "--input_file", str(requests), "--labels", "a,b,c")
               for name in ("float", "int8")}
    assert len(answers["int8"]) == 5
    for fp32, int8 in zip(answers["float"], answers["int8"]):
        assert abs(sum(int8["probabilities"].values()) - 1) < 1e-5
        np.testing.assert_allclose([int8["probabilities"][k] for k in "abc"],
                                   [fp32["probabilities"][k] for k in "abc"], rtol=0, atol=0.1)
    assert json.dumps(answers["int8"]) != json.dumps(answers["float"])


@pytest.mark.parametrize("name", ["float", "int8"])
def test_served_sessions_keep_the_residual_add_out_of_layer_norm(exports, name, tmp_path):
    """src.predict's ONNX Runtime session leaves out the SkipLayerNormalization fusion (slow on CPU: SLOW_FUSIONS),
    so each LayerNorm runs as ORT's LayerNormalization after a plain Add, where ORT's defaults fuse the two. Read
    from the kernels ORT's own profiler saw run."""
    from src.serving.engines import SLOW_FUSIONS, onnxruntime_session

    def kernels(disabled) -> list:
        session = onnxruntime_session(str(exports[name]), 1, disabled, str(tmp_path / f"profile{len(disabled)}"))
        session.run(None, {item.name: np.ones((BATCH, SEQ), np.int32) for item in session.get_inputs()})
        trace = json.loads(Path(session.end_profiling()).read_text())
        return [event["args"]["op_name"] for event in trace
                if event.get("cat") == "Node" and event["name"].endswith("_kernel_time")]

    layer_norms = 1 + 2 * tiny_config().num_hidden_layers  # the embeddings', and after attention and FFN per layer
    served, defaults = kernels(SLOW_FUSIONS), kernels(())
    assert served.count("LayerNormalization") == layer_norms and "SkipLayerNormalization" not in served
    assert defaults.count("SkipLayerNormalization") == layer_norms  # each follows an Add (the embeddings' sum too)


def _pairs_file(assets, tokenizer, path, rows: int):
    from tests.test_export import requests_file

    pairs, _ = _mrpc_features(assets, tokenizer, rows)
    return requests_file(path, [{"text_a": f[3], "text_b": f[4]} for f in pairs])


def test_predict_serves_a_checkpoint_with_bf16_and_int8_products(heads, assets, tokenizer, spm_path,  # noqa: F811
                                                                  tmp_path):
    """--precision bfloat16 and int8 on a .ckpt: answers close to float32's (int8: weights quantized at load per
    output channel, inputs per row: coarser on this tiny net of std-0.3 weights), each run saying its products."""
    from src.model import cpu_kernels
    from tests.pretrain_helpers import run

    precisions = ["float32"] + [name for name, (supported, why) in (("bfloat16", cpu_kernels.bf16_support()),
                                                                    ("int8", cpu_kernels.int8_support())) if supported]
    if len(precisions) == 1:
        pytest.skip("neither bfloat16 nor int8 products on this CPU")
    requests = _pairs_file(assets, tokenizer, tmp_path / "pairs.jsonl", 8)
    answers = {}
    for precision in precisions:
        done = ok(run(["-m", "src.predict", "--model", str(heads["classifier"][1]), "--task", "classifier",
                       "--spm_model_file", spm_path, "--seq_length", str(SEQ), "--input_file", str(requests),
                       "--labels", "a,b,c", "--batch_size", "3", "--precision", precision]))
        answers[precision] = [json.loads(line) for line in done.stdout.strip().splitlines()]
        assert ("products" in done.stderr) == (precision != "float32"), done.stderr
        assert precision == "float32" or f"{precision} products" in done.stderr, done.stderr
    probabilities = {precision: np.array([[a["probabilities"][k] for k in "abc"] for a in found])
                     for precision, found in answers.items()}
    for precision, tolerance in (("bfloat16", 0.05), ("int8", 0.1)):
        if precision in answers:
            difference = np.abs(probabilities[precision] - probabilities["float32"]).max()
            assert 0 < difference < tolerance, (precision, difference)
            agree = np.mean([a["label"] == b["label"] for a, b in zip(answers[precision], answers["float32"])])
            assert agree >= (1.0 if precision == "bfloat16" else 0.75), (precision, agree)


def test_bf16_is_refused_where_it_cannot_run(heads, spm_path, monkeypatch, capsys):  # noqa: F811
    from model_utils.errors import run_cli
    from src import predict
    from src.model import cpu_kernels

    why = "this CPU has no native bfloat16 dot products (neither AVX512_BF16 nor AMX-BF16 in /proc/cpuinfo)"
    monkeypatch.setattr(cpu_kernels, "bf16_support", lambda: (False, why))
    argv = ["--model", str(heads["classifier"][1]), "--task", "classifier", "--spm_model_file", spm_path,
            "--seq_length", str(SEQ), "--text_a", "A sentence.", "--precision", "bfloat16", "--device_target", "CPU"]
    assert run_cli(predict.main, argv) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == ("error: --precision bfloat16 needs native bfloat16 dot products: this CPU has no native bfloat16 "
                     "dot products (neither AVX512_BF16 nor AMX-BF16 in /proc/cpuinfo); use --precision float32")
    assert cpu_kernels._requested_bf16 == [False]


def test_int8_is_refused_where_it_cannot_run_and_on_exported_models(heads, exports, spm_path, monkeypatch,  # noqa: F811
                                                                    capsys):
    from model_utils.errors import run_cli
    from src import predict
    from src.model import cpu_kernels

    why = "oneDNN's int8 products here: none (no VNNI)"
    monkeypatch.setattr(cpu_kernels, "int8_support", lambda: (False, why))
    argv = ["--task", "classifier", "--spm_model_file", spm_path, "--text_a", "A sentence.", "--precision", "int8"]
    assert run_cli(predict.main, ["--model", str(heads["classifier"][1]), "--seq_length", str(SEQ),
                                  "--device_target", "CPU", *argv]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == f"error: --precision int8: {why}; use --precision float32"
    assert run_cli(predict.main, ["--model", str(exports["float"]), *argv]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error == (f"error: --precision int8 quantizes a .ckpt as it loads; an exported model is quantized by "
                     f"export.py --quantize int8: {exports['float']}")


def test_served_weights_are_made_once_at_load(monkeypatch):
    """A network served in bfloat16 reads its weights' bfloat16 copy rounded and packed when loaded: no rounding or
    packing kernel runs per request, the products read the packed form (where this CPU packs), and the results are
    bit-identical to rounding per call (the training path, which also packs the shared layer's weights once per
    call: the same numbers); served in int8, every dense product is an int8 kernel reading the weights quantized at
    load (the feed-forward network and attention's output one call each per layer, with their residual and
    LayerNorm), and the outputs stay near float32's."""
    import mindspore as ms
    from mindspore import Tensor

    from src.devices.device_setup import serving_runtime
    from src.model import cpu_kernels
    from src.model.albert import AlbertConfig, AlbertModel, Runtime
    from tests.test_bf16_training import TINY

    if not cpu_kernels.available():
        pytest.skip(f"compiled CPU kernels: {cpu_kernels.status()}")
    ms.set_context(mode=ms.GRAPH_MODE)
    rng = np.random.default_rng(4)
    batch = [Tensor(rng.integers(0, TINY["vocab_size"], (4, 32)).astype(np.int32)),
             Tensor(np.tile((np.arange(32) >= 16).astype(np.int32), (4, 1))), Tensor(np.ones((4, 32), np.int32))]

    def served(runtime: Runtime, reference=None):
        model = AlbertModel(AlbertConfig(**TINY), is_training=False, runtime=runtime)
        if reference is not None:
            ms.load_param_into_net(model, reference.parameters_dict(), strict_load=True)
        model.set_train(False)
        # the embeddings' projection, the shared layer's 6 and the pooler
        assert cpu_kernels.convert_weights(model) == (8 if runtime.serving_weights else 0)
        model(*batch)  # compiled outside the count
        cpu_kernels.start_profile()
        outputs = [output.asnumpy() for output in model(*batch)]
        return model, outputs, cpu_kernels.stop_profile()

    try:
        reference, fp32, _ = served(serving_runtime("CPU", "float32", "float32"))
        if cpu_kernels.bf16_support()[0]:
            _, per_call, counts = served(Runtime(kernels=True, bf16_weights=True), reference)
            assert counts["RoundToBf16"][0] > 0 and counts["PackBf16Weights"][0] == 6  # the shared layer's, packed
            _, at_load, counts = served(serving_runtime("CPU", "bfloat16", "bfloat16"), reference)
            assert "RoundToBf16" not in counts and "PackBf16Weights" not in counts
            assert counts["DenseQKVCopy"][0] == TINY["num_hidden_layers"]
            if "served ones at load" in cpu_kernels.onednn():  # the status line: this CPU packs them
                assert counts["thread: matmul primitive bf16, packed weights"][0] > 0, counts
            for got, want in zip(at_load, per_call):
                np.testing.assert_array_equal(got, want)
        if cpu_kernels.int8_support()[0]:
            _, int8, counts = served(serving_runtime("CPU", "float32", "int8"), reference)
            layers = TINY["num_hidden_layers"]
            # per layer: query/key/value; attention's output, residual and LayerNorm; the feed-forward network with
            # its residual and LayerNorm (post-LN); the embeddings' projection and the pooler besides
            assert counts["DenseQKVInt8"][0] == counts["DenseResidualNormInt8"][0] == layers
            assert counts["FusedAttentionInferenceBf16"][0] == layers  # bfloat16 products on AMX, float32 elsewhere
            assert counts["FeedForwardNormInt8"][0] == layers and counts["MatMulInt8Bias"][0] == 2
            assert counts["LayerNorm"][0] == 1  # the embeddings'; the blocks' inside the int8 calls
            assert not {"MatMulNT", "MatMulNTBias", "MatMulNTCopy", "MatMulNTBiasCopy", "DenseQKV",
                        "DenseQKVCopy"} & set(counts)  # no float dense product left
            for got, want in zip(int8, fp32):
                assert 0 < np.abs(got - want).max() < 0.1 * np.abs(want).max()
            # pre-LN blocks: the feed-forward network in one call, the residuals and LayerNorms outside it
            preln = AlbertConfig(**TINY, ln_type="preln")
            reference = AlbertModel(preln, is_training=False, runtime=serving_runtime("CPU", "float32", "float32"))
            reference.set_train(False)
            model = AlbertModel(preln, is_training=False, runtime=serving_runtime("CPU", "float32", "int8"))
            ms.load_param_into_net(model, reference.parameters_dict(), strict_load=True)
            model.set_train(False)
            cpu_kernels.convert_weights(model)
            for got, want in zip(model(*batch), reference(*batch)):
                assert 0 < np.abs(got.asnumpy() - want.asnumpy()).max() < 0.1 * np.abs(want.asnumpy()).max()
    finally:
        cpu_kernels.set_bf16(False)
