"""Pretraining network: the ALBERT backbone with the masked-LM and sentence-order-prediction heads (as Google)."""
from typing import Optional

import mindspore as ms
from mindspore import Parameter, Tensor, amp, nn, ops
from mindspore.common.initializer import TruncatedNormal
from mindspore.communication import get_group_size
from mindspore.context import ParallelMode

from src import cpu_kernels
from src.albert_model import (PORTABLE, Activation, AlbertConfig, AlbertModel, Runtime, dense_layer, layer_norm,
                              name_parameters_by_path)


def gather_positions(sequence, positions):
    """sequence [B, S, H], positions [B, P] -> [B, P, H] (the hidden states at the masked positions)."""
    batch, seq, width = sequence.shape
    offsets = (ops.arange(0, batch, dtype=ms.int32) * seq).reshape(-1, 1)
    flat_positions = (positions.astype(ms.int32) + offsets).reshape(-1)
    gathered = ops.gather(sequence.reshape(batch * seq, width), flat_positions, 0)
    return gathered.reshape(batch, -1, width)


class AlbertMLMHead(nn.Cell):
    """H -> E transform, activation, LayerNorm, then logits against the (tied) word embeddings plus a bias."""

    def __init__(self, config: AlbertConfig, word_embeddings: Parameter, runtime: Runtime = PORTABLE):
        super().__init__()
        self.dense = dense_layer(config.hidden_size, config.embedding_size, config, runtime)
        self.activation = Activation(config.hidden_act, runtime.kernels, runtime.onnx_patterns)
        self.LayerNorm = layer_norm(config.embedding_size, config, runtime)
        self.bias = Parameter(ops.zeros(config.vocab_size, ms.float32), name="bias")
        self.word_embeddings = word_embeddings  # the backbone's table: tied, not a second Parameter
        self.use_kernels = runtime.kernels
        self.bf16_weights = runtime.bf16_weights
        if self.use_kernels:  # the bias added in the product, its gradient fused
            self.decoder_kernel = cpu_kernels.matmul_nt_bias(runtime.bf16_weights)
        else:
            self.decoder_matmul = ops.MatMul(transpose_b=True)

    def construct(self, hidden_states):
        transformed = self.LayerNorm(self.activation(self.dense(hidden_states)).astype(ms.float32))
        batch, positions, width = transformed.shape
        # One 2-D product against the [V, E] table as stored: a 3-D ops.matmul would copy the table per batch row
        # (and transpose it), which cost more than the product itself.
        flat = transformed.reshape(batch * positions, width).astype(self.word_embeddings.dtype)
        if self.bf16_weights:
            table = cpu_kernels.bf16_copy(self.word_embeddings)
            return self.decoder_kernel(flat, self.word_embeddings, table, self.bias).reshape(batch, positions, -1)
        if self.use_kernels:
            return self.decoder_kernel(flat, self.word_embeddings, self.bias).reshape(batch, positions, -1)
        logits = self.decoder_matmul(flat, self.word_embeddings)
        return logits.reshape(batch, positions, -1) + self.bias  # [B, P, V]


class AlbertSOPHead(nn.Cell):
    """Sentence-order prediction: two logits from the pooled [CLS] output."""

    def __init__(self, config: AlbertConfig):
        super().__init__()
        self.classifier = nn.Dense(config.hidden_size, 2, weight_init=TruncatedNormal(config.initializer_range))

    def construct(self, pooled_output):
        return self.classifier(pooled_output)


class AlbertPreTraining(nn.Cell):
    """(input_ids, token_type_ids, input_mask, masked_lm_positions) -> (mlm_logits [B, P, V], sop_logits [B, 2])."""

    def __init__(self, config: AlbertConfig, is_training: bool = False, runtime: Runtime = PORTABLE):
        super().__init__()
        self.albert = AlbertModel(config, is_training, runtime)
        self.predictions = AlbertMLMHead(config, self.albert.embeddings.word_embeddings.embedding_table, runtime)
        self.sop_classifier = AlbertSOPHead(config)
        name_parameters_by_path(self)

    def construct(self, input_ids, token_type_ids, input_mask, masked_lm_positions):
        sequence_output, pooled_output = self.albert(input_ids, token_type_ids, input_mask)
        mlm_logits = self.predictions(gather_positions(sequence_output, masked_lm_positions))
        sop_logits = self.sop_classifier(pooled_output)
        return mlm_logits.astype(ms.float32), sop_logits.astype(ms.float32)


class AlbertPretrainingLoss(nn.Cell):
    """Google's pretraining loss: masked-LM NLL weighted by masked_lm_weights (padding predictions weigh 0),
    sum(w * nll) / (sum(w) + 1e-5), plus the mean sentence-order cross entropy.

    (mlm_logits [B, P, V], sop_logits [B, 2], masked_lm_ids [B, P], masked_lm_weights [B, P],
    next_sentence_labels [B] or [B, 1]) -> (total, mlm_loss, sop_loss), float32 scalars.
    With `use_kernels` the masked-LM NLL over the vocabulary is one compiled pass (`cpu_kernels.cross_entropy`).
    """

    def __init__(self, use_kernels: bool = False):
        super().__init__()
        self.use_kernels = use_kernels
        if use_kernels:
            self.cross_entropy = cpu_kernels.cross_entropy()

    def construct(self, mlm_logits, sop_logits, masked_lm_ids, masked_lm_weights, next_sentence_labels):
        if self.use_kernels:
            batch, positions, vocab = mlm_logits.shape
            mlm_nll = self.cross_entropy(mlm_logits.reshape(-1, vocab),
                                         masked_lm_ids.astype(ms.int32).reshape(-1))[0].reshape(batch, positions)
        else:
            mlm_nll = _nll(mlm_logits, masked_lm_ids)
        weights = masked_lm_weights.astype(ms.float32)
        mlm_loss = ops.reduce_sum(weights * mlm_nll) / (ops.reduce_sum(weights) + 1e-5)
        sop_loss = ops.reduce_mean(_nll(sop_logits, next_sentence_labels.reshape(-1)))
        return mlm_loss + sop_loss, mlm_loss, sop_loss


