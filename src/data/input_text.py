"""Helpers shared by the data creators: input files, strict tsv/json reading, tokenizer from flags, packing
of `[CLS] a [SEP] b [SEP]` sequences.

Reading is strict on purpose: a malformed row is reported with its file and line instead of being skipped,
because a silently shorter data set is discovered only after a wasted fine-tuning run.
"""
import csv
import errno
import glob
import json
import os
import re
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from model_utils import json_input
from model_utils.config import Config, parse_cli
from model_utils.errors import UserError, utf16_hint
from src.common.run_log import LOGS_FOLDER
from src.data.tokenization import FullTokenizer

CONFIG_FILE = Path(__file__).resolve().parents[2] / "create_data_config.yaml"
MINDRECORD_FREE_MB = 10  # MindRecord's writer stops when less than this is free on the disk (its kMinFreeDiskSize)


def parse_tool_config(argv: Sequence[str], section: str, description: str) -> Config:
    """The tool's section of create_data_config.yaml, overridden by --config_path and --flags; a max_seq_length the
    network cannot take stops here, before any input is read."""
    config = parse_cli(CONFIG_FILE, argv, description, section=section)
    if "max_position_embeddings" in config:
        check_max_seq_length(config.max_seq_length, config.max_position_embeddings)
    return config


def not_utf8(path: os.PathLike, err: UnicodeDecodeError) -> UserError:
    """The file and line of the first bytes that are not UTF-8 (the decoder's own offset counts within the chunk it
    was given, not the file), found by reading the file again line by line."""
    with open(path, "rb") as handle:
        for line_no, line in enumerate(handle, start=1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as bad:
                return UserError(f"{path} line {line_no}: not UTF-8 text ({bad.reason} at byte {bad.start} of the "
                                 f"line){utf16_hint(line)}")
    return UserError(f"{path}: not UTF-8 text ({err.reason})")


def _first_bytes(path: Path) -> bytes:
    """The start of a file, enough to tell UTF-16 by (utf16_hint)."""
    with open(path, "rb") as handle:
        return handle.read(4096)


@contextmanager
def full_disk_reported(output_file: Path, needed_bytes: int) -> Iterator[None]:
    """A full disk while the data is written: ENOSPC from a write of ours (OSError), or MindRecord's writer refusing
    to go on with less than MINDRECORD_FREE_MB free (a RuntimeError with its C++ call stack). Either becomes one
    line naming the output, the space free and about how much the data needs; the RecordWriter inside has removed
    what it staged by then, so the output folder is as it was."""
    try:
        yield
    except (OSError, RuntimeError) as err:
        if getattr(err, "errno", None) != errno.ENOSPC and "No free disk" not in str(err):
            raise
        folder = next(p for p in (output_file.parent, *output_file.parent.parents) if p.exists())
        raise UserError(f"no space left on the disk for {output_file}: {_size(shutil.disk_usage(folder).free)} free in "
                        f"{folder}, the data needs about {_size(needed_bytes)} and MindRecord's writer stops with "
                        f"less than {MINDRECORD_FREE_MB} MB free; free some space or choose another output_file") \
            from None


def _size(count: int) -> str:
    return f"{count / 1e6:.1f} MB" if count >= 100_000 else f"{count / 1e3:.0f} kB"


def resolve_input_files(spec: str) -> List[Path]:
    """Comma-separated files, glob patterns and folders -> sorted unique files (sorted so runs are reproducible).

    A folder stands for every file below it, recursively (WikiExtractor writes AA/wiki_00 ... ZZ/wiki_99), less
    hidden files and folders and the files our own data tools write (`*.mindrecord*`, `*.db`, `*.meta.json`).
    """
    patterns = [p.strip() for p in str(spec or "").split(",") if p.strip()]
    if not patterns:
        raise UserError("no input_file given")
    files = set()
    for pattern in patterns:
        matches = [Path(m) for m in glob.glob(os.path.expanduser(pattern), recursive=True)]
        found = [f for m in matches for f in ([m] if m.is_file() else _folder_files(m) if m.is_dir() else [])]
        if not found:
            what = "no input file in the folder" if any(m.is_dir() for m in matches) else "nothing matches"
            raise UserError(f"input_file: {what} {pattern!r}")
        files.update(f.resolve() for f in found)
    return sorted(files)


def _folder_files(folder: Path) -> List[Path]:
    """Files below `folder` that can be corpus text (see resolve_input_files)."""
    found = []
    for root, folders, names in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        logs = Path(root).name == LOGS_FOLDER
        found += [Path(root) / name for name in sorted(names) if not _skipped_in_folder(name, logs)]
    return found


def _skipped_in_folder(name: str, in_logs: bool) -> bool:
    """The files our own tools write beside their outputs: data, indexes, descriptions, and logs/*.log."""
    return name.startswith(".") or name.endswith((".db", ".meta.json")) or ".mindrecord" in name or \
        (in_logs and name.endswith(".log"))


def tokenizer_from_config(config: Any) -> FullTokenizer:
    """FullTokenizer from the `vocab_file` / `spm_model_file` / `do_lower_case` flags every creator has."""
    if not config.spm_model_file and not config.vocab_file:
        raise UserError("set --spm_model_file (SentencePiece, English ALBERT) or --vocab_file (WordPiece, albert_zh)")
    return FullTokenizer(config.vocab_file or None, do_lower_case=config.do_lower_case,
                         spm_model_file=config.spm_model_file or None)


def read_tsv(path: os.PathLike) -> Iterator[Tuple[int, List[str]]]:
    """(line number, fields) of a tab-separated file; a UTF-8 BOM is dropped, quotes are literal text (GLUE)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"input file not found: {path}")
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            for line_no, fields in enumerate(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE), start=1):
                if fields and any(f.strip() for f in fields):
                    _check_tsv_fields(path, line_no, fields)
                    yield line_no, fields
    except UnicodeDecodeError as err:
        raise not_utf8(path, err) from err
    except csv.Error as err:
        raise UserError(f"{path}: malformed tsv ({err})") from err


CSV_QUOTED = re.compile(r'^".*"".*"$', re.S)  # a field as Excel or pandas quote it: in quotes, its quotes doubled


def _check_tsv_fields(path: Path, line_no: int, fields: List[str]) -> None:
    """GLUE's files are not quoted (a quote is text), so a TSV saved by Excel or pandas, which wrap a field holding
    quotes in quotes and double those, would be read with its quoting as text (was: silently); and a row of NUL
    characters every other character is UTF-16 text without its byte-order mark (a stray NUL passes: the tokenizer
    drops it)."""
    if "".join(fields).count("\x00") * 4 > sum(map(len, fields)):  # Latin UTF-16 without its byte-order mark
        raise UserError(f"{path} line {line_no}: NUL characters in the text{utf16_hint(_first_bytes(path))}")
    quoted = next((number for number, field in enumerate(fields, 1) if CSV_QUOTED.match(field)), 0)
    if quoted:
        raise UserError(f"{path} line {line_no}: field {quoted} is quoted as Excel or pandas quote it (in quotes, its "
                        f"quotes doubled), but GLUE's tsv files are not quoted: save it without quoting (pandas: "
                        f"quoting=csv.QUOTE_NONE)")


def load_json(path: os.PathLike, what: str = "input file") -> Any:
    """json.load with errors that name the file (as `what` when it is missing) and the line."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{what} not found: {path}")
    if path.stat().st_size == 0:
        raise UserError(f"{path}: empty file, expected json")
    try:
        with open(path, encoding="utf-8-sig") as handle:
            return json_input.load(handle)
    except json.JSONDecodeError as err:
        raise UserError(f"{path} line {err.lineno}: malformed json ({err.msg}){utf16_hint(_first_bytes(path))}") \
            from err
    except UnicodeDecodeError as err:
        raise not_utf8(path, err) from err


