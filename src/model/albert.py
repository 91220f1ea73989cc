"""ALBERT backbone: factorized embeddings, cross-layer parameter sharing, post-LN or pre-LN blocks.

One class per concept, named like HF transformers' `modeling_albert.py`, so a checkpoint name is the attribute path:
`albert.encoder.albert_layer_groups.0.albert_layers.1.attention.query.weight`.

How the cells build their graph for where they run (compiled CPU kernels, how attention heads move, the mask's
shape, ONNX patterns) is a `Runtime` passed to them; no cell asks the device. Invalid values raise ValueError.

Shapes: B batch, S sequence, E embedding size, H hidden size, N heads, D = H / N head size.
"""
import copy
import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Dict, List, Optional, Tuple

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common.initializer import TruncatedNormal

from model_utils import json_input
from src.common.atomic_files import save_json_atomic
from src.common.checkpoint_io import DROPOUT_CALLS
from src.model import cpu_kernels

ACTIVATIONS = ("gelu", "gelu_new", "gelu_exact", "relu")
SHARE_TYPES = ("all", "attention", "ffn", "none")
LN_TYPES = ("postln", "preln")
COMPUTE_TYPES = {"float32": ms.float32, "float16": ms.float16, "bfloat16": ms.bfloat16}

# HF transformers' activation names mean something else than Google's: HF "gelu" is the exact erf GELU,
# Google's "gelu" is the tanh approximation (HF "gelu_new").
HF_ACTIVATIONS = {"gelu": "gelu_exact", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new",
                  "gelu_fast": "gelu_new", "relu": "relu"}
# transformers' AlbertConfig defaults (those of ALBERT-xxlarge), which an HF config.json leaves out when equal to them.
HF_DEFAULTS = {"vocab_size": 30000, "embedding_size": 128, "hidden_size": 4096, "num_hidden_layers": 12,
               "num_hidden_groups": 1, "num_attention_heads": 64, "intermediate_size": 16384, "inner_group_num": 1,
               "hidden_act": "gelu_new", "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
               "max_position_embeddings": 512, "type_vocab_size": 2, "initializer_range": 0.02,
               "layer_norm_eps": 1e-12}


@dataclass
class AlbertConfig:
    """Hyper-parameters of the backbone (Google's `albert_config.json` keys plus share_type, ln_type, compute_type)."""

    vocab_size: int = 30000
    embedding_size: int = 128
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_hidden_groups: int = 1
    inner_group_num: int = 1
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.0
    attention_probs_dropout_prob: float = 0.0
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    share_type: str = "all"
    ln_type: str = "postln"
    compute_type: str = "float32"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Reject configurations the model cannot build, naming the offending key."""
        for item in fields(self):  # net_cfg's values are typed by the user (32.0 for a size); floats take ints
            value, kinds = getattr(self, item.name), (int, float) if item.type is float else (item.type,)
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise ValueError(f"invalid ALBERT config: {item.name} must be {item.type.__name__}, got {value!r}")
        checks = [
            (self.hidden_act in ACTIVATIONS, f"hidden_act must be one of {ACTIVATIONS}, got {self.hidden_act!r}"),
            (self.share_type in SHARE_TYPES, f"share_type must be one of {SHARE_TYPES}, got {self.share_type!r}"),
            (self.ln_type in LN_TYPES, f"ln_type must be one of {LN_TYPES}, got {self.ln_type!r}"),
            (self.compute_type in COMPUTE_TYPES,
             f"compute_type must be one of {tuple(COMPUTE_TYPES)}, got {self.compute_type!r}"),
            (self.hidden_size % self.num_attention_heads == 0,
             f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}"),
            (1 <= self.num_hidden_groups <= self.num_hidden_layers,
             f"num_hidden_groups must be in [1, num_hidden_layers={self.num_hidden_layers}], "
             f"got {self.num_hidden_groups}"),
            (self.inner_group_num >= 1, f"inner_group_num must be >= 1, got {self.inner_group_num}"),
        ]
        for name in ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            checks.append((getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}"))
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            checks.append((0.0 <= getattr(self, name) < 1.0, f"{name} must be in [0, 1), got {getattr(self, name)}"))
        for ok, message in checks:
            if not ok:
                raise ValueError(f"invalid ALBERT config: {message}")

    @classmethod
    def from_dict(cls, values: Dict[str, Any], source: str = "config") -> "AlbertConfig":
        """Build from Google's, HF's or brightmart's json keys; keys that do not shape the network are ignored."""
        values = dict(values)
        is_hf = "model_type" in values or "architectures" in values or "transformers_version" in values
        if is_hf:
            values = {**HF_DEFAULTS, **values}  # a key left out means transformers' default, not Google's
            foreign = [name for name in values.get("architectures") or [] if not str(name).startswith("Albert")]
            if values.get("model_type", "albert") != "albert" or foreign:
                raise ValueError(f"{source}: model_type {values.get('model_type')!r}, architectures "
                                 f"{values.get('architectures')}: not an ALBERT model (only ALBERT converts)")
        act = values.get("hidden_act", "gelu")
        if is_hf:
            if act not in HF_ACTIVATIONS:
                raise ValueError(f"{source}: hidden_act {act!r} has no ALBERT equivalent")
            values["hidden_act"] = HF_ACTIVATIONS[act]
            if values.get("position_embedding_type", "absolute") != "absolute":
                raise ValueError(f"{source}: position_embedding_type "
                                 f"{values['position_embedding_type']!r} is not supported (only 'absolute')")
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in values.items() if k in known}
        types = {f.name: f.type for f in fields(cls)}
        for key, value in kwargs.items():
            expected = types[key]
            if expected is float and isinstance(value, int) and not isinstance(value, bool):
                kwargs[key] = float(value)
            elif not isinstance(value, expected) or isinstance(value, bool):
                raise ValueError(f"{source}: key '{key}' expects {expected.__name__}, got {value!r}")
        return cls(**kwargs)

    @classmethod
    def from_json_file(cls, path: str) -> "AlbertConfig":
        """Read Google's `albert_config.json`, HF's `config.json` or a brightmart albert_zh config."""
        try:
            with open(path, encoding="utf-8") as handle:
                values = json_input.load(handle)
        except FileNotFoundError:
            raise ValueError(f"config file not found: {path}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} line {err.lineno}: malformed json ({err.msg})") from None
        if not isinstance(values, dict):
            raise ValueError(f"{path}: expected a json object of config keys")
        return cls.from_dict(values, source=str(path))

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "AlbertConfig":
        if name not in PRESETS:
            raise ValueError(f"unknown ALBERT preset {name!r}; choose from {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    def replace(self, **changes: Any) -> "AlbertConfig":
        return AlbertConfig(**{**asdict(self), **changes})

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)

    def to_json_file(self, path: str) -> None:
        """Written whole or not at all (a reader never finds half a config beside a checkpoint)."""
        save_json_atomic(self.to_dict(), path)


