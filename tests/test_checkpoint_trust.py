"""A run trusts only its own, intact checkpoints, and never ends with inf/nan weights.

Each test first builds the scenario a user or a failing disk creates (another run's checkpoint copied into the save
folder under a higher number, bytes flipped inside a tensor, checkpoints of an older version without a run id, a
weight turning nan mid-run) and then runs the real `run_pretrain.py` in a subprocess.
"""
import json
import shutil
import subprocess
from pathlib import Path
from typing import List

import mindspore as ms
import numpy as np
import pytest

from src.training.checkpoints import IDENTITY_KEYS
from tests.pretrain_helpers import flip_tensor_bytes, ok, one_line_error, pretrain, run, tool

pytestmark = pytest.mark.slow

SAVE_EVERY_2 = ["--save_checkpoint_steps", "2", "--log_steps", "1"]


def steps_in(folder: Path) -> List[int]:
    return sorted(int(p.stem.rsplit("-", 1)[1]) for p in folder.glob("albert_pretrain-*.ckpt"))


def poisoned(after_batches: int, args: List[str]) -> subprocess.CompletedProcess:
    """`args` run with one weight turned nan after `after_batches` batches (tests/fault_injection.py)."""
    return run(["tests/fault_injection.py", "weights_nan", str(after_batches), *args])


def all_finite(path: Path) -> bool:
    return all(np.isfinite(value.asnumpy()).all() for value in ms.load_checkpoint(str(path)).values()
               if not isinstance(value, str) and value.dtype in ms.dtype.float_type)


@pytest.fixture(scope="module")
def four_steps(data, tmp_path_factory) -> Path:
    """The output folder of a 4-step run saving every 2 steps and keeping 2 checkpoints: the starting point of the
    tests below that damage or age its checkpoints (each works on its own copy; the run lineage lives in the folder,
    so a copy resumes as the same run)."""
    out = tmp_path_factory.mktemp("four_steps")
    ok(run(pretrain(data, out, "--save_checkpoint_num", "2", *SAVE_EVERY_2, "--train_steps", "4")))
    assert steps_in(out / "checkpoints") == [2, 4]
    return out


def copy_of(run_folder: Path, target: Path) -> Path:
    shutil.copytree(run_folder, target, dirs_exist_ok=True)
    return target


def test_a_strangers_checkpoint_is_never_resumed_from_or_deleted_on_any_restart(data, tmp_path):
    """Another run with the very same settings (so the same data plan and network: only its run id differs) wrote
    albert_pretrain-10.ckpt; placed in this run's folder under its own name and as -77777 (above every step), and
    as -3 (below the step resumed from: retention once deleted such files); this run's own -4 copied as -99 (its
    name says another step than it holds)."""
    ok(run(pretrain(data, tmp_path / "stranger", "--train_steps", "10", "--save_checkpoint_steps", "10")))
    folder = tmp_path / "run" / "checkpoints"
    args = pretrain(data, tmp_path / "run", "--save_checkpoint_num", "1", *SAVE_EVERY_2)
    ok(run(args + ["--train_steps", "4"]))
    run_id = json.loads((folder / "run_lineage.json").read_text())["run_id"]
    assert ms.load_checkpoint(str(folder / "albert_pretrain-4.ckpt"))["run_id"] == run_id
    foreign = (tmp_path / "stranger" / "checkpoints" / "albert_pretrain-10.ckpt").read_bytes()
    planted = {folder / f"albert_pretrain-{step}.ckpt": foreign for step in (3, 10, 77777)}
    planted[folder / "albert_pretrain-99.ckpt"] = (folder / "albert_pretrain-4.ckpt").read_bytes()
    for path, content in planted.items():
        path.write_bytes(content)

    for steps in (6, 8):  # every restart, not only the first
        result = ok(run(args + ["--train_steps", str(steps)]))
        assert f"resumed from {folder / f'albert_pretrain-{steps - 2}.ckpt'}: optimizer step {steps - 2} of {steps}" \
            in result.stdout
        for step in (10, 77777):
            assert f"warning: not resuming from {folder / f'albert_pretrain-{step}.ckpt'}: it belongs to another " \
                   f"run" in result.stdout
        assert f"warning: not resuming from {folder / 'albert_pretrain-99.ckpt'}: its name says step 99 but it " \
               f"holds step 4" in result.stdout
        assert all(path.read_bytes() == content for path, content in planted.items())
    assert steps_in(folder) == [3, 8, 10, 99, 77777]
    assert json.loads((folder / "run_lineage.json").read_text())["run_id"] == run_id


