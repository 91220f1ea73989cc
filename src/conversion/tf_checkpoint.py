"""Read TensorFlow checkpoints without TensorFlow.

A TF checkpoint written by ``tf.compat.v1.train.Saver`` (or ``tf.train.Checkpoint``) is a
"tensor bundle" (format V2)::

    PREFIX.index                      sorted key -> metadata table (LevelDB SSTable format)
    PREFIX.data-00000-of-0000N        raw tensor bytes, one or more shards

The index maps the empty key ``""`` to a ``BundleHeaderProto`` (shard count, endianness) and every
tensor name to a ``BundleEntryProto`` (dtype, shape, shard, byte offset, byte size, masked CRC32C of
the bytes). Both protos are tiny, so they are decoded here by hand rather than pulling in the
``protobuf`` package; the only dependencies are numpy and the standard library.

Public API:
    list_tf_variables(prefix) -> {name: (dtype_name, shape)}
    read_tf_checkpoint(prefix, names=None, verify_checksum=True) -> {name: np.ndarray}
    crc32c(data) -> int   (exposed for tests)

Why hand-rolled: the converter (``src/conversion/convert_checkpoint.py``) must turn Google's and brightmart's
ALBERT checkpoints into MindSpore ones on machines where TensorFlow is not installed (spec 4.2).
"""
from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

import numpy as np

__all__ = ["read_tf_checkpoint", "list_tf_variables", "resolve_prefix", "crc32c", "TensorEntry"]

# --------------------------------------------------------------------------------------------
# CRC32C (Castagnoli).  TF stores it "masked" (see _unmask_crc) for every tensor and block.
# --------------------------------------------------------------------------------------------

_CRC32C_POLY = 0x82F63B78  # reflected Castagnoli polynomial


def _make_crc_table() -> np.ndarray:
    table = np.zeros(256, dtype=np.uint32)
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _CRC32C_POLY if c & 1 else c >> 1
        table[n] = c
    return table


_CRC_TABLE = _make_crc_table()
_CRC_TABLE_PY = [int(v) for v in _CRC_TABLE]

# Below this size a plain per-byte loop is faster than setting up the vectorised path.
_SMALL_CRC = 1 << 14


def _crc_raw_py(data: bytes, crc: int = 0) -> int:
    """Raw (no pre/post inversion) reflected CRC register update, one byte at a time."""
    table = _CRC_TABLE_PY
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc


def _apply_cols(cols: List[int], x: int) -> int:
    """Apply a 32x32 GF(2) matrix, given as the images of the 32 unit vectors, to one uint32."""
    out = 0
    k = 0
    while x:
        if x & 1:
            out ^= cols[k]
        x >>= 1
        k += 1
    return out


def _compose(a: List[int], b: List[int]) -> List[int]:
    """Matrix product a*b (apply b, then a) in column-image form."""
    return [_apply_cols(a, col) for col in b]


def _zeros_operator(nbytes: int) -> List[int]:
    """The GF(2)-linear map "feed `nbytes` zero bytes into the raw CRC register", as column images.

    Built by repeated squaring of the one-zero-byte map: O(32 * 32 * log(nbytes)) Python ops.
    """
    one_byte = [_crc_raw_py(b"\x00", 1 << k) for k in range(32)]
    result = [1 << k for k in range(32)]  # identity
    power = one_byte
    while nbytes:
        if nbytes & 1:
            result = _compose(power, result)
        power = _compose(power, power)
        nbytes >>= 1
    return result


def _apply_operator_np(cols: List[int], x: np.ndarray) -> np.ndarray:
    """Apply a 32x32 GF(2) operator (column images) to every uint32 in `x`."""
    out = np.zeros_like(x)
    for k, col in enumerate(cols):
        if col:
            out ^= np.where((x >> np.uint32(k)) & np.uint32(1), np.uint32(col), np.uint32(0))
    return out


