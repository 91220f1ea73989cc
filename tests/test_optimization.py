"""Optimizers and LR schedule against numpy versions of the published update rules (Google ALBERT's
lamb_optimizer.py, Loshchilov & Hutter's AdamW as in Google BERT's AdamWeightDecayOptimizer)."""
import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor

from model_utils.errors import UserError
from src.training.optimization import Lamb, PolynomialWarmupSchedule, build_optimizer, schedule_warnings, use_weight_decay

SECTION = dict(learning_rate=0.01, end_learning_rate=0.001, power=2.0, warmup_steps=0, weight_decay=0.1, eps=1e-6)
TOTAL_STEPS = 10
BETA1, BETA2 = 0.9, 0.999


pytestmark = pytest.mark.usefixtures("graph_mode")  # tests/conftest.py


def schedule_formula(step, peak, end, warmup, decay, power):
    """Google BERT optimization.py: polynomial decay from step 0, overridden by linear warmup."""
    if step < warmup:
        return peak * step / warmup
    return (peak - end) * (1 - min(step, decay) / decay) ** power + end


def make_params():
    rng = np.random.default_rng(0)
    values = {"encoder.dense.weight": rng.normal(size=(3, 4)), "encoder.dense.bias": rng.normal(size=4),
              "encoder.LayerNorm.gamma": 1 + rng.normal(size=4) * 0.1, "zero.weight": np.zeros(4)}
    values = {k: v.astype(np.float32) for k, v in values.items()}
    grads = [[rng.normal(size=v.shape).astype(np.float32) for v in values.values()] for _ in range(2)]
    grads[0][-1][:] = 0  # a zero parameter with a zero gradient: trust ratio 1, not 0/0
    params = [Parameter(Tensor(v), name=k) for k, v in values.items()]
    return values, params, grads


def numpy_steps(values, grads, lamb: bool):
    """Two steps of LAMB (Google) or AdamW (no bias correction), lr from the schedule at steps 0 and 1.

    float32 throughout like the optimizers: in float64, 1 - float32(0.999) alone differs from 0.001 by 1.3e-5.
    """
    f32 = np.float32
    beta1, beta2, eps, decay_rate = f32(BETA1), f32(BETA2), f32(SECTION["eps"]), f32(SECTION["weight_decay"])
    state = {k: (v, np.zeros_like(v), np.zeros_like(v)) for k, v in values.items()}
    for step, step_grads in enumerate(grads):
        lr = f32(schedule_formula(step, 0.01, 0.001, 0, TOTAL_STEPS, 2.0))
        for (name, (w, m, v)), g in zip(list(state.items()), step_grads):
            m = beta1 * m + (f32(1) - beta1) * g
            v = beta2 * v + (f32(1) - beta2) * g * g
            update = m / (np.sqrt(v) + eps)
            decay = "bias" not in name and "LayerNorm" not in name
            if decay:
                update = update + decay_rate * w
            if lamb and decay:
                w_norm, u_norm = np.linalg.norm(w), np.linalg.norm(update)
                update = update * (w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0)
            state[name] = (w - lr * update, m, v)
    return {k: s[0] for k, s in state.items()}


@pytest.mark.parametrize("name", ["Lamb", "AdamWeightDecay"])
def test_two_steps_equal_numpy_reference(name):
    values, params, grads = make_params()
    optimizer = build_optimizer(name, params, SECTION, TOTAL_STEPS)
    for step_grads in grads:
        optimizer(tuple(Tensor(g) for g in step_grads))
    expected = numpy_steps(values, grads, lamb=name == "Lamb")
    for p in params:
        np.testing.assert_allclose(p.asnumpy(), expected[p.name], rtol=1e-6, atol=1e-7, err_msg=p.name)
    assert not np.allclose(params[0].asnumpy(), values["encoder.dense.weight"])


def test_no_decay_names():
    assert use_weight_decay("albert.encoder.dense.weight") and use_weight_decay("albert.embeddings.word_embeddings")
    for name in ("albert.embeddings.LayerNorm.gamma", "x.layer_norm.weight", "dense.bias", "ln.beta", "ln.gamma"):
        assert not use_weight_decay(name)


def test_lamb_trust_ratio_scales_the_step():
    """Lamb's step on a decayed parameter has norm lr * ||w|| (ratio times the unit update), whatever the grad."""
    w = np.full((2, 2), 3.0, np.float32)
    param = Parameter(Tensor(w), name="w")
    Lamb([param], 0.1, weight_decay=0.0)((Tensor(np.full((2, 2), 1e-3, np.float32)),))
    np.testing.assert_allclose(np.linalg.norm(w - param.asnumpy()), 0.1 * np.linalg.norm(w), rtol=1e-5)


def test_schedule_equals_formula():
    args = dict(peak=1e-3, end=1e-5, warmup=10, decay=100, power=1.5)
    schedule = PolynomialWarmupSchedule(learning_rate=1e-3, end_learning_rate=1e-5, warmup_steps=10,
                                        decay_steps=100, power=1.5)
    for step in (0, 5, 10, 55, 100, 150):
        got = float(schedule(Tensor(step, ms.int32)).asnumpy())
        assert got == pytest.approx(schedule_formula(step, **args), rel=1e-6, abs=1e-12), step
    assert float(schedule(Tensor(150, ms.int32)).asnumpy()) == pytest.approx(1e-5)


def test_bad_settings_are_user_errors():
    _, params, _ = make_params()
    with pytest.raises(UserError, match="unknown optimizer 'Adam'"):
        build_optimizer("Adam", params, SECTION, TOTAL_STEPS)
    with pytest.raises(UserError, match="lack 'power'"):
        build_optimizer("Lamb", params, {k: v for k, v in SECTION.items() if k != "power"}, TOTAL_STEPS)
    with pytest.raises(UserError, match="decay_steps > 0"):
        build_optimizer("Lamb", params, SECTION, 0)


def test_schedules_a_run_cannot_follow_are_named():
    """The README's case: LAMB's default 3125 warmup steps in a 50-step run never leave warmup; the message gives the
    learning rate the last step reaches (the formula's, step 49)."""
    readme = PolynomialWarmupSchedule(learning_rate=0.00176, end_learning_rate=0.0, warmup_steps=3125,
                                      decay_steps=50, power=1.0)
    (message,) = schedule_warnings(readme, 50, "optimizer_cfg.Lamb")
    reached = schedule_formula(49, 0.00176, 0.0, 3125, 50, 1.0)
    assert message.startswith("the learning rate never leaves warmup: warmup is 3125 optimizer steps "
                              "(optimizer_cfg.Lamb) but the run has 50")
    assert f"rises only to {reached:.3g} at the last step (peak learning_rate 0.00176)" in message
    cliff = PolynomialWarmupSchedule(learning_rate=1e-3, end_learning_rate=0.0, warmup_steps=100, decay_steps=80,
                                     power=1.0)
    (message,) = schedule_warnings(cliff, 1000, "optimizer_cfg.AdamWeightDecay")
    assert message.startswith("optimizer_cfg.AdamWeightDecay.decay_steps 80 is not longer than the warmup (100 "
                              "steps)")
    for warmup, decay in ((100, 1000), (0, 1000), (0, 1)):  # warmup then decay, or no warmup at all: nothing to say
        fine = PolynomialWarmupSchedule(learning_rate=1e-3, end_learning_rate=0.0, warmup_steps=warmup,
                                        decay_steps=decay, power=1.0)
        assert schedule_warnings(fine, 1000, "optimizer_cfg.Lamb") == []