def test_flipped_bytes_fall_back_to_the_newest_intact_checkpoint_or_stop_the_run(data, four_steps, tmp_path):
    folder = copy_of(four_steps, tmp_path) / "checkpoints"
    args = pretrain(data, tmp_path, "--save_checkpoint_num", "2", *SAVE_EVERY_2)
    newest = folder / "albert_pretrain-4.ckpt"
    flip_tensor_bytes(newest, newest)
    assert ms.load_checkpoint(str(newest)), "MindSpore alone loads the damaged file without a word"

    result = ok(run(args + ["--train_steps", "6"]))
    assert f"warning: skipping {newest}: checkpoint {newest} is damaged" in result.stdout
    assert f"warning: resuming from {folder / 'albert_pretrain-2.ckpt'}, the newest intact checkpoint" in result.stdout
    assert f"resumed from {folder / 'albert_pretrain-2.ckpt'}: optimizer step 2 of 6" in result.stdout
    assert (folder / "albert_pretrain-4.ckpt.replaced").exists(), "the damaged bytes are kept"

    for step in steps_in(folder):  # every checkpoint of the run damaged: starting over would lose it
        flip_tensor_bytes(folder / f"albert_pretrain-{step}.ckpt", folder / f"albert_pretrain-{step}.ckpt")
    before = {path: path.read_bytes() for path in folder.iterdir()}
    one_line_error(run(args + ["--train_steps", "8"]), f"no intact checkpoint of this run to resume from in {folder}",
                   "albert_pretrain-6.ckpt", "damaged")
    assert {path: path.read_bytes() for path in folder.iterdir()} == before


def test_checkpoints_of_an_older_version_resume_and_are_adopted_once(data, four_steps, tmp_path):
    folder = copy_of(four_steps, tmp_path) / "checkpoints"
    args = pretrain(data, tmp_path, "--save_checkpoint_num", "2", *SAVE_EVERY_2)
    for step in (2, 4):  # as the version before run lineage wrote them: no run id, no digest, no lineage file
        path = folder / f"albert_pretrain-{step}.ckpt"
        values = ms.load_checkpoint(str(path))
        path.unlink()
        ms.save_checkpoint([{"name": name, "data": value} for name, value in values.items()
                            if name not in ("run_id", "checkpoint_sha256", *IDENTITY_KEYS)], str(path))
    (folder / "run_lineage.json").unlink()

    result = ok(run(args + ["--train_steps", "6", "--save_checkpoint_num", "1"]))
    lineage = json.loads((folder / "run_lineage.json").read_text())
    assert f"{folder}: 2 checkpoint(s) written before runs recorded their lineage adopted as run " \
           f"{lineage['run_id']}" in result.stdout
    assert sorted(lineage["adopted"]) == ["albert_pretrain-2.ckpt", "albert_pretrain-4.ckpt"]
    assert f"resumed from {folder / 'albert_pretrain-4.ckpt'}: optimizer step 4 of 6" in result.stdout
    assert steps_in(folder) == [6], "adopted checkpoints are the run's own: retention prunes them"


def test_a_run_resumed_as_another_network_or_on_other_data_is_refused(data, four_steps, tmp_path):
    """The data plan's numbers let a network whose parameters keep their shapes (3 layers sharing one set instead
    of 2) or other data of the same size (another masking of the same text) continue a run silently, and the run's
    albert_config.json was rewritten to the new network."""

    folder = copy_of(four_steps, tmp_path / "run")
    written = (folder / "albert_config.json").read_text()
    recorded = ms.load_checkpoint(str(folder / "checkpoints" / "albert_pretrain-4.ckpt"))
    settings = json.loads(recorded["run_settings"])
    assert recorded["run_kind"] == "albert_pretrain" and settings["train_steps"] == 4
    assert settings["optimizer_cfg.AdamWeightDecay.learning_rate"] > 0 and "data_dir" not in settings  # no paths
    assert json.loads(recorded["run_network"])["num_hidden_layers"] == 2
    args = pretrain(data, folder, "--save_checkpoint_num", "2", *SAVE_EVERY_2, "--train_steps", "6")
    newest = folder / "checkpoints" / "albert_pretrain-4.ckpt"
    one_line_error(run(args + ["--net_cfg.num_hidden_layers", "3"]), f"{newest} was written by a run that trained "
                   "something else (net_cfg.num_hidden_layers: checkpoint 2, now 3); resume with the same settings")
    other = tmp_path / "masked.mindrecord"
    tool("create_pretraining_data", ["--input_file", data["folder"] / "corpus.txt", "--output_file", other,
                                     "--spm_model_file", data["folder"] / "spm.model", "--max_seq_length", "32",
                                     "--max_predictions_per_seq", "5", "--dupe_factor", "1", "--random_seed", "1",
                                     "--masked_lm_prob", "0.2", "--progress", "false"])
    args[args.index("--data_dir") + 1] = str(other)
    one_line_error(run(args), f"(data_dir: {other} holds other rows than the data the checkpoint was trained on)")
    assert (folder / "albert_config.json").read_text() == written and steps_in(folder / "checkpoints") == [2, 4]