def _english(hidden: int, layers: int, heads: int, dropout: float) -> Dict[str, Any]:
    return dict(vocab_size=30000, embedding_size=128, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=4 * hidden, hidden_dropout_prob=dropout,
                attention_probs_dropout_prob=dropout)


def _chinese(hidden: int, layers: int, heads: int) -> Dict[str, Any]:
    return dict(vocab_size=21128, embedding_size=128, hidden_size=hidden, num_hidden_layers=layers,
                num_attention_heads=heads, intermediate_size=4 * hidden)


# Sizes from Google's ALBERT release (v1 trained with dropout 0.1, v2 without) and brightmart's albert_zh.
PRESETS: Dict[str, Dict[str, Any]] = {}
for _version, _dropout in (("v1", 0.1), ("v2", 0.0)):
    PRESETS[f"albert_base_{_version}"] = _english(768, 12, 12, _dropout)
    PRESETS[f"albert_large_{_version}"] = _english(1024, 24, 16, _dropout)
    PRESETS[f"albert_xlarge_{_version}"] = _english(2048, 24, 16, _dropout)
    PRESETS[f"albert_xxlarge_{_version}"] = _english(4096, 12, 64, _dropout)
for _size in ("base", "large", "xlarge", "xxlarge"):
    PRESETS[f"albert_{_size}"] = PRESETS[f"albert_{_size}_v2"]
PRESETS["albert_zh_tiny"] = _chinese(312, 4, 12)
PRESETS["albert_zh_base"] = _chinese(768, 12, 12)
PRESETS["albert_zh_large"] = _chinese(1024, 24, 16)
PRESETS["albert_zh_xlarge"] = _chinese(2048, 24, 32)
# Ours, not a released model: small enough to pretrain on 2 CPU cores in minutes (the quick start, smoke tests).
PRESETS["albert_tiny"] = dict(_english(128, 4, 4, 0.0), embedding_size=64)


