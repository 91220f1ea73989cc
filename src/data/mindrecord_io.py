"""Writing MindRecord outputs as a stream, so that memory does not grow with the data and an interrupted run
leaves nothing that looks complete.

Every data creator writes through a `RecordWriter`: records go into
MindRecord files, their `.db` index files and any sidecar files (e.g. SQuAD's feature map) in a hidden staging
folder beside the output, are moved into place only after every `FileWriter.commit()`, and
`<output_file>.meta.json` is written last, each file flushed to the disk before it is renamed into place. A reader
that finds the meta file therefore finds complete data, and the meta file says what the data is (files, columns,
counts, sequence length, tokenizer), so training scripts can check it against their model config. While a writer
works, `.<output_file name>.lock` keeps a second run off the same output; the next writer removes the staging
folders a killed one left. With `overwrite`, the files of the earlier data set of that name (`data_set_files`: never
another data set's, e.g. `train2.*` beside `train`) go only once the new one is complete in the staging folder.

Two layouts:
- `partition_number` N (`write`; N = 1 by default): `--output_file DIR/train.mindrecord` writes
  `DIR/train.mindrecord` (N = 1) or `DIR/train.mindrecord0` .. `DIR/train.mindrecord{N-1}` (MindSpore's naming),
  each a self-contained MindRecord file, records dealt round-robin; a data set of more than N x
  MAX_RECORDS_PER_FILE records goes on in `DIR/train.mindrecord{N}`, ... (N more files per N x 65,536 records);
- numbered files `DIR/train.mindrecord00000`, `DIR/train.mindrecord00001`, ..., as many as the data needs, each
  written by whichever process made its records (`numbered_path` + `adopt`): for corpora whose size is not known in
  advance (src/create_pretraining_data.py).
"""
import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional

import numpy as np

from model_utils.errors import UserError
from src.common.atomic_files import (check_outputs, default_file_mode, fsync_path, lock_output, place, release_output,
                                     remove_leftovers)

META_SUFFIX = ".meta.json"
SIDECARS = (".examples.jsonl", ".features.jsonl")  # written beside their data sets by some creators
WRITE_BATCH = 2048
PAGE_SIZE = 4 << 20  # MindRecord's default page (32 MB) leaves most of a page unused at the end of every file
# Closing a MindRecord file builds its index in memory, ~1.5 KB a record: files are kept below this many records.
MAX_RECORDS_PER_FILE = 65536


def meta_path(output_file: os.PathLike) -> Path:
    return Path(str(output_file) + META_SUFFIX)


def data_file_pattern(name: str) -> "re.Pattern[str]":
    """File names of the MindRecord files (and their .db indexes) of the data set named `name`, any layout."""
    return re.compile(re.escape(name) + r"\d*(\.db)?")


def data_set_files(output_file: Path) -> List[Path]:
    """The files of the data set `output_file` as they stand, its meta last: the data files its meta lists (each
    with its .db index) and its sidecars. Without a readable meta (a publish that was killed): the files named like
    its data files, less those of another data set whose name extends it (`train2.*` when it is `train`)."""
    folder, name = output_file.parent, output_file.name
    if not folder.is_dir():
        return []
    entries = set(os.listdir(folder))
    pattern = data_file_pattern(name)
    listed = _meta_files(meta_path(output_file))
    if listed is None:
        others = [data_file_pattern(entry[:-len(META_SUFFIX)]) for entry in entries
                  if entry.endswith(META_SUFFIX) and entry.startswith(name) and entry != name + META_SUFFIX]
        data = [entry for entry in entries if pattern.fullmatch(entry) and
                not any(other.fullmatch(entry) for other in others)]
    else:
        data = [entry for file in listed for entry in (file, file + ".db") if entry in entries and
                pattern.fullmatch(entry)]
    data += [name + suffix for suffix in SIDECARS if name + suffix in entries]
    meta = [name + META_SUFFIX] if name + META_SUFFIX in entries else []
    return [folder / entry for entry in sorted(set(data)) + meta]


