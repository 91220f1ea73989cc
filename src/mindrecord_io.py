"""Writing MindRecord outputs so that an interrupted run leaves nothing that looks complete.

Every data creator writes through `write_records`: the shards, their `.db` index files and any sidecar files
(e.g. SQuAD's feature map) are written into a hidden temporary folder beside the output, moved into place only
after `FileWriter.commit()`, and `<output_file>.meta.json` is written last. A reader that finds the meta file
therefore finds complete data, and the meta file says what the data is (columns, counts, sequence length,
tokenizer), so training scripts can check it against their model config.

Output naming: `--output_file DIR/train.mindrecord` with `partition_number` 1 writes `DIR/train.mindrecord`;
with N > 1 it writes `DIR/train.mindrecord0` .. `DIR/train.mindrecord{N-1}` (MindSpore's naming), each a
self-contained MindRecord file holding every N-th record, so that data-parallel ranks can read disjoint files.
"""
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Tuple, Union

import numpy as np

from model_utils.errors import UserError
from src.data_utils import default_file_mode, refuse_existing

META_SUFFIX = ".meta.json"
WRITE_BATCH = 2048


def shard_paths(output_file: os.PathLike, partition_number: int) -> List[Path]:
    """The MindRecord files FileWriter creates for `output_file` (without their `.db` indexes)."""
    output_file = Path(output_file)
    if partition_number == 1:
        return [output_file]
    return [output_file.with_name(f"{output_file.name}{i}") for i in range(partition_number)]


def meta_path(output_file: os.PathLike) -> Path:
    return Path(str(output_file) + META_SUFFIX)


def _all_outputs(output_file: Path, partition_number: int, sidecars: Iterable[str]) -> List[Path]:
    paths = []
    for shard in shard_paths(output_file, partition_number):
        paths += [shard, Path(str(shard) + ".db")]
    paths += [Path(str(output_file) + suffix) for suffix in sidecars]
    return paths + [meta_path(output_file)]


def check_output_free(output_file: os.PathLike, partition_number: int = 1, overwrite: bool = False,
                      sidecars: Iterable[str] = ()) -> None:
    """Fail early, before any work, when an output exists and `overwrite` was not asked for."""
    if partition_number < 1:
        raise UserError(f"partition_number must be >= 1, got {partition_number}")
    output_file = Path(output_file)
    if not output_file.name:
        raise UserError("output_file must name a file, e.g. data/train.mindrecord")
    if output_file.is_dir():
        raise UserError(f"output_file {output_file} is a directory; name a file inside it, "
                        f"e.g. {output_file / 'train.mindrecord'}")
    outputs = _all_outputs(output_file, partition_number, sidecars)
    if not overwrite and not outputs[-1].exists() and any(path.exists() for path in outputs):
        found = next(path for path in outputs if path.exists())
        raise UserError(f"{found} was left by an interrupted run (there is no {outputs[-1].name}); pass --overwrite "
                        f"true to write the data again")
    refuse_existing(outputs, overwrite)


class ColumnTable:
    """Rows kept as one array per column: cheap to slice into shards and to hand to writer processes."""

    def __init__(self, columns: Dict[str, np.ndarray]):
        self.columns = columns

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __getitem__(self, index: slice) -> "ColumnTable":
        return ColumnTable({name: array[index] for name, array in self.columns.items()})

    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]:
        for i in range(len(self)):
            yield {name: array[i] for name, array in self.columns.items()}