@dataclass(frozen=True)
class Runtime:
    """How the cells build their graph: the same function on every path (tests/test_model_parity.py checks each
    against HF transformers), with the operations that suit where the network runs. Chosen once, by
    `src.devices.device_setup.model_runtime` for training and evaluation and by export.py's `export_runtime` for
    exported files, and passed down to every cell; no cell looks at the device itself.

    kernels: dense layers, LayerNorm, the tanh GELU, the attention products and softmax, and in pretraining the
        masked-LM decoder and cross entropy as the compiled CPU kernels (src/model/cpu_kernels.py): a float32 graph
        whatever compute_type says (compute_type bfloat16 runs their products in bfloat16, set process-wide by
        `model_runtime`; float16 never gets them), and never in an exported file (it must load without this
        machine's .so). The attention products read the heads in place in [B, S, H] (split_heads then does not
        apply) and add the mask inside the softmax, [B, 1, 1, S] as it is (broadcast_mask only costs a copy there).
    bf16_weights: with kernels in bfloat16, every dense layer's weights (and the tied decoder table) rounded to a
        bfloat16 copy by one kernel call per step in the graph (`cpu_kernels.bf16_copy`), which the products read:
        the layers that share weights share the copy (MindSpore merges the identical calls), instead of each
        product rounding them again. Weights that several layers run (ALBERT's shared layers) are packed in the
        same call into the layouts oneDNN's products read (`cpu_kernels.bf16_packed`), instead of by each product.
    serving_weights: for serving a checkpoint with the kernels, the dense layers' weights made once when it is
        loaded (`cpu_kernels.convert_weights`) instead of per call: "bfloat16" (the copy the bfloat16 products
        read) or "int8" (int8 values with a float32 scale per output channel, and the same packed for oneDNN's
        primitive; the products quantize their input per row on each call and sum in int32:
        `cpu_kernels.matmul_int8`); "" otherwise.
    split_heads: attention heads moved between [B, S, H] and [B, N, S, D] by a split and a stack instead of
        transposes: on CPU MindSpore's Transpose kernels each keep about twice their output's size allocated for the
        whole run (~100 MB per layer at batch 32) and are slower than a split and a stack. MindSpore's ONNX export
        cannot convert them (it has no Unstack converter).
    broadcast_mask: the additive mask broadcast once to the scores' shape [B, N, S, S]: on CPU a broadcasting Add in
        every layer keeps its own broadcast copies (~100 MB per layer at batch 32). Otherwise [B, 1, 1, S] is added
        as it is (ONNX Runtime needs no [B, N, S, S] copy: 226 MB at batch 32, seq 384).
    onnx_patterns: LayerNorm and the tanh GELU written as the operations ONNX Runtime fuses into single kernels
        (MindSpore's converter writes its own LayerNorm as a pattern ONNX Runtime leaves unfused).
    keyed_dropout: training networks' dropout masks counter-based (see LayerDropout: the same in every run and
        after a resume), by the kernels or MindSpore's integer operations; otherwise MindSpore's dropout (its CPU
        kernel's masks vary from run to run).
    """

    kernels: bool = False
    bf16_weights: bool = False
    serving_weights: str = ""
    split_heads: bool = False
    broadcast_mask: bool = False
    onnx_patterns: bool = False
    keyed_dropout: bool = False


# MindSpore's own operations, heads moved by transposes, the mask added by broadcasting: valid on any device and for
# any export.
PORTABLE = Runtime()


def dense_layer(in_size: int, out_size: int, config: AlbertConfig, runtime: Runtime,
                has_bias: bool = True) -> nn.Dense:
    """A Dense layer initialised as Google's (truncated normal weights, zero bias), run in compute_type."""
    layer = cpu_kernels.Dense(in_size, out_size, runtime.kernels, runtime.bf16_weights, runtime.serving_weights,
                              weight_init=TruncatedNormal(config.initializer_range), bias_init="zeros",
                              has_bias=has_bias)
    if config.compute_type != "float32" and not runtime.kernels:  # the kernels set their products' precision
        layer.to_float(COMPUTE_TYPES[config.compute_type])
    return layer


def layer_norm(size: int, config: AlbertConfig, runtime: Runtime) -> nn.LayerNorm:
    return cpu_kernels.LayerNorm(size, config.layer_norm_eps, runtime.kernels, runtime.onnx_patterns)


def _embedding(count: int, size: int, config: AlbertConfig) -> nn.Embedding:
    return nn.Embedding(count, size, embedding_table=TruncatedNormal(config.initializer_range))


GELU_TANH_SCALE = 2.0 * math.sqrt(2.0 / math.pi)


class Activation(nn.Cell):
    """hidden_act by name; `gelu` is Google's tanh approximation, `gelu_exact` the erf form.

    The tanh approximation is x * sigmoid(2 * sqrt(2/pi) * (x + 0.044715 x^3)), the same function
    (0.5 * (1 + tanh(z)) = sigmoid(2z)): one compiled kernel with `use_kernels`, otherwise these element-wise ops,
    which with their gradients run on CPU about 3x faster than MindSpore's fused GeLU/GeLUGrad kernels. With
    `onnx_pattern` (ONNX export) it is written 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the form ONNX
    Runtime's FastGeluFusion turns into one kernel.
    """

    def __init__(self, name: str, use_kernels: bool = False, onnx_pattern: bool = False):
        super().__init__()
        self.name = name
        self.use_kernels = use_kernels and name in ("gelu", "gelu_new")
        self.onnx_pattern = onnx_pattern
        if self.use_kernels:
            self.gelu_kernel = cpu_kernels.gelu_tanh()

    def construct(self, x):
        if self.name == "relu":
            return ops.relu(x)
        if self.name == "gelu_exact":
            return ops.gelu(x, approximate="none")
        if self.onnx_pattern:
            return 0.5 * x * (1.0 + ops.tanh(GELU_TANH_SCALE / 2 * (x + 0.044715 * ops.pow(x, 3.0))))
        if self.use_kernels:
            return self.gelu_kernel(x)
        return x * ops.sigmoid(GELU_TANH_SCALE * (x + 0.044715 * x * x * x))


GOLDEN = 0x9E3779B9  # 2^32 / golden ratio: spreads consecutive counts and indices over 32 bits


