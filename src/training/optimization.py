"""Optimizers and learning-rate schedule shared by pretraining and fine-tuning.

- `PolynomialWarmupSchedule`: ModelZoo BERT's `BertLearningRate` (= Google BERT/ALBERT `optimization.py`): linear
  warmup to the peak, and a polynomial decay from the peak to `end_learning_rate` over `decay_steps` counted from
  step 0 (so the warmup steps are part of the decay window, as in Google's code).
- `Lamb`: Google ALBERT's `lamb_optimizer.py` written with primitive ops, because `nn.Lamb` has no CPU kernel.
- `AdamWeightDecay`: MindSpore's own (it runs on CPU), with LayerNorm and bias parameters in a no-decay group.
- `build_optimizer`: the one place a yaml optimizer section becomes an optimizer; `schedule_warnings` says what its
  schedule will not do in a run of a given length that its settings suggest.
"""
from typing import Any, Callable, List, Mapping, Sequence

import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

from model_utils.errors import UserError

# Google ALBERT excludes ["LayerNorm", "layer_norm", "bias"]; beta/gamma are LayerNorm's names in MindSpore's nn.
NO_DECAY_NAME_PARTS = ("LayerNorm", "layer_norm", "bias", "beta", "gamma")
OPTIMIZERS = ("AdamWeightDecay", "Lamb")


def use_weight_decay(param_name: str) -> bool:
    """False for LayerNorm and bias parameters: decaying them towards 0 only hurts (Google BERT/ALBERT)."""
    return not any(part in param_name for part in NO_DECAY_NAME_PARTS)


class PolynomialWarmupSchedule(LearningRateSchedule):
    """lr(step) = peak * step / warmup_steps while step < warmup_steps, else
    (peak - end) * (1 - min(step, decay_steps) / decay_steps) ** power + end.

    `step` is the optimizer's global step (0 for the first update). With warmup_steps = 0 there is no warmup.
    """

    def __init__(self, learning_rate: float, end_learning_rate: float, warmup_steps: int, decay_steps: int,
                 power: float):
        super().__init__()
        if learning_rate <= 0 or end_learning_rate < 0 or warmup_steps < 0 or decay_steps <= 0 or power <= 0:
            raise UserError(f"learning-rate schedule needs learning_rate > 0, end_learning_rate >= 0, "
                            f"warmup_steps >= 0, decay_steps > 0 and power > 0; got learning_rate={learning_rate}, "
                            f"end_learning_rate={end_learning_rate}, warmup_steps={warmup_steps}, "
                            f"decay_steps={decay_steps}, power={power}")
        self.peak = float(learning_rate)
        self.end = float(end_learning_rate)
        self.warmup_steps = float(warmup_steps)
        self.warmup_divisor = float(max(warmup_steps, 1))
        self.decay_steps = float(decay_steps)
        self.power = float(power)

    def construct(self, global_step):
        step = global_step.astype(ms.float32)
        progress = ops.minimum(step, self.decay_steps) / self.decay_steps
        decayed = (self.peak - self.end) * ops.pow(1.0 - progress, self.power) + self.end
        warmup = self.peak * step / self.warmup_divisor
        return ops.select(step < self.warmup_steps, warmup, decayed)


def schedule_warnings(schedule: PolynomialWarmupSchedule, total_steps: int, where: str) -> List[str]:
    """What a run of `total_steps` optimizer steps will not do that the schedule's settings (the yaml section
    `where`) suggest, one message each: a warmup the run never leaves (with the learning rate it ends at), or a
    decay window that ends with the warmup (Google's decay counts from step 0: the rate falls from its peak to
    end_learning_rate at once)."""
    warmup, decay = int(schedule.warmup_steps), int(schedule.decay_steps)
    if warmup >= total_steps:
        last = float(schedule(Tensor(total_steps - 1, ms.int32)).asnumpy())
        return [f"the learning rate never leaves warmup: warmup is {warmup} optimizer steps ({where}) but the run "
                f"has {total_steps}, so it rises only to {last:.3g} at the last step (peak learning_rate "
                f"{schedule.peak:g}); lower warmup_steps (e.g. a tenth of the run) or train longer"]
    if 0 < warmup and decay <= warmup:
        return [f"{where}.decay_steps {decay} is not longer than the warmup ({warmup} steps): the decay counts from "
                f"step 0, so the learning rate falls from its peak {schedule.peak:g} to end_learning_rate "
                f"{schedule.end:g} right after warmup; set decay_steps above the warmup (or -1: the run's length)"]
    return []


