"""Yaml configuration with a command line built from it.

A config file holds up to three yaml documents: the values, a help string per key and the allowed values per
key (keys of nested values are written with dots, `optimizer_cfg.Lamb.learning_rate`): a list of choices, or an
interval such as "[1, 65536]" or "(0, inf)" for a number, so that a bad value stops the run at parse time, naming
the key and where it was set, before anything is written or computed. Every key, nested ones
included, becomes a `--key value` option whose type is the type of its value in the yaml. The file shipped with a
script is the schema: a user's own yaml (`--config_path`) may only set keys the shipped file has.

Nothing here runs at import time; scripts call `parse_cli(default_yaml, argv)`.
"""
import argparse
import difflib
import fnmatch
import math
import os
import re
import sys
from pathlib import Path
from typing import IO, AbstractSet, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import yaml

from model_utils.errors import UserError

TRUE_WORDS = {"true", "yes", "on", "1"}
FALSE_WORDS = {"false", "no", "off", "0"}
# "[1, inf)", "(0, 1]": the allowed values of a number, in interval notation.
INTERVAL = re.compile(r"^\s*([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])\s*$")
Allowed = Union[List[Any], str]  # choices, or an interval
# No setting needs a longer integer; Python refuses to convert one of more than 4300 digits (a ValueError), and a
# longer one would take time quadratic in its length.
MAX_INT_DIGITS = 100
INTEGER = re.compile(r"\s*[+-]?[\d_]+\s*")
FLOAT32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max: every float setting becomes a float32
SHOWN_CHARS = 60  # of a value in an error message
ALIASES = {"lr": "learning_rate"}  # names users type for keys spelled otherwise here
MAX_SUGGESTED = 3  # keys named in one "did you mean"
_WARMUP = "optimizer_cfg.*.warmup_steps"
_FROM_FRACTION = (("optimizer_cfg.*.warmup_proportion", ""),
                  (_WARMUP, "given in steps here, not as a fraction of training"))
_PRETRAINED = ("a MindSpore checkpoint; src.convert_checkpoint converts Google's TF and HF's ALBERT weights")
_DATA_SETTING = ("", "it is the data's here: set it when making the data (src.create_pretraining_data, "
                     "src.create_finetune_data, src.create_squad_data); runs read it from the data")
_EVAL_BATCH = ("eval_batch_size",)
# The flags of Google's ALBERT/BERT scripts, HF's run_glue/run_squad and ModelZoo's BERT spelled otherwise here ->
# the keys of ours that do their work, in order: the first the yaml in use has is suggested ('*': the optimizer
# section the run uses), with its note; a candidate ("", note) is a note alone (a setting of no key of this yaml).
FOREIGN_FLAGS: Dict[str, Tuple[Union[str, Tuple[str, str]], ...]] = {
    "num_train_epochs": ("epoch_num", "epoch_size"), "epoch_size": ("epoch_num",), "epoch_num": ("epoch_size",),
    "train_step": ("train_steps",), "num_train_steps": ("train_steps",), "max_steps": ("train_steps",),
    "warmup_step": (_WARMUP,), "num_warmup_steps": (_WARMUP,),
    "warmup_proportion": _FROM_FRACTION, "warmup_ratio": _FROM_FRACTION,
    "save_steps": ("save_checkpoint_steps",), "save_checkpoints_steps": ("save_checkpoint_steps",),
    "keep_checkpoint_max": ("save_checkpoint_num",), "save_total_limit": ("save_checkpoint_num",),
    "adam_epsilon": ("optimizer_cfg.*.eps",), "max_grad_norm": ("clip_norm",),
    "init_checkpoint": (("load_pretrain_checkpoint_path", _PRETRAINED), ("load_checkpoint_path", _PRETRAINED)),
    "model_name_or_path": (("load_pretrain_checkpoint_path", _PRETRAINED), ("load_checkpoint_path", _PRETRAINED)),
    "train_batch_size": ("batch_size",), "per_device_train_batch_size": ("train_batch_size", "batch_size"),
    "per_gpu_train_batch_size": ("train_batch_size", "batch_size"), "per_device_eval_batch_size": _EVAL_BATCH,
    "per_gpu_eval_batch_size": _EVAL_BATCH, "predict_batch_size": _EVAL_BATCH,
    "input_file": ("data_dir",), "bert_network": ("albert_network",),
    "max_seq_length": ("export_seq_length", _DATA_SETTING), "max_predictions_per_seq": (_DATA_SETTING,),
    "do_lower_case": (_DATA_SETTING,), "vocab_file": (_DATA_SETTING,), "spm_model_file": (_DATA_SETTING,),
    "task_name": (_DATA_SETTING,),
}