def mix32(value: int) -> int:
    """MurmurHash3's 32-bit finalizer of `value` modulo 2^32 (every input bit flips each output bit with p ~1/2)."""
    value &= 0xFFFFFFFF
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        value = ((value ^ (value >> shift)) * factor) & 0xFFFFFFFF
    return value ^ (value >> 16)


def _as_int32(value: int) -> int:
    """A 32-bit pattern as the int32 holding the same bits."""
    return value - (1 << 32) if value >= 1 << 31 else value


def _mix32_tensor(value):
    """mix32 on int32 tensors: products wrap modulo 2^32 as the bits of uint32 would, and the shifts, arithmetic on
    int32, are made logical by masking the sign's copies."""
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        value = ops.bitwise_xor(value, ops.bitwise_right_shift(value, shift) & ((1 << (32 - shift)) - 1))
        value = value * _as_int32(factor)
    return ops.bitwise_xor(value, ops.bitwise_right_shift(value, 16) & 0xFFFF)


def keyed_dropout(x, calls, place, scale: float):
    """`x` with the counter-based mask of LayerDropout, by MindSpore's operations: what the kernels' KeyedDropout
    (src/model/kernels/row_ops.cc) computes, for networks without them."""
    key = _mix32_tensor(place[0] + calls * _as_int32(GOLDEN))
    # Plus the count's zero: a run-time value, multiplied in int32 below. MindSpore 2.7 folds an expression of
    # constants at compile time in floating point, which rounded the product (other masks than the kernels').
    index = ops.arange(0, x.size, dtype=ms.int32).reshape(x.shape) + (calls - calls)
    bits = _mix32_tensor(ops.bitwise_xor(index * _as_int32(GOLDEN), key))
    keep = ops.stop_gradient((ops.bitwise_right_shift(bits, 8) & 0xFFFFFF) >= place[1])
    return x * keep.astype(x.dtype) * scale


class DropoutClock(nn.Cell):
    """How many micro-steps a network has trained (`dropout_calls`, int32 [1]): with the run's seed and each
    dropout's place, what every dropout mask of the network is a function of. So masks repeat from run to run, do
    not depend on thread timing, and continue exactly after a resume, which sets the count from the checkpoint's
    progress. The train-step cell adds one after each call's forward and backward passes, which see the same count.
    The Parameter is run state, not a weight: one name wherever the network holds it, never loaded from a
    checkpoint (a count from the run that wrote it would shift every mask)."""

    def __init__(self):
        super().__init__()
        self.dropout_calls = Parameter(Tensor([0], ms.int32), name=DROPOUT_CALLS, requires_grad=False)
        self.seed = ms.get_seed() or 0
        self.places = 0

    def place_key(self) -> int:
        """The key of a new dropout place (int32), places numbered in the order the network builds them."""
        self.places += 1
        return _as_int32(mix32(self.seed * 0x85EBCA6B + self.places * 0xC2B2AE35))


def dropout_clock(config: AlbertConfig, is_training: bool, runtime: Runtime,
                  *head_probs: float) -> Optional[DropoutClock]:
    """The clock of a training network with keyed dropout and some dropout probability above 0 (the backbone's or
    its heads' `head_probs`); None otherwise."""
    probs = (config.hidden_dropout_prob, config.attention_probs_dropout_prob) + head_probs
    return DropoutClock() if is_training and runtime.keyed_dropout and max(probs) > 0 else None


class LayerDropout(nn.Cell):
    """Dropout with probability `p` at one place of the network, told which of the network's layers runs it
    (`run` < `runs`): ALBERT's shared layers run one cell several times per step, and each run needs its own mask
    (TF and PyTorch draw a new one at every call).

    With a `clock` (Runtime.keyed_dropout), element i of run r is kept when
        mix32((i * GOLDEN) xor mix32(place_key_r + calls * GOLDEN)) >> 8  >=  round(p * 2^24)
    (arithmetic modulo 2^32; `calls` the clock's count, place_key_r the run's key from the clock; the key enters by
    xor, not +, so that two masks are not shifted copies of each other) and then scaled
    by 1 / (1 - p): the same masks in every run with the same seed and after a resume, by the kernels' KeyedDropout
    (`kernels`, float32) or the same arithmetic in MindSpore's operations. Otherwise MindSpore's dropout, one per
    run: the same dropout operation called twice in one graph draws the same mask at both calls (MindSpore 2.10,
    CPU, GRAPH mode), so one per layer would drop the same units in all layers at once."""

    def __init__(self, p: float, runs: int = 1, clock: Optional[DropoutClock] = None, kernels: bool = False):
        super().__init__()
        self.keyed = p > 0 and clock is not None
        self.dropouts = nn.CellList([nn.Dropout(p=p) for _ in range(runs)] if p > 0 and not self.keyed else [])
        self.clock, self.kernel = None, None
        if self.keyed:
            self.clock = clock
            threshold = int(round(p * (1 << 24)))
            self.places = tuple(Tensor([clock.place_key(), threshold], ms.int32) for _ in range(runs))
            self.scale = 1.0 / (1.0 - p)
            self.scale_tensor = Tensor([self.scale], ms.float32)
            self.kernel = cpu_kernels.keyed_dropout() if kernels else None

    def construct(self, x, run: int = 0):
        if self.keyed and not self.training:  # as nn.Dropout: set_train(False) turns it off
            return x
        if self.keyed and self.kernel is not None:
            return self.kernel(x, self.clock.dropout_calls, self.places[run], self.scale_tensor)
        if self.keyed:
            return keyed_dropout(x, self.clock.dropout_calls, self.places[run], self.scale)
        if not self.dropouts:
            return x
        return self.dropouts[run](x)