def test_what_a_resumed_run_may_change_and_what_it_is_told():
    """Precision and dropout may change on resume (a float32 machine continuing a bfloat16 run), said in a warning;
    the initializer does not matter (the weights come from the checkpoint); another optimizer is refused by name
    (its state was reported as missing network parameters); checkpoints of older versions carry no identity."""
    from model_utils.errors import UserError
    from src.model.albert import AlbertConfig
    from src.training.checkpoints import RunIdentity
    from src.training.settings import PRETRAIN_FLAGS, TrainSettings

    settings = TrainSettings(config=None, data="train.mindrecord", batch_size=8, epochs=1, shuffle=True,
                             output_dir="out", save_dir="out/checkpoints", checkpoint_prefix="albert_pretrain",
                             init_checkpoint="", flags=PRETRAIN_FLAGS)
    written = RunIdentity(AlbertConfig(compute_type="bfloat16").to_dict(), "Lamb", "0123", "albert_pretrain").entries()
    lines = []
    now = AlbertConfig(compute_type="float32", hidden_dropout_prob=0.1, initializer_range=0.05)
    RunIdentity(now.to_dict(), "Lamb", "0123", "albert_pretrain").check(written, "c.ckpt", settings, lines.append)
    assert lines == ["warning: resuming c.ckpt with other settings (net_cfg.compute_type: checkpoint bfloat16, now "
                     "float32; net_cfg.hidden_dropout_prob: checkpoint 0.0, now 0.1): the steps up to it ran with the "
                     "checkpoint's, the rest run with these"]
    with pytest.raises(UserError, match=r"^c.ckpt was written by a run that trained something else \(optimizer: "
                                        r"checkpoint Lamb, now AdamWeightDecay\); resume with the same settings, or "
                                        r"start a new run in another save_checkpoint_path$"):
        RunIdentity(AlbertConfig(compute_type="bfloat16").to_dict(), "AdamWeightDecay", "0123",
                    "albert_pretrain").check(written, "c.ckpt", settings, lines.append)
    RunIdentity(AlbertConfig(num_hidden_layers=3).to_dict(), "AdamWeightDecay", "4567", "albert_pretrain").check(
        {}, "old.ckpt", settings, lines.append)
    assert len(lines) == 1
    # A changed learning rate or clipping of the run's optimizer is said too (was: unsaid); another optimizer's
    # settings are not the run's.
    before = {"optimizer": "Lamb", "optimizer_cfg.Lamb.learning_rate": 0.1, "clip_norm": 1.0,
              "optimizer_cfg.AdamWeightDecay.learning_rate": 1.0, "log_steps": 10}
    after = {**before, "optimizer_cfg.Lamb.learning_rate": 0.2, "optimizer_cfg.AdamWeightDecay.learning_rate": 2.0,
             "log_steps": 1}
    network = AlbertConfig().to_dict()
    written = RunIdentity(network, "Lamb", "0123", "albert_pretrain", before).entries()
    RunIdentity(network, "Lamb", "0123", "albert_pretrain", after).check(written, "c.ckpt", settings, lines.append)
    assert lines[1:] == ["warning: resuming c.ckpt with other settings (optimizer_cfg.Lamb.learning_rate: checkpoint "
                         "0.1, now 0.2): the steps up to it ran with the checkpoint's, the rest run with these"]


def test_weights_turning_nan_with_loss_scaling_are_never_saved(data, tmp_path):
    """Loss scaling skips the steps whose gradients overflow, so a nan weight once went on unnoticed to the end;
    the checkpoint due at step 6 would hold it."""
    folder = tmp_path / "checkpoints"
    result = poisoned(5, pretrain(data, tmp_path, "--train_steps", "20", "--save_checkpoint_num", "5", *SAVE_EVERY_2))
    one_line_error(result, "step 6: the weights or optimizer state hold inf/nan",
                   f"the last finite checkpoint is {folder / 'albert_pretrain-4.ckpt'}", "Lower the learning rate")
    assert steps_in(folder) == [2, 4] and all(all_finite(path) for path in folder.glob("*.ckpt"))


