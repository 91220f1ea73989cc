"""The training driver's pure parts: step plan and data order, checkpoint discovery, device choice, the
pretraining yaml, row-exact dataset reading and schema checks."""
import json
from pathlib import Path

import numpy as np
import pytest

from model_utils.config import load_yaml_documents, parse_cli
from model_utils.errors import UserError
from src.devices.device_setup import pick_device_target
from src.model.albert import PRESETS
from src.training.checkpoints import list_checkpoints
from src.training.step_plan import StepPlan
from src.training.train_loop import sink_size

ROOT = Path(__file__).resolve().parents[1]


def test_epochs_follow_from_the_data_size():
    plan = StepPlan.create(rows=1000, batch_size=32, train_steps=-1, epoch_size=3)
    assert plan.batches_per_epoch == 31  # 1000 // 32, remainder dropped
    assert plan.total_steps == 93 and plan.epochs == pytest.approx(3.0)


def test_train_steps_are_optimizer_steps_whatever_the_accumulation():
    plan = StepPlan.create(rows=1000, batch_size=10, train_steps=7, epoch_size=99, accumulation_steps=4)
    assert plan.total_steps == 7 and plan.total_micro_steps == 28
    rows = np.concatenate(list(plan.segments(0, 1000)))
    assert len(rows) == 28 * 10


def test_ranks_read_disjoint_rows_and_together_the_whole_epoch():
    plans = [StepPlan.create(103, 5, -1, 1, group_size=3, rank=r, seed=7) for r in range(3)]
    rows = [p.epoch_rows(0) for p in plans]
    assert all(len(r) == 30 for r in rows)  # 103 // 3 = 34 rows per rank, 6 batches of 5
    everything = np.concatenate(rows)
    assert len(set(everything.tolist())) == 90
    assert set(everything.tolist()) <= set(range(103))


def test_epochs_are_reshuffled_and_reproducible():
    plan = StepPlan.create(50, 5, -1, 2, seed=3)
    assert not np.array_equal(plan.epoch_rows(0), plan.epoch_rows(1))
    assert np.array_equal(plan.epoch_rows(1), StepPlan.create(50, 5, -1, 2, seed=3).epoch_rows(1))
    assert np.array_equal(StepPlan.create(50, 5, -1, 1, shuffle=False).epoch_rows(0), np.arange(50))


@pytest.mark.parametrize("start", [0, 1, 9, 10, 17, 29])
def test_resuming_mid_run_reads_exactly_the_rows_left(start):
    plan = StepPlan.create(52, 5, train_steps=15, epoch_size=0, accumulation_steps=2, seed=11)
    # 30 micro-steps over 10 batches per epoch: epochs 0, 1, 2 each read whole, in their own order
    whole = np.concatenate([np.random.RandomState(11 + epoch).permutation(52)[:50] for epoch in range(3)])
    assert np.array_equal(np.concatenate(list(plan.segments(0, 30))), whole)
    pieces = list(plan.segments(start, 4))
    assert [len(rows) for rows in pieces] == [20] * ((30 - start) // 4) + ([(30 - start) % 4 * 5] if (30 - start) % 4
                                                                         else [])
    assert np.array_equal(np.concatenate(pieces), whole[start * 5:])


@pytest.mark.parametrize("batches, requested, accumulation, expected", [
    (100, 100, 1, 100), (344, 100, 1, 86), (97, 10, 1, 1), (40, 100, 1, 40), (48, 10, 4, 8), (48, 3, 4, 4),
    (120, 50, 2, 40)])
def test_sink_size_divides_the_run_into_whole_accumulation_windows(batches, requested, accumulation, expected):
    size = sink_size(batches, requested, accumulation)
    assert size == expected and batches % size == 0 and size % accumulation == 0


def test_too_little_data_is_a_clear_error():
    with pytest.raises(UserError, match="fewer than batch_size x device count = 8 x 2"):
        StepPlan.create(rows=15, batch_size=8, train_steps=5, epoch_size=1, group_size=2)
    with pytest.raises(UserError, match="train_steps > 0 or epoch_size > 0"):
        StepPlan.create(rows=100, batch_size=8, train_steps=0, epoch_size=0)


def test_only_finished_checkpoints_of_the_run_count(tmp_path):
    for name in ("albert_pretrain-5.ckpt", "albert_pretrain-40.ckpt", "albert_pretrain-100.ckpt",
                 ".tmp-abc123.ckpt", "other-900.ckpt", "albert_pretrain-7.ckpt.part", "albert_config.json"):
        (tmp_path / name).write_bytes(b"x")
    assert [step for step, _ in list_checkpoints(str(tmp_path), "albert_pretrain")] == [5, 40, 100]
    assert list_checkpoints(str(tmp_path / "missing"), "albert_pretrain") == []