class AlbertEmbeddings(nn.Cell):
    """Word + position + token-type embeddings of size E, then LayerNorm and dropout (projection to H is later)."""

    def __init__(self, config: AlbertConfig, is_training: bool, runtime: Runtime = PORTABLE,
                 clock: Optional[DropoutClock] = None):
        super().__init__()
        self.word_embeddings = _embedding(config.vocab_size, config.embedding_size, config)
        self.position_embeddings = _embedding(config.max_position_embeddings, config.embedding_size, config)
        self.token_type_embeddings = _embedding(config.type_vocab_size, config.embedding_size, config)
        self.LayerNorm = layer_norm(config.embedding_size, config, runtime)
        self.dropout = LayerDropout(config.hidden_dropout_prob if is_training else 0.0, 1, clock, runtime.kernels)

    def construct(self, input_ids, token_type_ids):
        seq_length = input_ids.shape[1]
        position_ids = ops.arange(0, seq_length, dtype=ms.int32).reshape(1, -1)
        embeddings = (self.word_embeddings(input_ids) + self.position_embeddings(position_ids)
                      + self.token_type_embeddings(token_type_ids))  # [B, S, E]
        return self.dropout(self.LayerNorm(embeddings))


class AlbertAttention(nn.Cell):
    """Multi-head self-attention with its output projection; owns the LayerNorm around it.

    postln: LayerNorm(x + Attn(x)).   preln: x + Attn(LayerNorm(x)).
    The query-key product runs in compute_type (a float16 product leaves as float16; the query is scaled by
    1/sqrt(head_size) beforehand, which keeps the scores small); the scores are widened to float32 before the mask
    and the softmax, whatever compute_type is. Heads move by transposes, or by a split and a stack with
    `runtime.split_heads` (see Runtime).
    """

    def __init__(self, config: AlbertConfig, is_training: bool, runtime: Runtime = PORTABLE,
                 clock: Optional[DropoutClock] = None):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_size = config.hidden_size // config.num_attention_heads
        self.scale = 1.0 / math.sqrt(self.head_size)
        self.compute_type = COMPUTE_TYPES[config.compute_type]
        self.half_precision = config.compute_type != "float32" and not runtime.kernels
        self.preln = config.ln_type == "preln"
        self.query = dense_layer(config.hidden_size, config.hidden_size, config, runtime)
        self.key = dense_layer(config.hidden_size, config.hidden_size, config, runtime)
        self.value = dense_layer(config.hidden_size, config.hidden_size, config, runtime)
        self.dense = dense_layer(config.hidden_size, config.hidden_size, config, runtime)
        self.LayerNorm = layer_norm(config.hidden_size, config, runtime)
        runs = config.num_hidden_layers  # the most this cell can run per step (shared by every layer)
        self.attention_dropout = LayerDropout(config.attention_probs_dropout_prob if is_training else 0.0, runs, clock,
                                              runtime.kernels)
        self.output_dropout = LayerDropout(config.hidden_dropout_prob if is_training else 0.0, runs, clock,
                                           runtime.kernels)
        self.split_heads = runtime.split_heads
        self.use_kernels = runtime.kernels
        # With the kernels, attention in one call per layer (forward and backward) unless dropout on the
        # probabilities sits between its softmax and its context; without probabilities kept for networks built for
        # evaluation and serving.
        self.attention_kind = "inference" if not is_training else \
            "fused" if config.attention_probs_dropout_prob == 0 else "with_dropout"
        if self.use_kernels:
            # Training in bfloat16 with attention's products in it: query, key and value handed over in bfloat16.
            self.bf16_handover = runtime.bf16_weights and not runtime.serving_weights and \
                self.attention_kind == "fused" and cpu_kernels.bf16_attention()
            self.qkv_kernel = cpu_kernels.dense_qkv_int8() if runtime.serving_weights == "int8" else \
                cpu_kernels.dense_qkv(runtime.bf16_weights, self.bf16_handover)
            self.probs_kernel, self.context_kernel = cpu_kernels.attention(self.num_heads)
            self.fused_kernel = cpu_kernels.fused_attention(self.num_heads, self.bf16_handover)
            self.inference_kernel = cpu_kernels.attention_inference(self.num_heads, runtime.serving_weights == "int8")
            self.scale_tensor, self.one = Tensor([self.scale], ms.float32), Tensor([1.0], ms.float32)
            self.heads_tensor = Tensor([self.num_heads], ms.int32)
        else:  # batched products on [B, N, ...] as they are (no broadcasting, key used untransposed)
            self.scores_matmul = ops.BatchMatMul(transpose_b=True)
            self.context_matmul = ops.BatchMatMul()
        # Served in int8 (post-LN): the output layer, residual and LayerNorm in one call.
        self.int8_output_norm = runtime.serving_weights == "int8" and not self.preln
        if self.int8_output_norm:
            self.output_norm_kernel = cpu_kernels.dense_residual_norm_int8()

    def _split_heads(self, x):
        """[B, S, H] -> [B, N, S, D]."""
        if self.split_heads:
            return ops.stack(ops.split(x, self.head_size, -1), 1)
        batch, seq, _ = x.shape
        return x.reshape(batch, seq, self.num_heads, self.head_size).transpose(0, 2, 1, 3)

    def _merge_heads(self, x):
        """[B, N, S, D] -> [B, S, H]."""
        if self.split_heads:
            return ops.concat(ops.unstack(x, 1), -1)
        batch, _, seq, _ = x.shape
        return x.transpose(0, 2, 1, 3).reshape(batch, seq, -1)

    def _attend(self, inputs, attention_bias, layer_number):
        """[B, S, H] -> context [B, S, H] by MindSpore's operations, heads moved to [B, N, S, D] and back."""
        # The scale goes on the query ([B, N, S, D]) rather than on the scores ([B, N, S, S]): one big tensor
        # fewer per layer to compute and to keep for the backward pass.
        query = self._split_heads(self.query(inputs)) * self.scale
        key = self._split_heads(self.key(inputs))
        value = self._split_heads(self.value(inputs))
        scores = self.scores_matmul(query, key)  # [B, N, S, S]
        if self.half_precision:
            scores = scores.astype(ms.float32)
        probs = self.attention_dropout(ops.softmax(scores + attention_bias, axis=-1), layer_number)
        if self.half_precision:
            probs = probs.astype(self.compute_type)
        return self._merge_heads(self.context_matmul(probs, value))

    def _attend_compiled(self, inputs, attention_bias, layer_number):
        """The same with the compiled kernels: query, key and value layers in one call (the query, key and value
        cells' weights); the products read each head where it lies in [B, S, H] (no split, stack or transpose) and
        take the scale as the products' factor; mask and softmax run inside the product."""
        shape = inputs.shape
        # (wq, wk, wv) (in int8 their int8 values), then their bfloat16 copies, or int8 packed forms and scales, where
        # the products read them
        query_operands, key_operands = self.query.weight_operands(), self.key.weight_operands()
        value_operands = self.value.weight_operands()
        weights = ()
        for i in range(len(query_operands)):
            weights += (query_operands[i], key_operands[i], value_operands[i])
        query, key, value = self.qkv_kernel(inputs.reshape(-1, shape[-1]), *weights, self.query.bias, self.key.bias,
                                            self.value.bias)
        if self.bf16_handover:  # [B * S, H] in bfloat16, as they come (MindSpore's CPU Reshape takes no bfloat16)
            return self.fused_kernel(query, key, value, attention_bias, self.scale_tensor)[0].reshape(shape)
        query, key, value = query.reshape(shape), key.reshape(shape), value.reshape(shape)
        if self.attention_kind == "inference":
            return self.inference_kernel(query, key, value, attention_bias, self.scale_tensor, self.heads_tensor)
        if self.attention_kind == "fused":
            return self.fused_kernel(query, key, value, attention_bias, self.scale_tensor)[0]
        probs = self.probs_kernel(query, key, attention_bias, self.scale_tensor)
        probs = self.attention_dropout(probs, layer_number)  # [B, N, S, S]
        return self.context_kernel(probs, value, self.one)

    def construct(self, hidden_states, attention_bias, layer_number: int = 0):
        """`layer_number`: which of the network's layers this run is (the layer's own dropout masks)."""
        inputs = self.LayerNorm(hidden_states) if self.preln else hidden_states
        if self.use_kernels:
            context = self._attend_compiled(inputs, attention_bias, layer_number)
        else:
            context = self._attend(inputs, attention_bias, layer_number)
        if self.int8_output_norm:  # LayerNorm(hidden_states + dense(context)) in one call
            shape = hidden_states.shape
            return self.output_norm_kernel(context.reshape(-1, shape[-1]), *self.dense.weight_operands(),
                                           self.dense.bias, hidden_states.reshape(-1, shape[-1]),
                                           self.LayerNorm.gamma, self.LayerNorm.beta,
                                           self.LayerNorm.epsilon_tensor).reshape(shape)
        projected = self.output_dropout(self.dense(context), layer_number).astype(ms.float32)
        if self.preln:
            return hidden_states + projected
        return self.LayerNorm(hidden_states + projected)