def _crc_raw_np(buf: np.ndarray, init: int) -> int:
    """Raw CRC (register starts at `init`) of a large (>= 4 bytes) uint8 buffer, vectorised with numpy.

    Starting the register at `init` equals starting at 0 with the first 4 bytes xor-ed with
    `init` (reflected CRC), so every chunk below can start from a zero register. The buffer is left-padded with zeros
    (which leave a zero register unchanged) to K chunks of L bytes, K a power of two and L a multiple of 4. All K chunks
    are CRC'd in lock-step, one little-endian 32-bit word per step (xor the word in, then four byte steps), so the
    Python loop runs L/4 times over K-vectors. Columns are transposed a slab at a time: a whole-buffer
    transpose is cache-hostile and costs more than the CRC itself. The K partial CRCs are then
    merged pairwise: crc(A || B) = shift_len(B)(crc(A)) ^ crc(B).
    """
    n = buf.size
    num_chunks = 1 << min(16, max(0, (n // 256).bit_length() - 1))
    chunk_len = -(-n // num_chunks)
    chunk_len += -chunk_len % 4
    padded = np.zeros(num_chunks * chunk_len, dtype=np.uint8)
    start = padded.size - n
    padded[start:] = buf
    padded[start:start + 4] ^= np.frombuffer(struct.pack("<I", init), dtype=np.uint8)
    words = padded.view("<u4").reshape(num_chunks, chunk_len // 4)

    crc = np.zeros(num_chunks, dtype=np.uint32)
    table = _CRC_TABLE
    low = np.uint32(0xFF)
    eight = np.uint32(8)
    slab = 64
    for col in range(0, words.shape[1], slab):
        for word in np.ascontiguousarray(words[:, col:col + slab].T):
            crc ^= word
            for _ in range(4):
                crc = table[crc & low] ^ (crc >> eight)

    shift = _zeros_operator(chunk_len)
    while crc.size > 1:
        pairs = crc.reshape(-1, 2)
        crc = _apply_operator_np(shift, pairs[:, 0]) ^ pairs[:, 1]
        shift = _compose(shift, shift)  # chunks are now twice as long
    return int(crc[0])


def crc32c(data) -> int:
    """CRC32C (as in iSCSI / LevelDB / TF) of a bytes-like object.

    Large inputs use a numpy path (about 0.5 s per 100 MB on one core); a per-byte Python loop
    would take about half a minute for one 268 MB ALBERT-xxlarge FFN kernel.
    """
    view = memoryview(data).cast("B")
    if len(view) < _SMALL_CRC:
        return _crc_raw_py(view, 0xFFFFFFFF) ^ 0xFFFFFFFF
    return _crc_raw_np(np.frombuffer(view, dtype=np.uint8), 0xFFFFFFFF) ^ 0xFFFFFFFF


def _unmask_crc(masked: int) -> int:
    """Undo LevelDB/TF's crc mask (rot 15 + constant), which it applies so CRCs of CRCs stay strong."""
    rot = (masked - 0xA282EAD8) & 0xFFFFFFFF
    return ((rot >> 17) | (rot << 15)) & 0xFFFFFFFF


# --------------------------------------------------------------------------------------------
# Protobuf wire format (just enough for BundleHeaderProto / BundleEntryProto).
# --------------------------------------------------------------------------------------------


def _read_varint(buf: bytes, pos: int) -> Tuple[int, int]:
    """Decode a base-128 varint at `pos`; return (value, new_pos)."""
    result = 0
    shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _iter_fields(buf: bytes) -> Iterator[Tuple[int, int, object]]:
    """Yield (field_number, wire_type, value) for a serialized message.

    Varints come back as int, fixed32/fixed64 as int, length-delimited fields as bytes.
    """
    pos = 0
    while pos < len(buf):
        tag, pos = _read_varint(buf, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire == 1:
            value = struct.unpack_from("<Q", buf, pos)[0]
            pos += 8
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            value = bytes(buf[pos:pos + length])
            if len(value) != length:
                raise ValueError("truncated length-delimited field")
            pos += length
        elif wire == 5:
            value = struct.unpack_from("<I", buf, pos)[0]
            pos += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield field, wire, value


def _to_int64(v: int) -> int:
    """Varints encode negative int64 as 10-byte two's complement."""
    return v - (1 << 64) if v >= 1 << 63 else v


@dataclass(frozen=True)
class TensorEntry:
    """Decoded BundleEntryProto: where one tensor's bytes live and how to check them."""

    dtype: int  # tensorflow DataType enum
    shape: Tuple[int, ...]
    shard_id: int
    offset: int
    size: int
    masked_crc32c: Optional[int]
    num_slices: int  # >0 for partitioned variables (not supported for reading)


def _parse_shape(buf: bytes) -> Tuple[int, ...]:
    """TensorShapeProto: repeated Dim dim = 2 { int64 size = 1; string name = 2; }."""
    dims: List[int] = []
    for field, _, value in _iter_fields(buf):
        if field == 2:
            size = 0
            for dfield, _, dvalue in _iter_fields(value):
                if dfield == 1:
                    size = _to_int64(dvalue)
            dims.append(size)
    return tuple(dims)


def _parse_entry(buf: bytes) -> TensorEntry:
    """BundleEntryProto: dtype=1, shape=2, shard_id=3, offset=4, size=5, crc32c=6 (fixed32), slices=7."""
    fields = {"dtype": 0, "shape": (), "shard_id": 0, "offset": 0, "size": 0, "crc": None, "slices": 0}
    for field, _, value in _iter_fields(buf):
        if field == 1:
            fields["dtype"] = value
        elif field == 2:
            fields["shape"] = _parse_shape(value)
        elif field == 3:
            fields["shard_id"] = value
        elif field == 4:
            fields["offset"] = _to_int64(value)
        elif field == 5:
            fields["size"] = _to_int64(value)
        elif field == 6:
            fields["crc"] = value
        elif field == 7:
            fields["slices"] += 1
    return TensorEntry(fields["dtype"], fields["shape"], fields["shard_id"], fields["offset"],
                       fields["size"], fields["crc"], fields["slices"])


def _parse_header(buf: bytes) -> Tuple[int, int]:
    """BundleHeaderProto: num_shards=1, endianness=2 (0 little, 1 big), version=3. Returns (shards, endianness)."""
    num_shards, endianness = 1, 0
    for field, _, value in _iter_fields(buf):
        if field == 1:
            num_shards = value
        elif field == 2:
            endianness = value
    return num_shards, endianness


# --------------------------------------------------------------------------------------------
# SSTable (LevelDB table format, as tensorflow/core/lib/io/table writes it).
# --------------------------------------------------------------------------------------------

_TABLE_MAGIC = 0xDB4775248B80FB57
_FOOTER_LEN = 48  # two BlockHandles padded to 40 bytes + 8-byte magic
_BLOCK_TRAILER_LEN = 5  # 1 byte compression type + 4 bytes masked crc32c


def _read_block_handle(buf: bytes, pos: int) -> Tuple[int, int, int]:
    offset, pos = _read_varint(buf, pos)
    size, pos = _read_varint(buf, pos)
    return offset, size, pos


def _read_block(table: bytes, offset: int, size: int, path: str) -> bytes:
    """Return a block's contents after checking its trailer (compression type and CRC)."""
    end = offset + size + _BLOCK_TRAILER_LEN
    if offset < 0 or end > len(table):
        raise ValueError(f"corrupt checkpoint index {path}: block at {offset}+{size} is past end of file")
    contents = table[offset:offset + size]
    compression = table[offset + size]
    if compression != 0:
        kind = {1: "snappy", 2: "zlib"}.get(compression, f"unknown type {compression}")
        raise ValueError(f"checkpoint index {path} uses {kind} block compression; only uncompressed "
                         f"tables (what TensorFlow writes) are supported")
    stored = struct.unpack_from("<I", table, offset + size + 1)[0]
    actual = _crc_raw_py(table[offset:offset + size + 1], 0xFFFFFFFF) ^ 0xFFFFFFFF
    if _unmask_crc(stored) != actual:
        raise ValueError(f"corrupt checkpoint index {path}: block checksum mismatch at offset {offset}")
    return contents


def _iter_block(block: bytes, path: str) -> Iterator[Tuple[bytes, bytes]]:
    """Yield (key, value) pairs of one block.

    Each entry stores how many leading bytes it shares with the previous key plus the rest;
    the trailing restart array (uint32 offsets + count) only matters for binary search, but it
    tells us where the entries stop.
    """
    if len(block) < 4:
        raise ValueError(f"corrupt checkpoint index {path}: block too short")
    num_restarts = struct.unpack_from("<I", block, len(block) - 4)[0]
    limit = len(block) - 4 * (num_restarts + 1)
    if limit < 0:
        raise ValueError(f"corrupt checkpoint index {path}: bad restart count {num_restarts}")
    pos = 0
    key = b""
    while pos < limit:
        shared, pos = _read_varint(block, pos)
        non_shared, pos = _read_varint(block, pos)
        value_len, pos = _read_varint(block, pos)
        if shared > len(key) or pos + non_shared + value_len > limit:
            raise ValueError(f"corrupt checkpoint index {path}: bad block entry at {pos}")
        key = key[:shared] + block[pos:pos + non_shared]
        pos += non_shared
        yield key, block[pos:pos + value_len]
        pos += value_len


def _iter_table(path: str) -> Iterator[Tuple[bytes, bytes]]:
    """Yield every (key, value) of an SSTable file in key order."""
    with open(path, "rb") as f:
        table = f.read()
    if len(table) < _FOOTER_LEN:
        raise ValueError(f"corrupt checkpoint index {path}: file is {len(table)} bytes, too short for a table footer")
    footer = table[-_FOOTER_LEN:]
    magic = struct.unpack_from("<Q", footer, _FOOTER_LEN - 8)[0]
    if magic != _TABLE_MAGIC:
        raise ValueError(f"corrupt checkpoint index {path}: bad table magic {magic:#018x} "
                         f"(expected {_TABLE_MAGIC:#018x}); is this a TF V2 checkpoint .index file?")
    try:
        _, _, pos = _read_block_handle(footer, 0)  # metaindex: unused by TF (no filters)
        index_offset, index_size, _ = _read_block_handle(footer, pos)
        index_block = _read_block(table, index_offset, index_size, path)
        for _, handle in _iter_block(index_block, path):
            offset, size, _ = _read_block_handle(handle, 0)
            yield from _iter_block(_read_block(table, offset, size, path), path)
    except (struct.error, IndexError) as exc:  # truncated structures inside the file
        raise ValueError(f"corrupt checkpoint index {path}: {exc}") from exc


# --------------------------------------------------------------------------------------------
# Tensor bundle.
# --------------------------------------------------------------------------------------------

_DT_STRING = 7
_DT_BFLOAT16 = 14

# tensorflow DataType enum -> (name, numpy dtype used for the raw bytes)
_DTYPES: Dict[int, Tuple[str, Optional[str]]] = {
    1: ("float32", "f4"),
    2: ("float64", "f8"),
    3: ("int32", "i4"),
    4: ("uint8", "u1"),
    5: ("int16", "i2"),
    6: ("int8", "i1"),
    7: ("string", None),
    8: ("complex64", "c8"),
    9: ("int64", "i8"),
    10: ("bool", "?"),
    14: ("bfloat16", "u2"),  # returned widened to float32
    17: ("uint16", "u2"),
    18: ("complex128", "c16"),
    19: ("float16", "f2"),
    22: ("uint32", "u4"),
    23: ("uint64", "u8"),
}


def resolve_prefix(prefix: str) -> str:
    """Accept what users actually pass: ``model.ckpt``, ``model.ckpt.index``, a data shard, or a folder.

    A folder is accepted when its ``checkpoint`` file names the latest prefix or it holds exactly
    one ``*.index`` file (Google's ALBERT tarballs ship ``model.ckpt-best.index`` and friends).
    """
    prefix = os.fspath(prefix)
    if prefix.endswith(".index"):
        return prefix[: -len(".index")]
    marker = prefix.rfind(".data-")
    if marker != -1 and "-of-" in prefix[marker:]:
        return prefix[:marker]
    if os.path.isdir(prefix):
        state = os.path.join(prefix, "checkpoint")
        if os.path.isfile(state):
            with open(state, encoding="utf-8") as f:
                for line in f:
                    if line.startswith("model_checkpoint_path:"):
                        name = line.split(":", 1)[1].strip().strip('"')
                        return name if os.path.isabs(name) else os.path.join(prefix, name)
        indexes = sorted(n for n in os.listdir(prefix) if n.endswith(".index"))
        if len(indexes) == 1:
            return os.path.join(prefix, indexes[0][: -len(".index")])
        raise FileNotFoundError(f"cannot pick a TF checkpoint in folder {prefix}: found {len(indexes)} "
                                f".index files {indexes[:5]}; pass the prefix (e.g. {prefix}/model.ckpt)")
    return prefix


@dataclass
class _Bundle:
    prefix: str
    num_shards: int
    byteorder: str
    entries: Dict[str, TensorEntry]


def _load_bundle(prefix: str) -> _Bundle:
    prefix = resolve_prefix(prefix)
    index_path = prefix + ".index"
    if not os.path.isfile(index_path):
        raise FileNotFoundError(f"TF checkpoint index file not found: {index_path} "
                                f"(pass the prefix, e.g. path/to/model.ckpt)")
    num_shards, endianness = 1, 0
    entries: Dict[str, TensorEntry] = {}
    saw_header = False
    for key, value in _iter_table(index_path):
        try:
            if key == b"":
                num_shards, endianness = _parse_header(value)
                saw_header = True
            elif key[:1] == b"\x00":
                continue  # encoded slice key of a partitioned variable, not a variable name
            else:
                entries[key.decode("utf-8")] = _parse_entry(value)
        except (ValueError, struct.error, UnicodeDecodeError) as exc:
            raise ValueError(f"corrupt checkpoint index {index_path}: entry {key!r}: {exc}") from exc
    if not saw_header:
        raise ValueError(f"corrupt checkpoint index {index_path}: no bundle header (empty key) found")
    if endianness not in (0, 1):
        raise ValueError(f"corrupt checkpoint index {index_path}: unknown endianness {endianness}")
    return _Bundle(prefix, num_shards, "<" if endianness == 0 else ">", entries)


def _shard_path(bundle: _Bundle, shard_id: int) -> str:
    return f"{bundle.prefix}.data-{shard_id:05d}-of-{bundle.num_shards:05d}"


def list_tf_variables(prefix: str) -> Dict[str, Tuple[str, Tuple[int, ...]]]:
    """Map every tensor name in the checkpoint to (dtype name, shape), without reading tensor data.

    Includes what the converter must skip (``global_step``, ``*/adam_m``, ``*/adam_v``, ...);
    dtype names are numpy's (``float32``, ``int64``) plus ``bfloat16`` and ``string``.
    """
    bundle = _load_bundle(prefix)
    return {name: (_DTYPES.get(e.dtype, (f"dtype_{e.dtype}", None))[0], e.shape)
            for name, e in bundle.entries.items()}


def _decode_tensor(raw: bytes, entry: TensorEntry, byteorder: str, name: str, path: str) -> np.ndarray:
    """Turn a tensor's raw bytes into an array of its shape (bfloat16 widened to float32)."""
    _, code = _DTYPES[entry.dtype]
    dtype = np.dtype(code).newbyteorder(byteorder)
    count = int(np.prod(entry.shape, dtype=np.int64))
    if count * dtype.itemsize != len(raw):
        raise ValueError(f"tensor {name!r} in {path}: {len(raw)} bytes do not hold shape {entry.shape} "
                         f"of {_DTYPES[entry.dtype][0]}")
    array = np.frombuffer(raw, dtype=dtype).reshape(entry.shape)
    if entry.dtype == _DT_BFLOAT16:
        return (array.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return array.astype(dtype.newbyteorder("="), copy=True)  # native order, writable


def read_tf_checkpoint(prefix: str, names: Optional[Iterable[str]] = None,
                       verify_checksum: bool = True) -> Dict[str, np.ndarray]:
    """Read tensors of a TF V2 checkpoint into numpy arrays, without TensorFlow.

    Args:
        prefix: checkpoint prefix (``dir/model.ckpt``); ``.index``/``.data-*`` paths and folders
            are resolved too (see ``resolve_prefix``).
        names: read only these tensors (e.g. skip optimizer slots of a 3x-sized training
            checkpoint); unknown names raise ``KeyError``. Default: every tensor.
        verify_checksum: check each tensor's stored CRC32C (cheap relative to disk reads).

    Returns:
        ``{name: array}`` in key order. String tensors are skipped (nothing a model needs is a
        string); bfloat16 comes back as float32; everything else keeps its dtype.

    Raises:
        FileNotFoundError: missing ``.index`` or data shard (message names the file).
        ValueError: corrupt index, truncated data shard, checksum mismatch, partitioned or
            unsupported-dtype tensors (message names the file and tensor).
    """
    bundle = _load_bundle(prefix)
    if names is None:
        wanted = list(bundle.entries)
    else:
        wanted = list(names)
        missing = [n for n in wanted if n not in bundle.entries]
        if missing:
            raise KeyError(f"tensors not in checkpoint {bundle.prefix}: {missing[:10]}")
        wanted.sort()

    result: Dict[str, np.ndarray] = {}
    open_files: Dict[int, object] = {}
    try:
        for name in wanted:
            entry = bundle.entries[name]
            if entry.dtype == _DT_STRING:
                continue
            raw, path = _read_tensor_bytes(bundle, entry, name, open_files)
            if verify_checksum and entry.masked_crc32c is not None:
                if crc32c(raw) != _unmask_crc(entry.masked_crc32c):
                    raise ValueError(f"checksum mismatch for tensor {name!r} in {path}: data file is corrupt")
            result[name] = _decode_tensor(raw, entry, bundle.byteorder, name, path)
    finally:
        for f in open_files.values():
            f.close()
    return result


def _read_tensor_bytes(bundle: _Bundle, entry: TensorEntry, name: str,
                       open_files: Dict[int, object]) -> Tuple[bytes, str]:
    """Fetch one tensor's bytes from its shard, with clear errors for missing/short files."""
    if entry.num_slices:
        raise ValueError(f"tensor {name!r} in {bundle.prefix}.index is a partitioned variable "
                         f"({entry.num_slices} slices); partitioned checkpoints are not supported")
    if entry.dtype not in _DTYPES:
        raise ValueError(f"tensor {name!r} in {bundle.prefix}.index has unsupported TF dtype enum {entry.dtype}")
    if not 0 <= entry.shard_id < bundle.num_shards:
        raise ValueError(f"corrupt checkpoint index {bundle.prefix}.index: tensor {name!r} names shard "
                         f"{entry.shard_id} of {bundle.num_shards}")
    path = _shard_path(bundle, entry.shard_id)
    if entry.shard_id not in open_files:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"TF checkpoint data file not found: {path} (needed for tensor {name!r})")
        open_files[entry.shard_id] = open(path, "rb")
    f = open_files[entry.shard_id]
    file_size = os.fstat(f.fileno()).st_size
    if entry.offset < 0 or entry.offset + entry.size > file_size:
        raise ValueError(f"TF checkpoint data file {path} is truncated: tensor {name!r} needs bytes "
                         f"{entry.offset}..{entry.offset + entry.size} but the file has {file_size}")
    f.seek(entry.offset)
    raw = f.read(entry.size)
    if len(raw) != entry.size:
        raise ValueError(f"TF checkpoint data file {path} is truncated: short read for tensor {name!r}")
    return raw, path