def _nll(logits, labels):
    """-log softmax(logits)[label] along the last axis, float32; the one-hot product as in Google's code."""
    log_probs = ops.log_softmax(logits.astype(ms.float32), -1)
    one_hot = ops.one_hot(labels.astype(ms.int32), logits.shape[-1], Tensor(1.0, ms.float32),
                          Tensor(0.0, ms.float32))
    return -ops.reduce_sum(log_probs * one_hot, -1)


class AlbertNetworkWithLoss(nn.Cell):
    """AlbertPreTraining plus its loss, taking the pretraining MindRecord columns in their dataset order.

    (input_ids, input_mask, segment_ids, next_sentence_labels, masked_lm_positions, masked_lm_ids,
    masked_lm_weights) -> total loss, or (total, mlm_loss, sop_loss) with `return_parts=True` (for logging;
    `AlbertTrainOneStepCell` takes either form and differentiates the total).
    """

    def __init__(self, config: AlbertConfig, is_training: bool = True, return_parts: bool = False,
                 runtime: Runtime = PORTABLE):
        super().__init__(auto_prefix=False)  # parameter names stay AlbertPreTraining's (the checkpoint names)
        self.albert_pretraining = AlbertPreTraining(config, is_training, runtime)
        self.loss = AlbertPretrainingLoss(runtime.kernels)
        self.return_parts = return_parts

    def construct(self, input_ids, input_mask, segment_ids, next_sentence_labels, masked_lm_positions,
                  masked_lm_ids, masked_lm_weights):
        mlm_logits, sop_logits = self.albert_pretraining(input_ids, segment_ids, input_mask, masked_lm_positions)
        total, mlm_loss, sop_loss = self.loss(mlm_logits, sop_logits, masked_lm_ids, masked_lm_weights,
                                              next_sentence_labels)
        if self.return_parts:
            return total, mlm_loss, sop_loss
        return total


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
      there) adds mindspore.amp.all_finite, which reads the chip's float-status register (src/device_checks.py);
      accumulation windows use amp.all_finite on every target (IsFinite off Ascend).
    - Accumulation: gradients of `accumulation_steps` micro-batches are averaged in Parameters ("accu_grads.*") and
      applied on every `accumulation_steps`-th call; the call counter ("accumulation_step") is a Parameter, so a
      checkpoint resumes mid-window.
    - Clipping: the averaged, unscaled gradients are clipped to global norm `clip_norm` (None or 0 = off).
      Unscaling, averaging and clipping are one division of each gradient by one number, after one read of all of
      them for the global norm (which is also the overflow check): an ALBERT with 90M parameters kept three
      extra copies of its gradients otherwise. With `use_kernels` (the network's Runtime has the compiled CPU
      kernels; float32 weights) the norm and the division are one compiled pass each.

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


class AlbertPretrainEvalCell(nn.Cell):
    """Sums for the pretraining metrics over one batch, so that batches and ranks add up exactly.

    Inputs: the 7 pretraining columns plus `example_weights` [B] (0 for padding rows). Output, float32 [6]:
    (masked-LM correct weight, masked-LM weight, masked-LM weighted NLL, SOP correct, SOP NLL, examples).
    """

    def __init__(self, config: AlbertConfig, runtime: Runtime = PORTABLE):
        super().__init__(auto_prefix=False)  # parameter names stay AlbertPreTraining's (the checkpoint names)
        self.albert_pretraining = AlbertPreTraining(config, is_training=False, runtime=runtime)

    def construct(self, input_ids, input_mask, segment_ids, next_sentence_labels, masked_lm_positions,
                  masked_lm_ids, masked_lm_weights, example_weights):
        mlm_logits, sop_logits = self.albert_pretraining(input_ids, segment_ids, input_mask, masked_lm_positions)
        example_weights = example_weights.astype(ms.float32)
        weights = masked_lm_weights.astype(ms.float32) * example_weights.reshape(-1, 1)
        mlm_hits = (ops.argmax(mlm_logits, -1).astype(ms.int32) == masked_lm_ids.astype(ms.int32)).astype(ms.float32)
        labels = next_sentence_labels.reshape(-1).astype(ms.int32)
        sop_hits = (ops.argmax(sop_logits, -1).astype(ms.int32) == labels).astype(ms.float32)
        return ops.stack([ops.reduce_sum(weights * mlm_hits), ops.reduce_sum(weights),
                          ops.reduce_sum(weights * _nll(mlm_logits, masked_lm_ids)),
                          ops.reduce_sum(example_weights * sop_hits),
                          ops.reduce_sum(example_weights * _nll(sop_logits, labels)),
                          ops.reduce_sum(example_weights)])