class AlbertLayer(nn.Cell):
    """One transformer block: attention, then the position-wise feed-forward network.

    postln: LayerNorm(h + FFN(h)).   preln: h + FFN(LayerNorm(h)).
    """

    FFN_CELLS = ("ffn", "ffn_output", "full_layer_layer_norm")

    def __init__(self, config: AlbertConfig, is_training: bool, runtime: Runtime = PORTABLE,
                 clock: Optional[DropoutClock] = None):
        super().__init__()
        self.preln = config.ln_type == "preln"
        self.attention = AlbertAttention(config, is_training, runtime, clock)
        self.ffn = dense_layer(config.hidden_size, config.intermediate_size, config, runtime)
        self.ffn_output = dense_layer(config.intermediate_size, config.hidden_size, config, runtime)
        self.full_layer_layer_norm = layer_norm(config.hidden_size, config, runtime)
        self.activation = Activation(config.hidden_act, runtime.kernels, runtime.onnx_patterns)
        self.dropout = LayerDropout(config.hidden_dropout_prob if is_training else 0.0, config.num_hidden_layers, clock,
                                    runtime.kernels)
        # Served in int8 with the tanh GELU: the whole feed-forward network in one kernel call, with the residual
        # and LayerNorm after it in post-LN blocks.
        self.int8_feed_forward = runtime.serving_weights == "int8" and self.activation.use_kernels
        if self.int8_feed_forward:
            self.feed_forward_kernel = cpu_kernels.feed_forward_int8(not self.preln)
        # Otherwise with the kernels and the tanh GELU: the two layers and the GELU between them in one kernel call,
        # forward and backward (no separate passes over the [B*S, I] activations); in post-LN blocks without dropout
        # on its output, the residual sum too (its input is its residual).
        self.fused_feed_forward = self.activation.use_kernels and not self.int8_feed_forward
        self.fused_residual = self.fused_feed_forward and not self.preln and \
            (config.hidden_dropout_prob == 0 or not is_training)
        if self.fused_feed_forward:
            self.feed_forward_kernel = cpu_kernels.feed_forward(self.ffn.reads_copy, self.fused_residual)

    def _int8_feed_forward(self, inputs):
        """The int8 kernel's feed-forward network of `inputs` (post-LN: LayerNorm(inputs + it))."""
        shape = inputs.shape
        operands = (inputs.reshape(-1, shape[-1]), *self.ffn.weight_operands(), self.ffn.bias,
                    *self.ffn_output.weight_operands(), self.ffn_output.bias)
        if not self.preln:
            norm = self.full_layer_layer_norm
            operands += (norm.gamma, norm.beta, norm.epsilon_tensor)
        return self.feed_forward_kernel(*operands).reshape(shape)

    def _fused_feed_forward(self, inputs):
        """ffn_output(activation(ffn(inputs))) by the kernels' `feed_forward`, in one call (plus inputs where
        `fused_residual`)."""
        shape = inputs.shape
        output = self.feed_forward_kernel(inputs.reshape(-1, shape[-1]), *self.ffn.weight_operands(), self.ffn.bias,
                                          *self.ffn_output.weight_operands(), self.ffn_output.bias)[0]
        return output.reshape(shape)

    def construct(self, hidden_states, attention_bias, layer_number: int = 0):
        hidden_states = self.attention(hidden_states, attention_bias, layer_number)
        inputs = self.full_layer_layer_norm(hidden_states) if self.preln else hidden_states
        if self.int8_feed_forward and not self.preln:
            return self._int8_feed_forward(inputs)
        if self.int8_feed_forward:
            return hidden_states + self._int8_feed_forward(inputs)
        if self.fused_residual:
            return self.full_layer_layer_norm(self._fused_feed_forward(hidden_states))
        if self.fused_feed_forward:
            output = self.dropout(self._fused_feed_forward(inputs), layer_number)
        else:
            output = self.dropout(self.ffn_output(self.activation(self.ffn(inputs))), layer_number).astype(ms.float32)
        if self.preln:
            return hidden_states + output
        return self.full_layer_layer_norm(hidden_states + output)


