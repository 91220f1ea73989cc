"""Fine-tuning networks with their losses, taking the MindRecord columns in dataset order (see dataset.py).

Training uses the package's one train-step cell, `src.training.train_step.AlbertTrainOneStepCell` (loss
scaling, clipping, accumulation, data-parallel reduction). The wrappers keep their head's parameter names
(`auto_prefix=False`), so checkpoints of a training run load straight into the heads for evaluation and export.
"""
import mindspore as ms
from mindspore import nn, ops

from src.model.pretraining_heads import _nll
from src.model.task_heads import AlbertForQuestionAnswering, AlbertForSquadV2


class AlbertClassifierWithLoss(nn.Cell):
    """Cross entropy over the labels (or, for a one-output regression head such as STS-B, mean squared error).

    (input_ids, input_mask, segment_ids, label_ids) -> loss. Works for AlbertForSequenceClassification ([B, S]
    inputs) and AlbertForMultipleChoice ([B, C, S] inputs, label = index of the right choice).
    """

    def __init__(self, model: nn.Cell, regression: bool = False):
        super().__init__(auto_prefix=False)
        self.model = model
        self.regression = regression

    def construct(self, input_ids, input_mask, segment_ids, label_ids):
        logits = self.model(input_ids, segment_ids, input_mask)
        if self.regression:
            return ops.reduce_mean(ops.square(logits.reshape(-1) - label_ids.reshape(-1).astype(ms.float32)))
        return ops.reduce_mean(_nll(logits, label_ids.reshape(-1)))


class AlbertSquadWithLoss(nn.Cell):
    """SQuAD v1.1: mean of the start and end cross entropies (is_impossible, always 0 in v1.1, is not used).

    (input_ids, input_mask, segment_ids, p_mask, start_positions, end_positions, is_impossible) -> loss.
    """

    def __init__(self, model: AlbertForQuestionAnswering):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, input_ids, input_mask, segment_ids, p_mask, start_positions, end_positions, is_impossible):
        start_logits, end_logits = self.model(input_ids, segment_ids, input_mask, p_mask)
        start_loss = ops.reduce_mean(_nll(start_logits, start_positions.reshape(-1)))
        end_loss = ops.reduce_mean(_nll(end_logits, end_positions.reshape(-1)))
        return (start_loss + end_loss) * 0.5


class AlbertSquadV2WithLoss(nn.Cell):
    """SQuAD v2.0 as Google's ALBERT: mean start/end NLL (unanswerable questions point at [CLS]) plus
    0.5 x binary cross entropy of the answer-class logit against is_impossible. Columns as AlbertSquadWithLoss."""

    def __init__(self, model: AlbertForSquadV2):
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, input_ids, input_mask, segment_ids, p_mask, start_positions, end_positions, is_impossible):
        start_log_probs, end_log_probs, cls_logits = self.model.train_outputs(input_ids, segment_ids, input_mask,
                                                                             p_mask, start_positions)
        start_loss = -ops.reduce_mean(_pick(start_log_probs, start_positions))
        end_loss = -ops.reduce_mean(_pick(end_log_probs, end_positions))
        labels = is_impossible.reshape(-1).astype(ms.float32)
        class_loss = ops.binary_cross_entropy_with_logits(cls_logits, labels, ops.ones_like(labels),
                                                          ops.ones_like(labels))
        return (start_loss + end_loss) * 0.5 + class_loss * 0.5


def _pick(log_probs, positions):
    """log_probs [B, S] at positions [B] (one-hot product, as Google)."""
    one_hot = ops.one_hot(positions.reshape(-1).astype(ms.int32), log_probs.shape[-1],
                          ops.ones((), ms.float32), ops.zeros((), ms.float32))
    return ops.reduce_sum(log_probs * one_hot, -1)

