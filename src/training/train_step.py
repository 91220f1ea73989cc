"""The one train-step cell of pretraining and fine-tuning: forward and backward of a network that returns its loss,
dynamic loss scaling with overflow skipping, gradient accumulation, global-norm clipping and the optimizer step, with
the gradients reduced over the data-parallel group."""
from typing import Optional

import mindspore as ms
from mindspore import Parameter, Tensor, amp, nn, ops
from mindspore.communication import get_group_size
from mindspore.context import ParallelMode

from src.common.checkpoint_io import DROPOUT_CALLS
from src.model import cpu_kernels


class AlbertTrainOneStepCell(nn.Cell):
    """One optimizer call per `accumulation_steps` calls, with dynamic loss scaling, global-norm clipping and
    data-parallel gradient reduction: the one train-step cell for pretraining and fine-tuning.

    `network(*inputs)` returns the loss to minimise, or a tuple whose first item is that loss and whose other items
    are passed through for logging (e.g. AlbertNetworkWithLoss(..., return_parts=True)).

    - Loss scaling (`loss_scale` = its initial value; None = off): the loss is multiplied by the scale before the
      backward pass and the gradients divided by it; the scale follows nn.DynamicLossScaleUpdateCell (divided by
      `scale_factor` on overflow, never below 1; multiplied by it after `scale_window` updates without overflow).
    - Overflow: inf/nan in any gradient (with or without loss scaling; seen as a non-finite global norm) skips the
      optimizer update; under data parallel the gradients are reduced first and the 0/1 flag of accumulation
      windows is all-reduced (a sum > 0 is the max; CPU AllReduce only sums), so every rank skips together and
      weights stay identical. `float_status` (Ascend 910A, or SATURATION_MODE: inf/nan saturate to finite values
      there) adds mindspore.amp.all_finite, which reads the chip's float-status register (src/devices/device_checks.py);
      accumulation windows use amp.all_finite on every target (IsFinite off Ascend).
    - Accumulation: gradients of `accumulation_steps` micro-batches are averaged in Parameters ("accu_grads.*") and
      applied on every `accumulation_steps`-th call; the call counter ("accumulation_step") is a Parameter, so a
      checkpoint resumes mid-window.
    - Clipping: the averaged, unscaled gradients are clipped to global norm `clip_norm` (None or 0 = off).
      Unscaling, averaging and clipping are one division of each gradient by one number, after one read of all of
      them for the global norm (which is also the overflow check): an ALBERT with 90M parameters kept three
      extra copies of its gradients otherwise. With `use_kernels` (the network's Runtime has the compiled CPU
      kernels; float32 weights) the norm and the division are one compiled pass each.
    - Dropout: a network with a dropout clock (src/model/albert.py, DropoutClock) has its count raised by one
      after each call's forward and backward passes, so every micro-batch gets new masks and both passes the same.

    Returns (loss, overflow, loss_scale, *extra network outputs). `overflow` is True when this call's optimizer
    update was skipped because of inf/nan gradients; calls that only accumulate report False.
    """

    def __init__(self, network: nn.Cell, optimizer: nn.Optimizer, loss_scale: Optional[float] = None,
                 scale_factor: float = 2.0, scale_window: int = 1000, clip_norm: Optional[float] = 1.0,
                 accumulation_steps: int = 1, float_status: bool = False, use_kernels: bool = False):
        super().__init__(auto_prefix=False)
        _check_train_options(loss_scale, scale_factor, scale_window, clip_norm, accumulation_steps)
        self.network = network
        self.network.set_grad()
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        if use_kernels and any(weight.dtype != ms.float32 for weight in self.weights):
            raise ValueError("use_kernels needs float32 weights: the compiled CPU kernels take float32 gradients")
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.hyper_map = ops.HyperMap()
        self.use_loss_scale = loss_scale is not None
        self.loss_scale = Parameter(Tensor(loss_scale if self.use_loss_scale else 1.0, ms.float32),
                                    name="loss_scale", requires_grad=False)
        if self.use_loss_scale:
            self.scale_update = nn.DynamicLossScaleUpdateCell(loss_scale, scale_factor, scale_window)
        self.float_status = float_status
        self.clip_norm = float(clip_norm or 0.0)
        self.accumulation_steps = int(accumulation_steps)
        if self.accumulation_steps > 1:
            self.accu_grads = self.weights.clone(prefix="accu_grads", init="zeros")
            self.accu_overflow = Parameter(Tensor(False, ms.bool_), name="accu_overflow", requires_grad=False)
            self.micro_step = Parameter(Tensor(0, ms.int32), name="accumulation_step", requires_grad=False)
        self.data_parallel = ms.get_auto_parallel_context("parallel_mode") in (ParallelMode.DATA_PARALLEL,
                                                                                 ParallelMode.HYBRID_PARALLEL)
        if self.data_parallel:
            self.grad_reducer = nn.DistributedGradReducer(self.weights, ms.get_auto_parallel_context("gradients_mean"),
                                                          get_group_size())
            self.overflow_all_reduce = ops.AllReduce(ops.ReduceOp.SUM)
        clocks = [param for param in network.get_parameters() if param.name == DROPOUT_CALLS]
        self.dropout_calls = clocks[0] if clocks else None
        self.use_kernels = use_kernels
        if use_kernels:
            self.norm_kernel, self.divide_kernel = cpu_kernels.scaled_squared_norm(), cpu_kernels.divide_by_scalar()

    def construct(self, *inputs):
        outputs = self.network(*inputs)
        if isinstance(outputs, tuple):
            loss = outputs[0]
            sens = (ops.ones_like(loss) * self.loss_scale.astype(loss.dtype),) + \
                self.hyper_map(ops.zeros_like, outputs[1:])
        else:
            loss = outputs
            sens = ops.ones_like(loss) * self.loss_scale.astype(loss.dtype)
        grads = self.grad(self.network, self.weights)(*inputs, sens)  # loss_scale x the gradients
        if self.accumulation_steps > 1:
            overflow = self._accumulate(self._divide(grads, self.loss_scale))
        elif self.float_status:
            overflow = self._apply(grads, ops.logical_not(amp.all_finite(grads)), self.loss_scale)
        else:  # the global norm's check sees any inf/nan
            overflow = self._apply(grads, Tensor(False, ms.bool_), self.loss_scale)
        if self.dropout_calls is not None:
            overflow = ops.depend(overflow, ops.assign_add(self.dropout_calls, ops.ones_like(self.dropout_calls)))
        if isinstance(outputs, tuple):
            return (loss, overflow, self.loss_scale) + outputs[1:]
        return loss, overflow, self.loss_scale

    def _accumulate(self, grads):
        """Add this micro-batch's (unscaled) gradients; on the last one of a window apply their mean and reset."""
        self.hyper_map(ops.assign_add, self.accu_grads, grads)
        seen_overflow = ops.logical_or(self.accu_overflow, ops.logical_not(amp.all_finite(grads)))
        ops.assign(self.accu_overflow, seen_overflow)
        step = self.micro_step + 1
        ops.assign(self.micro_step, step)
        overflow = Tensor(False, ms.bool_)
        if step % self.accumulation_steps == 0:
            overflow = self._apply(self.accu_grads, seen_overflow, Tensor(self.accumulation_steps, ms.float32))
            self.hyper_map(ops.assign, self.accu_grads, self.hyper_map(ops.zeros_like, self.accu_grads))
            ops.assign(self.accu_overflow, Tensor(False, ms.bool_))
        return overflow

    def _apply(self, grads, overflow, grad_scale):
        """`grads` are `grad_scale` times the gradients to apply: reduce them across ranks, check them, divide them
        by grad_scale (and by the clipping factor), update the loss scale, and call the optimizer unless some rank
        overflowed."""
        if self.data_parallel:
            grads = self.grad_reducer(grads)
            overflow = self.overflow_all_reduce(overflow.astype(ms.float32)) > 0
        squared_norm = ops.addn([self._squared_norm(grad, grad_scale) for grad in grads])
        overflow = ops.logical_or(overflow, ops.logical_not(ops.isfinite(squared_norm).all()))
        divisor = grad_scale
        if self.clip_norm > 0:  # as ops.clip_by_global_norm: times clip_norm / max(norm, clip_norm)
            divisor = grad_scale * ops.maximum(ops.sqrt(squared_norm) / self.clip_norm, 1.0)
        grads = self._divide(grads, divisor)
        if self.use_loss_scale:
            overflow = self.scale_update(self.loss_scale, overflow)
        if not overflow:
            overflow = ops.depend(overflow, self.optimizer(grads))
        return overflow

    def _squared_norm(self, grad, scale):
        """sum((grad / scale)^2) as [1]."""
        if self.use_kernels:
            return self.norm_kernel(grad, scale)
        return ops.reduce_sum(ops.square(grad / scale)).reshape(1)

    def _divide(self, grads, divisor):
        """Each gradient divided by `divisor`: a division, not a product with 1/divisor, which is subnormal for
        divisors above 8.5e37 and flushed to zero by CPU kernels running with denormals off."""
        if self.use_kernels:
            return tuple([self.divide_kernel(grad, divisor) for grad in grads])
        return tuple([grad / divisor for grad in grads])


def _check_train_options(loss_scale: Optional[float], scale_factor: float, scale_window: int,
                         clip_norm: Optional[float], accumulation_steps: int) -> None:
    if loss_scale is not None and (loss_scale < 1 or scale_factor <= 1 or scale_window < 1):
        raise ValueError(f"loss scaling needs loss_scale_value >= 1, scale_factor > 1 and scale_window >= 1; got "
                         f"{loss_scale}, {scale_factor}, {scale_window}")
    if clip_norm is not None and clip_norm < 0:
        raise ValueError(f"clip_norm must be >= 0 (0 = no clipping), got {clip_norm}")
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}")