def require(mapping: Any, key: str, kind: Union[type, Tuple[type, ...]], where: str) -> Any:
    """mapping[key] checked for presence and type, failing with `where` (file and item) in the message."""
    if not isinstance(mapping, dict):
        raise UserError(f"{where}: expected an object with field '{key}', got {type(mapping).__name__}")
    if key not in mapping:
        raise UserError(f"{where}: missing field '{key}'")
    value = mapping[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        names = " or ".join(k.__name__ for k in kinds)
        raise UserError(f"{where}: field '{key}' should be {names}, got {type(value).__name__}")
    return value


def pack_pair(tokenizer: FullTokenizer, ids_a: Sequence[int], ids_b: Optional[Sequence[int]],
              max_seq_length: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`[CLS] a [SEP] (b [SEP])` padded to max_seq_length -> (input_ids, input_mask, segment_ids), int32.

    The caller truncates first; a sequence that does not fit is a programming error.
    """
    ids = [tokenizer.cls_id, *ids_a, tokenizer.sep_id]
    segments = [0] * len(ids)
    if ids_b is not None:
        ids += [*ids_b, tokenizer.sep_id]
        segments += [1] * (len(ids_b) + 1)
    if len(ids) > max_seq_length:
        raise ValueError(f"sequence of {len(ids)} tokens exceeds max_seq_length {max_seq_length}")
    input_ids = np.full(max_seq_length, tokenizer.pad_id, dtype=np.int32)
    input_ids[:len(ids)] = ids
    input_mask = np.zeros(max_seq_length, dtype=np.int32)
    input_mask[:len(ids)] = 1
    segment_ids = np.zeros(max_seq_length, dtype=np.int32)
    segment_ids[:len(segments)] = segments
    return input_ids, input_mask, segment_ids


def truncate_pair_from_end(ids_a: List[int], ids_b: List[int], max_tokens: int) -> None:
    """Shorten the longer of the two lists, one token at a time from its end (Google's classifier rule)."""
    while len(ids_a) + len(ids_b) > max_tokens:
        (ids_a if len(ids_a) > len(ids_b) else ids_b).pop()


def check_max_seq_length(max_seq_length: int, max_position_embeddings: Optional[int] = None, minimum: int = 8) -> None:
    """Shorter than `minimum`, a sequence holds no pair; longer than the network's position table
    (`max_position_embeddings`, 512 in every published ALBERT), no network can take the data made with it."""
    if max_seq_length < minimum:
        raise UserError(f"max_seq_length must be at least {minimum}, got {max_seq_length}")
    if max_position_embeddings is not None and max_seq_length > max_position_embeddings:
        raise UserError(f"max_seq_length {max_seq_length} exceeds max_position_embeddings {max_position_embeddings} "
                        f"(the network's position table, 512 in every published ALBERT): lower max_seq_length, or "
                        f"set --max_position_embeddings for a network pretrained with a longer table")
