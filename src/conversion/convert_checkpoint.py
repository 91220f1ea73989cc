"""Convert public ALBERT weights to a MindSpore checkpoint that loads into `AlbertPreTraining`.

    python -m src.convert_checkpoint --src hf --input DIR_OR_FILE --output out.ckpt
    python -m src.convert_checkpoint --src tf --input model.ckpt-best --config albert_config.json --output out.ckpt

HF: a directory with config.json and model.safetensors or pytorch_model.bin (or one of those files, with --config).
An HF AlbertForMaskedLM (what an MLM training of one's own saves: no pooler, no sentence-order head) converts with
the pooler, and the sentence-order head beside its MLM head, initialised as transformers initialises what a
checkpoint lacks (weights normal(0, initializer_range), biases 0; from a fixed seed), said in one line.
TF: Google's ALBERT checkpoints and brightmart's albert_zh "*_google" releases, read without TensorFlow.
The network configuration is written next to the output as `<output>.json` (our AlbertConfig keys).
"""
import os
import pickle
import re
import sys
import zipfile
from typing import Dict, List, Optional, Tuple

import numpy as np

from model_utils.config import ArgumentParser, boolean
from model_utils.errors import UserError, as_user_error, run_cli
from src.common.atomic_files import check_outputs, claimed_folder_of, save_json_atomic
from src.common.run_log import log_to
from src.model.albert import AlbertConfig

Tensors = Dict[str, np.ndarray]

# ---------------------------------------------------------------------------------------------------------------
# HF transformers <-> ours. Module paths are identical; only the leaf names below differ. The one table is read both
# ways: HF -> ours here (--src hf), ours -> HF by export.py --file_format HF (src/export/hf_export.py).
# ---------------------------------------------------------------------------------------------------------------
HF_SKIPPED = ("albert.embeddings.position_ids", "predictions.decoder.weight", "predictions.decoder.bias")
HF_HEADS = ("predictions.", "sop_classifier.")
BARE_BACKBONE = ("embeddings.", "encoder.", "pooler.")  # the backbone's modules, named as a bare AlbertModel names them
POOLER = "albert.pooler."
INIT_SEED = 0  # of the weights initialised here: a conversion writes the same file every time
HF_LEAVES: Tuple[Tuple[str, str], ...] = (  # (HF's leaf, ours)
    ("word_embeddings.weight", "word_embeddings.embedding_table"),
    ("position_embeddings.weight", "position_embeddings.embedding_table"),
    ("token_type_embeddings.weight", "token_type_embeddings.embedding_table"),
    ("LayerNorm.weight", "LayerNorm.gamma"), ("LayerNorm.bias", "LayerNorm.beta"),
    ("full_layer_layer_norm.weight", "full_layer_layer_norm.gamma"),
    ("full_layer_layer_norm.bias", "full_layer_layer_norm.beta"),
)


def _rename_leaf(name: str, side: int) -> str:
    """`name` with its leaf renamed from side `side` of HF_LEAVES (0: HF's, 1: ours) to the other side."""
    for pair in HF_LEAVES:
        if name.endswith("." + pair[side]):
            return name[: -len(pair[side])] + pair[1 - side]
    return name


def hf_name(name: str) -> Optional[str]:
    """Our parameter name for an HF `AlbertForPreTraining` state-dict name, or None for tied/buffer entries."""
    if name.startswith(BARE_BACKBONE):
        name = "albert." + name  # a bare AlbertModel state dict has no "albert." prefix
    if name in HF_SKIPPED:
        return None
    return _rename_leaf(name, 0)


def name_in_hf(name: str) -> str:
    """HF transformers' state-dict name of our parameter `name` (the inverse of hf_name)."""
    return _rename_leaf(name, 1)


def convert_hf(tensors: Tensors) -> Tuple[Tensors, List[str]]:
    """Map HF names to ours; returns (converted, names not part of AlbertForPreTraining)."""
    converted: Tensors = {}
    skipped: List[str] = []
    for name, value in tensors.items():
        ours = hf_name(name)
        if ours is None:
            continue
        if not ours.startswith(("albert.",) + HF_HEADS) or ours.startswith("albert.albert."):
            skipped.append(name)
            continue
        converted[ours] = value
    _check_tied_decoder(tensors, converted)
    return converted, skipped


