"""MindDataset pipelines for every task, reading the MindRecord files written by `src/create_*`.

Each function takes `data`: a MindRecord file, the `--output_file` given to a data creator (its files are found
through `<output_file>.meta.json`), a folder, or a list of these. A folder means the files its .meta.json files
list: one data set, or the parts of one made by `src.create_pretraining_data --num_shards N` on several
processes or machines (read as their union; mixed settings or a missing part are refused, naming the files); a
folder without any .meta.json (data from other tools) means every MindRecord file in it. One numbered file of a
data set (`X.mindrecord0`) means the whole data set, as MindSpore's MindDataset reads it (ModelZoo scripts pass
the first shard); a file named twice is read once. It returns a
batched dataset whose columns come in the order stated in the function's docstring: the order the task networks
take their inputs. Integer columns are cast to int32 and real-valued ones to float32, so data written by other
tools (e.g. int64 records from TF-converted data) works too.

Training pipelines shuffle (`seed` makes the order reproducible: it sets MindSpore's global dataset seed) and
drop the last incomplete batch. Evaluation pipelines keep the order and every row; with `num_shards` > 1 they
pad the data with rows marked `is_real_example` = 0 (SQuAD: `unique_ids` = -1) so that every rank gets the same
number of batches, which collective evaluation needs.

`load_data_meta(data)` returns what the creator recorded about the data (columns, counts, max_seq_length,
tokenizer) and `check_data_meta(meta, vocab_size, max_seq_length)` stops a run whose data does not fit the model.
"""
import contextlib
import json
import os
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from model_utils import json_input
from model_utils.errors import UserError
from src.data import schema
from src.data.mindrecord_io import dealt_order

DataSource = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

# The columns each pipeline reads, in the order the networks take them (src/data/schema.py defines the records).
PRETRAIN_COLUMNS = list(schema.PRETRAINING.names)
CLASSIFIER_TRAIN_COLUMNS = list(schema.CLASSIFIER.without("is_real_example"))
CLASSIFIER_EVAL_COLUMNS = list(schema.CLASSIFIER.names)
SQUAD_TRAIN_COLUMNS = list(schema.SQUAD_TRAIN.names)
SQUAD_EVAL_COLUMNS = list(schema.SQUAD_EVAL.names)
FLOAT_COLUMNS = set(schema.PRETRAINING.float_names)


def _is_mindrecord(path: Path) -> bool:
    stem = path.name.rstrip("0123456789")
    return stem.endswith(".mindrecord") and not path.name.endswith(".db")


def resolve_mindrecord_files(data: DataSource) -> List[str]:
    """The MindRecord files behind `data` (see the module docstring), in a stable order."""
    items = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    if not items:
        raise UserError("no data files given")
    files: List[str] = []
    for item in items:
        path = Path(item).expanduser()
        meta = Path(str(path) + ".meta.json")
        if path.name.endswith(".meta.json") and path.is_file():
            raise UserError(f"{path}: not MindRecord data but the description of a data set: pass "
                            f"{str(path)[:-len('.meta.json')]} (the output_file of src.create_*)")
        if path.is_dir():
            files += _folder_files(path)
        elif meta.is_file():
            files += [str(path.with_name(name)) for name in _read_meta(meta)["files"]]
        elif path.is_file():
            files += _whole_data_set(path)
        elif path.with_name(path.name + "0").is_file() or path.with_name(path.name + "00000").is_file():
            raise UserError(f"{path} was not completely written ({meta.name} does not exist: an interrupted "
                            f"src.create_* run?); make the data again with --overwrite true")
        else:
            raise UserError(f"data not found: {path}")
    missing = [f for f in files if not Path(f).is_file()]
    if missing:
        raise UserError(f"MindRecord file missing: {missing[0]} (incomplete copy of the data?)")
    unique: Dict[str, str] = {}  # each file once, where it first came
    for name in files:
        unique.setdefault(os.path.realpath(name), name)
    return list(unique.values())


