"""The fine-tuning heads equal independent PyTorch references given the same weights.

Classifier, multiple choice and SQuAD v1 are checked against HF transformers' AlbertFor{SequenceClassification,
MultipleChoice,QuestionAnswering}; the SQuAD v2 head against HF's XLNet SQuAD poolers (the head Google's ALBERT v2
model uses) on top of HF's AlbertModel, with the beam search and loss written out in torch here. The heads are built
as fine-tuning on CPU builds them (model_runtime: the compiled kernels when they are built).
"""
import numpy as np
import pytest
import torch
import transformers
from mindspore import Tensor
from transformers.models.xlnet import modeling_xlnet

from src.common.checkpoint_io import load_weights, save_checkpoint_atomic
from src.conversion.convert_checkpoint import hf_name
from src.devices.device_setup import model_runtime
from src.model.albert import AlbertConfig
from src.model.task_heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering, AlbertForSequenceClassification,
                                  AlbertForSquadV2)
from src.model.task_losses import AlbertClassifierWithLoss, AlbertSquadV2WithLoss, AlbertSquadWithLoss
from model_utils.errors import UserError

HF_KWARGS = dict(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_hidden_groups=2,
                 inner_group_num=1, num_attention_heads=4, intermediate_size=37, hidden_act="gelu_new",
                 max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                 classifier_dropout_prob=0.0)