class AlbertLayerGroup(nn.Cell):
    """`inner_group_num` distinct blocks applied in sequence; a group is the unit Google's ALBERT shares."""

    def __init__(self, config: AlbertConfig, is_training: bool, runtime: Runtime = PORTABLE,
                 clock: Optional[DropoutClock] = None):
        super().__init__()
        self.albert_layers = nn.CellList([AlbertLayer(config, is_training, runtime, clock)
                                          for _ in range(config.inner_group_num)])

    def construct(self, hidden_states, attention_bias, layer_number: int = 0):
        for layer in self.albert_layers:
            hidden_states = layer(hidden_states, attention_bias, layer_number)
        return hidden_states


def group_index(layer: int, num_layers: int, num_groups: int) -> int:
    """Which layer group serves layer `layer` (Google: int(layer / num_layers * num_groups))."""
    return int(layer * num_groups / num_layers)


class AlbertTransformer(nn.Cell):
    """Projection E -> H, then `num_hidden_layers` applications of the layer groups.

    share_type "all" is Google's scheme: layer i runs group `group_index(i)`. For "none", "attention" and
    "ffn" every layer gets its own group, and the shared part (attention or feed-forward) is the same Cell object
    as in the group Google's rule would pick, so it has one Parameter and one checkpoint name.
    """

    def __init__(self, config: AlbertConfig, is_training: bool, runtime: Runtime = PORTABLE,
                 clock: Optional[DropoutClock] = None):
        super().__init__()
        layers, groups = config.num_hidden_layers, config.num_hidden_groups
        self.embedding_hidden_mapping_in = dense_layer(config.embedding_size, config.hidden_size, config, runtime)
        self.own_dropouts = is_training and (config.hidden_dropout_prob > 0 or config.attention_probs_dropout_prob > 0)
        own_groups = groups if config.share_type == "all" else layers
        self.albert_layer_groups = nn.CellList([AlbertLayerGroup(config, is_training, runtime, clock)
                                                for _ in range(own_groups)])
        if config.share_type == "all":
            self.layer_to_group = [group_index(i, layers, groups) for i in range(layers)]
        else:
            self.layer_to_group = list(range(layers))
            shared_cells = {"attention": ("attention",), "ffn": AlbertLayer.FFN_CELLS}.get(config.share_type, ())
            self._share(shared_cells, [group_index(i, layers, groups) for i in range(layers)])
        # Dense layers that several layers run read their bfloat16 weights packed once per step.
        cpu_kernels.pack_shared_weights([self.albert_layer_groups[group] for group in self.layer_to_group])

    def _share(self, cell_names: Tuple[str, ...], owner_of_layer: List[int]) -> None:
        """Make the named cells of every layer the very Cells of the first layer with the same owner group."""
        first_layer_of_owner: Dict[int, int] = {}
        for layer, owner in enumerate(owner_of_layer):
            source = first_layer_of_owner.setdefault(owner, layer)
            if source != layer:
                for inner, block in enumerate(self.albert_layer_groups[layer].albert_layers):
                    for name in cell_names:
                        setattr(block, name, getattr(self.albert_layer_groups[source].albert_layers[inner], name))

    def construct(self, embeddings, attention_bias):
        hidden_states = self.embedding_hidden_mapping_in(embeddings).astype(ms.float32)  # [B, S, H]
        for layer_number in range(len(self.layer_to_group)):
            group = self.layer_to_group[layer_number]
            # Without dropout every run is the same graph: a constant 0 lets MindSpore compile it once.
            run = layer_number if self.own_dropouts else 0
            hidden_states = self.albert_layer_groups[group](hidden_states, attention_bias, run)
        return hidden_states