def _meta_files(meta: Path) -> Optional[List[str]]:
    """The data file names a meta lists; None when there is no readable meta."""
    try:
        files = json.loads(meta.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return [file for file in files if isinstance(file, str)] if isinstance(files, list) else None


def check_output_free(output_file: os.PathLike, partition_number: int = 1, overwrite: bool = False) -> None:
    """Fail early, before any work, when an output exists and `overwrite` was not asked for."""
    if partition_number < 1:
        raise UserError(f"partition_number must be >= 1, got {partition_number}")
    output_file = Path(output_file)
    if not output_file.name:
        raise UserError("output_file must name a file, e.g. data/train.mindrecord")
    if output_file.is_dir():
        raise UserError(f"output_file {output_file} is a directory; name a file inside it, "
                        f"e.g. {output_file / 'train.mindrecord'}")
    outputs = data_set_files(output_file)
    if not overwrite and outputs and not meta_path(output_file).exists():
        raise UserError(f"{outputs[0]} was left by an interrupted run (there is no {meta_path(output_file).name}); "
                        f"pass --overwrite true to write the data again")
    check_outputs([str(path) for path in outputs], overwrite)


class ColumnTable:
    """Rows kept as one array per column: how instance makers hand over many rows at once."""

    def __init__(self, columns: Dict[str, np.ndarray]):
        self.columns = columns

    def __len__(self) -> int:
        return len(next(iter(self.columns.values())))

    def __iter__(self) -> Iterator[Dict[str, np.ndarray]]:
        for i in range(len(self)):
            yield {name: array[i] for name, array in self.columns.items()}


class MindRecordFile:
    """One MindRecord file being written, records buffered into batches; created only when the first record comes
    (so a writer that got no records leaves no file). Any process can write one: the data creators' workers
    write theirs into the staging folder of the `RecordWriter` that publishes them."""

    def __init__(self, path: os.PathLike, schema: Dict[str, Dict[str, Any]], description: str):
        self.path, self.schema, self.description = Path(path), schema, description
        self.count = 0
        self._writer: Any = None
        self._batch: List[Mapping[str, Any]] = []

    def write(self, records: Iterable[Mapping[str, Any]]) -> None:
        for record in records:
            self.add(record)

    def add(self, record: Mapping[str, Any]) -> None:
        if self._writer is None:
            from mindspore.mindrecord import FileWriter  # deferred: importing MindSpore costs seconds

            self._writer = FileWriter(str(self.path), shard_num=1)
            self._writer.set_page_size(PAGE_SIZE)
            self._writer.add_schema(self.schema, self.description)
            _cache_schema_lookups(self._writer)
        self._batch.append(record)
        self.count += 1
        if len(self._batch) == WRITE_BATCH:
            self._writer.write_raw_data(self._batch)
            self._batch.clear()

    def commit(self) -> int:
        """Write what is buffered and the file's index (once); returns the number of records (0: no file)."""
        if self._writer is not None:
            if self._batch:
                self._writer.write_raw_data(self._batch)
                self._batch.clear()
            self._writer.commit()
            self._writer = None
        return self.count


class RecordWriter:
    """One data set being written: records are streamed into files in a staging folder (by this writer, or by
    other processes that `adopt` hands over); `publish` moves them into place with the meta file last. Leaving the
    `with` block without publishing (an error) removes everything, including folders it created.

        with RecordWriter(output_file, schema, "albert squad", sidecars=[".features.jsonl"]) as out:
            out.write(records)
            out.sidecar(".features.jsonl").write_text("".join(map(jsonl_line, rows)))
            meta = out.publish({"kind": "squad", ...})

    Records given to `write` are dealt round-robin to `partition_number` files (see the module docstring).
    """

    def __init__(self, output_file: os.PathLike, schema: Dict[str, Dict[str, Any]], description: str = "",
                 partition_number: int = 1, overwrite: bool = False, sidecars: Iterable[str] = ()):
        self.output_file = Path(output_file).absolute()
        self.sidecars = list(sidecars)
        check_output_free(self.output_file, partition_number, overwrite)
        self.schema, self.description = schema, description or self.output_file.stem
        self.partition_number, self.overwrite = partition_number, overwrite
        self.count = 0
        self.files: List[str] = []
        self._partitions: List[MindRecordFile] = []
        self._created = [d for d in [self.output_file.parent, *self.output_file.parent.parents] if not d.exists()]
        self.output_file.parent.mkdir(parents=True, exist_ok=True)
        self.published = False
        try:
            lock_output(str(self._lock_file), f"output_file {self.output_file}")
        except UserError:
            self._remove_created()
            raise
        remove_leftovers(str(self._lock_file))
        self.staging = Path(tempfile.mkdtemp(prefix=f".{self.output_file.name}.tmp-", dir=self.output_file.parent))

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc_info) -> None:
        """Remove the staging folder and the lock and, when nothing was published, the folders this writer
        created."""
        shutil.rmtree(self.staging, ignore_errors=True)
        release_output(str(self._lock_file))
        if not self.published:
            self._remove_created()

    @property
    def _lock_file(self) -> Path:
        """One lock per data set, not per folder: the parts of one data set may be made at once into one folder."""
        return self.output_file.with_name(f".{self.output_file.name}.lock")

    def _remove_created(self) -> None:
        for folder in self._created:  # deepest first
            try:
                folder.rmdir()
            except OSError:
                break

    def sidecar(self, suffix: str) -> Path:
        """Where to write the sidecar file `suffix` (published with the data)."""
        if suffix not in self.sidecars:
            raise ValueError(f"sidecar {suffix} was not declared")
        return self.staging / (self.output_file.name + suffix)

    def numbered_path(self, index: int) -> Path:
        """Staging path of data file number `index` (`<output_file>00000`, ...) for a process to write."""
        return self.staging / f"{self.output_file.name}{index:05d}"

    def adopt(self, path: Path, count: int) -> None:
        """Publish the file another process wrote at `path` (in the staging folder) with `count` records."""
        if count:
            self.files.append(path.name)
            self.count += count

    def write(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Append records (dicts of column -> value, or a ColumnTable), dealt round-robin to the partitions; when
        they are full, the next group of partitions opens (and the full ones are closed, freeing their memory)."""
        partitions = self.partition_number
        for record in records:
            group, slot = divmod(self.count, partitions)
            index = group // MAX_RECORDS_PER_FILE * partitions + slot
            if index == len(self._partitions):
                if index and index % partitions == 0:
                    for full in self._partitions[-partitions:]:
                        full.commit()
                name = self.output_file.name if index == 0 and partitions == 1 else f"{self.output_file.name}{index}"
                self._partitions.append(MindRecordFile(self.staging / name, self.schema, self.description))
            self._partitions[index].add(record)
            self.count += 1

    def publish(self, meta: Dict[str, Any]) -> Dict[str, Any]:
        """Commit the files and move everything into place; returns `meta` completed with the file names, the
        number of records and the schema, as written to `<output_file>.meta.json`."""
        if self.count == 0:
            raise UserError(f"no records to write to {self.output_file}")
        for partition in self._partitions:  # every partition gets records when there are at least N
            if partition.commit():
                self.files.append(partition.path.name)
        meta = dict(meta, files=list(self.files), num_records=self.count, schema=self.schema)
        if self._partitions:  # how `write` dealt the records (creation_order undoes it)
            meta["partition_number"] = self.partition_number
        staged = [name for file in self.files for name in (file, file + ".db")]
        staged += [self.output_file.name + suffix for suffix in self.sidecars]
        self._seal(staged)
        old = data_set_files(self.output_file) if self.overwrite else []
        final_meta = meta_path(self.output_file)
        self._check_free([*staged, final_meta.name], old)
        if final_meta in old:  # first: the earlier data set no longer vouches for files about to change
            final_meta.unlink()
        self._place(staged)
        for path in old:
            if path.name not in staged:
                path.unlink(missing_ok=True)
        (self.staging / final_meta.name).write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n",
                                                    encoding="utf-8")
        self._seal([final_meta.name])
        self._place([final_meta.name])
        self.published = True
        return meta

    def _check_free(self, names: List[str], old: List[Path]) -> None:
        """Before anything is placed: no name of the new data set may be taken by a file that is not the earlier
        data set's (another data set's shard, `train2` of `train2.meta.json` when `train` has 3 partitions, or a
        file written while this run worked)."""
        taken = [path for path in map(self.output_file.with_name, names) if os.path.lexists(path) and path not in old]
        if taken:
            raise UserError(f"{taken[0]} is in the way: it is no file of {'the earlier data set ' if old else ''}"
                            f"{self.output_file.name} (another data set's, or written while this run worked); kept: "
                            f"choose another output_file")

    def _seal(self, names: List[str]) -> None:
        """Make staged files readable under the umask (FileWriter creates 0600 files) and flush them to the disk."""
        mode = default_file_mode()
        for name in names:
            os.chmod(self.staging / name, mode)
            fsync_path(str(self.staging / name))

    def _place(self, names: List[str]) -> None:
        """Move sealed files into place, the folder's entries flushed after, so that after a power cut the meta
        (placed last) never stands beside empty data. Without `overwrite` a file that appeared under one of the
        names meanwhile is kept (see place_new)."""
        for name in names:
            place(str(self.staging / name), str(self.output_file.with_name(name)), self.overwrite)
        fsync_path(str(self.output_file.parent))


def dealt_order(counts: List[int], partitions: int) -> Optional[np.ndarray]:
    """Where `RecordWriter.write` put each record, in the order it was given: its global row number over the files
    (`counts` records each, in the meta's order, as MindDataset reads them one after the other) when it dealt them
    round-robin to `partitions` files; None when `counts` are not what that dealing gives."""
    total, group = sum(counts), partitions * MAX_RECORDS_PER_FILE
    dealt = [len(range(slot, min(group, total - start), partitions))
             for start in range(0, total, group) for slot in range(min(partitions, total - start))]
    if dealt != list(counts):
        return None
    record = np.arange(total, dtype=np.int64)
    full_groups, within = np.divmod(record, group)
    first_rows = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)[:-1]])
    return first_rows[full_groups * partitions + within % partitions] + within // partitions


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


def jsonl_line(row: Any) -> str:
    """One line of a .jsonl sidecar."""
    return json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n"
