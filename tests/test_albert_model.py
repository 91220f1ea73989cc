"""Backbone structure: presets, parameter counts against HF, sharing, pre-LN, compute types, config files, and the
Runtime every cell is built with (never read from the device)."""
import functools
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from mindspore import Tensor
from mindspore.nn.utils import no_init_parameters

from tests.hf_reference import random_batch
from src.model import cpu_kernels
from src.model.albert import PORTABLE, PRESETS, Activation, AlbertAttention, AlbertConfig, AlbertLayer, AlbertModel, \
    LayerDropout, Runtime, count_parameters
from src.model.pretraining_heads import AlbertNetworkWithLoss, AlbertPreTraining
from src.model.task_heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering,
                                     AlbertForSequenceClassification, AlbertForSquadV2)

TINY = dict(vocab_size=50, embedding_size=16, hidden_size=32, num_hidden_layers=4, num_attention_heads=4,
            intermediate_size=40, max_position_embeddings=32)


def hf_parameter_count(config: AlbertConfig) -> int:
    """Parameters of HF's AlbertForPreTraining for the same sizes, built on the meta device (no memory)."""
    from transformers import AlbertConfig as HFConfig, AlbertForPreTraining
    hf_config = HFConfig(**{k: v for k, v in config.to_dict().items()
                            if k not in ("share_type", "ln_type", "compute_type", "hidden_act")})
    with torch.device("meta"):
        model = AlbertForPreTraining(hf_config)
    # HF keeps predictions.bias and predictions.decoder.bias as one tensor and ties the decoder weight.
    return sum(p.numel() for p in model.parameters())


# v1 and v2 (and the unversioned aliases) differ only in dropout: one build per distinct shape.
DISTINCT_PRESETS = sorted({json.dumps({k: v for k, v in values.items() if "dropout" not in k}, sort_keys=True): name
                           for name, values in sorted(PRESETS.items(), reverse=True)}.values())


@functools.lru_cache(maxsize=None)
def our_counts(preset: str):
    """(all parameters, backbone parameters) of our AlbertPreTraining for a preset (shapes only, no init)."""
    with no_init_parameters():
        net = AlbertPreTraining(AlbertConfig.from_preset(preset))
    backbone = sum(int(np.prod(p.shape)) for p in net.trainable_params() if p.name.startswith("albert."))
    return count_parameters(net), backbone


@pytest.mark.parametrize("preset", DISTINCT_PRESETS)
def test_preset_parameter_counts_equal_hf(preset):
    assert our_counts(preset)[0] == hf_parameter_count(AlbertConfig.from_preset(preset))


def test_published_sizes():
    """Backbone sizes quoted by Google's ALBERT paper (12M base, 18M large, 60M xlarge, 235M xxlarge)."""
    millions = {name: our_counts(name)[1] / 1e6 for name in ("albert_base", "albert_large",
                                                                      "albert_xlarge", "albert_xxlarge")}
    assert round(millions["albert_base"]) == 12 and round(millions["albert_large"]) == 18
    assert 58 <= millions["albert_xlarge"] <= 60
    assert 222 <= millions["albert_xxlarge"] <= 236


def _layer(net: AlbertModel, layer: int, inner: int = 0):
    return net.encoder.albert_layer_groups[net.encoder.layer_to_group[layer]].albert_layers[inner]


def expected_count(share_type: str, c: AlbertConfig) -> int:
    """Count by hand: embeddings + projection + pooler + attention and FFN blocks that are distinct."""
    h, e, i = c.hidden_size, c.embedding_size, c.intermediate_size
    embeddings = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * e + 2 * e
    attention = 4 * (h * h + h) + 2 * h
    ffn = (h * i + i) + (i * h + h) + 2 * h
    layers = c.num_hidden_layers * c.inner_group_num
    shared = c.num_hidden_groups * c.inner_group_num
    blocks = {"all": shared * (attention + ffn), "none": layers * (attention + ffn),
              "attention": shared * attention + layers * ffn, "ffn": layers * attention + shared * ffn}[share_type]
    return embeddings + (e * h + h) + blocks + (h * h + h)