def _check_tied_decoder(tensors: Tensors, converted: Tensors) -> None:
    """Our MLM decoder is tied to the word embeddings; an HF checkpoint with an untied decoder cannot be expressed."""
    decoder = tensors.get("predictions.decoder.weight")
    table = converted.get("albert.embeddings.word_embeddings.embedding_table")
    if decoder is not None and table is not None and not np.array_equal(decoder, table):
        raise UserError("predictions.decoder.weight differs from the word embeddings: ALBERT ties them, "
                        "this checkpoint does not")
    bias = tensors.get("predictions.decoder.bias")
    if bias is not None and "predictions.bias" not in converted:
        converted["predictions.bias"] = bias


def read_hf(path: str, config_path: Optional[str]) -> Tuple[Tensors, AlbertConfig]:
    """Tensors and config of an HF model directory (or a single weights file plus --config)."""
    if os.path.isdir(path):
        config_path = config_path or os.path.join(path, "config.json")
        candidates = [os.path.join(path, f) for f in ("model.safetensors", "pytorch_model.bin")]
        weights = next((c for c in candidates if os.path.isfile(c)), None)
        if weights is None:
            raise UserError(f"{path}: no model.safetensors or pytorch_model.bin in this directory")
    elif os.path.isfile(path):
        weights = path
        config_path = config_path or os.path.join(os.path.dirname(path), "config.json")
    else:
        raise UserError(f"input not found: {path}")
    if os.path.getsize(weights) == 0:
        raise UserError(f"{weights}: empty file (an interrupted download?)")
    config = read_config(config_path)
    return (_read_safetensors(weights) if weights.endswith(".safetensors") else _read_torch_bin(weights)), config


def read_config(path: str) -> AlbertConfig:
    """The network config json given with (or beside) the weights."""
    with as_user_error():
        return AlbertConfig.from_json_file(path)


def _read_safetensors(path: str) -> Tensors:
    from safetensors import SafetensorError
    from safetensors.numpy import load_file
    try:
        return dict(load_file(path))
    except (SafetensorError, OSError, ValueError) as err:
        raise UserError(f"cannot read {path}: {err}") from err


SAFE_TORCH = (2, 6)  # torch.load(weights_only=True) up to 2.5.1 can run code from a crafted file (CVE-2025-32434)


def check_torch_version(version: str, path: str) -> None:
    """Refuse a pickled .bin through a torch whose weights_only loader is known to be escapable; a pre-release of
    2.6 (2.6.0a0, 2.6.0.dev...) comes before 2.6 and may lack the fix."""
    from packaging.version import InvalidVersion, Version

    try:
        safe = Version(version) >= Version(".".join(map(str, SAFE_TORCH)))
    except InvalidVersion:
        safe = False
    if not safe:
        raise UserError(f"reading {path} needs torch >= {'.'.join(map(str, SAFE_TORCH))}: torch {version} can run code "
                        f"from a crafted .bin even with weights_only (CVE-2025-32434); upgrade torch, or convert the "
                        f"model.safetensors file of the same model, which holds no code")


def torch_file_problem(path: str) -> Optional[str]:
    """What makes `path` no file of torch.save, judged by its bytes before torch reads it (torch's own messages
    for these blame weights_only and suggest turning it off); None when it looks like one."""
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except zipfile.BadZipFile:
            return "a damaged zip archive"
        return None if any(name.endswith("/data.pkl") for name in names) else \
            "a zip archive but not one of torch.save (no data.pkl inside)"
    with open(path, "rb") as handle:
        head = handle.read(2)
    if head == b"PK":
        return "a damaged or truncated zip archive (an interrupted download?)"
    if head != b"\x80\x02":  # torch.save's legacy format starts with a protocol-2 pickle
        return "not a PyTorch weights file (neither torch.save's zip archive nor its legacy format)"
    return None


