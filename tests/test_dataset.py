"""dataset.py pipelines over records written by the data creators from the real assets."""
import numpy as np
import pytest

import src.data.pipelines as dataset
from model_utils.errors import UserError
from src import create_finetune_data as cfd
from src import create_pretraining_data as cpd
from src import create_squad_data as csd


@pytest.fixture(scope="module")
def data(tmp_path_factory, assets):
    """One small data set per task, written once for the module."""
    root = tmp_path_factory.mktemp("data")
    spm = str(assets / "tokenizer" / "albert_30k-clean.model")
    common = ["--spm_model_file", spm, "--max_seq_length", "64"]
    cpd.main(common + ["--input_file", str(assets / "pretrain" / "bert_sample_text.txt"), "--output_file",
                       str(root / "pretrain" / "pt.mindrecord"), "--dupe_factor", "3", "--records_per_file", "10",
                       "--max_predictions_per_seq", "10", "--progress", "false"])
    cfd.main(common + ["--task_name", "mrpc", "--data_dir", str(assets / "glue" / "MRPC"), "--split", "dev",
                       "--output_file", str(root / "mrpc_dev.mindrecord")])
    cfd.main(common + ["--task_name", "sts-b", "--data_dir", str(assets / "glue" / "hf_dummy" / "stsb" / "SST-B"),
                       "--output_file", str(root / "stsb_train.mindrecord")])
    cfd.main(common + ["--task_name", "race", "--data_dir", str(assets / "race" / "RACE"), "--split", "train",
                       "--output_file", str(root / "race_train.mindrecord")])
    sample = str(assets / "derived" / "squad_v1.1_dev_sample_SuperBowl50_5paras.json")
    csd.main(common + ["--input_file", sample, "--output_file", str(root / "squad_dev.mindrecord"),
                       "--is_training", "false", "--doc_stride", "32", "--max_query_length", "24"])
    csd.main(common + ["--input_file", sample, "--output_file", str(root / "squad_train.mindrecord"),
                       "--doc_stride", "32", "--max_query_length", "24"])
    return root


def _rows(pipeline):
    return list(pipeline.create_dict_iterator(output_numpy=True, num_epochs=1))


def test_pretraining_columns_and_types(data):
    pipeline = dataset.create_pretraining_dataset(data / "pretrain", batch_size=4, seed=1)
    assert pipeline.get_col_names() == dataset.PRETRAIN_COLUMNS
    batch = _rows(pipeline)[0]
    assert batch["input_ids"].shape == (4, 64) and batch["input_ids"].dtype == np.int32
    assert batch["next_sentence_labels"].shape == (4,)
    assert batch["masked_lm_positions"].shape == (4, 10)
    assert batch["masked_lm_weights"].dtype == np.float32


def test_folder_output_file_and_list_resolve_to_the_same_files(data):
    by_dir = dataset.resolve_mindrecord_files(data / "pretrain")
    by_name = dataset.resolve_mindrecord_files(data / "pretrain" / "pt.mindrecord")
    count = len(dataset.load_data_meta(data / "pretrain")["files"])
    assert count >= 2 and by_dir == by_name == [str(data / "pretrain" / f"pt.mindrecord{i:05d}") for i in range(count)]
    assert dataset.resolve_mindrecord_files(by_dir) == by_dir


def test_seeded_shuffle_is_reproducible(data):
    def order(seed):
        rows = _rows(dataset.create_classification_dataset(data / "mrpc_dev.mindrecord", 8, seed=seed))
        return np.concatenate([b["input_ids"][:, 1] for b in rows]).tolist()

    plain = _rows(dataset.create_classification_dataset(data / "mrpc_dev.mindrecord", 8, is_training=False))
    plain_order = np.concatenate([b["input_ids"][:, 1] for b in plain]).tolist()
    assert order(5) == order(5) != plain_order
    assert sorted(order(5)) == sorted(plain_order)


def test_training_shards_are_disjoint(data):
    seen = []
    for shard in range(2):
        rows = _rows(dataset.create_classification_dataset(data / "mrpc_dev.mindrecord", 4, num_shards=2,
                                                           shard_id=shard, seed=3))
        seen.append({row.tobytes() for batch in rows for row in batch["input_ids"]})
    assert not seen[0] & seen[1]
    assert len(seen[0]) + len(seen[1]) >= 400


