"""The MindSpore model equals HF transformers' AlbertForPreTraining (eager attention) given the same weights.

The weights travel through our converter (safetensors and pytorch .bin), so this also proves the name table.
"""
import numpy as np
import pytest
import torch

from tests.hf_reference import TINY_CONFIGS, hf_outputs, make_hf_pretraining, random_batch, save_hf
from src.common.checkpoint_io import load_weights
from src.conversion.convert_checkpoint import convert, convert_hf
from src.model import cpu_kernels
from src.model.albert import AlbertAttention, AlbertConfig, AlbertLayer, Runtime
from src.model.pretraining_heads import AlbertNetworkWithLoss, AlbertPreTraining
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


def _hf_loss_gradients(hf, batch, masked_ids, sop_labels):
    """d(loss)/d(weights) of HF AlbertForPreTraining by torch autograd, under our (converted) parameter names."""
    input_ids, token_type_ids, input_mask, positions = batch
    labels = torch.full(input_ids.shape, -100, dtype=torch.long)
    labels.scatter_(1, torch.tensor(positions, dtype=torch.long), torch.tensor(masked_ids, dtype=torch.long))
    hf.zero_grad()
    loss = hf(input_ids=torch.tensor(input_ids, dtype=torch.long), attention_mask=torch.tensor(input_mask).long(),
              token_type_ids=torch.tensor(token_type_ids, dtype=torch.long), labels=labels,
              sentence_order_label=torch.tensor(sop_labels, dtype=torch.long)).loss
    loss.backward()
    grads, _ = convert_hf({name: p.grad.numpy() for name, p in hf.named_parameters()})
    return float(loss.detach()), grads


def _kernel_use(net) -> dict:
    """Kind of cell -> whether its cells run the compiled CPU kernels (all of a kind must agree)."""
    use = {}
    for _, cell in net.cells_and_names():
        if hasattr(cell, "use_kernels"):
            use.setdefault(type(cell).__name__, set()).add(bool(cell.use_kernels))
    assert all(len(values) == 1 for values in use.values()), use
    return {kind: values.pop() for kind, values in use.items()}


# The runtimes the package builds networks with: CPU float32 with the compiled kernels, CPU without them (other
# compute types, no compiler), and GPU/Ascend/ONNX (heads by transposes, the mask added by broadcasting).
PATHS = {"cpu_kernels": Runtime(kernels=True),
         "mindspore_ops": Runtime(split_heads=True, broadcast_mask=True),
         "mindspore_ops_transposed_heads": Runtime()}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", sorted(TINY_CONFIGS))
def test_pretraining_loss_gradients_equal_hf(name, path):
    """Our pretraining loss and every weight's gradient equal HF's by torch autograd: this covers the backward of
    each layer, computed by the compiled CPU kernels (their own bprops) or by MindSpore's operations, with the
    attention heads moved by split/stack and the mask broadcast once (CPU) or by transposes and a broadcasting add
    (GPU, Ascend, ONNX export).

    The cpu_kernels case first proves the kernels are built and that every dense layer, LayerNorm, attention and
    tanh GELU of the network runs them (a feed-forward network with the tanh GELU as one call); without a compiler
    it is skipped (a failure in CI, tests/ci_skips.py) rather than silently re-testing the native path."""
    from mindspore import nn, ops

    kwargs = TINY_CONFIGS[name]
    runtime = PATHS[path]
    if runtime.kernels and not cpu_kernels.available():
        pytest.skip(f"compiled CPU kernels unavailable: {cpu_kernels.status()}")
    hf = make_hf_pretraining(kwargs, seed=7)
    batch = random_batch(kwargs["vocab_size"], kwargs.get("type_vocab_size", 2), seed=8)
    rng = np.random.default_rng(9)
    masked_ids = rng.integers(0, kwargs["vocab_size"], batch[3].shape).astype(np.int32)
    sop_labels = rng.integers(0, 2, len(batch[0])).astype(np.int32)
    hf_loss, hf_grads = _hf_loss_gradients(hf, batch, masked_ids, sop_labels)

    net = AlbertNetworkWithLoss(AlbertConfig.from_dict({**kwargs, "model_type": "albert"}), is_training=True,
                                runtime=runtime)
    kernels = runtime.kernels
    assert _kernel_use(net) == {"Dense": kernels, "LayerNorm": kernels, "AlbertAttention": kernels,
                                "Activation": kernels and kwargs["hidden_act"] == "gelu_new",
                                "AlbertMLMHead": kernels, "AlbertPretrainingLoss": kernels}
    # With the kernels and the tanh GELU, each block's feed-forward network is one kernel call, forward and backward,
    # its residual sum included (post-LN, no dropout).
    assert {cell.fused_feed_forward for _, cell in net.cells_and_names() if isinstance(cell, AlbertLayer)} == \
        {kernels and kwargs["hidden_act"] == "gelu_new"}
    assert {cell.fused_residual for _, cell in net.cells_and_names() if isinstance(cell, AlbertLayer)} == \
        {kernels and kwargs["hidden_act"] == "gelu_new"}
    assert {cell.split_heads for _, cell in net.cells_and_names() if isinstance(cell, AlbertAttention)} == \
        {runtime.split_heads}
    assert net.albert_pretraining.albert.broadcast_mask == runtime.broadcast_mask
    load_weights(net, convert_hf(_hf_state(hf))[0])
    weights = net.trainable_params()
    names = [p.name for p in weights]  # before the wrapper below prefixes them

    class LossAndGrads(nn.Cell):
        def __init__(self):
            super().__init__()
            self.net, self.weights = net, weights
            self.grad = ops.GradOperation(get_by_list=True)

        def construct(self, *inputs):
            return self.net(*inputs), self.grad(self.net, self.weights)(*inputs)

    input_ids, token_type_ids, input_mask, positions = batch
    inputs = [input_ids, input_mask, token_type_ids, sop_labels, positions, masked_ids,
              np.ones(positions.shape, np.float32)]
    loss, grads = LossAndGrads()(*[Tensor(value) for value in inputs])
    # Google's MLM loss divides by (weight sum + 1e-5), HF's by the count: 1e-6 relative here.
    assert abs(float(loss.asnumpy()) - hf_loss) <= 1e-5 * max(1.0, hf_loss)
    assert sorted(names) == sorted(hf_grads)
    for param_name, grad in zip(names, grads):
        want, got = hf_grads[param_name], grad.asnumpy()
        # 1e-4 relative (seen: ~1e-6), plus 1e-8 absolute for the key biases, whose gradient is 0 in exact
        # arithmetic (softmax ignores the per-query constant q.b_k they add) and float32 noise (~1e-10) on both sides.
        error = np.linalg.norm(got - want)
        assert error <= 1e-4 * np.linalg.norm(want) + 1e-8, f"{param_name}: |got - want| {error:.2e}"
