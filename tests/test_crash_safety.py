"""A user never loses work: real subprocesses are killed with SIGKILL at random moments (a timer outside) and at
exact points (tests/fault_injection.py: a checkpoint half written, written but not renamed, placed but the old
one not pruned, a MindRecord shard half written, a data set half published), then started again. No damaged file
is ever taken for a checkpoint or for data, and the resumed runs' losses and weights equal the uninterrupted run's.

Also: an output folder that cannot hold a checkpoint fails before training starts (inf/nan training:
tests/test_checkpoint_trust.py).
"""
import os
import random
import resource
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import List

import numpy as np
import pytest

from tests.finetune_helpers import ASSETS, TINY_FINETUNE, make_glue
from tests.pretrain_helpers import (ENV, RESUME_RUN, ROOT, check_curves, digest, metrics_by_step, ok, one_line_error,
                                    pretrain, run)

pytestmark = pytest.mark.slow


def killed_at(point: str, count: int, args: List[str]) -> None:
    """Run `args` under tests/fault_injection.py and check that it died at `point`."""
    result = subprocess.run([sys.executable, "tests/fault_injection.py", point, str(count), *args], cwd=ROOT, env=ENV,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == -signal.SIGKILL, (point, result.returncode, result.stdout[-2000:],
                                                  result.stderr[-2000:])


def killed_after_rows(args: List[str], metrics: Path, rows: int) -> None:
    """Start `args` and `kill -9` it as soon as `metrics` holds `rows` lines (i.e. somewhere inside a step)."""
    process = subprocess.Popen([sys.executable] + args, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= rows:
            break
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait() == -signal.SIGKILL, "the run ended before it could be killed"


def checkpoint_steps(folder: Path, prefix: str = "albert_pretrain") -> List[int]:
    return sorted(int(p.stem.rsplit("-", 1)[1]) for p in folder.glob(f"{prefix}-*.ckpt"))


def assert_same_trajectory(got: dict, expected: dict, keys=("loss", "lr", "loss_scale", "overflow_count")) -> None:
    assert sorted(got) == sorted(expected)
    for step in expected:  # bit-identical in practice (counter-based dropout, fixed data order); 1e-6 relative allowed
        for key in keys:
            assert got[step][key] == pytest.approx(expected[step][key], rel=1e-6), (step, key)


def test_pretraining_killed_at_five_points_resumes_to_the_uninterrupted_trajectory(data, tmp_path):
    reference = ok(run(pretrain(data, tmp_path / "reference", *RESUME_RUN)))
    expected = metrics_by_step(tmp_path / "reference" / "metrics.jsonl")
    assert len(expected) == 300
    out = tmp_path / "killed"
    args, metrics, checkpoints = pretrain(data, out, *RESUME_RUN), out / "metrics.jsonl", out / "checkpoints"
    rng = random.Random(20261123)

    # 1. Somewhere inside a step (checkpoints every 40 steps, two kept).
    killed_after_rows(args, metrics, rng.randint(90, 150))
    before = checkpoint_steps(checkpoints)
    assert 1 <= len(before) <= 2 and before[-1] >= 80
    # 2. Half-way through writing the next checkpoint: only a temporary file holds the half.
    killed_at("checkpoint_write", 1, args)
    assert checkpoint_steps(checkpoints) == before and len(list(checkpoints.glob(".tmp-*.ckpt"))) == 1
    # 3. The checkpoint fully written, not yet renamed: still not a checkpoint.
    killed_at("checkpoint_rename", 1, args)
    assert checkpoint_steps(checkpoints) == before
    # 4. The new checkpoint in place, the oldest not yet deleted: three remain.
    killed_at("checkpoint_prune", 1, args)
    placed = checkpoint_steps(checkpoints)
    assert len(placed) == 3 and placed[-1] == before[-1] + 40, placed
    # The newest checkpoint damaged on disk (as by a failing disk): resuming must skip it for the one before.
    newest = checkpoints / f"albert_pretrain-{placed[-1]}.ckpt"
    newest.write_bytes(newest.read_bytes()[:1000])
    # 5. At another random moment of a step, in the run that skipped the damaged checkpoint.
    killed_after_rows(args, metrics, placed[-1] + rng.randint(5, 60))

    resumed = ok(run(args))
    assert not list(checkpoints.glob(".tmp-*")), "temporary files of killed runs must be cleaned up"
    assert_same_trajectory(metrics_by_step(metrics), expected, ("loss", "mlm_loss", "sop_loss", "lr", "loss_scale",
                                                                "overflow_count"))
    assert len(metrics.read_text().splitlines()) == 300, "a resumed run re-logs the steps it redoes in place"
    # TensorBoard's curves too: each resumed run replaced what its predecessor logged after the checkpoint.
    check_curves(out, metrics_by_step(metrics), ("loss", "mlm_loss", "sop_loss", "lr", "loss_scale", "overflow_count"))
    assert digest(resumed.stdout) == digest(reference.stdout)
    again = ok(run(args))  # a finished run started again does nothing
    assert "nothing to train" in again.stdout and len(metrics.read_text().splitlines()) == 300


def test_a_damaged_newest_checkpoint_is_skipped_with_a_warning(data, tmp_path):
    args = pretrain(data, tmp_path, "--train_steps", "4", "--save_checkpoint_steps", "2", "--save_checkpoint_num", "2")
    ok(run(args))
    damaged = tmp_path / "checkpoints" / "albert_pretrain-4.ckpt"
    damaged.write_bytes(damaged.read_bytes()[:-64])
    (tmp_path / "checkpoints" / "albert_pretrain-9.ckpt").write_bytes(b"not a checkpoint")
    result = ok(run(args))
    assert f"warning: skipping {tmp_path / 'checkpoints' / 'albert_pretrain-9.ckpt'}: cannot read" in result.stdout
    assert f"warning: skipping {damaged}: cannot read" in result.stdout
    assert f"resumed from {tmp_path / 'checkpoints' / 'albert_pretrain-2.ckpt'}" in result.stdout
    assert damaged.stat().st_size > 64 * 1024  # steps 3-4 redone and step 4 saved again, whole
    aside = tmp_path / "checkpoints" / "albert_pretrain-4.ckpt.replaced"  # the damaged bytes are kept, not lost
    assert aside.stat().st_size == damaged.stat().st_size - 64 and f"moved aside to {aside}" in result.stdout
    check_curves(tmp_path, metrics_by_step(tmp_path / "metrics.jsonl"))  # step 4 logged twice, shown once


def test_retention_deletes_only_the_checkpoints_of_this_training(data, tmp_path):
    """A save folder already holding files the run did not write: a damaged `albert_pretrain-999.ckpt` (numbered
    above every step of the run) and a readable weights-only checkpoint under the run's name. Retention once kept the N
    highest numbers of every matching file, so with save_checkpoint_num 1 each save deleted the file it had just
    written and the run ended with no checkpoint. Now both strangers keep their bytes (one warning each), the run's
    newest checkpoint stays (readable by others: 0644 minus the umask, not MindSpore's 0400) and resumes, and the
    resumed run prunes the first run's checkpoint."""
    import mindspore as ms

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    damaged, weights_only = folder / "albert_pretrain-999.ckpt", folder / "albert_pretrain-1.ckpt"
    damaged.write_bytes(bytes(range(256)) * 12)
    ms.save_checkpoint([{"name": "w", "data": ms.Tensor(np.ones(3, np.float32))}], str(weights_only))
    strangers = {path: path.read_bytes() for path in (damaged, weights_only)}
    args = pretrain(data, tmp_path, "--save_checkpoint_steps", "2", "--save_checkpoint_num", "1", "--log_steps", "1")
    first = ok(run(args + ["--train_steps", "6"], preexec_fn=lambda: os.umask(0o027)))
    assert [line for line in first.stdout.splitlines() if line.startswith("saved ")] == \
        [f"saved {folder / f'albert_pretrain-{step}.ckpt'}" for step in (2, 4, 6)]
    for path in strangers:
        assert sum(line.startswith(f"warning: {path} is not a checkpoint of this run")
                   for line in first.stdout.splitlines()) == 1, first.stdout
    assert checkpoint_steps(folder) == [1, 6, 999]
    assert stat.S_IMODE((folder / "albert_pretrain-6.ckpt").stat().st_mode) == 0o640  # 0644 minus the umask
    newest = ms.load_checkpoint(str(folder / "albert_pretrain-6.ckpt"))
    assert int(newest["micro_step"].asnumpy()) == 6 and int(newest["batch_size"].asnumpy()) == 8
    second = ok(run(args + ["--train_steps", "8"]))
    assert f"resumed from {folder / 'albert_pretrain-6.ckpt'}: optimizer step 6 of 8" in second.stdout
    assert checkpoint_steps(folder) == [1, 8, 999]
    assert sorted(metrics_by_step(tmp_path / "metrics.jsonl")) == list(range(1, 9))
    assert all(path.read_bytes() == content for path, content in strangers.items())


CREATE = ["-m", "src.create_pretraining_data", "--max_seq_length", "32", "--max_predictions_per_seq", "5",
          "--dupe_factor", "1", "--random_seed", "1", "--progress", "false", "--records_per_file", "40"]


def test_data_creation_killed_leaves_nothing_that_passes_for_data(data, tmp_path):
    from src.data.pipelines import count_rows, load_data_meta, read_column

    def create(output: Path, *extra: str) -> List[str]:
        return CREATE + ["--input_file", str(data["folder"] / "corpus.txt"), "--output_file", str(output),
                         "--spm_model_file", str(data["folder"] / "spm.model"), *extra]

    ok(run(create(tmp_path / "clean" / "train.mindrecord")))
    expected = read_column(tmp_path / "clean" / "train.mindrecord", "input_ids")
    assert len(load_data_meta(tmp_path / "clean" / "train.mindrecord")["files"]) >= 3

    # Killed while the second file is being written (the first one is complete): nothing under the output's
    # names, so a plain rerun just works.
    cut = tmp_path / "cut" / "train.mindrecord"
    killed_at("mindrecord_write", 2, create(cut))
    assert not list(cut.parent.glob("train.mindrecord*"))
    ok(run(create(cut)))
    np.testing.assert_array_equal(read_column(cut, "input_ids"), expected)
    assert [p.name for p in cut.parent.iterdir() if p.name.startswith(".")] == [], "stale staging folder left"

    # Killed after the first file was moved into place: without the meta file it is refused everywhere.
    half = tmp_path / "half" / "train.mindrecord"
    killed_at("mindrecord_publish", 1, create(half))
    assert (half.parent / "train.mindrecord00000").exists() and not (half.parent / "train.mindrecord.meta.json").exists()
    one_line_error(run(pretrain({"train": half}, tmp_path / "out", "--train_steps", "1")), "not completely written")
    one_line_error(run(pretrain({"train": half.parent}, tmp_path / "out", "--train_steps", "1")),
                   "train.mindrecord00000: its index file train.mindrecord00000.db is missing", "interrupted")
    one_line_error(run(create(half)), "interrupted", "--overwrite")
    ok(run(create(half, "--overwrite", "true")))
    np.testing.assert_array_equal(read_column(half, "input_ids"), expected)

    # A worker process killed while writing its file (as the OOM killer would): the run stops with one line.
    lost = tmp_path / "lost" / "train.mindrecord"
    result = run(["tests/fault_injection.py", "mindrecord_write", "1", *create(lost, "--num_workers", "2")])
    one_line_error(result, "a worker process died", "nothing was written")
    assert not lost.parent.exists()

    # Part 1 of 2 killed mid-publish beside a complete part 0: the folder does not pass for the data set, and the
    # rerun of part 1 alone completes it to the union of the parts, every record of the unsharded run once.
    parts = tmp_path / "parts" / "train.mindrecord"
    ok(run(create(parts, "--num_shards", "2", "--shard_index", "0")))
    killed_at("mindrecord_publish", 1, create(parts, "--num_shards", "2", "--shard_index", "1"))
    one_line_error(run(pretrain({"train": parts.parent}, tmp_path / "out", "--train_steps", "1")),
                   "part 1 of 2 of train.mindrecord is missing")
    ok(run(create(parts, "--num_shards", "2", "--shard_index", "1", "--overwrite", "true")))
    assert count_rows(parts.parent) == len(expected)
    union = read_column(parts.parent, "input_ids")
    assert sorted(map(bytes, union)) == sorted(map(bytes, expected))


@pytest.mark.skipif(not ASSETS.is_dir(), reason=f"test assets not found at {ASSETS}")
def test_finetuning_killed_mid_run_resumes_to_the_uninterrupted_trajectory(tmp_path):
    """With dropout at every place (embeddings, attention probabilities, layer outputs, classifier): the killed
    run's steps repeat the reference's, from another process, and the resumed ones continue them (was: masks
    varied from run to run and restarted on resume)."""
    mrpc = make_glue(tmp_path, "mrpc", 64, 8)

    def finetune(out: Path) -> List[str]:
        return ["run_classifier.py", "--output_dir", str(out), *TINY_FINETUNE, "--train_data_file_path",
                str(mrpc["train"]), "--do_eval", "false", "--train_batch_size", "8", "--epoch_num", "4",
                "--log_steps", "1", "--save_checkpoint_steps", "5", "--save_checkpoint_num", "2",
                "--net_cfg.hidden_dropout_prob", "0.1", "--net_cfg.attention_probs_dropout_prob", "0.1"]

    reference = ok(run(finetune(tmp_path / "reference")))
    expected = metrics_by_step(tmp_path / "reference" / "metrics.jsonl")
    assert len(expected) == 32
    out = tmp_path / "killed"
    killed_after_rows(finetune(out), out / "metrics.jsonl", random.Random(5).randint(12, 24))
    killed_at("checkpoint_rename", 1, finetune(out))
    resumed = ok(run(finetune(out)))
    assert "resumed from" in resumed.stdout
    random_start = "no load_pretrain_checkpoint_path: the whole network starts from random weights"
    assert random_start in reference.stdout and random_start not in resumed.stdout  # was printed before "resumed"
    assert_same_trajectory(metrics_by_step(out / "metrics.jsonl"), expected)
    assert digest(resumed.stdout) == digest(reference.stdout)
    import mindspore as ms  # the count the masks follow moved with the steps (was: a count stuck at 0 would pass)
    final = ms.load_checkpoint(str(max((out / "checkpoints").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)))
    assert int(final["dropout_calls"].asnumpy()[0]) == int(final["micro_step"].asnumpy()) == 32


def test_a_folder_that_cannot_hold_a_checkpoint_fails_before_training(data, tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    args = pretrain(data, tmp_path / "out", "--train_steps", "2", "--log_steps", "1")
    result = run(args + ["--save_checkpoint_path", str(blocker / "checkpoints")])
    one_line_error(result, str(blocker / "checkpoints"), "Not a directory")
    assert "step 1/2" not in result.stdout

    def full_disk():  # files may not grow beyond 64 KiB: writes fail as on a full disk (EFBIG instead of ENOSPC)
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.RLIM_INFINITY))
    result = run(args, preexec_fn=full_disk)
    one_line_error(result, f"cannot write checkpoints to {tmp_path / 'out' / 'checkpoints'}", "File too large",
                   "MiB")
    assert "step 1/2" not in result.stdout
    assert not list((tmp_path / "out").glob("**/*.ckpt")) and not list((tmp_path / "out").glob("**/.tmp-*"))