def _whole_data_set(path: Path) -> List[str]:
    """The data set one MindRecord file is part of, read whole as MindSpore's MindDataset reads it given that file
    (ModelZoo scripts pass `X.mindrecord0`; reading the file alone evaluated a part of the data as if it were all):
    a numbered file listed in `X.mindrecord.meta.json` (src.create_*) means every file it lists; otherwise every
    shard of a FileWriter(shard_num=N) data set its header names."""
    stem = path.name.rstrip("0123456789")
    meta = path.with_name(stem + ".meta.json")
    if stem != path.name and meta.is_file():
        names = _read_meta(meta)["files"]
        if path.name in names:
            return [str(path.with_name(name)) for name in names]
    return [str(path.with_name(name)) for name in _shard_addresses(path)] or [str(path)]


def _shard_addresses(path: Path) -> List[str]:
    """The file names of the shards a MindRecord file's header lists (its own format: the header's size in 8
    little-endian bytes, then the header as JSON); [] when it lists fewer than two or cannot be read."""
    try:
        with open(path, "rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            header = json.loads(handle.read(size).rstrip(b"\0")) if 0 < size < 1 << 24 else {}
    except (OSError, ValueError):
        return []
    names = header.get("shard_addresses") if isinstance(header, dict) else None
    if not isinstance(names, list) or len(names) < 2 or not all(isinstance(name, str) and name for name in names):
        return []
    return [os.path.basename(name) for name in names]


def data_paths(data: DataSource) -> List[str]:
    """Every file a reader of `data` opens: the MindRecord files, their .db indexes and .meta.json descriptions
    (an output of the same run must never replace one of them)."""
    files = resolve_mindrecord_files(data)
    metas = {f.rstrip("0123456789") + ".meta.json" for f in files}
    return files + [f + ".db" for f in files] + sorted(m for m in metas if os.path.isfile(m))


def _read_meta(path: Path) -> Dict[str, object]:
    try:
        meta = json_input.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not a readable .meta.json ({err})") from None
    files = meta.get("files") if isinstance(meta, dict) else None
    if not isinstance(files, list):
        raise UserError(f"{path}: not a .meta.json of src.create_* (no 'files' list); make the data again")
    for name in files:
        _check_plain_name(name, path)
    return meta


def _check_plain_name(name: object, meta: Path) -> None:
    """A meta lists files beside it: a path (`../x`, `/etc/x`) would make a reader open files elsewhere."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\\" in name \
            or "\0" in name:
        raise UserError(f"{meta}: files entry {name!r} is not a plain file name (a .meta.json lists the data files "
                        f"beside it); make the data again")


def _folder_metas(folder: Path) -> Dict[Path, Dict[str, object]]:
    return {path: _read_meta(path) for path in sorted(folder.glob("*.meta.json"))}


def _folder_files(folder: Path) -> List[str]:
    """A folder's data: the files its .meta.json files list, when there are any (several only as parts of one
    data set, see check_parts); otherwise, data from other tools, every MindRecord file in it."""
    found = sorted(str(p) for p in folder.iterdir() if p.is_file() and _is_mindrecord(p))
    metas = _folder_metas(folder)
    if not metas:
        if not found:
            raise UserError(f"no .mindrecord files in {folder}")
        return found
    check_parts(metas)
    listed = [str(folder / name) for meta in metas.values() for name in meta["files"]]
    stray = sorted(set(found) - set(listed))
    if stray:
        raise UserError(f"{stray[0]} belongs to no data set in {folder} (no .meta.json lists it: left by an "
                        f"interrupted run?); remove it or make its data again")
    return listed


def _settings(meta: Dict[str, object]) -> Dict[str, object]:
    """What must agree for records of two data sets to train as one."""
    tokenizer = {k: v for k, v in dict(meta.get("tokenizer") or {}).items() if k not in ("model_file", "file_sha256")}
    options = {k: v for k, v in dict(meta.get("options") or {}).items() if k not in ("dupe_factor", "random_seed")}
    return {"kind": meta.get("kind"), "max_seq_length": meta.get("max_seq_length"),
            "max_predictions_per_seq": meta.get("max_predictions_per_seq"), "tokenizer": tokenizer,
            **{f"options.{k}": v for k, v in options.items()}, "schema": meta.get("schema")}


def _first_difference(a: Dict[str, object], b: Dict[str, object]) -> str:
    for key in [*a, *(k for k in b if k not in a)]:
        if a.get(key) != b.get(key):
            return f"{key} {a.get(key)} vs {b.get(key)}"
    return ""


def check_parts(metas: Dict[Path, Dict[str, object]]) -> None:
    """Several data sets in one folder train as one only when they are pretraining data made with the same
    settings (sequence length, tokenizer, masking) from different text; the parts of one sharded data set must also
    agree on seed, dupe_factor and input list, and all be there, each once."""
    (first_path, first), *others = metas.items()
    for path, meta in others:
        if "pretraining" != meta.get("kind") or "pretraining" != first.get("kind"):
            raise UserError(f"{first_path.parent} holds several data sets ({first_path.name}, {path.name}); "
                            f"pass one output_file")
        difference = _first_difference(_settings(first), _settings(meta))
        if difference:
            raise UserError(f"{first_path} and {path} were made with different settings ({difference}); "
                            f"keep them in separate folders")
    _check_distinct_text(metas)
    groups: Dict[Tuple[str, int], Dict[int, Path]] = {}
    for path, meta in metas.items():
        part = dict(meta.get("part") or {})
        if part.get("count", 1) > 1:
            group = groups.setdefault((str(part["of"]), int(part["count"])), {})
            if part["index"] in group:
                raise UserError(f"{group[part['index']]} and {path} are both part {part['index']} of {part['of']}")
            for other in group.values():
                difference = _first_difference(_part_identity(metas[other]), _part_identity(meta))
                if difference:
                    raise UserError(f"{other} and {path} are parts of {part['of']} made differently ({difference})")
            group[int(part["index"])] = path
    for (name, count), group in groups.items():
        missing = [k for k in range(count) if k not in group]
        if missing:
            raise UserError(f"{first_path.parent}: part {missing[0]} of {count} of {name} is missing (found parts "
                            f"{sorted(group)}); wait until every part is made, or copy it here")


def _check_distinct_text(metas: Dict[Path, Dict[str, object]]) -> None:
    """Two data sets of one folder made from the same text, not as parts of one: another masking of it, most likely
    the evaluation set beside the training set (the quick start makes them so); read as one, a run trained on its
    evaluation data and pretrain_eval scored on its training data, without a word. The same text: the same input
    file names (the input digest), bytes and documents; data sets whose meta lacks these are not compared."""
    first: Dict[Tuple[object, ...], str] = {}  # the text's identity -> the first data set made from it
    for path, meta in metas.items():
        stats, part = dict(meta.get("stats") or {}), dict(meta.get("part") or {})
        text = (dict(meta.get("input") or {}).get("digest"), stats.get("input_bytes"), stats.get("documents"))
        count = int(part.get("count", 1))
        name = str(part.get("of") or path.name.removesuffix(".meta.json")) + (f" ({count} parts)" if count > 1 else "")
        other = first.setdefault(text, name) if all(text) else name
        if other != name:
            raise UserError(f"{path.parent}: {other} and {name} were made from the same text (the same input files, "
                            f"bytes and documents): one is another masking of the other (an evaluation set?), and "
                            f"read as one a run would train on both; pass one output_file, or keep them in separate "
                            f"folders")


def _part_identity(meta: Dict[str, object]) -> Dict[str, object]:
    options = dict(meta.get("options") or {})
    return {"random_seed": options.get("random_seed"), "dupe_factor": options.get("dupe_factor"),
            "input": meta.get("input")}


def load_data_meta(data: DataSource) -> Dict[str, object]:
    """The `.meta.json` the data creator wrote beside `data` (columns, num_records, max_seq_length, tokenizer).

    `data` is an output_file, one of its files, a folder holding one data set (or the parts of one, then the
    meta describes their union), or a list of these that all belong to one data set. Runners use it with
    `check_data_meta` before building a model.
    """
    items = [data] if isinstance(data, (str, os.PathLike)) else list(data)
    metas: Dict[Path, Dict[str, object]] = {}
    for item in items:
        path = Path(item).expanduser()
        if path.is_dir():
            found = sorted(path.glob("*.meta.json"))
        else:  # the output_file itself, or one of its numbered files
            found = [c for c in (Path(f"{path}.meta.json"), Path(str(path).rstrip("0123456789") + ".meta.json"))
                     if c.is_file()][:1]
        if not found:
            raise UserError(f"no .meta.json found for {path}: was it written by src/create_*.py?")
        metas.update((f, _read_meta(f)) for f in found)
    if len(metas) == 1:
        return next(iter(metas.values()))
    check_parts(metas)
    first = next(iter(metas.values()))
    union = {k: v for k, v in first.items() if k not in ("files", "num_records", "stats", "part", "input")}
    return dict(union, files=[name for meta in metas.values() for name in meta["files"]],
                num_records=sum(int(meta["num_records"]) for meta in metas.values()),
                data_sets=[str(path) for path in metas])


def check_data_meta(meta: Dict[str, object], vocab_size: Optional[int] = None,
                    max_seq_length: Optional[int] = None) -> None:
    """Fail early, naming both numbers, when data and model disagree (a wrong vocabulary or sequence length
    otherwise surfaces as an index error deep inside a training step)."""
    data_vocab = meta.get("tokenizer", {}).get("vocab_size")
    if vocab_size is not None and data_vocab is not None and data_vocab > vocab_size:
        raise UserError(f"the data was tokenized with a {data_vocab}-token vocabulary "
                        f"({meta['tokenizer'].get('model_file')}) but the model has vocab_size {vocab_size}")
    if max_seq_length is not None and meta.get("max_seq_length") not in (None, max_seq_length):
        raise UserError(f"the data has max_seq_length {meta['max_seq_length']} but the model config says "
                        f"{max_seq_length}; recreate the data or change the config")


def _has_mindrecord_header(path: str) -> bool:
    """A MindRecord file starts with its JSON header's length (8 bytes, little-endian) and then the header: tells a
    tsv, json or text file given as data from a damaged MindRecord file."""
    with open(path, "rb") as handle:
        start = handle.read(9)
    length = int.from_bytes(start[:8], "little")
    return len(start) == 9 and start[8:] == b"{" and 0 < length < os.path.getsize(path)


@contextlib.contextmanager
def _reading(files: List[str]) -> Iterator[None]:
    """MindSpore reports an empty, truncated or foreign MindRecord file as a multi-line RuntimeError that buries
    the file's name; inside this block it becomes a one-line error naming the file."""
    empty = [f for f in files if os.path.getsize(f) == 0]
    if empty:
        raise UserError(f"{empty[0]}: empty file, not MindRecord data; make the data again")
    foreign = [f for f in files if not _has_mindrecord_header(f)]
    if foreign:
        raise UserError(f"{foreign[0]}: not MindRecord data; make it with src.create_finetune_data (GLUE tsv, RACE), "
                        f"src.create_squad_data (SQuAD json) or src.create_pretraining_data (text)")
    unindexed = [f for f in files if not os.path.isfile(f + ".db")]
    if unindexed:
        raise UserError(f"{unindexed[0]}: its index file {os.path.basename(unindexed[0])}.db is missing (not "
                        f"completely written or copied: an interrupted src.create_* run?)")
    try:
        yield
    except RuntimeError as err:
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        reason = next((line[len("[ERROR]"):].strip() for line in lines if line.startswith("[ERROR]")),
                      lines[0] if lines else type(err).__name__)
        where = files[0] + (f" (one of {len(files)} files)" if len(files) > 1 else "")
        raise UserError(f"{where}: not readable MindRecord data: {reason}") from err