def test_a_loss_that_stays_nan_stops_after_nonfinite_stop_steps(data, tmp_path):
    result = poisoned(5, pretrain(data, tmp_path, "--train_steps", "20", "--save_checkpoint_steps", "4",
                                  "--nonfinite_stop_steps", "3", "--log_steps", "1"))
    one_line_error(result, "step 8: the loss has been nan for 3 batches in a row (nonfinite_stop_steps 3)",
                   f"the last good checkpoint is {tmp_path / 'checkpoints' / 'albert_pretrain-4.ckpt'}")
    assert steps_in(tmp_path / "checkpoints") == [4]
    # metrics.jsonl stays standard JSON (was: NaN, which JSON has not; strict parsers refused the whole file): a
    # nan loss, and the speed before any timed step, are null.
    rows = [json.loads(line, parse_constant=refuse) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if row["loss"] is None] == [6, 7, 8] and rows[0]["samples_per_s"] is None
    assert all(isinstance(row["loss"], float) for row in rows if row["step"] < 6)


def refuse(constant: str):
    raise ValueError(f"{constant} is not JSON")


def test_a_loss_turning_nan_without_loss_scaling_stops_and_keeps_the_last_good_checkpoint(data, tmp_path):
    result = poisoned(3, pretrain(data, tmp_path, "--train_steps", "20", "--save_checkpoint_num", "3",
                                  "--enable_lossscale", "false", *SAVE_EVERY_2))
    one_line_error(result, "step 4: the loss is nan with loss scaling off: training diverged and was stopped",
                   f"the last good checkpoint is {tmp_path / 'checkpoints' / 'albert_pretrain-2.ckpt'}",
                   "enable_lossscale")
    assert steps_in(tmp_path / "checkpoints") == [2]


def test_a_run_without_checkpoints_never_exits_0_with_nan_weights(data, tmp_path):
    result = poisoned(3, pretrain(data, tmp_path, "--train_steps", "3", "--enable_save_ckpt", "false"))
    one_line_error(result, "training ended with inf/nan in", "it diverged")


def test_a_checkpoint_converted_beside_its_tensorflow_original_reads_as_mindspore(tmp_path):
    """Converted in place as the TensorFlow refusal suggests (`--output model.ckpt` beside model.ckpt.index): the
    MindSpore file is read, not taken for the TensorFlow checkpoint of that prefix (was: refused as TensorFlow)."""
    from src.common.checkpoint_io import foreign_weights, read_checkpoint, save_checkpoint_atomic

    (tmp_path / "model.ckpt.index").write_bytes(b"tf index")
    assert "is a TensorFlow checkpoint" in foreign_weights(str(tmp_path / "model.ckpt"))
    save_checkpoint_atomic([{"name": "w", "data": ms.Tensor(np.ones(3, np.float32))}], str(tmp_path / "model.ckpt"))
    assert foreign_weights(str(tmp_path / "model.ckpt")) == ""
    assert read_checkpoint(str(tmp_path / "model.ckpt"))["w"].asnumpy().tolist() == [1.0, 1.0, 1.0]


def test_a_restart_given_another_start_than_its_run_had_is_warned(tmp_path):
    """run_lineage.json records where the run started: "" for random weights, so a rerun that now names pretrained
    weights is warned too (was: the plain line); an older file, without the record, cannot tell."""
    from src.training.checkpoints import Lineage, _continuing
    from src.training.settings import FINETUNE_FLAGS, TrainSettings

    settings = TrainSettings(config=None, data="d", batch_size=8, epochs=1, shuffle=True, output_dir="o",
                             save_dir="o/checkpoints", checkpoint_prefix="albert_classifier", init_checkpoint="p.ckpt",
                             init_only=True, flags=FINETUNE_FLAGS)
    Lineage("run", start="").write(str(tmp_path))
    started = Lineage.read(str(tmp_path)).start
    assert started == "" and _continuing("o/checkpoints", "p.ckpt", started, settings).startswith(
        "warning: o/checkpoints holds the checkpoints of a run that started from random weights: continuing that "
        "run, not starting from p.ckpt; to start from it, use a new save_finetune_checkpoint_path")
    (tmp_path / "run_lineage.json").write_text('{"run_id": "old", "adopted": {}}')
    assert Lineage.read(str(tmp_path)).start is None
    assert _continuing("o/checkpoints", "p.ckpt", None, settings) == \
        "o/checkpoints already holds this run's checkpoints: continuing from them, not from p.ckpt"
