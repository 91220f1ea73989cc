"""Checkpoint helpers shared by every entry point: atomic writes that carry a digest of their contents, reading
that verifies it, and loading that refuses to half-load."""
import hashlib
import os
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn

from model_utils.errors import UserError
from src.common.atomic_files import atomic_path, make_readable

BACKBONE_PREFIX = "albert."
# A training network's dropout clock (src/model/albert.py, DropoutClock): run state, never loaded (another run's
# count would shift every mask); a resumed run sets it from its progress.
DROPOUT_CALLS = "dropout_calls"
# Train-cell state that shares a checkpoint with the weights (optimizer moments, step, loss scale).
TRAIN_STATE_PREFIXES = ("moment1.", "moment2.", "moments.", "adam_m.", "adam_v.", "lamb_m.", "lamb_v.", "accu_grads.",
                        "accu_overflow", "accumulation_step", "global_step",
                        "learning_rate", "beta1_power", "beta2_power", "scale_sense", "current_iterator_step",
                        "last_overflow_iterator_step", "epoch_num", "step_num", "loss_scale", "overflow_count",
                        "run_id", DROPOUT_CALLS)
_SHOWN = 8
# Every checkpoint this package writes holds the sha256 of all its other entries under this name (see
# `contents_digest`): MindSpore itself loads a file with flipped tensor bytes without a word.
DIGEST_KEY = "checkpoint_sha256"
Value = Union[Parameter, Tensor, np.ndarray, int, float, str]


@dataclass
class LoadReport:
    """What a checkpoint load did: which network parameters were left at their initial values, what was unused."""

    loaded: List[str] = field(default_factory=list)
    missing: List[str] = field(default_factory=list)
    unused: List[str] = field(default_factory=list)


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_SHOWN])
    return shown + (f" ... and {len(names) - _SHOWN} more" if len(names) > _SHOWN else "")


def read_checkpoint(path: str) -> Dict[str, Parameter]:
    """ms.load_checkpoint with a one-line error naming the file when it is missing, unreadable or damaged (its
    stored digest does not match its contents). A file without a digest (a checkpoint MindSpore or an older
    version of this package wrote) is read as it is."""
    values, stored = _load_checkpoint(path)
    if stored is not None:
        _check_digest(path, stored, contents_digest(values))
    return values


def read_checkpoint_and_digest(path: str) -> Tuple[Dict[str, Parameter], str]:
    """read_checkpoint, and the contents_digest of what it read (hashed once: the stored digest is checked against
    it): what an evaluation records of the weights it scored and an export compares."""
    values, stored = _load_checkpoint(path)
    digest = contents_digest(values)
    if stored is not None:
        _check_digest(path, stored, digest)
    return values, digest


def foreign_weights(path: str) -> str:
    """Why `path` is weights of another framework, which MindSpore cannot read ("" when it is not): an HF
    transformers folder or file, a PyTorch file, a TensorFlow checkpoint (ALBERT's releases: model.ckpt-N.index and
    .data-*), with the conversion that makes a MindSpore checkpoint of it."""
    source = ("hf" if os.path.isdir(path) and os.path.isfile(os.path.join(path, "config.json"))
              or path.endswith((".safetensors", ".bin", ".pt", ".pth")) and os.path.isfile(path)
              else "tf" if path.endswith(".index") or not os.path.isfile(path) and os.path.isfile(path + ".index")
              else "")
    if not source:
        return ""
    what = {"hf": "HF transformers / PyTorch weights", "tf": "a TensorFlow checkpoint"}[source]
    given = path.removesuffix(".index") if source == "tf" else path
    beside = os.path.join(os.path.dirname(given), "albert_config.json")
    config = f" --config {beside}" if source == "tf" else ""
    return (f"{path} is {what}, which MindSpore cannot read: convert it first with python -m src.convert_checkpoint "
            f"--src {source} --input {given}{config} --output model.ckpt, then pass model.ckpt")


def _load_checkpoint(path: str) -> Tuple[Dict[str, Parameter], Optional[str]]:
    foreign = foreign_weights(path)
    if foreign:
        raise UserError(foreign)
    if not os.path.isfile(path):
        raise UserError(f"checkpoint not found: {path}")
    if os.path.getsize(path) == 0:
        raise UserError(f"cannot read checkpoint {path}: the file is empty")
    try:
        values = ms.load_checkpoint(path)
    except Exception as err:  # MindSpore raises ValueError/RuntimeError with multi-line text for corrupt files
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(f"cannot read checkpoint {path}: {reason}") from err
    return values, values.pop(DIGEST_KEY, None)


def _check_digest(path: str, stored: str, digest: str) -> None:
    if stored != digest:
        raise UserError(f"checkpoint {path} is damaged: its contents do not match the sha256 stored in it when it "
                        f"was written (a disk or copy that changed bytes)")


def contents_digest(values: Mapping[str, Value]) -> str:
    """sha256 over every entry's name, dtype, shape and bytes, in name order: the same for the values a checkpoint
    is written from and the values MindSpore reads back (ints come back as int64, floats as float32)."""
    digest = hashlib.sha256()
    for name in sorted(values):
        value = values[name]
        digest.update(name.encode("utf-8") + b"\0")
        if isinstance(value, str):
            digest.update(b"str\0" + value.encode("utf-8"))
            continue
        array = _as_array(value)
        digest.update(f"{array.dtype.str}{array.shape}\0".encode("ascii"))
        digest.update(np.ascontiguousarray(array).data)
    return digest.hexdigest()