def write_records(output_file: os.PathLike, schema: Dict[str, Dict[str, Any]],
                  records: Union[Iterable[Mapping[str, Any]], ColumnTable], meta: Dict[str, Any],
                  partition_number: int = 1, overwrite: bool = False,
                  sidecars: Optional[Dict[str, Callable[[Path], None]]] = None, description: str = "",
                  num_workers: int = 1) -> Dict[str, Any]:
    """Write `records` as MindRecord shards plus sidecars, atomically; returns the meta dict written.

    `sidecars` maps a file suffix (".features.jsonl") to a function that writes that file at the given path.
    `meta` is completed with the file names, the number of records and the schema. A ColumnTable written to
    several shards with `num_workers` > 1 is written by that many processes at once (the files are the same).
    """
    sidecars = sidecars or {}
    output_file = Path(output_file).absolute()
    check_output_free(output_file, partition_number, overwrite, sidecars)
    output_file.parent.mkdir(parents=True, exist_ok=True)
    for stale in output_file.parent.glob(f".{output_file.name}.tmp-*"):  # left by a killed run
        shutil.rmtree(stale, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_file.name}.tmp-", dir=output_file.parent))
    try:
        paths = [staging / p.name for p in shard_paths(output_file, partition_number)]
        description = description or output_file.stem
        if isinstance(records, ColumnTable) and num_workers > 1 and partition_number > 1 and _can_fork():
            count = _write_shards_in_processes(paths, schema, records, description, num_workers)
        else:
            count = _write_shards(paths, schema, records, description)
        if count == 0:
            raise UserError(f"no records to write to {output_file}")
        for suffix, write in sidecars.items():
            write(staging / (output_file.name + suffix))
        meta = dict(meta, files=[p.name for p in shard_paths(output_file, partition_number)],
                    num_records=count, schema=schema)
        _publish(staging, output_file, partition_number, list(sidecars), meta, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return meta


def _can_fork() -> bool:
    """Writer processes are forked (they inherit the rows without copying); a process that has loaded MindSpore
    (and its threads) must not fork, so it writes the shards itself."""
    return sys.platform.startswith("linux") and "mindspore" not in sys.modules


# The table the forked writer processes read their shards from (set just before the pool forks).
_SHARED_TABLE: Optional[ColumnTable] = None


def _write_shard_of_shared_table(args: Tuple[int, int, Path, Dict[str, Dict[str, Any]], str]) -> int:
    shard, num_shards, path, schema, description = args
    return _write_shards([path], schema, _SHARED_TABLE[shard::num_shards], description)


def _write_shards_in_processes(paths: List[Path], schema: Dict[str, Dict[str, Any]], table: ColumnTable,
                               description: str, num_workers: int) -> int:
    """Shard k holds rows k, k+N, ... exactly as `_write_shards` deals them, written by a pool of processes."""
    global _SHARED_TABLE
    _SHARED_TABLE = table
    try:
        jobs = [(k, len(paths), path, schema, description) for k, path in enumerate(paths)]
        with multiprocessing.get_context("fork").Pool(min(num_workers, len(paths))) as pool:
            return sum(pool.map(_write_shard_of_shared_table, jobs))
    finally:
        _SHARED_TABLE = None


def _write_shards(paths: List[Path], schema: Dict[str, Dict[str, Any]], records: Iterable[Mapping[str, Any]],
                  description: str) -> int:
    """Deal records round-robin to one single-file writer per shard; returns the number written.

    FileWriter(shard_num=N) spreads records over its shards in an order that varies from run to run, so
    shards are written as independent files here to keep every file's content reproducible.
    """
    from mindspore.mindrecord import FileWriter  # deferred: importing MindSpore costs seconds

    writers = []
    for path in paths:
        writer = FileWriter(str(path), shard_num=1)
        writer.add_schema(schema, description)
        _cache_schema_lookups(writer)
        writers.append(writer)
    batches: List[List[Mapping[str, Any]]] = [[] for _ in paths]
    count = 0
    for record in records:
        batch = batches[count % len(paths)]
        batch.append(record)
        count += 1
        if len(batch) == WRITE_BATCH:
            writers[(count - 1) % len(paths)].write_raw_data(batch)
            batch.clear()
    if count == 0:
        return 0  # nothing committed; the caller reports the empty output
    for writer, batch in zip(writers, batches):
        if batch:
            writer.write_raw_data(batch)
        writer.commit()
    return count


def _cache_schema_lookups(writer: Any) -> None:
    """Answer the writer's schema lookups from a copy, which makes writing about 2x faster.

    MindSpore 2.10's FileWriter asks its C++ header for the schema (decoded from JSON anew each time) for every
    field of every row it writes; that, not the disk, dominates writing time. The schema cannot change after
    `add_schema`, so a copy is exact. Writers whose internals differ are left alone.
    """
    header = getattr(writer, "_header", None)
    header_class = type(header)
    if header is None or not all(isinstance(getattr(header_class, name, None), property)
                                 for name in ("schema", "blob_fields")):
        return
    schema, blob_fields = header.schema, header.blob_fields
    header.__class__ = type("SchemaCachedHeader", (header_class,), {
        "schema": property(lambda self: schema), "blob_fields": property(lambda self: blob_fields)})


def _publish(staging: Path, output_file: Path, partition_number: int, sidecars: List[str],
             meta: Dict[str, Any], overwrite: bool) -> None:
    """Move the staged files into place; the meta file goes last, so its presence means the data is complete."""
    final_meta = meta_path(output_file)
    if overwrite:
        for path in [final_meta] + _all_outputs(output_file, partition_number, sidecars):
            if path.exists():
                path.unlink()
    mode = default_file_mode()
    for path in _all_outputs(output_file, partition_number, sidecars)[:-1]:
        os.chmod(staging / path.name, mode)  # FileWriter creates 0600 files
        os.replace(staging / path.name, path)
    tmp_meta = staging / final_meta.name
    tmp_meta.write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.chmod(tmp_meta, mode)
    os.replace(tmp_meta, final_meta)


def write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")


def read_meta(output_file: os.PathLike) -> Dict[str, Any]:
    """The sidecar meta of a data set written by `write_records`, e.g. to check max_seq_length or vocab_size."""
    path = meta_path(output_file)
    if not path.is_file():
        raise UserError(f"{path} not found: {output_file} is missing or was not completely written")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise UserError(f"{path} line {err.lineno}: malformed json ({err.msg})") from err