class ConfigError(UserError):
    """A bad key, value or config file."""


class Config:
    """Nested, read-only-by-convention configuration with attribute access."""

    def __init__(self, values: Dict[str, Any]):
        for key, value in values.items():
            setattr(self, key, Config(value) if isinstance(value, dict) else value)

    def __getattr__(self, name: str) -> Any:
        # Only called for missing attributes: fail with the closest real key instead of a bare AttributeError.
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"config has no key '{name}'{suggestion(name, list(self.__dict__))}")

    def __contains__(self, key: str) -> bool:
        return key in self.__dict__

    def __getitem__(self, key: str) -> Any:
        return self.__dict__[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.__dict__.get(key, default)

    def keys(self) -> List[str]:
        return list(self.__dict__)

    def to_dict(self) -> Dict[str, Any]:
        return {k: v.to_dict() if isinstance(v, Config) else v for k, v in self.__dict__.items()}

    def __repr__(self) -> str:
        return f"Config({self.to_dict()!r})"

    def __str__(self) -> str:
        return "\n".join(f"{key}: {value!r}" for key, value in flatten(self.to_dict()).items())


def flatten(values: Dict[str, Any], prefix: str = "") -> Dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; the CLI and error messages speak in dotted keys."""
    flat: Dict[str, Any] = {}
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            flat.update(flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _set_dotted(values: Dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for part in parents:
        values = values[part]
    values[last] = value


def _visible(name: str, candidates: Sequence[str], unused: AbstractSet[str]) -> List[str]:
    """`candidates` less the keys under sections the run does not use (`unused`, e.g. the optimizers not chosen),
    unless `name` itself names that section."""
    hidden = unused - set(name.split(".")[:-1])
    return [key for key in candidates if not hidden & set(key.split(".")[:-1])]


def closest_keys(name: str, candidates: Sequence[str], unused: AbstractSet[str] = frozenset()) -> List[str]:
    """The keys an unknown `name` most likely meant, among the _visible ones: `optimizer_cfg.AdamW.learning_rate`
    with optimizer AdamWeightDecay suggests AdamWeightDecay's key, not Lamb's.

    A plain name that is the last part of nested keys means those (`learning_rate`, `lr`: `optimizer_cfg.Lamb.
    learning_rate`), else the keys it ends (`batch_size`: `train_batch_size` before `eval_batch_size`, in the
    yaml's order); spelling similarity would pick the wrong one (`warmup_steps` is closest to `train_steps`).
    Otherwise, or when too many keys fit, the one spelled most alike."""
    shown = _visible(name, candidates, unused)
    if "." not in name:
        word = ALIASES.get(name, name)
        leaves = [key.rsplit(".", 1)[-1] for key in shown]
        for fits in (lambda leaf: leaf == word, lambda leaf: leaf.endswith("_" + word)):
            found = [key for key, leaf in zip(shown, leaves) if fits(leaf)]
            if 0 < len(found) <= MAX_SUGGESTED:
                return found
    return difflib.get_close_matches(name, shown, n=1, cutoff=0.5)


def _foreign_hint(name: str, shown: Sequence[str], prefix: str, booleans: AbstractSet[str]) -> Optional[str]:
    """The hint of FOREIGN_FLAGS for `name`: its first candidate the yaml has (with its note), or its note that
    needs no key; None when the table has nothing for this yaml. absl's `--noX` is `X false` for a true/false key X
    (`booleans`)."""
    if name.startswith("no") and (name[2:] in booleans or name[2:] in FOREIGN_FLAGS):
        negated = name[2:] if name[2:] in booleans and name[2:] in shown else None
        return (f"; did you mean {prefix + negated + (' false' if prefix else ': false')!r}?" if negated
                else _foreign_hint(name[2:], shown, prefix, booleans))
    for candidate in FOREIGN_FLAGS.get(name, ()):
        pattern, note = (candidate, "") if isinstance(candidate, str) else candidate
        keys = fnmatch.filter(shown, pattern)[:MAX_SUGGESTED] if pattern else []
        if keys:
            return (f"; did you mean {' or '.join(repr(prefix + key) for key in keys)}"
                    f"{f' ({note})' if note else ''}?")
        if not pattern:
            return f"; {note}"
    return None


def suggestion(name: str, candidates: Sequence[str], unused: AbstractSet[str] = frozenset(), prefix: str = "",
               booleans: AbstractSet[str] = frozenset()) -> str:
    """"; did you mean 'KEY'?" for `name` (each key written with `prefix`, "--" for flags), or "": the well-known
    flag of another implementation first (FOREIGN_FLAGS: closeness misleads there, `num_train_epochs` is nearest
    `train_steps`), else the closest_keys. `booleans`: the true/false keys among `candidates`."""
    hint = _foreign_hint(name, _visible(name, candidates, unused), prefix, booleans)
    if hint is not None:
        return hint
    keys = closest_keys(name, candidates, unused)
    return f"; did you mean {' or '.join(repr(prefix + key) for key in keys)}?" if keys else ""


def _unused_options(settings: Dict[str, Any], choices: Dict[str, Allowed]) -> AbstractSet[str]:
    """The options that the choice keys in `settings` (flat) did not pick, e.g. the optimizers not used."""
    return {str(option) for key, allowed in choices.items() if isinstance(allowed, list) and key in settings
            for option in allowed if option != settings[key]}


class YamlRefused(yaml.MarkedYAMLError):
    """Yaml that parses but that this package refuses to build: anchors and aliases, over-long integers."""


class StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader without anchors and aliases, and without integers of more than MAX_INT_DIGITS digits.

    Aliases are refused as the parser meets them, before anything is built: nine levels of nine aliases each (a
    600-byte file) make a tree of 9**9 leaves once flattened into keys. No config needs them."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if event.anchor is not None:  # an &anchor on a node, or an *alias
            sign = "*" if isinstance(event, yaml.AliasEvent) else "&"
            raise YamlRefused(problem=f"yaml anchors and aliases are refused ({sign}{event.anchor}): write the "
                                      f"values out", problem_mark=event.start_mark)
        return super().compose_node(parent, index)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        problem = _long_integer(node.value)
        if problem:
            raise YamlRefused(problem=problem, problem_mark=node.start_mark)
        return super().construct_yaml_int(node)


StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)


def _long_integer(text: str) -> Optional[str]:
    """Why the integer literal `text` is refused (too many digits), else None."""
    digits = len(text.strip().lstrip("+-").replace("_", ""))
    return f"an integer of {digits} digits is refused (at most {MAX_INT_DIGITS})" if digits > MAX_INT_DIGITS else None


def _shown(value: Any) -> str:
    """repr(value), cut short: an error line names a value, it does not repeat a megabyte of it."""
    text = repr(value)
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


def load_yaml_documents(path: os.PathLike) -> Tuple[Dict[str, Any], Dict[str, str], Dict[str, Allowed]]:
    """Read (values, help, allowed values) from a yaml file of one to three documents."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    try:
        with open(path, encoding="utf-8") as handle:
            docs = _documents(handle)
    except YamlRefused as err:
        raise ConfigError(f"{path} line {err.problem_mark.line + 1}: {err.problem}") from None
    except (yaml.YAMLError, RecursionError) as err:
        mark = getattr(err, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: malformed yaml ({_yaml_problem(err)})") from err
    except UnicodeDecodeError as err:
        raise ConfigError(f"{path}: not UTF-8 text (byte {err.start})") from None
    if len(docs) > 3:
        raise ConfigError(f"{path}: expected at most 3 yaml documents (values, help, choices), found {len(docs)}")
    for doc, line in docs:
        if doc is not None and not isinstance(doc, dict):
            raise ConfigError(f"{path} line {line}: every yaml document must be a mapping of keys to values, got "
                              f"{'a list' if isinstance(doc, list) else _shown(doc)}")
    values = [doc or {} for doc, _ in docs]
    values += [{}] * (3 - len(values))
    return values[0], values[1], values[2]


def _documents(handle: IO[str]) -> List[Tuple[Any, int]]:
    """(value, line where it starts) of each yaml document, as yaml.load_all reads them."""
    loader = StrictLoader(handle)
    try:
        found = []
        while loader.check_node():
            node = loader.get_node()
            found.append((loader.construct_document(node), node.start_mark.line + 1))
        return found
    finally:
        loader.dispose()


def _yaml_problem(err: Exception) -> str:
    """What is wrong with some yaml, in one line."""
    if isinstance(err, RecursionError):
        return "nested too deeply"
    return getattr(err, "problem", None) or (str(err).splitlines() or [type(err).__name__])[0]


def _yaml_value(text: str, key: str, source: str) -> Any:
    """`text` read as a yaml value (a list typed on the command line); malformed yaml is a ConfigError."""
    try:
        return yaml.load(text, Loader=StrictLoader)
    except YamlRefused as err:
        raise ConfigError(f"{source}: key '{key}': {err.problem}") from None
    except (yaml.YAMLError, RecursionError) as err:
        raise ConfigError(f"{source}: key '{key}' got malformed yaml {_shown(text)} ({_yaml_problem(err)})") from None


def _type_name(value: Any) -> str:
    return {bool: "bool", int: "int", float: "float", str: "str", list: "list"}.get(type(value), type(value).__name__)


def coerce(key: str, value: Any, like: Any, source: str) -> Any:
    """Convert `value` to the type of the schema value `like`, or fail naming the key and expected type."""
    expected = "true or false" if isinstance(like, bool) else _type_name(like)
    if like is None:
        return value
    if value is None:
        raise ConfigError(f"{source}: key '{key}' cannot be null (it expects {expected}): leave it out for its "
                          f"default, {_shown(like)}")
    if isinstance(like, bool):
        if isinstance(value, bool):
            return value
        if type(value) is int and value in (0, 1):  # yaml's 1 / 0, as on the command line
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in TRUE_WORDS | FALSE_WORDS:
            return value.strip().lower() in TRUE_WORDS
    elif isinstance(like, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            problem = _long_integer(value) if INTEGER.fullmatch(value) else None
            if problem:
                raise ConfigError(f"{source}: key '{key}': {problem}")
            try:
                return int(value.strip())
            except ValueError:
                pass
    elif isinstance(like, float):
        if isinstance(value, (int, float, str)) and not isinstance(value, bool):
            return _float32(key, value, source)
    elif isinstance(like, str):
        if isinstance(value, str):
            return value
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
    elif isinstance(like, list):
        if isinstance(value, str):
            value = (_yaml_value(value, key, source) if value.strip().startswith("[")
                     else [v for v in value.split(",") if v])
        if isinstance(value, list):  # items typed like the schema's first item
            return [coerce(f"{key}[{i}]", v, like[0], source) if like else v for i, v in enumerate(value)]
    elif isinstance(like, dict):
        if isinstance(value, dict):
            return value
    else:
        return value
    raise ConfigError(f"{source}: key '{key}' expects {expected}, got {_shown(value)}")


def _float32(key: str, value: Union[int, float, str], source: str) -> float:
    """`value` as a float that float32 holds (every float setting ends up in float32: inf or 1e39 would train to
    NaN); yaml 1.1 reads 1e-4 (no dot) as a string."""
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (ValueError, OverflowError):  # OverflowError: an integer beyond the float range
        raise ConfigError(f"{source}: key '{key}' expects float, got {_shown(value)}") from None
    if math.isnan(number):
        raise ConfigError(f"{source}: key '{key}' expects float, got {_shown(value)}")
    if abs(number) > FLOAT32_MAX:
        raise ConfigError(f"{source}: key '{key}' must be finite in float32 (at most {FLOAT32_MAX:.4g} in "
                          f"size), got {_shown(value)}")
    return number


def parse_interval(spec: str) -> Tuple[float, float, bool, bool]:
    """(low, high, low included, high included) of an interval such as "[1, inf)"; a malformed one is a bug
    of the shipped yaml, reported as such."""
    match = INTERVAL.match(spec)
    try:
        low, high = float(match[2]), float(match[3])
    except (TypeError, ValueError):
        raise ValueError(f"not an interval like '[1, inf)': {spec!r}") from None
    return low, high, match[1] == "[", match[4] == "]"


def in_interval(value: Any, spec: str) -> bool:
    low, high, low_closed, high_closed = parse_interval(spec)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return False
    return (low <= value if low_closed else low < value) and (value <= high if high_closed else value < high)


# The keys whose choices are names other tools spell otherwise (Google's run_classifier lowercases `--task_name
# MRPC`; HF and GLUE write sst2, stsb; MindSpore's own device names are upper case): only these fold. Elsewhere a
# spelling may mean something else (`share_type None` is no 'none', which unshares every layer).
FOLDED_CHOICES = ("task_name", "device_target", "file_format", "optimizer", "engine")


def spelled_choice(value: Any, allowed: Sequence[Any]) -> Any:
    """The non-empty choice of `allowed` that `value` spells in another case or without its '-' and '_', else
    `value` (for the FOLDED_CHOICES keys)."""
    if not isinstance(value, str) or value in allowed:
        return value
    folded = [choice for choice in allowed if isinstance(choice, str) and choice and _folded(choice) == _folded(value)]
    return folded[0] if len(folded) == 1 else value


def _folded(text: str) -> str:
    return re.sub(r"[-_]", "", text).lower()


def _check_choice(key: str, value: Any, choices: Dict[str, Allowed], source: str) -> Any:
    """`value` (its spelled_choice for FOLDED_CHOICES) if it is one of the key's choices or lies in its interval
    (null always passes an interval: it means 'take the default from elsewhere', e.g. net_cfg keys)."""
    allowed = choices.get(key)
    if isinstance(allowed, str):
        if value is not None and not in_interval(value, allowed):
            raise ConfigError(f"{source}: key '{key}' must be in {allowed.strip()}, got {_shown(value)}")
    elif allowed:
        value = spelled_choice(value, allowed) if key.rsplit(".", 1)[-1] in FOLDED_CHOICES else value
        if value not in allowed:
            raise ConfigError(f"{source}: key '{key}' must be one of {allowed}, got {_shown(value)}")
    return value


# The yamls the project ships beside its scripts: a user's yaml copied from one of them can be named by its keys.
SHIPPED_YAMLS = ("pretrain_config.yaml", "task_classifier_config.yaml", "task_race_config.yaml",
                 "task_squad_v1_config.yaml", "task_squad_v2_config.yaml", "export_config.yaml",
                 "create_data_config.yaml")


# The top keys of a network config json (Google's albert_config.json, HF's config.json, the X.ckpt.json beside a
# checkpoint) that no yaml of ours has at its top: HF's names, or the sizes every network config holds.
HF_CONFIG_KEYS = {"architectures", "model_type"}
NETWORK_SIZE_KEYS = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads"}


def check_not_network_config(path: os.PathLike, values: Dict[str, Any], advice: str) -> None:
    """A network config json passed as --config_path (json is yaml, so it would read as unknown keys, or suggest
    net_cfg.vocab_size) is named as such, with `advice`: where the script takes it, if it does."""
    keys = set(values)
    if keys & HF_CONFIG_KEYS or NETWORK_SIZE_KEYS <= keys:
        raise ConfigError(f"{path} is a network config (ALBERT's config json), not a yaml of this script: {advice}")


def _network_config_advice(values: Dict[str, Any], default_config: os.PathLike) -> str:
    """Where a script with the schema `values` takes a network config json."""
    if "albert_config_file" in values:
        return "pass it as --albert_config_file"
    size = ("; give the network's max_position_embeddings as --max_position_embeddings"
            if "max_position_embeddings" in values else "")
    return f"--config_path takes a yaml like {Path(default_config).name} (this script takes no network config{size})"


def yamls_holding(keys: Iterable[str], files: Iterable[Path]) -> List[Path]:
    """The yaml files among `files` whose values have every one of `keys`."""
    wanted = set(keys)
    return [path for path in files if wanted <= set(flatten(load_yaml_documents(path)[0]))]


def merge_user_yaml(schema: Dict[str, Any], user: Dict[str, Any], choices: Dict[str, Allowed],
                    source: str, shipped: Optional[Path] = None) -> Dict[str, Any]:
    """Overlay a user's yaml values on the schema's, rejecting unknown keys (naming the other SHIPPED_YAMLS beside
    `shipped` that have them all) and wrong types."""
    flat_schema = flatten(schema)
    merged = yaml.safe_load(yaml.safe_dump(schema))  # deep copy of plain data
    sections = {key.rsplit(".", i)[0] for key in flat_schema for i in range(1, key.count(".") + 1)}
    for key, value in flatten(user).items():
        if key in sections:
            if value == {}:
                continue
            raise ConfigError(f"{source}: key '{key}' is a section; set its sub-keys instead")
        if key not in flat_schema:
            unknown = [k for k in flatten(user) if k not in flat_schema and k not in sections]
            others = [shipped.parent / name for name in SHIPPED_YAMLS
                      if name != shipped.name and (shipped.parent / name).is_file()] if shipped else []
            holding = yamls_holding(unknown, others) if len(unknown) > 1 else []
            if holding:
                raise ConfigError(f"{source}: unknown key '{key}' (and {len(unknown) - 1} more): they are keys of "
                                  f"{' or '.join(path.name for path in holding)}, the yaml of another script (this "
                                  f"one's is {shipped.name})")
            unused = _unused_options({**flat_schema, **flatten(user)}, choices)
            booleans = {name for name, default in flat_schema.items() if isinstance(default, bool)}
            hint = suggestion(key, list(flat_schema), unused, booleans=booleans)
            raise ConfigError(f"{source}: unknown key '{key}'{hint}")
        value = _check_choice(key, coerce(key, value, flat_schema[key], source), choices, source)
        _set_dotted(merged, key, value)
    return merged


class ArgumentParser(argparse.ArgumentParser):
    """argparse that raises ConfigError (a one-line UserError) instead of printing usage and calling sys.exit;
    also for the tools whose flags are not a yaml (src.predict, benchmarks, src.convert_checkpoint).

    Values in exponent notation are numbers, not flags: plain argparse takes `--learning_rate -1e-4` for a
    missing value followed by an unknown option `-1e-4`."""

    NEGATIVE_NUMBER = re.compile(r"^-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = self.NEGATIVE_NUMBER  # argparse's own pattern lacks the exponent

    def parse_known_args(self, args: Optional[Sequence[str]] = None, namespace: Any = None) -> Any:
        """argparse's, after refusing a carriage return at the end of an argument: a shell script saved with
        Windows line endings passes `value\r` (was: an output file named `x.mindrecord\r`, or `input file not
        found` for a file that exists)."""
        for arg in sys.argv[1:] if args is None else args:
            if str(arg).endswith("\r"):
                raise ConfigError(f"argument {str(arg)!r} ends in a carriage return (\\r): the script that ran "
                                  f"this command has Windows line endings; convert it to LF (e.g. dos2unix SCRIPT)")
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> None:  # type: ignore[override]
        unknown = re.match(r"unrecognized arguments: (--[^\s=]+)", message)
        if unknown:  # the closest flag, as the yaml-driven command lines suggest it
            flags = [option[2:] for action in self._actions for option in action.option_strings
                     if option.startswith("--")]
            message += suggestion(unknown.group(1)[2:], flags, prefix="--")
        raise ConfigError(message)


def boolean(text: str) -> bool:
    """argparse `type` for true/false flags, with the words the yaml command lines accept."""
    word = text.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return word in TRUE_WORDS


def integer(text: str) -> int:
    """argparse `type` for integer flags: an over-long number is refused in one line (int() would raise past 4300
    digits with a message repeating them all)."""
    problem = _long_integer(text) if INTEGER.fullmatch(text) else None
    if problem:
        raise argparse.ArgumentTypeError(problem)
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {_shown(text)}") from None


def real(text: str) -> float:
    """argparse `type` for float flags: a finite number (nan and inf are refused)."""
    try:
        number = float(text)
    except ValueError:
        number = math.nan
    if not math.isfinite(number):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {_shown(text)}")
    return number


def _describe(key: str, value: Any, helps: Dict[str, str], choices: Dict[str, Allowed]) -> str:
    text = helps.get(key, "")
    if isinstance(choices.get(key), str):
        text += f" (range: {choices[key].strip()})"
    elif key in choices:
        text += f" (choices: {', '.join(map(str, choices[key]))})"
    return f"{text} [default: {value!r}]".strip()


def build_parser(values: Dict[str, Any], helps: Dict[str, str], choices: Dict[str, Allowed],
                 description: str = "", config_path: Optional[str] = None) -> argparse.ArgumentParser:
    parser = ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--config_path", default=config_path, help="yaml file with the values to use")
    parser.add_argument("--verbose", action="store_true",
                        help="show tracebacks on errors, and MindSpore's own warnings (hidden unless GLOG_v is set)")
    for key, value in flatten(values).items():
        metavar = _type_name(value).upper() if value is not None else "VALUE"
        alone = {"nargs": "?", "const": "true"} if isinstance(value, bool) else {}  # `--overwrite` = `--overwrite true`
        parser.add_argument(f"--{key}", dest=key, default=argparse.SUPPRESS, metavar=metavar,
                            help=_describe(key, value, helps, choices), **alone)
    return parser


def parse_cli(default_config: os.PathLike, argv: Optional[Sequence[str]] = None, description: str = "",
              section: Optional[str] = None) -> Config:
    """Values of `default_config`, overlaid by a user's `--config_path` yaml, overlaid by `--key value` options.

    `section` uses one top-level mapping of the yaml as the root (for files that configure several tools).
    The help and choices documents always come from `default_config`.
    """
    argv = list(argv or [])
    values, helps, choices = load_yaml_documents(default_config)
    if section is not None:
        values = values[section]
        helps = {k[len(section) + 1:]: v for k, v in helps.items() if k.startswith(section + ".")}
        choices = {k[len(section) + 1:]: v for k, v in choices.items() if k.startswith(section + ".")}
    pre = ArgumentParser(add_help=False, allow_abbrev=False)
    pre.add_argument("--config_path", default=None)
    known, _ = pre.parse_known_args(argv)
    if known.config_path:
        user_path = Path(known.config_path).expanduser()
        if not user_path.is_absolute():
            user_path = Path.cwd() / user_path
        user_values, _, _ = load_yaml_documents(user_path)
        check_not_network_config(user_path, user_values, _network_config_advice(values, default_config))
        if section is not None and section in user_values and isinstance(user_values[section], dict):
            user_values = user_values[section]
        values = merge_user_yaml(values, user_values, choices, str(user_path), Path(default_config))
    parser = build_parser(values, helps, choices, description, str(default_config))
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        flag = next((a for a in unknown if a.startswith("-")), unknown[0])
        flag = flag.split("=", 1)[0] if flag.startswith("-") else flag  # `--x=True` is the option --x
        name = flag.lstrip("-")
        unused = _unused_options({**flatten(values), **vars(args)}, choices)
        booleans = {key for key, default in flatten(values).items() if isinstance(default, bool)}
        hint = suggestion(name, list(flatten(values)), unused, prefix="--", booleans=booleans)
        raise ConfigError(f"unknown option '{flag}'{hint}"
                          if flag.startswith("-") else f"unexpected argument '{flag}'")
    overrides = {k: v for k, v in vars(args).items() if k not in ("config_path", "verbose")}
    flat = flatten(values)
    for key, raw in overrides.items():
        value = coerce(key, _from_cli(key, raw, flat[key]), flat[key], "command line")
        _set_dotted(values, key, _check_choice(key, value, choices, "command line"))
    for key, value in flatten(values).items():
        _check_choice(key, value, choices, str(default_config))
    return Config(values)


def _from_cli(key: str, raw: str, like: Any) -> Any:
    """Strings typed on the command line; `null`/`none` clears a value that defaults to null."""
    if like is None:
        return _yaml_value(raw, key, "command line") if raw.strip() else raw
    return raw