def _read_torch_bin(path: str) -> Tensors:
    try:
        import torch
    except ImportError:
        raise UserError(f"reading {path} needs PyTorch (pip install torch); "
                        "a model.safetensors file converts without it") from None
    check_torch_version(torch.__version__, path)
    problem = torch_file_problem(path)
    if problem:
        raise UserError(f"cannot read {path}: {problem}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:  # weights_only refused an object
        raise UserError(f"cannot read {path}: it holds objects other than tensors, which the safe loader refuses; "
                        f"convert the model.safetensors file of the same model instead") from None
    except Exception as err:  # torch raises RuntimeError/EOFError for damaged files
        raise UserError(f"cannot read {path}: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from err
    if not isinstance(state, dict) or not all(isinstance(value, torch.Tensor) for value in state.values()):
        found = type(state).__name__ if not isinstance(state, dict) else \
            next(f"{name!r}: {type(value).__name__}" for name, value in state.items()
                 if not isinstance(value, torch.Tensor))
        raise UserError(f"cannot read {path}: not a state dict of tensor names to tensors (found {found})")
    return {name: value.float().numpy() if value.is_floating_point() else value.numpy()
            for name, value in state.items()}


# ---------------------------------------------------------------------------------------------------------------
# Google's TF names -> ours. Kernels are stored [in, out]; MindSpore Dense weights are [out, in].
# ---------------------------------------------------------------------------------------------------------------
_LAYER = r"albert.encoder.albert_layer_groups.\1.albert_layers.\2."
TF_TABLE: List[Tuple[str, str]] = [
    (r"bert/embeddings/(word|position|token_type)_embeddings", r"albert.embeddings.\1_embeddings.embedding_table"),
    (r"bert/embeddings/LayerNorm/(gamma|beta)", r"albert.embeddings.LayerNorm.\1"),
    (r"bert/encoder/embedding_hidden_mapping_in/(kernel|bias)", r"albert.encoder.embedding_hidden_mapping_in.\1"),
    (r"{G}/attention_1/self/(query|key|value)/(kernel|bias)", _LAYER + r"attention.\3.\4"),
    (r"{G}/attention_1/output/dense/(kernel|bias)", _LAYER + r"attention.dense.\3"),
    (r"{G}/LayerNorm/(gamma|beta)", _LAYER + r"attention.LayerNorm.\3"),
    (r"{G}/ffn_1/intermediate/dense/(kernel|bias)", _LAYER + r"ffn.\3"),
    (r"{G}/ffn_1/intermediate/output/dense/(kernel|bias)", _LAYER + r"ffn_output.\3"),
    (r"{G}/LayerNorm_1/(gamma|beta)", _LAYER + r"full_layer_layer_norm.\3"),
    (r"bert/pooler/dense/(kernel|bias)", r"albert.pooler.\1"),
    (r"cls/predictions/transform/dense/(kernel|bias)", r"predictions.dense.\1"),
    (r"cls/predictions/transform/LayerNorm/(gamma|beta)", r"predictions.LayerNorm.\1"),
    (r"cls/predictions/output_bias", r"predictions.bias"),
    (r"cls/seq_relationship/output_weights", r"sop_classifier.classifier.weight"),
    (r"cls/seq_relationship/output_bias", r"sop_classifier.classifier.bias"),
]
_GROUP = r"bert/encoder/transformer/group_(\d+)/inner_group_(\d+)"
_TF_RULES = [(re.compile(pattern.replace("{G}", _GROUP) + "$"), target) for pattern, target in TF_TABLE]
TF_TRAINING_STATE = re.compile(r"(^|/)(global_step|good_steps|loss_scale|adam_[mv]|lamb_[mv]|Momentum|"
                               r"Adam(_\d+)?|beta[12]_power)$")


def tf_name(name: str) -> Optional[str]:
    """Our parameter name for a Google ALBERT TF variable, or None when it is not part of the network."""
    name = name[len("module/"):] if name.startswith("module/") else name  # TF-Hub exports
    for pattern, target in _TF_RULES:
        match = pattern.match(name)
        if match:
            return match.expand(target).replace(".kernel", ".weight")
    return None


def convert_tf(tensors: Tensors) -> Tuple[Tensors, List[str]]:
    """Map TF names to ours (transposing kernels); returns (converted, skipped non-network names)."""
    converted: Tensors = {}
    skipped: List[str] = []
    for name, value in tensors.items():
        if TF_TRAINING_STATE.search(name):
            continue
        ours = tf_name(name)
        if ours is None:
            skipped.append(name)
            continue
        converted[ours] = np.ascontiguousarray(value.T) if name.endswith("/kernel") else value
    if any("bert/encoder/layer_shared/" in n or n.endswith("word_embeddings_2") for n in skipped):
        raise UserError("this is a checkpoint of brightmart's early albert_zh layout (bert/encoder/layer_shared, "
                        "word_embeddings_2), which places the embedding projection differently from Google's "
                        "ALBERT; use brightmart's *_google releases, which convert with --src tf")
    inside = [name for name in skipped if name.removeprefix("module/").startswith(("bert/", "cls/predictions/",
                                                                                      "cls/seq_relationship/"))]
    if inside:
        raise UserError(f"{inside[0]} lies in ALBERT's own scopes but is no weight of the network (a damaged "
                        f"checkpoint, or another model's layout)")
    return converted, skipped


def read_tf(prefix: str, config_path: Optional[str]) -> Tuple[Tensors, AlbertConfig]:
    from src.conversion.tf_checkpoint import read_tf_checkpoint
    if not config_path:
        raise UserError("--config albert_config.json is required with --src tf")
    config = read_config(config_path)
    try:
        return read_tf_checkpoint(prefix), config
    except (ValueError, OSError) as err:
        raise UserError(str(err).splitlines()[0]) from err


# ---------------------------------------------------------------------------------------------------------------
# Checking against the network and writing.
# ---------------------------------------------------------------------------------------------------------------
def network_shapes(config: AlbertConfig) -> Dict[str, Tuple[int, ...]]:
    """Name -> shape of every parameter of the pretraining network of `config`."""
    from src.model.albert import parameter_shapes
    from src.model.pretraining_heads import AlbertPreTraining
    return parameter_shapes(AlbertPreTraining(config, is_training=False))


def check_whole_groups(converted: Tensors, expected: Dict[str, Tuple[int, ...]]) -> None:
    """A Google checkpoint holds each layer whole: one that has some weights of a layer (the pooler, a head's dense
    layer) but not all is damaged or misnamed, not a model without that layer."""
    for name in sorted(expected):
        layer = name.rsplit(".", 1)[0]
        if name not in converted and any(other.rsplit(".", 1)[0] == layer for other in converted):
            raise UserError(f"the checkpoint has part of {layer} but not {name}: a damaged checkpoint, or a "
                            f"misnamed tensor")


def initialise_like_transformers(converted: Tensors, expected: Dict[str, Tuple[int, ...]],
                                 initializer_range: float) -> List[str]:
    """Add what transformers initialises when it loads an AlbertForMaskedLM's weights into AlbertForPreTraining:
    the pooler, and the sentence-order head when the MLM head is there (a pretraining network but for it); its
    _init_weights draws a Linear's weight from normal(0, initializer_range) and zeroes its bias. Returns the names
    added (none when the checkpoint has them)."""
    wanted = (POOLER, HF_HEADS[1]) if any(name.startswith(HF_HEADS[0]) for name in converted) else (POOLER,)
    added = sorted(name for name in expected if name.startswith(wanted) and name not in converted)
    rng = np.random.default_rng(INIT_SEED)
    for name in added:
        converted[name] = np.zeros(expected[name], np.float32) if name.endswith(".bias") else \
            rng.normal(0.0, initializer_range, expected[name]).astype(np.float32)
    return added


def check_against_network(converted: Tensors, expected: Dict[str, Tuple[int, ...]]) -> List[str]:
    """Fail unless every backbone parameter is present with the network's shape; returns missing head names."""
    wrong = [f"{n}: weights {tuple(v.shape)} vs config {expected[n]}"
             for n, v in converted.items() if n in expected and tuple(v.shape) != expected[n]]
    extra = sorted(n for n in converted if n not in expected)
    missing = sorted(n for n in expected if n not in converted)
    if wrong:
        raise UserError(f"the config does not match the weights: {wrong[0]}" +
                        (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else ""))
    if extra:
        raise UserError(f"the config does not match the weights: {extra[0]} has no place in the network "
                        f"(e.g. more layer groups or inner groups in the checkpoint than in the config)")
    backbone_missing = [n for n in missing if n.startswith("albert.")]
    if backbone_missing:
        raise UserError(f"the checkpoint lacks {len(backbone_missing)} backbone weights, e.g. {backbone_missing[0]}")
    return missing


def convert(src: str, input_path: str, output: str, config_path: Optional[str] = None,
            overwrite: bool = False) -> Dict[str, object]:
    """Convert and write `output` (+ `output`.json config) in the folder claimed for this run (claimed_folder_of);
    existing ones only with `overwrite`; returns a summary for printing."""
    from mindspore import Tensor
    from src.common.checkpoint_io import save_checkpoint_atomic
    if src == "hf":
        tensors, config = read_hf(input_path, config_path)
        converted, skipped = convert_hf(tensors)
    else:
        tensors, config = read_tf(input_path, config_path)
        converted, skipped = convert_tf(tensors)
    expected = network_shapes(config)
    if src == "tf":
        check_whole_groups(converted, expected)
    initialised = initialise_like_transformers(converted, expected, config.initializer_range)
    missing_heads = check_against_network(converted, expected)
    items = [{"name": name, "data": Tensor(np.asarray(value, dtype=np.float32))}
             for name, value in sorted(converted.items())]
    with claimed_folder_of(output, "--output"):
        save_checkpoint_atomic(items, output, replace=overwrite)
        save_json_atomic(config.to_dict(), output + ".json", replace=overwrite)
    return {"written": output, "config": output + ".json", "parameters": len(converted),
            "missing_heads": missing_heads, "skipped": skipped, "initialised": initialised,
            "initializer_range": config.initializer_range}


def main(argv: List[str]) -> int:
    parser = ArgumentParser(prog="python -m src.convert_checkpoint", description=__doc__.split("\n")[0])
    parser.add_argument("--src", required=True, choices=["hf", "tf"], help="format of the input weights")
    parser.add_argument("--input", required=True, help="HF directory/file, or TF checkpoint prefix")
    parser.add_argument("--output", required=True, help="MindSpore checkpoint to write (.ckpt)")
    parser.add_argument("--config", default=None, help="config json (required for tf; HF default: config.json)")
    parser.add_argument("--overwrite", type=boolean, nargs="?", const=True, default=False,
                        help="replace an existing output (.ckpt or its .json) (true or false; alone: true)")
    args = parser.parse_args(argv)
    if os.path.isdir(args.output):
        raise UserError(f"--output names the checkpoint file to write (.ckpt), not a folder: {args.output}")
    check_outputs([args.output, args.output + ".json"], args.overwrite, {"--input": args.input, "--config": args.config},
                  flag="--overwrite")
    summary = convert(args.src, args.input, args.output, args.config, args.overwrite)
    log_to(os.path.dirname(os.path.abspath(args.output)))
    print(f"wrote {summary['written']} ({summary['parameters']} parameters) and {summary['config']}")
    if summary["initialised"]:
        why = " (an HF AlbertForMaskedLM has neither pooler nor sentence-order head)" if args.src == "hf" else ""
        print(f"note: {', '.join(summary['initialised'])} not in the input{why}: initialised as transformers does "
              f"(weights normal(0, {summary['initializer_range']}), biases 0), to be trained")
    if summary["missing_heads"]:
        print(f"note: the input has no pretraining head weights for: {', '.join(summary['missing_heads'])}")
    if summary["skipped"]:
        print(f"note: skipped {len(summary['skipped'])} tensors that are not part of ALBERT pretraining: "
              f"{', '.join(summary['skipped'][:8])}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