def _as_array(value: Value) -> np.ndarray:
    if isinstance(value, Tensor):
        return value.asnumpy()
    if isinstance(value, bool):
        return np.asarray(value, np.bool_)
    if isinstance(value, int):
        return np.asarray(value, np.int64)
    if isinstance(value, float):
        return np.asarray(value, np.float32)
    return np.asarray(value)


def config_beside(checkpoint: str) -> str:
    """The network config saved with a checkpoint: `<checkpoint>.json` (src.convert_checkpoint) or the
    albert_config.json that training runs write into their checkpoint folder; "" when there is none."""
    if not checkpoint:
        return ""
    for path in (checkpoint + ".json", os.path.join(os.path.dirname(os.path.abspath(checkpoint)), "albert_config.json")):
        if os.path.isfile(path):
            return path
    return ""


def load_weights(net: nn.Cell, source: Union[str, Mapping[str, Union[Parameter, np.ndarray, Tensor]]],
                 allow_missing: Sequence[str] = (), required_prefix: str = BACKBONE_PREFIX,
                 name: str = "", network_note: str = "") -> LoadReport:
    """Load a checkpoint into `net`, failing loudly instead of silently keeping random weights.

    Every parameter of `net` must come from the checkpoint, except names starting with one of `allow_missing`
    (a new task head); a name under `required_prefix` (the backbone) can never be missing. Shapes must match.
    Optimizer state in the checkpoint is ignored; other unused names are reported in the returned LoadReport.
    `name`: the file a mapping `source` was read from, so that errors name it; `network_note`: where the network
    came from, added to a shape mismatch (see network_config.network_note).
    """
    where = source if isinstance(source, str) else name or "checkpoint"
    values = read_checkpoint(source) if isinstance(source, str) else dict(source)
    params = {p.name: p for p in net.get_parameters()}

    mismatched = [f"{name}: checkpoint {tuple(np.shape(values[name]))} vs network {tuple(p.shape)}"
                  for name, p in params.items() if name in values and tuple(np.shape(values[name])) != tuple(p.shape)]
    if mismatched:
        raise UserError(f"{where}: shapes do not match the network (a checkpoint of another config?): "
                        f"{_listing(mismatched)}{network_note}")
    missing = [name for name in params if name not in values and name != DROPOUT_CALLS]
    required = [name for name in missing
                if name.startswith(required_prefix) or not name.startswith(tuple(allow_missing))]
    if required:
        raise UserError(f"{where}: {len(required)} network parameters are not in the checkpoint and would stay "
                        f"randomly initialised: {_listing(required)}")
    to_load = {name: _as_parameter(name, values[name]) for name in params if name in values and name != DROPOUT_CALLS}
    not_loaded, _ = ms.load_param_into_net(net, to_load, strict_load=True)
    not_loaded = [name for name in not_loaded if name in to_load]
    if not_loaded:
        raise UserError(f"{where}: MindSpore did not load {_listing(not_loaded)}")
    unused = [name for name in values if name not in params and not name.startswith(TRAIN_STATE_PREFIXES)]
    return LoadReport(loaded=sorted(to_load), missing=missing, unused=unused)


def _as_parameter(name: str, value: Union[Parameter, np.ndarray, Tensor]) -> Parameter:
    if isinstance(value, Parameter):
        return value
    return Parameter(value if isinstance(value, Tensor) else Tensor(np.asarray(value)), name=name)


def save_checkpoint_atomic(items: Union[nn.Cell, List[Dict[str, Tensor]]], path: str,
                           append_dict: Optional[Dict[str, Union[int, float, str]]] = None,
                           replace: bool = True) -> None:
    """Write a checkpoint, with the digest of its contents (see read_checkpoint), under a temporary name and rename
    it into place once it is on disk, so a crash never leaves half a file under the final name; readable by others
    (see make_readable). `append_dict` adds scalars (e.g. training progress) beside the parameters; `replace`
    False: never over a file (see place_new)."""
    if not path.endswith(".ckpt"):
        raise UserError(f"checkpoint file name must end with .ckpt: {path}")
    tensors = _by_name(items)
    extra = dict(append_dict or {})
    extra[DIGEST_KEY] = contents_digest({**tensors, **extra})
    with atomic_path(path, ".ckpt", plain_mode=False, durable=True, replace=replace) as tmp:
        ms.save_checkpoint([{"name": name, "data": value} for name, value in tensors.items()], tmp,
                           append_dict=extra)
        make_readable(tmp)


def _by_name(items: Union[nn.Cell, List[Dict[str, Tensor]]]) -> Dict[str, Tensor]:
    """What is written, by name: a cell's parameters (each once) or a list of {"name", "data"}; MindSpore writes
    exactly these (as a list of {"name", "data"}, the form every supported version takes), so the digest is
    computed over what lands in the file."""
    if isinstance(items, nn.Cell):
        return {param.name: param for _, param in items.parameters_and_names()}
    return {item["name"]: item["data"] for item in items}