@pytest.mark.parametrize("share_type", ["all", "attention", "ffn", "none"])
def test_share_type_counts_and_identity(share_type):
    config = AlbertConfig(share_type=share_type, num_hidden_groups=2, inner_group_num=2, **TINY)
    net = AlbertModel(config)
    assert count_parameters(net) == expected_count(share_type, config)
    first, third = _layer(net, 0), _layer(net, 1)  # layers 0 and 1 both belong to group 0 (4 layers, 2 groups)
    assert (first.attention.query.weight is third.attention.query.weight) == (share_type in ("all", "attention"))
    assert (first.ffn.weight is third.ffn.weight) == (share_type in ("all", "ffn"))
    assert first.attention is not _layer(net, 0, inner=1).attention  # inner-group layers are always distinct
    assert _layer(net, 0).attention.query.weight is not _layer(net, 3).attention.query.weight  # other group
    names = [p.name for p in net.get_parameters()]
    assert len(names) == len(set(names))


def _layer_norm(x, gamma, beta, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def numpy_preln_forward(params, config, input_ids, token_type_ids, input_mask):
    """Pre-LN ALBERT in numpy: h = x + Attn(LN(x)); out = h + FFN(LN(h)); ReLU activation."""
    p = {k: v.asnumpy().astype(np.float64) for k, v in params.items()}
    emb = "embeddings."
    x = (p[emb + "word_embeddings.embedding_table"][input_ids]
         + p[emb + "position_embeddings.embedding_table"][: input_ids.shape[1]]
         + p[emb + "token_type_embeddings.embedding_table"][token_type_ids])
    x = _layer_norm(x, p[emb + "LayerNorm.gamma"], p[emb + "LayerNorm.beta"])
    lin = lambda v, name: v @ p[name + ".weight"].T + p[name + ".bias"]  # noqa: E731
    x = lin(x, "encoder.embedding_hidden_mapping_in")
    bias = (1.0 - input_mask[:, None, None, :]) * -10000.0
    heads, size = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    split = lambda v: v.reshape(v.shape[0], v.shape[1], heads, size).transpose(0, 2, 1, 3)  # noqa: E731
    for layer in range(config.num_hidden_layers):
        pre = f"encoder.albert_layer_groups.{layer}.albert_layers.0."
        a = _layer_norm(x, p[pre + "attention.LayerNorm.gamma"], p[pre + "attention.LayerNorm.beta"])
        q, k, v = (split(lin(a, pre + "attention." + n)) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(size) + bias
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = x + lin(context, pre + "attention.dense")
        f = _layer_norm(x, p[pre + "full_layer_layer_norm.gamma"], p[pre + "full_layer_layer_norm.beta"])
        x = x + lin(np.maximum(lin(f, pre + "ffn"), 0.0), pre + "ffn_output")
    return x


def test_preln_matches_numpy_formula():
    config = AlbertConfig(ln_type="preln", share_type="none", hidden_act="relu", **TINY)
    net = AlbertModel(config)
    net.set_train(False)
    rng = np.random.default_rng(0)
    for param in net.get_parameters():  # LayerNorm gammas/betas away from 1/0 so their placement matters
        param.set_data(Tensor(rng.normal(0, 0.3, param.shape).astype(np.float32) + (1.0 if "gamma" in param.name
                                                                                        else 0.0)))
    input_ids, token_type_ids, input_mask, _ = random_batch(config.vocab_size, 2)
    sequence, _ = net(Tensor(input_ids), Tensor(token_type_ids), Tensor(input_mask))
    params = {p.name: p for p in net.get_parameters()}
    reference = numpy_preln_forward(params, config, input_ids, token_type_ids, input_mask.astype(np.float64))
    assert np.abs(sequence.asnumpy() - reference).max() < 1e-4
    postln = AlbertModel(config.replace(ln_type="postln"))
    postln.set_train(False)
    for param in postln.get_parameters():
        param.set_data(params[param.name].data)
    other, _ = postln(Tensor(input_ids), Tensor(token_type_ids), Tensor(input_mask))
    assert np.abs(other.asnumpy() - reference).max() > 1e-2  # the formula really differs


@pytest.mark.parametrize("compute_type", ["float16"])
def test_reduced_precision_stays_close_to_float32(compute_type):
    config = AlbertConfig(**TINY)
    full = AlbertModel(config)
    half = AlbertModel(config.replace(compute_type=compute_type))
    for net in (full, half):
        net.set_train(False)
    for param in half.get_parameters():
        param.set_data({p.name: p for p in full.get_parameters()}[param.name].data)
    batch = [Tensor(x) for x in random_batch(config.vocab_size, 2)[:3]]
    (seq_full, pooled_full), (seq_half, pooled_half) = full(*batch), half(*batch)
    assert seq_half.dtype == seq_full.dtype  # hidden states and LayerNorm stay float32
    assert np.abs(seq_half.asnumpy() - seq_full.asnumpy()).max() < 2e-2
    assert np.abs(pooled_half.asnumpy() - pooled_full.asnumpy()).max() < 2e-2


@pytest.fixture
def pynative():
    """Spies on operations need the network run as Python (PyNative), not as a compiled graph."""
    import mindspore as ms

    previous = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE)
    yield
    ms.set_context(mode=previous)


def _float64_softmax(x):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_float16_model_runs_softmax_and_layer_norm_in_float32(pynative, monkeypatch):
    """compute_type float16 (README: LayerNorm and softmax stay float32): every softmax and LayerNorm call of the
    network, caught as it runs, takes and gives float32 and equals numpy float64 on its own input within 1e-6 and
    1e-5. Run in float16 they would miss by ~6e-5 (softmax, probabilities ~1/16) and ~1e-3 (LayerNorm), as the
    float16 roundings of these very outputs show below."""
    import mindspore as ms
    from mindspore import ops

    from src.model import albert as albert_model, cpu_kernels

    config = AlbertConfig(compute_type="float16", **TINY)
    net = AlbertModel(config)
    net.set_train(False)
    softmax_calls, layer_norm_calls = [], []
    softmax = ops.softmax

    def softmax_spy(x, axis=-1, **kwargs):
        y = softmax(x, axis, **kwargs)
        softmax_calls.append((x.dtype, y.dtype, x.asnumpy(), y.asnumpy()))
        return y

    def layer_norm_spy(primitive):
        def call(x, gamma, beta):
            out = primitive(x, gamma, beta)
            layer_norm_calls.append((x.dtype, out[0].dtype, x.asnumpy(), gamma.asnumpy(), beta.asnumpy(),
                                     out[0].asnumpy()))
            return out
        return call

    monkeypatch.setattr(albert_model.ops, "softmax", softmax_spy)
    for _, cell in net.cells_and_names():
        if isinstance(cell, cpu_kernels.LayerNorm):
            cell.layer_norm = layer_norm_spy(cell.layer_norm)
    net(*[Tensor(x) for x in random_batch(config.vocab_size, 2)[:3]])

    layers = config.num_hidden_layers
    assert len(softmax_calls) == layers and len(layer_norm_calls) == 1 + 2 * layers  # embeddings + 2 per layer
    for x_type, y_type, x, y in softmax_calls:
        assert x_type == y_type == ms.float32
        reference = _float64_softmax(x)
        assert np.abs(y - reference).max() < 1e-6
        assert np.abs(y.astype(np.float16) - reference).max() > 2e-5  # what a float16 softmax could not beat
    for x_type, y_type, x, gamma, beta, y in layer_norm_calls:
        assert x_type == y_type == ms.float32
        reference = _layer_norm(x.astype(np.float64), gamma, beta)
        assert np.abs(y - reference).max() < 1e-5
        assert np.abs(y.astype(np.float16) - reference).max() > 2e-4


def test_float16_model_keeps_the_residual_stream_in_float32():
    """README: the residual stream stays float32 under compute_type float16. LayerNorm betas of 4000 put every value
    of the stream near 4000, where float16 steps by 2 (float32 by 0.0002), and every dense layer reading the stream
    gets zero weights (a dense layer's input is float16 by design: near 4000 that rounding is the float16 model's
    own), so the stream carries the input through both residual sums and LayerNorms of 2 layers. The float16 model
    must give the float32 model's sequence output within 5e-3 (seen ~1.5e-3, from its float16 embedding projection)
    where a float16 stream would miss by up to 1, as numpy shows with the same output rounded to float16."""
    offset = 4000.0
    config = AlbertConfig(**dict(TINY, num_hidden_layers=2), hidden_act="relu")
    full = AlbertModel(config)
    half = AlbertModel(config.replace(compute_type="float16"))
    params = {p.name: p for p in full.get_parameters()}
    for name, param in params.items():
        if name.endswith(("attention.LayerNorm.beta", "full_layer_layer_norm.beta")):
            param.set_data(Tensor(np.full(param.shape, offset, np.float32)))
        if name.endswith(("query.weight", "key.weight", "value.weight", ".ffn.weight")):
            param.set_data(Tensor(np.zeros(param.shape, np.float32)))
    for param in half.get_parameters():
        param.set_data(params[param.name].data)
    batch = [Tensor(x) for x in random_batch(config.vocab_size, 2)[:3]]
    for net in (full, half):
        net.set_train(False)
    sequence_full, sequence_half = full(*batch)[0].asnumpy(), half(*batch)[0].asnumpy()
    assert sequence_full.std() > 0.5  # offset + LayerNorm output: the input did get through
    assert np.abs(sequence_half - sequence_full).max() < 5e-3
    # The output is the last LayerNorm's (gamma 1, beta 4000); its input, the stream, rounded to float16:
    stream = sequence_full.astype(np.float16).astype(np.float64)
    ones, zeros = np.ones(config.hidden_size), np.zeros(config.hidden_size)
    assert np.abs(_layer_norm(stream, ones, zeros) + offset - sequence_full).max() > 0.3


def test_sequence_length_is_not_baked_in():
    net = AlbertModel(AlbertConfig(**TINY))
    net.set_train(False)
    for seq in (8, 20):
        ids, types, mask, _ = random_batch(50, 2, seq=seq)
        sequence, pooled = net(Tensor(ids), Tensor(types), Tensor(mask))
        assert sequence.shape == (3, seq, 32) and pooled.shape == (3, 32)


GOOGLE_BASE_V2 = {"attention_probs_dropout_prob": 0, "hidden_act": "gelu", "hidden_dropout_prob": 0,
                  "embedding_size": 128, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
                  "max_position_embeddings": 512, "num_attention_heads": 12, "num_hidden_layers": 12,
                  "num_hidden_groups": 1, "net_structure_type": 0, "layers_to_keep": [], "gap_size": 0,
                  "num_memory_blocks": 0, "inner_group_num": 1, "down_scale_factor": 1, "type_vocab_size": 2,
                  "vocab_size": 30000}
BRIGHTMART_TINY = {"attention_probs_dropout_prob": 0.0, "directionality": "bidi", "hidden_act": "gelu",
                   "hidden_dropout_prob": 0.0, "hidden_size": 312, "embedding_size": 128,
                   "initializer_range": 0.02, "intermediate_size": 1248, "max_position_embeddings": 512,
                   "num_attention_heads": 12, "num_hidden_layers": 4, "pooler_fc_size": 768,
                   "pooler_num_attention_heads": 12, "pooler_num_fc_layers": 3, "pooler_size_per_head": 128,
                   "pooler_type": "first_token_transform", "type_vocab_size": 2, "vocab_size": 21128,
                   "ln_type": "postln"}


def test_config_files_of_google_hf_and_brightmart(tmp_path):
    from transformers import AlbertConfig as HFConfig
    (tmp_path / "google.json").write_text(json.dumps(GOOGLE_BASE_V2))
    (tmp_path / "zh.json").write_text(json.dumps(BRIGHTMART_TINY))
    HFConfig(embedding_size=128, hidden_size=768, num_attention_heads=12, intermediate_size=3072).save_pretrained(
        str(tmp_path / "hf"))
    google = AlbertConfig.from_json_file(str(tmp_path / "google.json"))
    hf = AlbertConfig.from_json_file(str(tmp_path / "hf" / "config.json"))
    zh = AlbertConfig.from_json_file(str(tmp_path / "zh.json"))
    assert google == AlbertConfig.from_preset("albert_base_v2")
    assert hf.replace(hidden_act="gelu") == google  # HF's default gelu_new is Google's gelu
    assert zh == AlbertConfig.from_preset("albert_zh_tiny")


@pytest.mark.parametrize("changes, culprit", [
    (dict(hidden_size=30), "num_attention_heads"), (dict(share_type="some"), "share_type"),
    (dict(hidden_act="swish"), "hidden_act"), (dict(num_hidden_groups=9), "num_hidden_groups"),
    (dict(compute_type="int8"), "compute_type"), (dict(hidden_dropout_prob=1.5), "hidden_dropout_prob")])
def test_invalid_configs_name_the_key(changes, culprit):
    with pytest.raises(ValueError, match=culprit):
        AlbertConfig(**{**TINY, **changes})


def test_bad_config_files(tmp_path):
    (tmp_path / "bad.json").write_text('{"hidden_size": 32,\n "vocab_size": }')
    with pytest.raises(ValueError, match=r"bad.json line 2"):
        AlbertConfig.from_json_file(str(tmp_path / "bad.json"))
    (tmp_path / "type.json").write_text('{"hidden_size": "large"}')
    with pytest.raises(ValueError, match="hidden_size"):
        AlbertConfig.from_json_file(str(tmp_path / "type.json"))
    with pytest.raises(ValueError, match="not found"):
        AlbertConfig.from_json_file(str(tmp_path / "missing.json"))


# ------------------------------------------------------------------------------------------------------- Runtime
KERNELS = Runtime(kernels=True)
RUNTIMES = {"portable": PORTABLE, "split_heads": Runtime(split_heads=True, broadcast_mask=True), "kernels": KERNELS,
            "onnx": Runtime(onnx_patterns=True)}
NETWORKS = {"AlbertModel": lambda config, runtime: AlbertModel(config, runtime=runtime),
            "AlbertPreTraining": lambda config, runtime: AlbertPreTraining(config, runtime=runtime),
            "AlbertNetworkWithLoss": lambda config, runtime: AlbertNetworkWithLoss(config, runtime=runtime),
            "classifier": lambda config, runtime: AlbertForSequenceClassification(config, 3, runtime=runtime),
            "race": lambda config, runtime: AlbertForMultipleChoice(config, runtime=runtime),
            "squad_v1": lambda config, runtime: AlbertForQuestionAnswering(config, runtime=runtime),
            "squad_v2": lambda config, runtime: AlbertForSquadV2(config, runtime=runtime)}
SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.fixture
def device_unreadable(monkeypatch):
    """mindspore.get_context fails when src/ calls it (MindSpore's own Custom op reads it, so only src/'s calls),
    and so does cpu_kernels.available, however it is called."""
    import mindspore
    import mindspore.context

    original = mindspore.context.get_context

    def get_context(*args, **kwargs):
        if sys._getframe(1).f_code.co_filename.startswith(SRC):
            raise AssertionError(f"src/ read mindspore.get_context{args}")
        return original(*args, **kwargs)

    def available() -> bool:
        raise AssertionError("src/ asked cpu_kernels.available()")

    for module in (mindspore, mindspore.context):
        monkeypatch.setattr(module, "get_context", get_context)
    monkeypatch.setattr(cpu_kernels, "available", available)


def test_the_spy_catches_a_device_read(device_unreadable):
    from src.devices.device_checks import is_ascend_910a

    with pytest.raises(AssertionError, match="get_context"):
        is_ascend_910a()


@pytest.mark.parametrize("network", sorted(NETWORKS))
@pytest.mark.parametrize("name", sorted(RUNTIMES))
def test_networks_are_built_as_their_runtime_says_without_asking_the_device(name, network, request):
    """Every cell takes the Runtime it is given (kernels, head layout, mask, ONNX patterns) and nothing else: the
    device and the kernel library are not consulted while any network is built."""
    runtime = RUNTIMES[name]
    if runtime.kernels and not cpu_kernels.available():
        pytest.skip(f"compiled CPU kernels unavailable: {cpu_kernels.status()}")
    request.getfixturevalue("device_unreadable")
    config = AlbertConfig(hidden_act="gelu", **TINY)
    with no_init_parameters():
        net = NETWORKS[network](config, runtime)
    cells = [cell for _, cell in net.cells_and_names()]

    def values(kinds, flag: str) -> set:
        return {getattr(cell, flag) for cell in cells if isinstance(cell, kinds)}

    assert values((cpu_kernels.Dense, cpu_kernels.LayerNorm, Activation, AlbertAttention), "use_kernels") == \
        {runtime.kernels}
    assert values((cpu_kernels.LayerNorm, Activation), "onnx_pattern") == {runtime.onnx_patterns}
    assert values(AlbertAttention, "split_heads") == {runtime.split_heads}
    assert values(AlbertModel, "broadcast_mask") == {runtime.broadcast_mask}
    # With the kernels the tanh GELU's feed-forward network is one call.
    assert values(AlbertLayer, "fused_feed_forward") == {runtime.kernels}


def test_a_network_asked_for_the_impossible_is_a_value_error():
    """The model refuses in its own terms (the entry points turn these into one-line user errors)."""
    with pytest.raises(ValueError, match=r"run float32 graphs \(bfloat16: their products.*compute_type is float16"):
        AlbertModel(AlbertConfig(compute_type="float16", **TINY), runtime=KERNELS)
    with pytest.raises(ValueError, match="num_class must be >= 1"):
        AlbertForSequenceClassification(AlbertConfig(**TINY), 0)
    with pytest.raises(ValueError, match="start_n_top and end_n_top must be >= 1"):
        AlbertForSquadV2(AlbertConfig(**TINY), start_n_top=0)


@pytest.mark.usefixtures("graph_mode_each_test")
def test_a_shared_layer_draws_new_dropout_masks_at_each_of_its_runs():
    """ALBERT runs its one shared layer 12 times a step, and in GRAPH mode MindSpore's dropout draws the same mask at
    every call of the same operation: all 12 layers dropped the same units (TF and PyTorch draw at every call). Each
    run of a layer now has a dropout of its own: other masks at each run, and new ones at the next step."""
    import mindspore as ms
    from mindspore import nn

    class ThreeRuns(nn.Cell):
        def __init__(self):
            super().__init__()
            self.site = LayerDropout(0.5, 3)

        def construct(self, x):
            return self.site(x, 0), self.site(x, 1), self.site(x, 2)

    ms.set_seed(1)
    net = ThreeRuns()
    net.set_train(True)
    x = Tensor(np.ones((8, 256), np.float32))
    steps = [[out.asnumpy() for out in net(x)] for _ in range(2)]
    for outputs in steps:
        for out in outputs:
            assert set(np.unique(out)) == {0.0, 2.0} and 0.4 < (out == 0).mean() < 0.6  # p 0.5, kept x 1/(1-p)
        masks = [out == 0 for out in outputs]
        assert all((a != b).mean() > 0.3 for i, a in enumerate(masks) for b in masks[i + 1:])  # ~0.5 if independent
    assert (steps[0][0] != steps[1][0]).mean() > 0.3


@pytest.mark.usefixtures("graph_mode_each_test")
def test_each_run_of_the_shared_layer_uses_its_own_dropout_cells():
    """The transformer passes each layer's number down to its dropout sites (only where there is dropout: without,
    one graph serves every run). Seen from outside: pre-LN blocks add each site's output to the residual stream, so
    sites that give out their run's number (1, 2, 3) add 2 x (1 + 2 + 3) to a 3-layer network's output."""
    import mindspore as ms
    from mindspore import nn, ops

    class RunNumber(nn.Cell):  # stands in for a dropout: ignores its input, gives out its run's number
        def __init__(self, value: float):
            super().__init__()
            self.value = value

        def construct(self, x):
            return ops.zeros_like(x) + self.value

    config = AlbertConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                          num_attention_heads=2, intermediate_size=64, max_position_embeddings=32, ln_type="preln",
                          hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.0)
    outputs = []
    for numbered in (False, True):
        ms.set_seed(3)  # the same initial weights for both
        model = AlbertModel(config, is_training=True)
        model.embeddings.dropout = nn.Identity()
        layer = model.encoder.albert_layer_groups[0].albert_layers[0]
        for site in (layer.dropout, layer.attention.output_dropout):
            site.dropouts = nn.CellList([RunNumber(float(run + 1) if numbered else 0.0) for run in range(3)])
        model.set_train(True)
        ids = Tensor(np.arange(32).reshape(2, 16) % 100, ms.int32)
        outputs.append(model(ids, ops.zeros_like(ids), ops.ones_like(ids))[0].asnumpy())
    np.testing.assert_allclose(outputs[1] - outputs[0], 2 * (1 + 2 + 3), atol=1e-4)  # one cell for all runs: 2 x 3
    assert LayerDropout(0.0, 3)(Tensor(np.ones(4, np.float32)), 2).asnumpy().tolist() == [1.0] * 4  # no dropout
