"""Random-weight HF transformers ALBERT models used as the independent reference (no download)."""
from pathlib import Path
from typing import Dict

import numpy as np

TINY_CONFIGS: Dict[str, dict] = {
    # name: HF AlbertConfig kwargs. All have embedding_size != hidden_size.
    "groups2_inner2_gelu_new": dict(vocab_size=99, embedding_size=16, hidden_size=32, num_hidden_layers=4,
                                    num_hidden_groups=2, inner_group_num=2, num_attention_heads=4,
                                    intermediate_size=37, hidden_act="gelu_new", max_position_embeddings=64),
    "exact_gelu_3layers": dict(vocab_size=120, embedding_size=24, hidden_size=48, num_hidden_layers=3,
                               num_hidden_groups=1, inner_group_num=1, num_attention_heads=6,
                               intermediate_size=64, hidden_act="gelu", max_position_embeddings=40),
    "groups3_relu_typevocab3": dict(vocab_size=77, embedding_size=8, hidden_size=64, num_hidden_layers=6,
                                    num_hidden_groups=3, inner_group_num=1, num_attention_heads=8,
                                    intermediate_size=96, hidden_act="relu", max_position_embeddings=48,
                                    type_vocab_size=3),
}


def make_hf_pretraining(kwargs: dict, seed: int = 0):
    """An HF AlbertForPreTraining with non-trivial random weights (LayerNorms and biases perturbed too)."""
    import torch
    from transformers import AlbertConfig, AlbertForPreTraining
    config = AlbertConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                          attn_implementation="eager", **kwargs)
    torch.manual_seed(seed)
    model = AlbertForPreTraining(config).eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            param.add_(torch.randn_like(param) * (0.2 if "LayerNorm" in name or "norm" in name else 0.05))
    return model


def save_hf(model, folder: Path, safetensors: bool) -> Path:
    model.save_pretrained(str(folder), safe_serialization=safetensors)
    return folder


def random_batch(vocab_size: int, type_vocab_size: int, batch: int = 3, seq: int = 12, predictions: int = 4,
                 seed: int = 1):
    """Inputs with padding in all but the first row, and masked positions inside the real tokens."""
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(0, vocab_size, (batch, seq)).astype(np.int32)
    token_type_ids = rng.integers(0, type_vocab_size, (batch, seq)).astype(np.int32)
    lengths = [seq] + list(rng.integers(seq // 2, seq, batch - 1))
    input_mask = np.array([[1] * n + [0] * (seq - n) for n in lengths], dtype=np.int32)
    positions = np.stack([np.sort(rng.choice(n, predictions, replace=False)) for n in lengths]).astype(np.int32)
    return input_ids, token_type_ids, input_mask, positions


def hf_outputs(model, input_ids, token_type_ids, input_mask, positions):
    """sequence, pooled, MLM logits at `positions`, SOP logits from the HF model."""
    import torch
    with torch.no_grad():
        out = model(input_ids=torch.tensor(input_ids, dtype=torch.long),
                    token_type_ids=torch.tensor(token_type_ids, dtype=torch.long),
                    attention_mask=torch.tensor(input_mask, dtype=torch.long), output_hidden_states=True)
        base = model.albert(input_ids=torch.tensor(input_ids, dtype=torch.long),
                            token_type_ids=torch.tensor(token_type_ids, dtype=torch.long),
                            attention_mask=torch.tensor(input_mask, dtype=torch.long))
    mlm = out.prediction_logits.numpy()
    mlm_at = np.take_along_axis(mlm, positions[:, :, None].astype(np.int64), axis=1)
    return (base.last_hidden_state.numpy(), base.pooler_output.numpy(), mlm_at, out.sop_logits.numpy())