def _mind_dataset(files: List[str], **kwargs):
    """ds.MindDataset with its header read at once, so that a damaged file is reported here, by name, rather than
    inside the first training step."""
    import mindspore.dataset as ds

    with _reading(files):
        dataset = ds.MindDataset(files, **kwargs)
        dataset.get_col_names()
    return dataset


def _open(files: List[str], columns: List[str], **kwargs):
    found = _mind_dataset(files, shuffle=False).get_col_names()
    missing = [c for c in columns if c not in found]
    if missing:
        raise UserError(f"{files[0]}: columns {missing} missing (found {found}); was it written for this task?")
    return _mind_dataset(files, columns_list=columns, **kwargs)


def _finish(dataset, columns: List[str], float_columns: Sequence[str], batch_size: int, drop_remainder: bool,
            num_parallel_workers: int):
    import mindspore as ms
    import mindspore.dataset.transforms as transforms

    for column in columns:
        dtype = ms.float32 if column in float_columns else ms.int32
        dataset = dataset.map(operations=transforms.TypeCast(dtype), input_columns=[column],
                              num_parallel_workers=num_parallel_workers)
    return dataset.batch(batch_size, drop_remainder=drop_remainder)


def _num_rows(files: List[str]) -> int:
    return _mind_dataset(files, shuffle=False).get_dataset_size()


