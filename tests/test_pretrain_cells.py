"""Pretraining loss and the train-step cell (loss scale, overflow skip, accumulation, clipping), GRAPH mode on CPU,
each checked against an independent computation (numpy loss, plain gradients, one big batch). Networks and train
cells are built as training on CPU builds them (model_runtime: the compiled kernels when they are built)."""
from typing import Dict, List

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn, ops

from src.common.checkpoint_io import load_weights, save_checkpoint_atomic
from src.devices.device_setup import model_runtime
from src.model.albert import AlbertConfig
from src.model.pretraining_heads import AlbertNetworkWithLoss, AlbertPreTraining
from src.training.optimization import build_optimizer
from src.training.train_step import AlbertTrainOneStepCell

CONFIG = AlbertConfig(vocab_size=100, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=37, max_position_embeddings=32, hidden_dropout_prob=0.0,
                      attention_probs_dropout_prob=0.0)
SEQ, PREDICTIONS = 16, 4
RUNTIME = model_runtime("CPU", CONFIG.compute_type)
KERNELS = RUNTIME.kernels


pytestmark = pytest.mark.usefixtures("graph_mode")  # tests/conftest.py


def pretraining_batch(size: int, seed: int = 0, all_weights: bool = False) -> List[Tensor]:
    """The 7 pretraining columns in dataset order; some padded positions and zero-weight predictions."""
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(5, CONFIG.vocab_size, (size, SEQ)).astype(np.int32)
    input_mask = np.ones((size, SEQ), np.int32)
    input_mask[:, SEQ - 3:] = 0
    segment_ids = (np.arange(SEQ) >= SEQ // 2).astype(np.int32)[None].repeat(size, 0)
    labels = rng.integers(0, 2, size).astype(np.int32)
    positions = np.stack([rng.choice(SEQ - 3, PREDICTIONS, replace=False) for _ in range(size)]).astype(np.int32)
    ids = rng.integers(5, CONFIG.vocab_size, (size, PREDICTIONS)).astype(np.int32)
    weights = np.ones((size, PREDICTIONS), np.float32)
    if not all_weights:
        weights[:, -1] = 0.0
    return [Tensor(a) for a in (input_ids, input_mask, segment_ids, labels, positions, ids, weights)]


def network(return_parts: bool = True) -> AlbertNetworkWithLoss:
    ms.set_seed(1)
    return AlbertNetworkWithLoss(CONFIG, is_training=True, return_parts=return_parts, runtime=RUNTIME)


def snapshot(net: nn.Cell) -> Dict[str, np.ndarray]:
    return {p.name: p.asnumpy().copy() for p in net.trainable_params()}


def assert_same(a: Dict[str, np.ndarray], b: Dict[str, np.ndarray], **tolerance) -> None:
    for name in a:
        np.testing.assert_allclose(a[name], b[name], err_msg=name, **(tolerance or dict(rtol=0, atol=0)))


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    shifted = x - x.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def test_loss_equals_numpy_from_logits():
    net = network()
    batch = pretraining_batch(3)
    input_ids, input_mask, segment_ids, labels, positions, ids, weights = batch
    mlm_logits, sop_logits = net.albert_pretraining(input_ids, segment_ids, input_mask, positions)
    nll = -np.take_along_axis(log_softmax(mlm_logits.asnumpy()), ids.asnumpy()[..., None], -1)[..., 0]
    w = weights.asnumpy()
    mlm = (w * nll).sum() / (w.sum() + 1e-5)
    sop = -log_softmax(sop_logits.asnumpy())[np.arange(3), labels.asnumpy()].mean()
    total, got_mlm, got_sop = (float(x.asnumpy()) for x in net(*batch))
    assert got_mlm == pytest.approx(mlm, rel=1e-6) and got_sop == pytest.approx(sop, rel=1e-6)
    assert total == pytest.approx(mlm + sop, rel=1e-6)
    assert float(network(return_parts=False)(*batch).asnumpy()) == pytest.approx(total, rel=1e-6)


def expected_scales(initial: float, factor: float, window: int, overflows: List[bool]) -> List[float]:
    """nn.DynamicLossScaleUpdateCell's rule: divide on overflow (not below 1), multiply after `window` good steps."""
    scale, good, scales = initial, 0, []
    for overflow in overflows:
        good = 0 if overflow else good + 1
        scale = max(scale / factor, 1.0) if overflow else scale
        if good >= window:
            scale, good = scale * factor, 0
        scales.append(scale)
    return scales


def test_overflow_skips_updates_and_lowers_the_scale_then_training_proceeds():
    """2**127 overflows the float32 gradients; the scale falls by 4x until it fits, grows back after 2 good steps
    (window 2), overflows again: an update happens exactly on the steps without overflow."""
    net = network()
    # A gain of 64 in the MLM head's LayerNorm makes the largest gradient ~44 (2**5.5): scaled by 2**123 and more
    # it exceeds float32's range in exact arithmetic, not only in some kernel's intermediate values.
    gamma = net.albert_pretraining.predictions.LayerNorm.gamma
    gamma.set_data(Tensor(np.full(gamma.shape, 64.0, np.float32)))
    optimizer = build_optimizer("Lamb", net.trainable_params(), dict(
        learning_rate=1e-3, end_learning_rate=0.0, power=1.0, warmup_steps=0, weight_decay=0.01), 100)
    cell = AlbertTrainOneStepCell(net, optimizer, loss_scale=2.0 ** 127, scale_factor=4.0, scale_window=2,
                                  use_kernels=KERNELS)
    batch = pretraining_batch(2)
    overflows, scales, losses = [], [], []
    for _ in range(12):
        before = snapshot(net)
        loss, overflow, scale, _, _ = cell(*batch)
        overflows.append(bool(overflow.asnumpy()))
        scales.append(float(scale.asnumpy()))
        losses.append(float(loss.asnumpy()))
        changed = [name for name, value in snapshot(net).items() if not np.array_equal(value, before[name])]
        assert not changed if overflows[-1] else changed
    assert overflows[0] and not all(overflows)
    assert scales == expected_scales(2.0 ** 127, 4.0, 2, overflows)
    assert optimizer.global_step.asnumpy().item() == overflows.count(False)
    assert np.isfinite(losses).all() and losses[-1] < losses[0]


def sgd_cell(accumulation_steps: int, clip_norm=None, loss_scale=2.0 ** 10, return_parts=True):
    net = network(return_parts)
    optimizer = nn.SGD(net.trainable_params(), learning_rate=0.5)
    return net, AlbertTrainOneStepCell(net, optimizer, loss_scale=loss_scale, clip_norm=clip_norm,
                                       accumulation_steps=accumulation_steps, use_kernels=KERNELS)


def test_four_micro_batches_of_two_equal_one_batch_of_eight():
    """SGD makes the update proportional to the gradient, so a sum instead of a mean would show. Every row has the
    same number of real predictions, so the mean of the micro-batch losses is the big batch's loss (up to the 1e-5
    in the MLM denominator: relative 1e-6)."""
    batch = pretraining_batch(8, all_weights=True)
    net_big, cell_big = sgd_cell(1)
    initial = snapshot(net_big)
    cell_big(*batch)
    expected = snapshot(net_big)

    net, cell = sgd_cell(4)
    assert_same(snapshot(net), initial)
    for micro in range(4):
        _, overflow, _, _, _ = cell(*[column[2 * micro:2 * micro + 2] for column in batch])
        assert not overflow.asnumpy()
        if micro < 3:
            assert_same(snapshot(net), initial)
    assert int(cell.micro_step.asnumpy()) == 4
    assert not np.allclose(expected["albert.encoder.embedding_hidden_mapping_in.weight"],
                           initial["albert.encoder.embedding_hidden_mapping_in.weight"])
    assert_same(snapshot(net), expected, rtol=1e-5, atol=1e-6)
    for accumulated in cell.accu_grads:
        assert not accumulated.asnumpy().any()


def test_clipping_applies_the_clipped_gradient():
    """Plain variant (no loss scale, scalar loss): the update equals -lr * g * clip / ||g||, g from GradOperation."""
    batch = pretraining_batch(4)
    net, cell = sgd_cell(1, clip_norm=1e-3, loss_scale=None, return_parts=False)
    initial = snapshot(net)
    weights = net.trainable_params()

    class Grads(nn.Cell):
        def __init__(self):
            super().__init__()
            self.grad = ops.GradOperation(get_by_list=True)

        def construct(self, *inputs):
            return self.grad(net, weights)(*inputs)

    grads = [g.asnumpy().astype(np.float64) for g in Grads()(*batch)]
    norm = np.sqrt(sum((g * g).sum() for g in grads))
    assert norm > 1e-2
    loss, overflow, scale = cell(*batch)
    assert not overflow.asnumpy() and float(scale.asnumpy()) == 1.0
    after = snapshot(net)
    for param, grad in zip(weights, grads):
        expected = initial[param.name] - 0.5 * grad * 1e-3 / norm
        np.testing.assert_allclose(after[param.name], expected, rtol=1e-5, atol=1e-9, err_msg=param.name)


class Linear(nn.Cell):
    """sum(weight * x): the gradient is x, so SGD's update is known exactly."""

    def __init__(self):
        super().__init__()
        self.weight = ms.Parameter(Tensor(np.ones(4, np.float32)), name="weight")

    def construct(self, x):
        return (self.weight * x).sum()


@pytest.mark.parametrize("loss_scale, scale_window", [(1e38, 1000), (1024.0, 1)])
def test_each_step_is_unscaled_by_its_own_loss_scale(loss_scale, scale_window):
    """1e38: the scaled gradient (0.5e38) fits float32 but 1/1e38 is subnormal, and CPU kernels running with
    denormals off flush it to zero, so unscaling must divide. Window 1: the scale doubles after every step, and each
    step is still divided by the scale it was computed with. Either way SGD's update is exactly lr * 0.5."""
    net = Linear()
    cell = AlbertTrainOneStepCell(net, nn.SGD(net.trainable_params(), learning_rate=0.5), loss_scale=loss_scale,
                                  scale_window=scale_window, clip_norm=None, use_kernels=KERNELS)
    for step in range(1, 4):
        _, overflow, scale = cell(Tensor(np.full(4, 0.5, np.float32)))
        assert not overflow.asnumpy()
        np.testing.assert_allclose(net.weight.asnumpy(), 1.0 - step * 0.5 * 0.5, rtol=1e-6)
        if scale_window == 1:
            assert float(scale.asnumpy()) == loss_scale * 2 ** step


def test_train_state_names_and_bad_options():
    net, cell = sgd_cell(2)
    names = {p.name for p in cell.get_parameters()}
    assert {"loss_scale", "accumulation_step", "accu_overflow", "current_iterator_step",
            "last_overflow_iterator_step"} <= names
    assert "albert.embeddings.word_embeddings.embedding_table" in names
    assert "accu_grads.albert.embeddings.word_embeddings.embedding_table" in names
    optimizer = nn.SGD(net.trainable_params())
    for options, message in ((dict(accumulation_steps=0), "accumulation_steps"), (dict(clip_norm=-1.0), "clip_norm"),
                             (dict(loss_scale=0.5), "loss_scale_value >= 1"),
                             (dict(loss_scale=8.0, scale_factor=1.0), "scale_factor > 1")):
        with pytest.raises(ValueError, match=message):
            AlbertTrainOneStepCell(net, optimizer, **options)
    half = Linear()
    half.weight = ms.Parameter(Tensor(np.ones(4, np.float16)), name="weight")
    with pytest.raises(ValueError, match="use_kernels needs float32 weights"):
        AlbertTrainOneStepCell(half, nn.SGD(half.trainable_params()), use_kernels=True)


def lamb_cell(accumulation_steps: int) -> AlbertTrainOneStepCell:
    net = network()
    optimizer = build_optimizer("Lamb", net.trainable_params(), dict(
        learning_rate=1e-2, end_learning_rate=0.0, power=1.0, warmup_steps=2, weight_decay=0.01), 10)
    return AlbertTrainOneStepCell(net, optimizer, loss_scale=2.0 ** 16, scale_window=1,
                                  accumulation_steps=accumulation_steps, use_kernels=KERNELS)


def test_checkpoint_mid_window_resumes_exactly(tmp_path):
    """A train-cell checkpoint taken between micro-batches holds the accumulated gradients, the call counter, the
    optimizer moments and step, and the loss scale: a fresh cell loading it continues bit for bit."""
    batches = [pretraining_batch(2, seed=seed) for seed in range(5)]
    cell = lamb_cell(2)
    for batch in batches[:3]:
        cell(*batch)
    path = str(tmp_path / "train.ckpt")
    save_checkpoint_atomic(cell, path)
    for batch in batches[3:]:
        cell(*batch)

    resumed = lamb_cell(2)
    not_loaded, _ = ms.load_param_into_net(resumed, ms.load_checkpoint(path))
    assert not not_loaded
    assert int(resumed.micro_step.asnumpy()) == 3 and float(resumed.loss_scale.asnumpy()) == 2.0 ** 17
    for batch in batches[3:]:
        resumed(*batch)
    assert_same(snapshot(resumed.network), snapshot(cell.network))

    report = load_weights(AlbertPreTraining(CONFIG), path)
    assert not report.missing and not report.unused