def test_eval_shards_hold_every_row_exactly_once(data):
    shards = [_rows(dataset.create_classification_dataset(data / "mrpc_dev.mindrecord", 16, is_training=False,
                                                          num_shards=5, shard_id=i)) for i in range(5)]
    sizes = [sum(len(b["label_ids"]) for b in shard) for shard in shards]
    assert sizes == [82, 82, 82, 81, 81]  # 408 rows, each in exactly one shard: none repeated, no padding rows
    whole = _rows(dataset.create_classification_dataset(data / "mrpc_dev.mindrecord", 408, is_training=False))[0]
    for i, shard in enumerate(shards):
        np.testing.assert_array_equal(np.concatenate([b["input_ids"] for b in shard]), whole["input_ids"][i::5])
    assert all(b["is_real_example"].all() for shard in shards for b in shard)
    assert shards[0][0]["label_ids"].dtype == np.int32
    assert dataset.create_classification_dataset(data / "mrpc_dev.mindrecord", 16, is_training=False
                                                 ).get_col_names() == dataset.CLASSIFIER_EVAL_COLUMNS


def test_regression_labels_are_float(data):
    rows = _rows(dataset.create_classification_dataset(data / "stsb_train.mindrecord", 3, regression=True, seed=0))
    assert rows[0]["label_ids"].dtype == np.float32
    assert sorted(rows[0]["label_ids"].tolist()) == pytest.approx([3.8, 3.8, 5.0])


def test_race_and_squad(data):
    race = _rows(dataset.create_race_dataset(data / "race_train.mindrecord", 2, seed=0))
    assert race[0]["input_ids"].shape == (2, 4, 64)
    train = dataset.create_squad_dataset(data / "squad_train.mindrecord", 8, is_training=True, seed=0)
    assert train.get_col_names() == dataset.SQUAD_TRAIN_COLUMNS
    evaluation = dataset.create_squad_dataset(data / "squad_dev.mindrecord", 8, is_training=False, num_shards=3,
                                              shard_id=2)
    ids = np.concatenate([b["unique_ids"] for b in _rows(evaluation)])
    total = dataset._num_rows(dataset.resolve_mindrecord_files(data / "squad_dev.mindrecord"))
    assert len(ids) == len(range(2, total, 3))
    assert (ids >= 1000000000).all() and len(set(ids.tolist())) == len(ids)


def test_missing_data_wrong_columns_and_bad_shard_id_are_user_errors(data, tmp_path):
    with pytest.raises(UserError, match="data not found"):
        dataset.create_pretraining_dataset(tmp_path / "missing", 2)
    with pytest.raises(UserError, match="no .mindrecord files"):
        dataset.create_pretraining_dataset(tmp_path, 2)
    with pytest.raises(UserError, match=r"columns \['next_sentence_labels'"):
        dataset.create_pretraining_dataset(data / "mrpc_dev.mindrecord", 2)
    with pytest.raises(UserError, match="shard_id"):
        dataset.create_squad_dataset(data / "squad_dev.mindrecord", 2, num_shards=2, shard_id=2)


def test_one_numbered_file_of_a_data_set_means_the_whole_data_set(data):
    """ModelZoo users pass `X.mindrecord0` (MindSpore's MindDataset reads all shards of FileWriter(shard_num=N) data
    given the first); was: that one file alone, so an evaluation of a partitioned data set scored a part of it."""
    import mindspore.dataset as ds

    files = sorted(str(p) for p in (data / "pretrain").glob("pt.mindrecord0000?"))
    assert len(files) == 2
    per_file = [ds.MindDataset(f, shuffle=False).get_dataset_size() for f in files]
    assert dataset.resolve_mindrecord_files(files[1]) == dataset.resolve_mindrecord_files(files) == files
    assert dataset.count_rows(files[1]) == sum(per_file)
    # named twice, in either order or spelled otherwise: read once (was: the data set twice)
    twice = [files[1], str(data / "pretrain" / "pt.mindrecord"),
             str(data / "pretrain" / ".." / "pretrain" / "pt.mindrecord00000")]
    assert dataset.count_rows(twice) == sum(per_file)