def test_device_target_auto_picks_what_is_present():
    import mindspore as ms

    expected = next((t for t in ("Ascend", "GPU") if ms.hal.is_available(t)), "CPU")
    assert pick_device_target("auto") == expected
    if expected == "CPU":
        with pytest.raises(UserError, match="GPU is not available"):
            pick_device_target("GPU")
    with pytest.raises(UserError, match="device_target must be one of"):
        pick_device_target("TPU")


def test_yaml_offers_every_network_preset_and_each_optimizer():
    values, helps, choices = load_yaml_documents(ROOT / "pretrain_config.yaml")
    assert sorted(choices["albert_network"]) == sorted(PRESETS)
    assert sorted(values["optimizer_cfg"]) == sorted(choices["optimizer"])
    undocumented = [k for k in _flat_keys(values) if k not in helps]
    assert not undocumented


def _flat_keys(values, prefix=""):
    for key, value in values.items():
        if isinstance(value, dict):
            yield from _flat_keys(value, f"{prefix}{key}.")
        else:
            yield prefix + key


def test_yaml_types_and_overrides():
    config = parse_cli(ROOT / "pretrain_config.yaml", ["--optimizer_cfg.Lamb.learning_rate", "2e-3",
                                                       "--net_cfg.num_hidden_layers", "6", "--do_shuffle", "false"])
    assert config.optimizer_cfg.Lamb.learning_rate == 2e-3 and config.net_cfg.num_hidden_layers == 6
    assert config.do_shuffle is False and config.loss_scale_value == 2 ** 32
    with pytest.raises(UserError, match="did you mean '--save_checkpoint_steps'"):
        parse_cli(ROOT / "pretrain_config.yaml", ["--save_checkpoint_step", "5"])


@pytest.fixture(scope="module")
def two_shard_data(tmp_path_factory):
    """40 rows in two MindRecord shards; input_ids[0] is the row number."""
    from src.data.mindrecord_io import RecordWriter

    columns = {"input_ids": (np.int32, [8]), "input_mask": (np.int32, [8]), "segment_ids": (np.int32, [8]),
               "next_sentence_labels": (np.int32, [1]), "masked_lm_positions": (np.int32, [3]),
               "masked_lm_ids": (np.int32, [3]), "masked_lm_weights": (np.float32, [3])}
    rows = [{name: np.full(shape, i if name == "input_ids" else 1, dtype) for name, (dtype, shape) in columns.items()}
            for i in range(40)]
    schema = {name: {"type": "float32" if dtype == np.float32 else "int32", "shape": shape}
              for name, (dtype, shape) in columns.items()}
    output = tmp_path_factory.mktemp("data") / "rows.mindrecord"
    with RecordWriter(output, schema, partition_number=2) as out:
        out.write(rows)
        out.publish({"kind": "pretraining", "max_seq_length": 8})
    return output


def test_dataset_reads_the_requested_rows_in_order_across_shards(two_shard_data):
    from src.data.pipelines import count_rows, create_pretraining_dataset

    assert count_rows(two_shard_data) == 40
    in_file_order = create_pretraining_dataset(two_shard_data, batch_size=40, shuffle=False)
    row_ids = next(in_file_order.create_tuple_iterator(output_numpy=True))[0][:, 0]
    assert sorted(row_ids.tolist()) == list(range(40))
    wanted = np.array([33, 2, 19, 20, 0, 39, 7, 21])  # global row numbers: shard 0's rows, then shard 1's
    dataset = create_pretraining_dataset(two_shard_data, batch_size=4, indices=wanted)
    got = np.concatenate([batch[0][:, 0] for batch in dataset.create_tuple_iterator(output_numpy=True)])
    assert got.tolist() == row_ids[wanted].tolist()


def test_schema_file_mismatch_names_the_column(two_shard_data, tmp_path):
    from src.data.pipelines import check_schema

    assert check_schema(two_shard_data, "") == (8,)
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": {"input_ids": {"type": "int64", "rank": 1, "shape": [128]}}}))
    with pytest.raises(UserError, match=r"column 'input_ids' is int \[8\] but schema .* says int64 \[128\]"):
        check_schema(two_shard_data, str(schema))
    schema.write_text(json.dumps({"columns": {"input_ids": {"type": "int64", "shape": [8]}}}))
    assert check_schema(two_shard_data, str(schema)) == (8,)
    with pytest.raises(UserError, match=r"columns \['label_ids'\] missing"):
        check_schema(two_shard_data, "", columns=["input_ids", "label_ids"])
