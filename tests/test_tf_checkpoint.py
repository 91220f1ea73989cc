"""src/conversion/tf_checkpoint.py against checkpoints written, and read back, by real TensorFlow.

The fixtures and their reference.npz come from tests/fixtures/make_tf_albert_checkpoint.py (run once
with TensorFlow in a separate virtualenv); TensorFlow is not needed here.
"""
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest

from src.conversion.tf_checkpoint import _iter_table, crc32c, list_tf_variables, read_tf_checkpoint, resolve_prefix

FIXTURES = Path(__file__).resolve().parent / "fixtures"
ALBERT = FIXTURES / "tf_albert_tiny"
DTYPES = FIXTURES / "tf_dtypes"


def _reference(folder: Path) -> dict:
    with np.load(folder / "reference.npz") as ref:
        return {name: ref[name] for name in ref.files}


def _assert_same(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name, expected in want.items():
        actual = got[name]
        assert actual.dtype == expected.dtype, name
        assert actual.shape == expected.shape, name
        np.testing.assert_array_equal(actual, expected, err_msg=name)


def _copy_fixture(src: Path, dst: Path) -> str:
    shutil.copytree(src, dst)
    return str(dst / "model.ckpt")


# ---------------------------------------------------------------- reading real TF checkpoints


def test_albert_fixture_equals_tensorflow_reading():
    _assert_same(read_tf_checkpoint(str(ALBERT / "model.ckpt")), _reference(ALBERT))


def test_albert_fixture_has_googles_names_and_shapes():
    cfg = json.loads((ALBERT / "albert_config.json").read_text())
    V, E, H, I = cfg["vocab_size"], cfg["embedding_size"], cfg["hidden_size"], cfg["intermediate_size"]
    listing = list_tf_variables(str(ALBERT / "model.ckpt"))
    assert listing["bert/embeddings/word_embeddings"] == ("float32", (V, E))
    assert listing["bert/encoder/embedding_hidden_mapping_in/kernel"] == ("float32", (E, H))
    assert listing["cls/predictions/transform/dense/kernel"] == ("float32", (H, E))
    assert listing["cls/seq_relationship/output_weights"] == ("float32", (2, H))
    for g in range(cfg["num_hidden_groups"]):
        for i in range(cfg["inner_group_num"]):
            base = f"bert/encoder/transformer/group_{g}/inner_group_{i}"
            assert listing[f"{base}/attention_1/self/query/kernel"] == ("float32", (H, H))
            assert listing[f"{base}/ffn_1/intermediate/dense/kernel"] == ("float32", (H, I))
            assert listing[f"{base}/ffn_1/intermediate/output/dense/kernel"] == ("float32", (I, H))
            assert listing[f"{base}/LayerNorm_1/gamma"] == ("float32", (H,))
    assert f"bert/encoder/transformer/group_{cfg['num_hidden_groups']}/inner_group_0/LayerNorm/beta" not in listing


def test_training_state_is_listed_and_read():
    listing = list_tf_variables(str(ALBERT / "model.ckpt"))
    assert listing["global_step"] == ("int64", ())
    assert listing["bert/embeddings/word_embeddings/adam_m"] == listing["bert/embeddings/word_embeddings"]
    assert "bert/embeddings/word_embeddings/adam_v" in listing
    step = read_tf_checkpoint(str(ALBERT / "model.ckpt"), names=["global_step"])["global_step"]
    assert step.dtype == np.int64 and step.shape == () and int(step) == 125000


def test_every_dtype_from_a_two_shard_bundle():
    got = read_tf_checkpoint(str(DTYPES / "model.ckpt"))
    want = _reference(DTYPES)
    assert "string" not in got  # string tensors are skipped, without error
    assert list_tf_variables(str(DTYPES / "model.ckpt"))["string"] == ("string", (2,))
    del want["string"]
    _assert_same(got, want)  # bfloat16 comes back widened to float32, as the reference stores it
    assert got["bfloat16"].dtype == np.float32
    assert got["float16"].dtype == np.float16 and got["bool"].dtype == np.bool_
    assert list_tf_variables(str(DTYPES / "model.ckpt"))["bfloat16"] == ("bfloat16", (2, 5))


def test_names_subset_and_unknown_name():
    got = read_tf_checkpoint(str(ALBERT / "model.ckpt"), names=["cls/predictions/output_bias", "global_step"])
    assert sorted(got) == ["cls/predictions/output_bias", "global_step"]
    with pytest.raises(KeyError, match="no/such/var"):
        read_tf_checkpoint(str(ALBERT / "model.ckpt"), names=["no/such/var"])


def test_prefix_forms_resolve():
    prefix = str(ALBERT / "model.ckpt")
    assert resolve_prefix(prefix + ".index") == prefix
    assert resolve_prefix(prefix + ".data-00000-of-00001") == prefix
    assert resolve_prefix(str(ALBERT)) == prefix
    assert sorted(read_tf_checkpoint(str(ALBERT))) == sorted(_reference(ALBERT))


def test_crc32c_known_values_and_vectorised_path():
    assert crc32c(b"") == 0
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4 test vectors
    assert crc32c(b"\xff" * 32) == 0x62A8AB43
    table = []  # bitwise-built reference table, independent of the module's
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    data = np.random.default_rng(0).integers(0, 256, 200_003, dtype=np.uint8).tobytes()
    for size in (5, 16_383, 16_384, 16_385, 20_000, 200_003):  # both sides of the vectorised threshold
        crc = 0xFFFFFFFF
        for byte in data[:size]:
            crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        assert crc32c(data[:size]) == crc ^ 0xFFFFFFFF, size
    assert crc32c(bytearray(data)) == crc32c(memoryview(data)) == crc32c(data)


# ---------------------------------------------------------------- table structure the fixture doesn't hit


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _block(entries, restart_interval: int = 3) -> bytes:
    out, restarts, last = bytearray(), [], b""
    for n, (key, value) in enumerate(entries):
        shared = 0
        if n % restart_interval == 0:
            restarts.append(len(out))
        else:
            while shared < min(len(key), len(last)) and key[shared] == last[shared]:
                shared += 1
        out += _varint(shared) + _varint(len(key) - shared) + _varint(len(value)) + key[shared:] + value
        last = key
    restarts = restarts or [0]
    return bytes(out) + b"".join(struct.pack("<I", r) for r in restarts) + struct.pack("<I", len(restarts))


def _write_table(path: Path, entries, per_block: int, compression: int = 0) -> None:
    """A LevelDB-format table like TF's, but split into many small data blocks."""
    body, index = bytearray(), []

    def add(block: bytes) -> bytes:
        handle = _varint(len(body)) + _varint(len(block))
        trailer = bytes([compression])
        body.extend(block + trailer + struct.pack("<I", _masked_crc(block + trailer)))
        return handle

    for start in range(0, len(entries), per_block):
        chunk = entries[start:start + per_block]
        index.append((chunk[-1][0], add(_block(chunk))))
    meta = add(_block([]))
    idx = add(_block(index, restart_interval=1))
    footer = (meta + idx).ljust(40, b"\0") + struct.pack("<Q", 0xDB4775248B80FB57)
    path.write_bytes(bytes(body) + footer)


def test_index_split_into_many_blocks(tmp_path):
    prefix = _copy_fixture(ALBERT, tmp_path / "ckpt")
    entries = list(_iter_table(prefix + ".index"))
    _write_table(Path(prefix + ".index"), entries, per_block=7)
    _assert_same(read_tf_checkpoint(prefix), _reference(ALBERT))


def test_compressed_index_blocks_are_refused_clearly(tmp_path):
    prefix = _copy_fixture(ALBERT, tmp_path / "ckpt")
    entries = list(_iter_table(prefix + ".index"))
    _write_table(Path(prefix + ".index"), entries, per_block=7, compression=1)
    with pytest.raises(ValueError, match=r"model\.ckpt\.index uses snappy block compression"):
        read_tf_checkpoint(prefix)


# ---------------------------------------------------------------- errors name the file at fault


def test_a_missing_index_file_is_a_file_not_found_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"index file not found: .*nothing_here\.index"):
        read_tf_checkpoint(str(tmp_path / "nothing_here"))


