"""Fine-tuning heads around the ALBERT backbone, one class per task, parameter names as HF's (`albert.*`,
`classifier.*`, `qa_outputs.*`) and, for SQuAD v2, as Google's v2 model (`start_logits.*`, `end_logits.*`,
`answer_class.*`), so a pretraining checkpoint loads by name and only the head is new.

Every head takes (input_ids, token_type_ids, input_mask [, p_mask]) and returns float32 outputs; these are also
the inputs and outputs of the models `export.py` writes. Each takes the `Runtime` its backbone is built with.
"""
from typing import Optional

import mindspore as ms
from mindspore import nn, ops

from src.model.albert import (PORTABLE, AlbertConfig, AlbertModel, DropoutClock, LayerDropout, Runtime, dense_layer,
                              dropout_clock, layer_norm, name_parameters_by_path)

# Added to logits where the answer cannot be (p_mask = 1), as Google's v2 model; logits are float32 there.
MASKED_LOGIT = 1e30


def mask_logits(logits, p_mask):
    """logits [.., S] float32; positions with p_mask 1 get -1e30 (so softmax gives them exactly 0)."""
    p_mask = p_mask.astype(ms.float32)
    return logits * (1.0 - p_mask) - MASKED_LOGIT * p_mask


class AlbertForSequenceClassification(nn.Cell):
    """GLUE-style classification (num_labels >= 2) or regression (num_labels = 1) on the pooled [CLS] output.

    (input_ids, token_type_ids, input_mask) [B, S] -> logits [B, num_labels].
    """

    def __init__(self, config: AlbertConfig, num_labels: int, dropout_prob: float = 0.1, is_training: bool = False,
                 runtime: Runtime = PORTABLE):
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_class must be >= 1 (1 = regression), got {num_labels}")
        self.num_labels = num_labels
        self.albert = AlbertModel(config, is_training, runtime, dropout_clock(config, is_training, runtime, dropout_prob))
        self.dropout = LayerDropout(dropout_prob if is_training else 0.0, 1, self.albert.dropout_clock, runtime.kernels)
        self.classifier = dense_layer(config.hidden_size, num_labels, config, runtime)
        name_parameters_by_path(self)

    def construct(self, input_ids, token_type_ids, input_mask):
        _, pooled_output = self.albert(input_ids, token_type_ids, input_mask)
        return self.classifier(self.dropout(pooled_output)).astype(ms.float32)


class AlbertForMultipleChoice(nn.Cell):
    """RACE: each (article, question + option) row scored from its pooled output; the choices of one question
    compete in a softmax over the scores.

    (input_ids, token_type_ids, input_mask) [B, C, S] -> scores [B, C].
    """

    def __init__(self, config: AlbertConfig, dropout_prob: float = 0.1, is_training: bool = False,
                 runtime: Runtime = PORTABLE):
        super().__init__()
        self.albert = AlbertModel(config, is_training, runtime, dropout_clock(config, is_training, runtime, dropout_prob))
        self.dropout = LayerDropout(dropout_prob if is_training else 0.0, 1, self.albert.dropout_clock, runtime.kernels)
        self.classifier = dense_layer(config.hidden_size, 1, config, runtime)
        name_parameters_by_path(self)

    def construct(self, input_ids, token_type_ids, input_mask):
        batch, choices, seq = input_ids.shape
        _, pooled_output = self.albert(input_ids.reshape(-1, seq), token_type_ids.reshape(-1, seq),
                                       input_mask.reshape(-1, seq))  # [B*C, H]
        scores = self.classifier(self.dropout(pooled_output)).astype(ms.float32)
        return scores.reshape(batch, choices)


class AlbertForQuestionAnswering(nn.Cell):
    """SQuAD v1.1: a start and an end logit per token; positions outside the context (p_mask 1) are masked.

    (input_ids, token_type_ids, input_mask, p_mask) [B, S] -> (start_logits [B, S], end_logits [B, S]).
    """

    def __init__(self, config: AlbertConfig, is_training: bool = False, runtime: Runtime = PORTABLE):
        super().__init__()
        self.albert = AlbertModel(config, is_training, runtime)
        self.qa_outputs = dense_layer(config.hidden_size, 2, config, runtime)
        name_parameters_by_path(self)

    def construct(self, input_ids, token_type_ids, input_mask, p_mask):
        sequence_output, _ = self.albert(input_ids, token_type_ids, input_mask)
        logits = self.qa_outputs(sequence_output).astype(ms.float32)  # [B, S, 2]
        return mask_logits(logits[:, :, 0], p_mask), mask_logits(logits[:, :, 1], p_mask)


class PoolerStartLogits(nn.Cell):
    """One logit per token: where the answer starts."""

    def __init__(self, config: AlbertConfig, runtime: Runtime = PORTABLE):
        super().__init__()
        self.dense = dense_layer(config.hidden_size, 1, config, runtime)

    def construct(self, sequence_output, p_mask):
        return mask_logits(self.dense(sequence_output).astype(ms.float32).squeeze(-1), p_mask)  # [B, S]


class PoolerEndLogits(nn.Cell):
    """One logit per token for where the answer ends, given the start token's representation.

    sequence_output [..., S, H], start_states [..., S, H] (the start representation repeated along S) -> [..., S].
    """

    def __init__(self, config: AlbertConfig, runtime: Runtime = PORTABLE):
        super().__init__()
        self.dense_0 = dense_layer(2 * config.hidden_size, config.hidden_size, config, runtime)
        self.LayerNorm = layer_norm(config.hidden_size, config, runtime)
        self.dense_1 = dense_layer(config.hidden_size, 1, config, runtime)

    def construct(self, sequence_output, start_states, p_mask):
        hidden = ops.tanh(self.dense_0(ops.concat((sequence_output, start_states), -1)).astype(ms.float32))
        logits = self.dense_1(self.LayerNorm(hidden)).astype(ms.float32).squeeze(-1)
        return mask_logits(logits, p_mask)