def name_parameters_by_path(cell: nn.Cell) -> None:
    """Give every Parameter its attribute path as name (the checkpoint name), whatever order cells were built in.

    MindSpore renames parameters only when a cell is attached to a parent; the outermost network and Cells
    shared between layers would otherwise keep short or stale names. The dropout clock's count, run state held by
    every dropout place, keeps its one name.
    """
    for path, param in cell.parameters_and_names():
        param.name = DROPOUT_CALLS if path.rsplit(".", 1)[-1] == DROPOUT_CALLS else path


class AlbertModel(nn.Cell):
    """(input_ids, token_type_ids, input_mask) [B, S] int -> (sequence_output [B, S, H], pooled_output [B, H]).

    `clock`: the network's DropoutClock when a head with dropout holds this model (see dropout_clock); otherwise
    the model makes its own when it needs one."""

    def __init__(self, config: AlbertConfig, is_training: bool = False, runtime: Runtime = PORTABLE,
                 clock: Optional[DropoutClock] = None):
        super().__init__()
        config = copy.deepcopy(config)
        config.validate()
        if runtime.kernels and config.compute_type not in ("float32", "bfloat16"):
            raise ValueError(f"the compiled CPU kernels run float32 graphs (bfloat16: their products, see "
                             f"cpu_kernels.set_bf16), compute_type is {config.compute_type}")
        self.config = config
        self.dropout_clock = clock if clock is not None else dropout_clock(config, is_training, runtime)
        self.embeddings = AlbertEmbeddings(config, is_training, runtime, self.dropout_clock)
        self.encoder = AlbertTransformer(config, is_training, runtime, self.dropout_clock)
        self.pooler = dense_layer(config.hidden_size, config.hidden_size, config, runtime)
        self.broadcast_mask = runtime.broadcast_mask
        self.num_heads = config.num_attention_heads
        name_parameters_by_path(self)

    def construct(self, input_ids, token_type_ids, input_mask):
        # Additive mask [B, 1, 1, S]: 0 where attended, -10000 (as Google) on padding.
        batch, seq = input_mask.shape
        attention_bias = ((1.0 - input_mask.astype(ms.float32)) * -10000.0).reshape(batch, 1, 1, seq)
        if self.broadcast_mask:
            attention_bias = ops.broadcast_to(attention_bias, (batch, self.num_heads, seq, seq))
        attention_bias = ops.stop_gradient(attention_bias)  # a function of the input mask: nothing to learn
        sequence_output = self.encoder(self.embeddings(input_ids, token_type_ids), attention_bias)
        pooled_output = ops.tanh(self.pooler(sequence_output[:, 0]).astype(ms.float32))
        return sequence_output, pooled_output


def count_parameters(cell: nn.Cell) -> int:
    """Number of distinct trainable scalars (shared Parameters counted once)."""
    return int(sum(np.prod(p.shape) for p in cell.trainable_params()))


def parameter_shapes(cell: nn.Cell) -> Dict[str, Tuple[int, ...]]:
    return {p.name: tuple(p.shape) for p in cell.get_parameters()}
