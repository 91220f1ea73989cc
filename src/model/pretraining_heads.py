"""Pretraining network: the ALBERT backbone with the masked-LM and sentence-order-prediction heads (as Google)."""
import mindspore as ms
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import TruncatedNormal

from src.model import cpu_kernels
from src.model.albert import (PORTABLE, Activation, AlbertConfig, AlbertModel, Runtime, dense_layer, layer_norm,
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