def test_one_shard_of_modelzoo_data_means_all_its_shards(tmp_path):
    """FileWriter(shard_num=N) data (ModelZoo's, no .meta.json): MindSpore's MindDataset reads every shard given
    one of them; so does the package (was: that shard alone)."""
    import mindspore.dataset as ds
    from mindspore.mindrecord import FileWriter

    writer = FileWriter(str(tmp_path / "zoo.mindrecord"), shard_num=3)
    writer.add_schema({"input_ids": {"type": "int32", "shape": [-1]}}, "zoo")
    writer.write_raw_data([{"input_ids": np.array([i], np.int32)} for i in range(10)])
    writer.commit()
    for shard in ("zoo.mindrecord0", "zoo.mindrecord2"):
        assert dataset.count_rows(tmp_path / shard) == ds.MindDataset(str(tmp_path / shard)).get_dataset_size() == 10


def test_data_meta_checks(data):
    meta = dataset.load_data_meta(data / "pretrain")
    assert meta == dataset.load_data_meta(data / "pretrain" / "pt.mindrecord00001")
    assert meta["kind"] == "pretraining" and meta["max_seq_length"] == 64 and meta["tokenizer"]["vocab_size"] == 30000
    dataset.check_data_meta(meta, vocab_size=30000, max_seq_length=64)
    with pytest.raises(UserError, match="30000-token vocabulary"):
        dataset.check_data_meta(meta, vocab_size=21128)
    with pytest.raises(UserError, match="max_seq_length 64 but the model config says 128"):
        dataset.check_data_meta(meta, max_seq_length=128)
    with pytest.raises(UserError, match="several data sets"):
        dataset.load_data_meta(data)
    assert dataset.load_data_meta(data / "squad_dev.mindrecord")["stats"]["examples"] == 117


def test_the_top_level_dataset_module_reexports_the_pipelines():
    """ModelZoo's layout has dataset.py at the top: scripts written against it keep working."""
    import dataset
    import src.data.pipelines

    assert dataset.__all__ and all(getattr(dataset, name) is getattr(src.data.pipelines, name) for name in dataset.__all__)


def test_modelzoo_berts_schema_json_fits_the_pretraining_data(data, tmp_path):
    """ModelZoo BERT's schema gives int64 columns and its labels the shape [1]; the data's label is a scalar, which
    the network reads the same way (was: refused, "is int [] but schema says int64 [1]")."""
    import json

    seq, predictions = 64, 10
    columns = {"input_ids": [seq], "input_mask": [seq], "segment_ids": [seq], "next_sentence_labels": [1],
               "masked_lm_positions": [predictions], "masked_lm_ids": [predictions]}
    schema = {"datasetType": "TF", "numRows": 0,
              "columns": {**{name: {"type": "int64", "rank": len(shape), "shape": shape}
                             for name, shape in columns.items()},
                          "masked_lm_weights": {"type": "float32", "rank": 1, "shape": [predictions]}}}
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    assert dataset.check_schema(data / "pretrain", str(tmp_path / "schema.json")) == (seq,)
    schema["columns"]["next_sentence_labels"]["shape"] = [2]
    (tmp_path / "schema.json").write_text(json.dumps(schema))
    with pytest.raises(UserError, match=r"column 'next_sentence_labels' is int \[\] but schema .* says int64 \[2\]"):
        dataset.check_schema(data / "pretrain", str(tmp_path / "schema.json"))


def test_data_sets_of_other_texts_in_input_files_of_the_same_name_train_as_one(tmp_path, assets):
    """Two corpora each in a file named corpus.txt (as wikiextractor's AA/wiki_00 or parquet's train-00000 names
    repeat across dumps), made into one folder: different text, so one data set of both (as docs/data.md says of
    Wikipedia and books); only another masking of the same text is refused (tests/test_bad_input_matrix.py)."""
    lines = (assets / "pretrain" / "bert_sample_text.txt").read_text(encoding="utf-8").split("\n\n")
    spm = str(assets / "tokenizer" / "albert_30k-clean.model")
    for name, half in (("a", lines[: len(lines) // 2]), ("b", lines[len(lines) // 2:])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "corpus.txt").write_text("\n\n".join(half), encoding="utf-8")
        assert cpd.main(["--input_file", str(tmp_path / name / "corpus.txt"), "--output_file",
                         str(tmp_path / "data" / f"{name}.mindrecord"), "--spm_model_file", spm, "--max_seq_length",
                         "64", "--dupe_factor", "1", "--progress", "false"]) == 0
    together = dataset.count_rows(tmp_path / "data")
    assert together == dataset.count_rows(tmp_path / "data" / "a.mindrecord") + dataset.count_rows(
        tmp_path / "data" / "b.mindrecord") > 0