def _lamb_update(beta1: float, beta2: float, eps: float, weight_decay: float, lr: Tensor, param: Parameter,
                 m: Parameter, v: Parameter, grad: Tensor, decay: bool):
    """One parameter's LAMB step (Google's rule: Adam moments without bias correction, decoupled weight decay
    added to the update, then the layer-wise trust ratio ||w|| / ||update||; excluded parameters get neither)."""
    grad = grad.astype(ms.float32)
    next_m = beta1 * m + (1.0 - beta1) * grad
    next_v = beta2 * v + (1.0 - beta2) * ops.square(grad)
    update = next_m / (ops.sqrt(next_v) + eps)
    if decay:
        update = update + weight_decay * param
        w_norm = ops.sqrt(ops.reduce_sum(ops.square(param)))
        u_norm = ops.sqrt(ops.reduce_sum(ops.square(update)))
        ratio = ops.select(ops.logical_and(w_norm > 0, u_norm > 0), w_norm / ops.maximum(u_norm, 1e-30),
                           ops.ones_like(w_norm))
        update = ratio * update
    next_param = param - lr * update
    ops.assign(m, next_m)
    ops.assign(v, next_v)
    ops.assign(param, next_param)
    return next_param


class Lamb(nn.Optimizer):
    """Google ALBERT's LAMB (`lamb_optimizer.py`) from primitive ops, so it runs on CPU as well as GPU/Ascend.

    `decay_filter(name)` picks the parameters that get weight decay and the trust ratio (default: all but
    LayerNorm and bias, as Google's `exclude_from_weight_decay`, which also serves as its layer-adaptation filter).
    """

    def __init__(self, params: Sequence[Parameter], learning_rate, beta1: float = 0.9, beta2: float = 0.999,
                 eps: float = 1e-6, weight_decay: float = 0.01,
                 decay_filter: Callable[[str], bool] = use_weight_decay):
        super().__init__(learning_rate, params)
        self.beta1, self.beta2, self.eps = float(beta1), float(beta2), float(eps)
        self.decay_rate = float(weight_decay)
        self.moments1 = self.parameters.clone(prefix="lamb_m", init="zeros")
        self.moments2 = self.parameters.clone(prefix="lamb_v", init="zeros")
        self.lamb_decay_flags = tuple(decay_filter(p.name) for p in self._parameters)
        self.hyper_map = ops.HyperMap()

    def construct(self, gradients):
        lr = self.get_lr()
        self.assignadd(self.global_step, self.global_step_increase_tensor)
        return self.hyper_map(ops.partial(_lamb_update, self.beta1, self.beta2, self.eps, self.decay_rate, lr),
                              self._parameters, self.moments1, self.moments2, gradients, self.lamb_decay_flags)


def decay_groups(params: Sequence[Parameter], weight_decay: float) -> List[dict]:
    """MindSpore param groups: weight decay for most parameters, none for LayerNorm/bias; order kept."""
    params = list(params)
    decay = [p for p in params if use_weight_decay(p.name)]
    no_decay = [p for p in params if not use_weight_decay(p.name)]
    groups = [{"params": group, "weight_decay": rate}
              for group, rate in ((decay, weight_decay), (no_decay, 0.0)) if group]
    return groups + [{"order_params": params}]


def _setting(section: Mapping[str, Any], key: str, where: str) -> Any:
    if key not in section:
        raise UserError(f"optimizer settings {where} lack '{key}'")
    return section[key]


def _warmup_steps(section: Mapping[str, Any], total_steps: int, where: str) -> int:
    if int(section.get("warmup_steps", -1)) >= 0:
        return int(section["warmup_steps"])
    proportion = float(_setting(section, "warmup_proportion", where))
    if not 0.0 <= proportion <= 1.0:
        raise UserError(f"warmup_proportion {where} must be in [0, 1], got {proportion}")
    return int(total_steps * proportion)


def build_optimizer(name: str, params: Sequence[Parameter], section: Mapping[str, Any],
                    total_steps: int) -> nn.Optimizer:
    """The optimizer named `name` ("AdamWeightDecay" or "Lamb") over `params`, with a PolynomialWarmupSchedule.

    `section` is the yaml block of that optimizer: learning_rate, end_learning_rate, power, warmup_steps (when
    absent or < 0: warmup_proportion, a fraction of `total_steps`, as Google's fine-tuning), weight_decay, optionally
    eps (default 1e-6) and decay_steps (default, or when <= 0: `total_steps`, the number of optimizer updates of the
    run, as ModelZoo BERT).
    """
    if name not in OPTIMIZERS:
        raise UserError(f"unknown optimizer '{name}'; choose one of {', '.join(OPTIMIZERS)}")
    where = f"for {name}"
    decay_steps = int(section.get("decay_steps", 0) or 0)
    schedule = PolynomialWarmupSchedule(
        learning_rate=float(_setting(section, "learning_rate", where)),
        end_learning_rate=float(_setting(section, "end_learning_rate", where)),
        warmup_steps=_warmup_steps(section, total_steps, where),
        decay_steps=decay_steps if decay_steps > 0 else int(total_steps),
        power=float(_setting(section, "power", where)))
    weight_decay = float(_setting(section, "weight_decay", where))
    eps = float(section.get("eps", 1e-6))
    if name == "Lamb":
        return Lamb(params, schedule, eps=eps, weight_decay=weight_decay)
    return nn.AdamWeightDecay(decay_groups(params, weight_decay), schedule, eps=eps)
