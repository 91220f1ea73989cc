"""Dropout with counter-based masks (src/model/albert.py LayerDropout and DropoutClock; the kernels' KeyedDropout):
every mask checked against its formula computed here in numpy, on the kernels' path and on MindSpore's operations;
the masks' rate and independence; the gradient's mask; the train-step cell's count; which networks have a clock.
Whole runs repeating and resuming exactly with dropout: tests/test_crash_safety.py."""
import numpy as np
import pytest

ms = pytest.importorskip("mindspore")
from mindspore import Parameter, Tensor, nn, ops  # noqa: E402

from src.common.checkpoint_io import DROPOUT_CALLS, load_weights  # noqa: E402
from src.model import cpu_kernels  # noqa: E402
from src.model.albert import AlbertConfig, DropoutClock, LayerDropout, Runtime, name_parameters_by_path  # noqa: E402
from src.model.task_heads import AlbertForSequenceClassification  # noqa: E402
from src.training.train_step import AlbertTrainOneStepCell  # noqa: E402

pytestmark = pytest.mark.usefixtures("graph_mode_each_test")

WORD = 0xFFFFFFFF
PATHS = [pytest.param(True, id="kernels", marks=pytest.mark.skipif(
             not cpu_kernels.available(), reason=f"compiled CPU kernels unavailable: {cpu_kernels.status()}")),
         pytest.param(False, id="operations")]


def murmur_finalizer(values: np.ndarray) -> np.ndarray:
    """MurmurHash3's fmix32 on uint64 arrays holding 32-bit values."""
    values = values & WORD
    values ^= values >> 16
    values = (values * 0x85EBCA6B) & WORD
    values ^= values >> 13
    values = (values * 0xC2B2AE35) & WORD
    return values ^ (values >> 16)


def expected_output(x: np.ndarray, calls: int, place: np.ndarray, p: float) -> np.ndarray:
    """The documented rule: element i kept when fmix32((i * G) xor fmix32(place_key + calls * G)) >> 8 >= threshold."""
    golden = 0x9E3779B9
    place_key, threshold = int(place[0]) & WORD, int(place[1])
    key = murmur_finalizer(np.array([(place_key + calls * golden) & WORD], np.uint64))[0]
    index = np.arange(x.size, dtype=np.uint64)
    bits = murmur_finalizer(((index * golden) & WORD) ^ key)
    keep = ((bits >> 8) >= threshold).reshape(x.shape)
    assert threshold == round(p * 2 ** 24)
    return np.where(keep, x * np.float32(1.0 / (1.0 - p)), np.float32(0.0))


class Runs(nn.Cell):
    """One dropout place run by three layers, each run with its own mask."""

    def __init__(self, dropout: LayerDropout, training: bool = True):
        super().__init__()
        self.dropout = dropout
        self.set_train(training)  # as Model.train does

    def construct(self, x):
        return self.dropout(x, 0), self.dropout(x, 1), self.dropout(x, 2)


def dropout_with_clock(p: float, runs: int, kernels: bool, calls: int) -> LayerDropout:
    clock = DropoutClock()
    clock.dropout_calls.set_data(Tensor([calls], ms.int32))
    return LayerDropout(p, runs, clock, kernels)


@pytest.mark.parametrize("kernels", PATHS)
def test_every_runs_mask_is_the_formula_of_its_place_and_the_count(kernels):
    x = np.random.default_rng(0).normal(size=(4, 8, 33)).astype(np.float32)  # 1056 elements, not a multiple of 16
    dropout = dropout_with_clock(0.1, 3, kernels, calls=5)
    outputs = [out.asnumpy() for out in Runs(dropout)(Tensor(x))]
    for run, out in enumerate(outputs):
        np.testing.assert_array_equal(out, expected_output(x, 5, dropout.places[run].asnumpy(), 0.1))
    assert len({out.tobytes() for out in outputs}) == 3  # the layers drop different units
    for out in Runs(dropout, training=False)(Tensor(x)):  # set_train(False) turns it off, as nn.Dropout
        np.testing.assert_array_equal(out.asnumpy(), x)


@pytest.mark.parametrize("kernels", PATHS)
def test_masks_keep_one_minus_p_and_are_independent_across_counts_and_layers(kernels):
    x = np.ones((64, 4096), np.float32)
    first = [out.asnumpy() != 0 for out in Runs(dropout_with_clock(0.25, 3, kernels, calls=7))(Tensor(x))]
    later = Runs(dropout_with_clock(0.25, 3, kernels, calls=8))(Tensor(x))[0].asnumpy() != 0
    for mask in first + [later]:
        assert mask.mean() == pytest.approx(0.75, abs=0.005)
    # Independent masks agree on 0.75^2 + 0.25^2 = 62.5% of the units.
    for a, b in ((first[0], first[1]), (first[1], first[2]), (first[0], later)):
        assert (a == b).mean() == pytest.approx(0.625, abs=0.005)