def test_missing_data_shard(tmp_path):
    prefix = _copy_fixture(ALBERT, tmp_path / "ckpt")
    Path(prefix + ".data-00000-of-00001").unlink()
    assert "global_step" in list_tf_variables(prefix)  # listing needs only the index
    with pytest.raises(FileNotFoundError, match=r"data file not found: .*model\.ckpt\.data-00000-of-00001"):
        read_tf_checkpoint(prefix)


def test_missing_second_shard(tmp_path):
    prefix = _copy_fixture(DTYPES, tmp_path / "ckpt")
    Path(prefix + ".data-00001-of-00002").unlink()
    assert read_tf_checkpoint(prefix, names=["int64"])["int64"].tolist() == [-(2 ** 40), 0, 2 ** 62]
    with pytest.raises(FileNotFoundError, match=r"model\.ckpt\.data-00001-of-00002"):
        read_tf_checkpoint(prefix)


def test_truncated_data_file(tmp_path):
    prefix = _copy_fixture(ALBERT, tmp_path / "ckpt")
    data = Path(prefix + ".data-00000-of-00001")
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"data file .*model\.ckpt\.data-00000-of-00001 is truncated"):
        read_tf_checkpoint(prefix)


def test_corrupted_index_magic(tmp_path):
    prefix = _copy_fixture(ALBERT, tmp_path / "ckpt")
    index = Path(prefix + ".index")
    raw = bytearray(index.read_bytes())
    raw[-1] ^= 0xFF
    index.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"corrupt checkpoint index .*model\.ckpt\.index: bad table magic"):
        list_tf_variables(prefix)
    with pytest.raises(ValueError, match=r"model\.ckpt\.index"):
        read_tf_checkpoint(prefix)


def test_not_a_checkpoint_at_all(tmp_path):
    (tmp_path / "x.index").write_bytes(b"hello")
    with pytest.raises(ValueError, match=r"corrupt checkpoint index .*x\.index"):
        read_tf_checkpoint(str(tmp_path / "x"))


def test_corrupted_index_block(tmp_path):
    prefix = _copy_fixture(ALBERT, tmp_path / "ckpt")
    index = Path(prefix + ".index")
    raw = bytearray(index.read_bytes())
    raw[40] ^= 0x01  # inside the first data block: its stored checksum no longer matches
    index.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"corrupt checkpoint index .*model\.ckpt\.index: block checksum"):
        read_tf_checkpoint(prefix)


def test_flipped_tensor_byte_fails_checksum(tmp_path):
    prefix = _copy_fixture(DTYPES, tmp_path / "ckpt")
    data = Path(prefix + ".data-00001-of-00002")  # holds the 20 KB tensor (vectorised CRC path)
    raw = bytearray(data.read_bytes())
    raw[len(raw) - 100] ^= 0x10
    data.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"checksum mismatch for tensor 'scope/large' in .*data-00001-of-00002"):
        read_tf_checkpoint(prefix)
    assert read_tf_checkpoint(prefix, verify_checksum=False)["scope/large"].shape == (70, 73)