class PoolerAnswerClass(nn.Cell):
    """One logit per example that the question has no answer, from [CLS] and the expected start representation
    (no dependence on the end, so every example gets a single score)."""

    def __init__(self, config: AlbertConfig, dropout_prob: float, is_training: bool, runtime: Runtime = PORTABLE,
                 clock: Optional[DropoutClock] = None):
        super().__init__()
        self.dense_0 = dense_layer(2 * config.hidden_size, config.hidden_size, config, runtime)
        self.dropout = LayerDropout(dropout_prob if is_training else 0.0, 1, clock, runtime.kernels)
        self.dense_1 = dense_layer(config.hidden_size, 1, config, runtime, has_bias=False)

    def construct(self, start_states, cls_states):
        hidden = ops.tanh(self.dense_0(ops.concat((start_states, cls_states), -1)).astype(ms.float32))
        return self.dense_1(self.dropout(hidden)).astype(ms.float32).squeeze(-1)  # [B]


class AlbertForSquadV2(nn.Cell):
    """SQuAD v2.0 as Google's ALBERT v2 model (XLNet's head): start logits; end logits conditioned on the start
    token; an answer-class logit on [CLS] and the softmax-expected start representation.

    Training (`train_outputs`, gold start given): (start_log_probs [B, S], end_log_probs [B, S], cls_logits [B]).
    Inference (`construct`): beam search over `start_n_top` starts and, for each, `end_n_top` ends:
    (input_ids, token_type_ids, input_mask, p_mask) [B, S] -> (start_top_log_probs [B, K1], start_top_index
    [B, K1], end_top_log_probs [B, K1*K2], end_top_index [B, K1*K2], cls_logits [B]); entry i*K2 + j is the j-th
    best end for the i-th best start. Span validity (end >= start, length) is checked by the postprocessing.
    """

    def __init__(self, config: AlbertConfig, dropout_prob: float = 0.1, is_training: bool = False,
                 start_n_top: int = 5, end_n_top: int = 5, runtime: Runtime = PORTABLE):
        super().__init__()
        if start_n_top < 1 or end_n_top < 1:
            raise ValueError(f"start_n_top and end_n_top must be >= 1, got {start_n_top} and {end_n_top}")
        self.start_n_top, self.end_n_top = start_n_top, end_n_top
        self.albert = AlbertModel(config, is_training, runtime, dropout_clock(config, is_training, runtime, dropout_prob))
        self.start_logits = PoolerStartLogits(config, runtime)
        self.end_logits = PoolerEndLogits(config, runtime)
        self.answer_class = PoolerAnswerClass(config, dropout_prob, is_training, runtime, self.albert.dropout_clock)
        name_parameters_by_path(self)

    def _answer_class(self, sequence_output, start_logits):
        start_probs = ops.softmax(start_logits, -1)  # [B, S]
        expected_start = ops.bmm(start_probs.expand_dims(1), sequence_output.astype(ms.float32)).squeeze(1)
        return self.answer_class(expected_start.astype(sequence_output.dtype), sequence_output[:, 0])

    def train_outputs(self, input_ids, token_type_ids, input_mask, p_mask, start_positions):
        sequence_output, _ = self.albert(input_ids, token_type_ids, input_mask)  # [B, S, H]
        start_logits = self.start_logits(sequence_output, p_mask)
        seq = sequence_output.shape[1]
        start_one_hot = ops.one_hot(start_positions.reshape(-1).astype(ms.int32), seq,
                                    ops.ones((), sequence_output.dtype), ops.zeros((), sequence_output.dtype))
        start_states = ops.bmm(start_one_hot.expand_dims(1), sequence_output)  # [B, 1, H]
        end_logits = self.end_logits(sequence_output, ops.broadcast_to(start_states, sequence_output.shape), p_mask)
        cls_logits = self._answer_class(sequence_output, start_logits)
        return ops.log_softmax(start_logits, -1), ops.log_softmax(end_logits, -1), cls_logits

    def construct(self, input_ids, token_type_ids, input_mask, p_mask):
        sequence_output, _ = self.albert(input_ids, token_type_ids, input_mask)  # [B, S, H]
        batch, seq, width = sequence_output.shape
        start_logits = self.start_logits(sequence_output, p_mask)
        start_top_log_probs, start_top_index = ops.topk(ops.log_softmax(start_logits, -1), self.start_n_top)
        flat_index = (start_top_index + (ops.arange(0, batch, dtype=ms.int32) * seq).reshape(-1, 1)).reshape(-1)
        start_states = ops.gather(sequence_output.reshape(-1, width), flat_index, 0)  # [B*K1, H]
        start_states = ops.broadcast_to(start_states.reshape(batch, self.start_n_top, 1, width),
                                        (batch, self.start_n_top, seq, width))
        tiled_output = ops.broadcast_to(sequence_output.expand_dims(1), (batch, self.start_n_top, seq, width))
        end_logits = self.end_logits(tiled_output, start_states, p_mask.expand_dims(1))  # [B, K1, S]
        end_top_log_probs, end_top_index = ops.topk(ops.log_softmax(end_logits, -1), self.end_n_top)
        cls_logits = self._answer_class(sequence_output, start_logits)
        return (start_top_log_probs, start_top_index.astype(ms.int32),
                end_top_log_probs.reshape(batch, -1), end_top_index.astype(ms.int32).reshape(batch, -1), cls_logits)