def count_rows(data: DataSource) -> int:
    """Number of records behind `data` (every shard counted)."""
    return _num_rows(resolve_mindrecord_files(data))


def _rows_of_several_epochs(files: List[str], indices: Sequence[int]) -> Tuple[List[str], np.ndarray]:
    """MindDataset's SubsetSampler takes at most as many indices as the files hold rows, but one dataset for a
    whole run reads each row once per epoch. The files are therefore listed once per `rows` indices (MindDataset
    numbers the rows of a repeated file anew) and the i-th index points into copy i // rows."""
    indices = np.asarray(indices, np.int64)
    rows = _num_rows(files)
    copies = max(-(-len(indices) // rows), 1)
    return files * copies, indices + rows * (np.arange(len(indices), dtype=np.int64) // rows)


def _build(data: DataSource, columns: List[str], batch_size: int, is_training: bool, num_shards: int, shard_id: int,
           shuffle: Optional[bool], seed: Optional[int], drop_remainder: Optional[bool],
           num_parallel_workers: int, float_columns: Sequence[str] = (), indices: Optional[Sequence[int]] = None):
    import mindspore.dataset as ds

    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    if num_shards < 1 or not 0 <= shard_id < num_shards:
        raise UserError(f"shard_id must be in [0, num_shards), got shard_id={shard_id}, num_shards={num_shards}")
    files = resolve_mindrecord_files(data)
    shuffle = is_training if shuffle is None else shuffle
    drop_remainder = is_training if drop_remainder is None else drop_remainder
    if seed is not None:
        ds.config.set_seed(seed)
    kwargs = dict(shuffle=shuffle, num_parallel_workers=num_parallel_workers)
    if indices is None and num_shards > 1 and not is_training:
        # Evaluation shards as the fine-tuning driver splits rows: every row in exactly one shard, none repeated
        # (MindDataset's own sharding repeats rows to even the shards out, which would bias metrics).
        indices = np.arange(_num_rows(files))[shard_id::num_shards]
    if indices is not None:  # a run's own rows in order (src/training/step_plan.py), or an evaluation shard's
        files, indices = _rows_of_several_epochs(files, indices)
        kwargs = dict(sampler=ds.SubsetSampler(indices), num_parallel_workers=num_parallel_workers)
    elif num_shards > 1:
        kwargs.update(num_shards=num_shards, shard_id=shard_id)
    dataset = _open(files, columns, **kwargs)
    return _finish(dataset, columns, float_columns, batch_size, drop_remainder, num_parallel_workers)


def create_pretraining_dataset(data: DataSource, batch_size: int, num_shards: int = 1, shard_id: int = 0,
                               shuffle: bool = True, seed: Optional[int] = None, drop_remainder: bool = True,
                               num_parallel_workers: int = 2, indices: Optional[Sequence[int]] = None):
    """Pretraining batches; columns: input_ids, input_mask, segment_ids, next_sentence_labels,
    masked_lm_positions, masked_lm_ids (int32), masked_lm_weights (float32).

    `indices` reads exactly these rows in this order (global row numbers over the files in their resolved
    order) instead of shuffling and sharding: how a training run resumes mid-epoch on every rank.
    """
    return _build(data, PRETRAIN_COLUMNS, batch_size, True, num_shards, shard_id, shuffle, seed, drop_remainder,
                  num_parallel_workers, float_columns=FLOAT_COLUMNS, indices=indices)


def create_classification_dataset(data: DataSource, batch_size: int, is_training: bool = True,
                                  num_shards: int = 1, shard_id: int = 0, shuffle: Optional[bool] = None,
                                  seed: Optional[int] = None, drop_remainder: Optional[bool] = None,
                                  regression: bool = False, num_parallel_workers: int = 2,
                                  indices: Optional[Sequence[int]] = None):
    """GLUE/LCQMC batches; columns: input_ids, input_mask, segment_ids, label_ids (float32 when `regression`,
    i.e. STS-B), and for evaluation (is_training False) also is_real_example. `indices`: as in
    create_pretraining_dataset (every task's pipeline takes it)."""
    columns = CLASSIFIER_TRAIN_COLUMNS if is_training else CLASSIFIER_EVAL_COLUMNS
    return _build(data, columns, batch_size, is_training, num_shards, shard_id, shuffle, seed, drop_remainder,
                  num_parallel_workers, float_columns=["label_ids"] if regression else [], indices=indices)


def create_race_dataset(data: DataSource, batch_size: int, is_training: bool = True, num_shards: int = 1,
                        shard_id: int = 0, shuffle: Optional[bool] = None, seed: Optional[int] = None,
                        drop_remainder: Optional[bool] = None, num_parallel_workers: int = 2,
                        indices: Optional[Sequence[int]] = None):
    """RACE batches; columns: input_ids, input_mask, segment_ids ([batch, 4, seq]), label_ids, and for
    evaluation also is_real_example."""
    columns = CLASSIFIER_TRAIN_COLUMNS if is_training else CLASSIFIER_EVAL_COLUMNS
    return _build(data, columns, batch_size, is_training, num_shards, shard_id, shuffle, seed, drop_remainder,
                  num_parallel_workers, indices=indices)


def create_squad_dataset(data: DataSource, batch_size: int, is_training: bool = True, num_shards: int = 1,
                         shard_id: int = 0, shuffle: Optional[bool] = None, seed: Optional[int] = None,
                         drop_remainder: Optional[bool] = None, num_parallel_workers: int = 2,
                         indices: Optional[Sequence[int]] = None):
    """SQuAD batches. Training columns: input_ids, input_mask, segment_ids, p_mask, start_positions,
    end_positions, is_impossible. Evaluation columns: input_ids, input_mask, segment_ids, p_mask, unique_ids."""
    columns = SQUAD_TRAIN_COLUMNS if is_training else SQUAD_EVAL_COLUMNS
    return _build(data, columns, batch_size, is_training, num_shards, shard_id, shuffle, seed, drop_remainder,
                  num_parallel_workers, indices=indices)


def creation_order(data: DataSource) -> Tuple[np.ndarray, bool]:
    """(the global row numbers, over the files in their resolved order, in the order the src.create_* tool wrote
    the records, whether that order is known): the k-th example of the input is row `order[k]`. A data set of
    partition_number N > 1 was dealt round-robin to N files, which MindDataset reads one after the other;
    evaluation and prediction read in this order, so that predictions.tsv's row k is the input's example k (was:
    row 1 held example N's prediction). Data of earlier versions, whose .meta.json does not say N, is recognised
    by its numbered first file and its files' row counts; where several N fit them, or the files are named in
    another order than the meta's, or there is no meta, the order is file order and not known."""
    files = resolve_mindrecord_files(data)
    counts = [_num_rows([name]) for name in files]
    in_file_order = np.arange(sum(counts))
    if len(files) == 1:
        return in_file_order, True
    try:
        meta = load_data_meta(files)
    except UserError:  # shards of ModelZoo's FileWriter: no meta, file order
        return in_file_order, False
    if meta.get("kind") == "pretraining" or [os.path.basename(name) for name in files] != meta.get("files"):
        return in_file_order, False
    if meta.get("partition_number"):
        fits = [int(meta["partition_number"])]
    elif files[0].endswith("0"):  # X.mindrecord0: written in partitions (one partition names its file X)
        fits = [n for n in range(2, len(files) + 1) if dealt_order(counts, n) is not None]
    else:
        fits = [1]
    order = dealt_order(counts, fits[0]) if len(fits) == 1 else None
    return (in_file_order, False) if order is None else (order, True)


def read_column(data: DataSource, column: str) -> np.ndarray:
    """One column of every row, in the global row order that `indices` refers to (file order; `creation_order`
    maps it to the input's order)."""
    files = resolve_mindrecord_files(data)
    dataset = _open(files, [column], shuffle=False)
    return np.stack([row[0] for row in dataset.create_tuple_iterator(output_numpy=True, num_epochs=1)])


def read_column_as_made(data: DataSource, column: str) -> np.ndarray:
    """read_column in creation order: the order of evaluation's and prediction's outputs (labels to score them by,
    SQuAD's unique_ids to match them to features)."""
    return read_column(data, column)[creation_order(data)[0]]


def rows_fingerprint(data: DataSource, samples: int = 32) -> str:
    """A short digest of `samples` rows spread evenly over the data (every column, in file order): another data set
    of the same size differs in them (other text, masking, tokenizer or task), while the same rows copied or moved
    elsewhere do not. What a resumed run checks its data by, in a fraction of a second at any size."""
    import hashlib

    import mindspore.dataset as ds

    files = resolve_mindrecord_files(data)
    total = _num_rows(files)
    picked = sorted({int(index) for index in np.linspace(0, total - 1, min(samples, total))})
    digest = hashlib.sha256(str(total).encode("ascii"))
    with _reading(files):
        dataset = _mind_dataset(files, sampler=ds.SubsetSampler(picked))
        names = dataset.get_col_names()
        for row in dataset.create_tuple_iterator(output_numpy=True, num_epochs=1):
            for name, value in sorted(zip(names, row)):
                digest.update(f"{name}{value.dtype.str}{value.shape}".encode("ascii"))
                digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()[:16]


def read_rows(data: DataSource, columns: Sequence[str], limit: int) -> Dict[str, np.ndarray]:
    """The first `limit` rows of `columns`, in file order, each column stacked: a sample of real inputs read
    without building a pipeline (the calibration of an int8 export). Data without a row is refused."""
    files = resolve_mindrecord_files(data)
    with _reading(files):
        rows = list(_open(files, list(columns), shuffle=False).take(limit).create_tuple_iterator(
            output_numpy=True, num_epochs=1))
    if not rows:
        raise UserError(f"{files[0]}: holds no rows")
    return {column: np.stack([row[index] for row in rows]) for index, column in enumerate(columns)}


def check_schema(data: DataSource, schema_file: str, columns: Sequence[str] = PRETRAIN_COLUMNS) -> Tuple[int, ...]:
    """Check that `data` holds `columns` (and, when `schema_file` is set, exactly the columns, kinds and shapes of
    that ModelZoo-style schema json: {"columns": {name: {"type": "int64", "shape": [128]}}}, where shape [1] also
    fits a scalar column, as ModelZoo BERT's schema gives its labels); returns the shape of the first column's rows
    (e.g. (max_seq_length,) for input_ids)."""
    files = resolve_mindrecord_files(data)
    found = _mind_dataset(files, shuffle=False)
    names = found.get_col_names()
    with _reading(files):  # the first row is read here
        shapes = dict(zip(names, (tuple(s) for s in found.output_shapes())))
        kinds = dict(zip(names, ("float" if np.dtype(t).kind == "f" else "int" for t in found.output_types())))
    missing = [c for c in columns if c not in names]
    if missing:
        raise UserError(f"{files[0]}: columns {missing} missing (found {names}); was it written for this task?")
    if schema_file:
        try:
            with open(schema_file, encoding="utf-8") as handle:
                expected = json.load(handle)["columns"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(f"schema_dir {schema_file}: not a schema json with a 'columns' object ({err})") from None
        for name, spec in expected.items():
            want_kind = "float" if str(spec.get("type", "")).startswith("float") else "int"
            want_shape = tuple(spec.get("shape", ()))
            if name not in shapes:
                raise UserError(f"{files[0]}: column '{name}' of schema {schema_file} is not in the data")
            if kinds[name] != want_kind or (want_shape and shapes[name] != want_shape
                                            and not (want_shape == (1,) and shapes[name] == ())):
                raise UserError(f"{files[0]}: column '{name}' is {kinds[name]} {list(shapes[name])} but schema "
                                f"{schema_file} says {spec.get('type')} {list(want_shape)}")
    return shapes[columns[0]]
