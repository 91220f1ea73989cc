"""The MindSpore model equals HF transformers' AlbertForPreTraining (eager attention) given the same weights.

The weights travel through our converter (safetensors and pytorch .bin), so this also proves the name table.
"""
import numpy as np
import pytest
import torch

from hf_reference import TINY_CONFIGS, hf_outputs, make_hf_pretraining, random_batch, save_hf
from src.albert_for_pre_training import AlbertPreTraining
from src.albert_model import AlbertConfig
from src.convert_checkpoint import convert, convert_hf
from src.utils import load_weights
from mindspore import Tensor

TOLERANCE = 1e-5


def our_outputs(net, input_ids, token_type_ids, input_mask, positions):
    sequence, pooled = net.albert(Tensor(input_ids), Tensor(token_type_ids), Tensor(input_mask))
    mlm, sop = net(Tensor(input_ids), Tensor(token_type_ids), Tensor(input_mask), Tensor(positions))
    return sequence.asnumpy(), pooled.asnumpy(), mlm.asnumpy(), sop.asnumpy()


def assert_close(ours, reference):
    for what, a, b in zip(("sequence_output", "pooled_output", "mlm_logits", "sop_logits"), ours, reference):
        assert a.shape == b.shape, what
        assert np.abs(a - b).max() <= TOLERANCE, f"{what}: max abs diff {np.abs(a - b).max()}"


@pytest.mark.parametrize("safetensors", [True, False], ids=["safetensors", "pytorch_bin"])
@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_parity_through_converter(tmp_path, name, safetensors):
    kwargs = TINY_CONFIGS[name]
    hf = make_hf_pretraining(kwargs)
    save_hf(hf, tmp_path / "hf", safetensors)
    summary = convert("hf", str(tmp_path / "hf"), str(tmp_path / "out.ckpt"))
    assert summary["missing_heads"] == [] and summary["skipped"] == []
    config = AlbertConfig.from_json_file(str(tmp_path / "out.ckpt.json"))
    net = AlbertPreTraining(config, is_training=False)
    net.set_train(False)
    report = load_weights(net, str(tmp_path / "out.ckpt"))
    assert report.missing == [] and report.unused == []
    batch = random_batch(kwargs["vocab_size"], kwargs.get("type_vocab_size", 2))
    assert_close(our_outputs(net, *batch), hf_outputs(hf, *batch))


def test_hf_activation_names_follow_hf_semantics():
    """HF "gelu" is the exact erf GELU and "gelu_new" Google's tanh form; ours name them gelu_exact and gelu."""
    assert AlbertConfig.from_dict({"model_type": "albert", "hidden_act": "gelu"}).hidden_act == "gelu_exact"
    assert AlbertConfig.from_dict({"model_type": "albert", "hidden_act": "gelu_new"}).hidden_act == "gelu_new"
    assert AlbertConfig.from_dict({"hidden_act": "gelu"}).hidden_act == "gelu"  # Google's albert_config.json


def _hf_state(model):
    return {k: v.numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("share_type", ["none", "attention", "ffn"])
def test_share_types_match_hf_with_tied_layers(share_type):
    """share_type none = HF with one group per layer; attention/ffn = the same with that part tied across layers."""
    layers = 3
    kwargs = dict(TINY_CONFIGS["exact_gelu_3layers"], num_hidden_groups=layers)
    hf = make_hf_pretraining(kwargs, seed=3)
    groups = hf.albert.encoder.albert_layer_groups
    tied = {"attention": ["attention"], "ffn": ["ffn", "ffn_output", "full_layer_layer_norm"]}.get(share_type, [])
    with torch.no_grad():
        for group in groups[1:]:
            for part in tied:
                getattr(group.albert_layers[0], part).load_state_dict(
                    getattr(groups[0].albert_layers[0], part).state_dict())
    converted, _ = convert_hf(_hf_state(hf))
    config = AlbertConfig.from_dict({**kwargs, "model_type": "albert", "num_hidden_groups": 1,
                                     "share_type": share_type})
    net = AlbertPreTraining(config, is_training=False)
    net.set_train(False)
    ours = {p.name for p in net.get_parameters()}
    load_weights(net, {k: v for k, v in converted.items() if k in ours})
    batch = random_batch(kwargs["vocab_size"], 2, seed=5)
    assert_close(our_outputs(net, *batch), hf_outputs(hf, *batch))