@pytest.mark.parametrize("kernels", PATHS)
def test_the_gradient_passes_through_the_forward_mask(kernels):
    x = np.random.default_rng(1).normal(size=(6, 50)).astype(np.float32)
    sens = np.random.default_rng(2).normal(size=(6, 50)).astype(np.float32)
    dropout = dropout_with_clock(0.3, 1, kernels, calls=11)
    dropout.set_train()
    expected_mask = expected_output(np.ones_like(x), 11, dropout.places[0].asnumpy(), 0.3)
    grad = ops.GradOperation(sens_param=True)(dropout)(Tensor(x), Tensor(sens)).asnumpy()
    np.testing.assert_allclose(grad, sens * expected_mask, rtol=1e-6)


class WeightedDropout(nn.Cell):
    """loss = sum(dropout(x) * w): the gradient for w is the dropped-out x, the mask the forward pass used."""

    def __init__(self, kernels: bool):
        super().__init__()
        self.w = Parameter(Tensor(np.ones((8, 16), np.float32)), name="w")
        self.dropout = LayerDropout(0.5, 1, DropoutClock(), kernels)
        name_parameters_by_path(self)

    def construct(self, x):
        return (self.dropout(x) * self.w).sum()


@pytest.mark.parametrize("accumulation", [1, 2])
@pytest.mark.parametrize("kernels", PATHS)
def test_the_train_step_counts_micro_batches_and_both_passes_see_one_mask(kernels, accumulation):
    net = WeightedDropout(kernels)
    assert sorted(param.name for param in net.get_parameters()) == [DROPOUT_CALLS, "w"]
    step = AlbertTrainOneStepCell(net, nn.SGD([net.w], learning_rate=1.0), loss_scale=None, clip_norm=None,
                                  accumulation_steps=accumulation)
    step.set_train()
    x = np.random.default_rng(3).uniform(1, 2, size=(8, 16)).astype(np.float32)
    place, w = net.dropout.places[0].asnumpy(), net.w.asnumpy().copy()
    window = []
    for calls in range(4):
        dropped = expected_output(x, calls, place, 0.5)
        loss = step(Tensor(x))[0].asnumpy()
        np.testing.assert_allclose(loss, (dropped * w).sum(), rtol=1e-5)  # the forward pass's mask
        window.append(dropped)
        assert int(net.dropout.clock.dropout_calls.asnumpy()[0]) == calls + 1
        if len(window) == accumulation:  # SGD, lr 1: w moved by the mean gradient, the backward passes' masks
            w = w - np.mean(window, axis=0)
            window = []
        np.testing.assert_allclose(net.w.asnumpy(), w, rtol=1e-6)


TINY = AlbertConfig(vocab_size=50, embedding_size=8, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                    intermediate_size=32, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


def clock_names(network: nn.Cell) -> list:
    return [param.name for param in network.get_parameters() if "dropout_calls" in param.name]


def test_only_training_networks_with_keyed_dropout_and_some_dropout_have_one_clock():
    keyed = Runtime(keyed_dropout=True)
    assert clock_names(AlbertForSequenceClassification(TINY, 2, 0.1, True, keyed)) == [DROPOUT_CALLS]
    no_backbone_dropout = AlbertConfig(**{**TINY.to_dict(), "hidden_dropout_prob": 0.0,
                                          "attention_probs_dropout_prob": 0.0})
    assert clock_names(AlbertForSequenceClassification(no_backbone_dropout, 2, 0.1, True, keyed)) == [DROPOUT_CALLS]
    assert clock_names(AlbertForSequenceClassification(no_backbone_dropout, 2, 0.0, True, keyed)) == []
    assert clock_names(AlbertForSequenceClassification(TINY, 2, 0.1, False, keyed)) == []  # evaluation
    assert clock_names(AlbertForSequenceClassification(TINY, 2, 0.1, True, Runtime())) == []  # GPU, Ascend


def test_the_clock_is_never_loaded_required_or_reported_unused():
    """A run starting from another run's checkpoint took that run's count, so its own resume (which sets the count
    from its progress) drew other masks than its uninterrupted run."""
    training = AlbertForSequenceClassification(TINY, 2, 0.1, True, Runtime(keyed_dropout=True))
    weights = {param.name: param.asnumpy() for param in training.get_parameters() if param.name != DROPOUT_CALLS}
    assert load_weights(training, weights).missing == []  # e.g. a converted checkpoint
    pretrained = dict(weights, **{DROPOUT_CALLS: np.array([7], np.int32)})  # e.g. a pretraining run's
    assert DROPOUT_CALLS not in load_weights(training, pretrained).loaded
    assert int(training.albert.dropout_clock.dropout_calls.asnumpy()[0]) == 0
    saved = {param.name: param.asnumpy() for param in training.get_parameters()}
    assert load_weights(AlbertForSequenceClassification(TINY, 2, 0.1), saved).unused == []  # served from training's