OURS = AlbertConfig(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=3, num_hidden_groups=2,
                    inner_group_num=1, num_attention_heads=4, intermediate_size=37, hidden_act="gelu_new",
                    max_position_embeddings=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
BATCH, SEQ = 3, 20
RUNTIME = model_runtime("CPU", OURS.compute_type)
TOLERANCE = 1e-5


pytestmark = pytest.mark.usefixtures("graph_mode")  # tests/conftest.py


def perturbed(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Random, non-trivial weights (LayerNorms and biases moved away from 1/0)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.add_(torch.randn_like(param) * (0.2 if "norm" in name.lower() else 0.05))
    return model.eval()


def our_weights(state: dict) -> dict:
    """HF state dict -> our names: the converter's table for the backbone, heads keep their names
    (XLNet's LayerNorm weight/bias become gamma/beta as everywhere in MindSpore)."""
    weights = {}
    for name, value in state.items():
        if name.startswith("albert."):
            ours = hf_name(name)
        else:
            ours = name.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta")
        if ours is not None:
            weights[ours] = value.detach().numpy().astype(np.float32)
    return weights


def batch(seed: int = 1, choices: int = 0):
    rng = np.random.default_rng(seed)
    shape = (BATCH, choices, SEQ) if choices else (BATCH, SEQ)
    input_ids = rng.integers(0, 99, shape).astype(np.int32)
    token_type_ids = rng.integers(0, 2, shape).astype(np.int32)
    lengths = rng.integers(SEQ // 2, SEQ + 1, shape[:-1])
    input_mask = (np.arange(SEQ) < lengths[..., None]).astype(np.int32)
    return input_ids, token_type_ids, input_mask


def torch_inputs(input_ids, token_type_ids, input_mask):
    return dict(input_ids=torch.tensor(input_ids, dtype=torch.long),
                token_type_ids=torch.tensor(token_type_ids, dtype=torch.long),
                attention_mask=torch.tensor(input_mask, dtype=torch.long))


def p_mask_for(input_mask: np.ndarray, seed: int = 2) -> np.ndarray:
    """1 on a 'question' prefix and on padding, 0 on [CLS] and the 'context'."""
    p_mask = 1 - input_mask.copy()
    p_mask[:, 1:6] = 1
    return p_mask.astype(np.int32)


def assert_close(ours: np.ndarray, reference: np.ndarray, what: str) -> None:
    assert ours.shape == reference.shape, (what, ours.shape, reference.shape)
    assert np.abs(ours - reference).max() <= TOLERANCE, f"{what}: max abs diff {np.abs(ours - reference).max()}"


@pytest.mark.parametrize("num_labels", [1, 3])
def test_sequence_classification_equals_hf(num_labels):
    hf = perturbed(transformers.AlbertForSequenceClassification(
        transformers.AlbertConfig(num_labels=num_labels, attn_implementation="eager", **HF_KWARGS)))
    model = AlbertForSequenceClassification(OURS, num_labels, runtime=RUNTIME)
    model.set_train(False)
    report = load_weights(model, our_weights(hf.state_dict()))
    assert report.missing == [] and report.unused == []
    inputs = batch()
    with torch.no_grad():
        expected = hf(**torch_inputs(*inputs)).logits.numpy()
    assert_close(model(*map(Tensor, inputs)).asnumpy(), expected, "logits")

    labels = np.array([0.5, 1.5, -1.0], np.float32) if num_labels == 1 else np.array([0, 2, 1], np.int32)
    with torch.no_grad():
        hf_labels = torch.tensor(labels) if num_labels == 1 else torch.tensor(labels, dtype=torch.long)
        hf_loss = hf(**torch_inputs(*inputs), labels=hf_labels).loss.item()
    loss = AlbertClassifierWithLoss(model, regression=num_labels == 1)
    ids, types, mask = inputs
    assert abs(float(loss(Tensor(ids), Tensor(mask), Tensor(types), Tensor(labels)).asnumpy()) - hf_loss) < 1e-5


def test_multiple_choice_equals_hf():
    hf = perturbed(transformers.AlbertForMultipleChoice(
        transformers.AlbertConfig(attn_implementation="eager", **HF_KWARGS)))
    model = AlbertForMultipleChoice(OURS, runtime=RUNTIME)
    model.set_train(False)
    assert load_weights(model, our_weights(hf.state_dict())).missing == []
    inputs = batch(choices=4)
    labels = np.array([3, 0, 2], np.int32)
    with torch.no_grad():
        out = hf(**torch_inputs(*inputs), labels=torch.tensor(labels, dtype=torch.long))
    assert_close(model(*map(Tensor, inputs)).asnumpy(), out.logits.numpy(), "choice scores")
    ids, types, mask = inputs
    loss = AlbertClassifierWithLoss(model)(Tensor(ids), Tensor(mask), Tensor(types), Tensor(labels))
    assert abs(float(loss.asnumpy()) - out.loss.item()) < 1e-5


def test_squad_v1_equals_hf_and_masks_outside_the_context():
    hf = perturbed(transformers.AlbertForQuestionAnswering(
        transformers.AlbertConfig(attn_implementation="eager", **HF_KWARGS)))
    model = AlbertForQuestionAnswering(OURS, runtime=RUNTIME)
    model.set_train(False)
    weights = our_weights(hf.state_dict())  # HF's span head has no pooler; ours has one (unused by the head)
    weights.update({"albert.pooler.weight": np.zeros((32, 32), np.float32),
                    "albert.pooler.bias": np.zeros(32, np.float32)})
    assert load_weights(model, weights).missing == []
    ids, types, mask = batch()
    p_mask = p_mask_for(mask)
    start, end = (t.asnumpy() for t in model(Tensor(ids), Tensor(types), Tensor(mask), Tensor(p_mask)))
    with torch.no_grad():
        out = hf(**torch_inputs(ids, types, mask))
    keep = p_mask == 0
    assert_close(start[keep], out.start_logits.numpy()[keep], "start logits")
    assert_close(end[keep], out.end_logits.numpy()[keep], "end logits")
    assert np.all(start[~keep] <= -1e29) and np.all(end[~keep] <= -1e29)

    # Loss: HF's mean of start and end cross entropy (its positions are never masked here).
    starts, ends = np.array([0, 7, 9], np.int32), np.array([0, 8, 12], np.int32)
    with torch.no_grad():
        hf_loss = hf(**torch_inputs(ids, types, mask), start_positions=torch.tensor(starts, dtype=torch.long),
                     end_positions=torch.tensor(ends, dtype=torch.long)).loss.item()
    ours = AlbertSquadWithLoss(model)(Tensor(ids), Tensor(mask), Tensor(types), Tensor(p_mask), Tensor(starts),
                                      Tensor(ends), Tensor(np.zeros(BATCH, np.int32)))
    # Masked positions carry no probability in ours; HF spreads a little over them: compare on unmasked logits.
    ref = 0.5 * sum(torch.nn.functional.cross_entropy(
        torch.tensor(np.where(keep, logits, -1e30)), torch.tensor(positions, dtype=torch.long)).item()
        for logits, positions in ((out.start_logits.numpy(), starts), (out.end_logits.numpy(), ends)))
    assert abs(float(ours.asnumpy()) - ref) < 1e-5
    assert abs(hf_loss - ref) > 1e-6  # the masking matters, so the comparison above can fail


class TorchSquadV2(torch.nn.Module):
    """Google's ALBERT v2 SQuAD model in torch: HF AlbertModel + HF XLNet's start/end/answer-class poolers."""

    def __init__(self, seed: int = 3):
        super().__init__()
        self.albert = transformers.AlbertModel(transformers.AlbertConfig(attn_implementation="eager", **HF_KWARGS),
                                               add_pooling_layer=True)
        xlnet = transformers.XLNetConfig(d_model=32, layer_norm_eps=1e-12, dropout=0.0)
        self.start_logits = modeling_xlnet.XLNetPoolerStartLogits(xlnet)
        self.end_logits = modeling_xlnet.XLNetPoolerEndLogits(xlnet)
        self.answer_class = modeling_xlnet.XLNetPoolerAnswerClass(xlnet)
        perturbed(self, seed)

    def forward(self, ids, types, mask, p_mask, k1, k2):
        hidden = self.albert(**torch_inputs(ids, types, mask)).last_hidden_state
        p = torch.tensor(p_mask, dtype=torch.float32)
        start_logits = self.start_logits(hidden, p_mask=p)
        start_top, start_index = torch.log_softmax(start_logits, -1).topk(k1, -1)
        ends, end_indexes = [], []
        for k in range(k1):
            end_logits = self.end_logits(hidden, start_positions=start_index[:, k], p_mask=p)
            top, index = torch.log_softmax(end_logits, -1).topk(k2, -1)
            ends.append(top)
            end_indexes.append(index)
        expected_start = torch.einsum("bsh,bs->bh", hidden, torch.softmax(start_logits, -1))
        cls_logits = self.answer_class(hidden, start_states=expected_start,
                                       cls_index=torch.zeros(len(ids), dtype=torch.long))
        return (start_top, start_index, torch.cat(ends, -1), torch.cat(end_indexes, -1), cls_logits)

    def loss(self, ids, types, mask, p_mask, starts, ends, impossible):
        hidden = self.albert(**torch_inputs(ids, types, mask)).last_hidden_state
        p = torch.tensor(p_mask, dtype=torch.float32)
        starts, ends = torch.tensor(starts, dtype=torch.long), torch.tensor(ends, dtype=torch.long)
        start_logits = self.start_logits(hidden, p_mask=p)
        end_logits = self.end_logits(hidden, start_positions=starts, p_mask=p)
        expected_start = torch.einsum("bsh,bs->bh", hidden, torch.softmax(start_logits, -1))
        cls_logits = self.answer_class(hidden, start_states=expected_start,
                                       cls_index=torch.zeros(len(ids), dtype=torch.long))
        span = 0.5 * (torch.nn.functional.cross_entropy(start_logits, starts)
                      + torch.nn.functional.cross_entropy(end_logits, ends))
        answer = torch.nn.functional.binary_cross_entropy_with_logits(cls_logits,
                                                                      torch.tensor(impossible, dtype=torch.float32))
        return (span + 0.5 * answer).item()


def squad_v2_pair(k1: int = 3, k2: int = 4):
    reference = TorchSquadV2()
    model = AlbertForSquadV2(OURS, dropout_prob=0.0, start_n_top=k1, end_n_top=k2, runtime=RUNTIME)
    model.set_train(False)
    report = load_weights(model, our_weights(reference.state_dict()))
    assert report.missing == [] and report.unused == [], report
    return reference, model


def test_squad_v2_beam_search_equals_the_torch_reference():
    reference, model = squad_v2_pair()
    ids, types, mask = batch()
    p_mask = p_mask_for(mask)
    ours = [t.asnumpy() for t in model(Tensor(ids), Tensor(types), Tensor(mask), Tensor(p_mask))]
    with torch.no_grad():
        expected = [t.numpy() for t in reference(ids, types, mask, p_mask, 3, 4)]
    names = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")
    for name, a, b in zip(names, ours, expected):
        if "index" in name:
            assert a.shape == b.shape and np.array_equal(a, b), name
        else:
            assert_close(a, b, name)
    assert ours[1].shape == (BATCH, 3) and ours[3].shape == (BATCH, 12) and ours[4].shape == (BATCH,)
    for indexes in (ours[1], ours[3]):  # beams never point at the question, [SEP] or padding
        assert np.all(np.take_along_axis(p_mask, indexes.astype(np.int64), 1) == 0)


def test_squad_v2_loss_equals_the_torch_reference_and_falls():
    reference, model = squad_v2_pair()
    ids, types, mask = batch()
    p_mask = p_mask_for(mask)
    starts, ends, impossible = (np.array([0, 7, 8], np.int32), np.array([0, 9, 8], np.int32),
                                np.array([1, 0, 0], np.int32))
    loss_net = AlbertSquadV2WithLoss(model)
    columns = [Tensor(c) for c in (ids, mask, types, p_mask, starts, ends, impossible)]
    with torch.no_grad():
        expected = reference.loss(ids, types, mask, p_mask, starts, ends, impossible)
    assert abs(float(loss_net(*columns).asnumpy()) - expected) < 1e-5

    from src.training.optimization import build_optimizer
    from src.training.train_step import AlbertTrainOneStepCell
    optimizer = build_optimizer("AdamWeightDecay", loss_net.trainable_params(),
                                dict(learning_rate=1e-3, end_learning_rate=0.0, power=1.0, warmup_steps=0,
                                     weight_decay=0.0), 30)
    cell = AlbertTrainOneStepCell(loss_net, optimizer, loss_scale=65536.0, use_kernels=RUNTIME.kernels)
    losses = [float(cell(*columns)[0].asnumpy()) for _ in range(30)]
    assert losses[-1] < 0.3 * losses[0], losses


def test_pretrained_checkpoint_loads_with_only_the_head_missing(tmp_path):
    from src.model.pretraining_heads import AlbertPreTraining

    pretraining = AlbertPreTraining(OURS)
    path = str(tmp_path / "pretrained.ckpt")
    save_checkpoint_atomic(pretraining, path)
    for head, new in ((AlbertForSequenceClassification(OURS, 2), {"classifier.weight", "classifier.bias"}),
                      (AlbertForQuestionAnswering(OURS), {"qa_outputs.weight", "qa_outputs.bias"}),
                      (AlbertForSquadV2(OURS), None)):
        report = load_weights(head, path, allow_missing=("",))
        missing = set(report.missing)
        assert missing and not any(name.startswith("albert.") for name in missing)
        assert new is None or missing == new
        assert set(report.unused) == {p.name for p in pretraining.get_parameters()
                                      if not p.name.startswith("albert.")}
    # A checkpoint without a backbone weight is an error naming it, even when heads may be missing.
    values = {p.name: p for p in pretraining.get_parameters() if "pooler" not in p.name}
    with pytest.raises(UserError, match="albert.pooler"):
        load_weights(AlbertForSequenceClassification(OURS, 2), values, allow_missing=("",))
