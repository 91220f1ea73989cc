"""run_pretrain.py, pretrain_eval.py and src.plot_metrics as users run them: real subprocesses, GRAPH mode, CPU.

Evaluation is checked against HF transformers computing the same metrics, TensorBoard summaries against
metrics.jsonl through TensorBoard's own reader; kill -9 and resume are in test_crash_safety.py.
"""
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

from tests.pretrain_helpers import (ENV, ROOT, TINY, check_curves, metrics_by_step, ok, one_line_error, pretrain, run,
                                    tensorboard)


def test_absurd_loss_scale_overflows_then_falls_and_training_proceeds(data, tmp_path):
    # Weights drawn with stddev 1 give first gradients above 1.2, so that times 3e38 they exceed float32's range.
    result = ok(run(pretrain(data, tmp_path, "--train_steps", "40", "--log_steps", "1", "--loss_scale_value", "3.0e38",
                    "--scale_factor", "2", "--scale_window", "1000", "--enable_save_ckpt", "false",
                    "--optimizer_cfg.AdamWeightDecay.learning_rate", "2e-3",
                    "--optimizer_cfg.AdamWeightDecay.warmup_steps", "0", "--net_cfg.initializer_range", "1.0")))
    rows = [metrics_by_step(tmp_path / "metrics.jsonl")[step] for step in range(1, 41)]
    # fp32 gradients times 3e38 hold inf: the first update is skipped and the scale halves.
    assert rows[0]["overflow_count"] == 1 and rows[0]["loss_scale"] == pytest.approx(1.5e38, rel=1e-6)
    for row in rows:  # every overflow (and nothing else, within scale_window) divides the scale by scale_factor
        assert row["loss_scale"] == pytest.approx(3.0e38 / 2 ** row["overflow_count"], rel=1e-6)
    # then overflows all but stop: the scale has fallen to where the gradients fit, and at most an occasional one
    # halves it again as the gradients grow (when depends on float32 rounding along the run: step 17 or step 32 of
    # the same run as the kernels' sums changed order)
    assert rows[-1]["overflow_count"] < 12 and rows[-1]["overflow_count"] - rows[9]["overflow_count"] <= 2
    assert np.mean([r["mlm_loss"] for r in rows[-5:]]) < rows[0]["mlm_loss"] - 0.3  # and training proceeds
    assert "warning" not in result.stdout + result.stderr  # a run that learns: no flat-loss or warmup warning


def test_train_steps_count_optimizer_steps_with_accumulation(data, tmp_path):
    """Also what such a run reports: its log file, TensorBoard summaries, and the warnings of a run that cannot
    learn (AdamWeightDecay's default 10000 warmup steps in a 6-step run: the learning rate stays near 0)."""
    result = ok(run(pretrain(data, tmp_path, "--train_steps", "6", "--accumulation_steps", "3", "--log_steps", "2",
                             "--save_checkpoint_steps", "4", "--save_checkpoint_num", "5")))
    rows = metrics_by_step(tmp_path / "metrics.jsonl")
    assert sorted(rows) == [2, 4, 6]
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("*.ckpt")) == \
        ["albert_pretrain-4.ckpt", "albert_pretrain-6.ckpt"]
    assert "6 optimizer steps x 3 micro-batch(es)" in result.stdout
    line = next(l for l in result.stdout.splitlines() if l.startswith("step 6/6"))
    for field in ("epoch", "loss", "mlm", "sop", "lr", "loss scale", "overflows", "samples/s", "tokens/s", "eta"):
        assert field in line
    config = json.loads((tmp_path / "albert_config.json").read_text())
    assert config["hidden_size"] == 32 and config["vocab_size"] == 1000  # vocab from the data's tokenizer

    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning: ")]
    assert warnings[0] == ("warning: the learning rate never leaves warmup: warmup is 10000 optimizer steps "
                           f"(optimizer_cfg.AdamWeightDecay) but the run has 6, so it rises only to {1e-4 * 5 / 10000:.3g}"
                           " at the last step (peak learning_rate 0.0001); lower warmup_steps (e.g. a tenth of the "
                           "run) or train longer")
    assert warnings[1].startswith(f"warning: the loss has not moved in the first 4 of 6 steps: {rows[2]['loss']:.4f} "
                                  f"at step 2, {rows[4]['loss']:.4f} at step 4 (less than 2% apart) with a learning "
                                  f"rate of {rows[4]['lr']:.3g}")
    assert len(warnings) == 2
    log = (tmp_path / "logs" / "pretrain.log").read_text().splitlines()
    assert log[0].startswith("--- ") and " pretrain --data_dir " in log[0]
    assert log[1:] == result.stdout.splitlines()  # every line, in order, once
    events = check_curves(tmp_path, rows)
    assert [event.value for event in events.Scalars("train/epoch")] == pytest.approx([rows[s]["epoch"] for s in rows])
    settings = events.Tensors("settings/text_summary")[0]
    assert settings.step == 0 and "    train_steps: 6\n" in settings.tensor_proto.string_val[0].decode()


def test_mindspore_plugin_warnings_show_only_with_verbose(data, tmp_path):
    """`--device_target auto` makes MindSpore try its Ascend and GPU plugins, and it logs a WARNING for each one it
    cannot load: hidden unless --verbose (or GLOG_v set by the user), the device line shown either way. The runs stop
    right after the device is set up (a missing checkpoint), so no graph is compiled."""
    env = {key: value for key, value in ENV.items() if key != "GLOG_v"}
    args = [sys.executable, *pretrain(data, tmp_path, "--device_target", "auto", "--load_checkpoint_path",
                                      str(tmp_path / "missing.ckpt"))]
    printed = {}
    for extra in ([], ["--verbose"]):
        result = subprocess.run(args + extra, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 2 and "device: " in result.stdout, result.stdout + result.stderr
        printed[bool(extra)] = result.stdout + result.stderr
    assert "error: checkpoint not found" in printed[False]
    for line in ("[WARNING]", "Load dynamic library"):  # the records and their continuation lines
        assert line not in printed[False] and line in printed[True], line


def test_epochs_come_from_the_dataset_size(data, tmp_path):
    from src.data.pipelines import count_rows

    rows = count_rows(data["train"])
    result = ok(run(pretrain(data, tmp_path, "--batch_size", "256", "--epoch_size", "2", "--log_steps", "100",
                             "--enable_save_ckpt", "false", "--enable_tensorboard", "false")))
    steps = 2 * (rows // 256)
    assert f"{rows} rows; per rank {rows // 256} batches of 256 per epoch; {steps} optimizer steps" in result.stdout
    assert max(metrics_by_step(tmp_path / "metrics.jsonl")) == steps
    assert not (tmp_path / "tensorboard").exists()


def hf_metrics(hf_model, data_file: Path) -> Dict[str, float]:
    """The four metrics computed with HF AlbertForPreTraining (torch) over every row of `data_file`."""
    import torch

    from src.data.pipelines import create_pretraining_dataset

    totals = np.zeros(6)
    dataset = create_pretraining_dataset(data_file, batch_size=64, shuffle=False, drop_remainder=False)
    for ids, mask, segments, labels, positions, mlm_ids, weights in dataset.create_tuple_iterator(output_numpy=True):
        with torch.no_grad():
            out = hf_model(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                           token_type_ids=torch.tensor(segments, dtype=torch.long))
        logits = out.prediction_logits.double().numpy()
        picked = np.take_along_axis(logits, positions[..., None].astype(np.int64), axis=1)
        log_probs = picked - np.log(np.exp(picked - picked.max(-1, keepdims=True)).sum(-1, keepdims=True)) \
            - picked.max(-1, keepdims=True)
        nll = -np.take_along_axis(log_probs, mlm_ids[..., None].astype(np.int64), -1)[..., 0]
        sop = out.sop_logits.double().numpy()
        sop_log_probs = sop - np.log(np.exp(sop).sum(-1, keepdims=True))
        labels = labels.reshape(-1)
        totals += [(weights * (picked.argmax(-1) == mlm_ids)).sum(), weights.sum(), (weights * nll).sum(),
                   (sop.argmax(-1) == labels).sum(), -sop_log_probs[np.arange(len(labels)), labels].sum(), len(labels)]
    return {"masked_lm_accuracy": totals[0] / totals[1], "masked_lm_loss": totals[2] / totals[1],
            "sentence_order_accuracy": totals[3] / totals[5], "sentence_order_loss": totals[4] / totals[5]}


def test_pretrain_eval_equals_hf_on_a_converted_checkpoint(data, tmp_path):
    from tests.hf_reference import make_hf_pretraining, save_hf

    model = make_hf_pretraining(dict(vocab_size=1000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=48, max_position_embeddings=64),
                                seed=3)
    hf_dir = save_hf(model, tmp_path / "hf", safetensors=True)
    ok(run(["-m", "src.convert_checkpoint", "--src", "hf", "--input", str(hf_dir), "--output",
            str(tmp_path / "converted.ckpt")]))
    result = ok(run(["pretrain_eval.py", "--eval_data_dir", str(data["eval"]), "--eval_ckpt",
                     str(tmp_path / "converted.ckpt"), "--albert_config_file", str(hf_dir / "config.json"),
                     "--eval_batch_size", "48", "--output_dir", str(tmp_path), "--device_target", "CPU"]))
    ours = json.loads((tmp_path / "pretrain_eval.json").read_text())
    expected = hf_metrics(model, data["eval"])
    for key, value in expected.items():
        assert ours[key] == pytest.approx(value, rel=1e-4, abs=1e-6), key
    from src.data.pipelines import count_rows
    assert ours["examples"] == count_rows(data["eval"])  # the padded last batch adds nothing
    assert "masked_lm_accuracy" in result.stdout
    # Progress (a plain last line: no terminal here), the log beside the json, TensorBoard at the checkpoint's step
    # (a converted checkpoint has none: 0).
    done = f"eval: {ours['examples']} rows in "
    assert result.stderr.startswith(done) and "\r" not in result.stderr
    log = (tmp_path / "logs" / "pretrain_eval.log").read_text()
    assert done in log and '"masked_lm_accuracy"' in log and f"wrote {tmp_path / 'pretrain_eval.json'}" in log
    events = tensorboard(tmp_path / "tensorboard")
    for key in expected:
        (event,) = events.Scalars(f"pretrain_eval/{key}")
        assert event.step == 0 and event.value == pytest.approx(ours[key], rel=1e-6), key


def test_plot_metrics_writes_a_png_with_the_newest_row_per_step(tmp_path):
    from src.plot_metrics import read_metrics

    rows = [{"step": s, "loss": 9.0 - s, "mlm_loss": 8.0 - s, "sop_loss": 0.7, "lr": 1e-3 * s} for s in (1, 2, 3)]
    rows.append({"step": 2, "loss": 1.5, "mlm_loss": 1.0, "sop_loss": 0.5, "lr": 2e-3})
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [r["loss"] for r in read_metrics(str(metrics))] == [8.0, 1.5, 6.0]
    result = ok(run(["-m", "src.plot_metrics", str(metrics), "--output", str(tmp_path / "c.png")]))
    png = (tmp_path / "c.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 800  # 8 in x 100 dpi
    assert "3 points" in result.stdout
    from src.plot_metrics import main as plot_main
    metrics.write_text('{"step": 1, "loss": 2}\n{"step": 2, "loss": 1}\n')  # rows without "lr" (was: KeyError)
    assert plot_main([str(metrics), "--output", str(tmp_path / "no_lr.png")]) == 0
    assert (tmp_path / "no_lr.png").read_bytes()[:4] == b"\x89PNG"
    metrics.write_text('{"step": 1, "loss": 2}\nnot json\n')
    bad = run(["-m", "src.plot_metrics", str(metrics)])
    assert bad.returncode == 2 and "metrics.jsonl line 2" in bad.stderr


def test_continued_pretraining_takes_the_network_saved_beside_the_checkpoint(data, tmp_path):
    """A converted public checkpoint X.ckpt comes with X.ckpt.json (src.convert_checkpoint): run_pretrain.py
    reads the network from it as fine-tuning does, instead of the default preset (which would not fit)."""
    import mindspore as ms

    from src.model.albert import AlbertConfig
    from src.model.pretraining_heads import AlbertPreTraining

    config = AlbertConfig.from_preset("albert_tiny", vocab_size=1000, hidden_size=48, embedding_size=16,
                                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    ms.save_checkpoint(AlbertPreTraining(config), str(tmp_path / "public.ckpt"))
    config.to_json_file(str(tmp_path / "public.ckpt.json"))
    result = ok(run(["run_pretrain.py", "--data_dir", str(data["train"]), "--output_dir", str(tmp_path / "out"),
                     "--load_checkpoint_path", str(tmp_path / "public.ckpt"), "--batch_size", "8", "--train_steps",
                     "1", "--device_target", "CPU"]))
    assert f"network: {tmp_path / 'public.ckpt.json'}" in result.stdout
    assert AlbertConfig.from_json_file(str(tmp_path / "out" / "albert_config.json")).hidden_size == 48


def test_bad_input_gives_one_clear_line(data, tmp_path):
    base = ["run_pretrain.py", "--output_dir", str(tmp_path / "out"), *TINY, "--train_steps", "2"]
    one_line_error(run(base), "set --data_dir")
    one_line_error(run(base + ["--data_dir", str(tmp_path / "nowhere")]), "data not found", "nowhere")
    one_line_error(run(base + ["--data_dir", str(data["train"]), "--save_checkpoint_step", "5"]),
                   "did you mean '--save_checkpoint_steps'")
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": {"input_ids": {"type": "int64", "rank": 1, "shape": [128]}}}))
    one_line_error(run(base + ["--data_dir", str(data["train"]), "--schema_dir", str(schema)]),
                   "column 'input_ids' is int [32]", "[128]")
    one_line_error(run(base + ["--data_dir", str(data["train"]), "--net_cfg.vocab_size", "500"]),
                   "1000-token vocabulary", "vocab_size 500")
    one_line_error(run(base + ["--data_dir", str(data["train"]), "--distribute", "true"]),
                   "not started by a launcher", "(MindSpore: ")
    under_mpirun = subprocess.run([sys.executable, *base, "--data_dir", str(data["train"]), "--distribute", "true"],
                                  cwd=ROOT, env=dict(ENV, OMPI_COMM_WORLD_SIZE="2", OMPI_COMM_WORLD_RANK="1"),
                                  capture_output=True, text=True, timeout=300)
    one_line_error(under_mpirun, "rank 1 of mpirun could not start the collective communication (MindSpore: ")
    assert not (tmp_path / "out").exists()  # no output folder (and no log in one) for a run that cannot start


def test_checkpoint_of_another_config_or_plan_is_refused(data, tmp_path):
    first = pretrain(data, tmp_path / "a", "--train_steps", "2", "--save_checkpoint_steps", "2")
    ok(run(first))
    checkpoint = tmp_path / "a" / "checkpoints" / "albert_pretrain-2.ckpt"
    wider = pretrain(data, tmp_path / "b", "--train_steps", "4", "--net_cfg.hidden_size", "48",
                     "--load_checkpoint_path", str(checkpoint))
    one_line_error(run(wider), f"{checkpoint} was written by a run that trained something else "
                   "(net_cfg.hidden_size: checkpoint 32, now 48)")
    other_batch = pretrain(data, tmp_path / "a", "--train_steps", "4", "--batch_size", "4")
    one_line_error(run(other_batch), "read its data differently", "batch_size: checkpoint 8, now 4",
                   "start a new run in another save_checkpoint_path")
    # naming its own checkpoint too (ModelZoo's way to resume): the folder's own checkpoint is what is resumed, so
    # taking the weights only would not help (was: advised, and refused the same way with it)
    one_line_error(run(other_batch + ["--load_checkpoint_path", str(checkpoint)]), "batch_size: checkpoint 8, now 4",
                   "start a new run in another save_checkpoint_path")
    # Continued pretraining from that run's checkpoint with other settings, in a new folder: the advice was to use
    # another save folder, which it did; its weights alone can be taken.
    continued = pretrain(data, tmp_path / "d", "--train_steps", "1", "--batch_size", "4", "--load_checkpoint_path",
                         str(checkpoint))
    one_line_error(run(continued), "batch_size: checkpoint 8, now 4", "start from its weights only (step 0, fresh "
                   "optimizer state) with --load_weights_only true")
    assert f"initialised the network from {checkpoint} (weights only" in ok(run(continued + [
        "--load_weights_only", "true"])).stdout
    one_line_error(run(pretrain(data, tmp_path / "e", "--load_weights_only", "true")),
                   "load_weights_only is true but --load_checkpoint_path is not set")
    one_line_error(run(pretrain(data, tmp_path / "c", "--load_checkpoint_path", str(tmp_path / "missing.ckpt"))),
                   "checkpoint not found")


def test_weights_only_checkpoint_initialises_and_a_restart_continues_the_run(data, tmp_path):
    import mindspore as ms

    from src.model.albert import AlbertConfig
    from src.model.pretraining_heads import AlbertPreTraining

    config = AlbertConfig.from_preset("albert_tiny", vocab_size=1000, hidden_size=32, embedding_size=16,
                                      num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    initial = AlbertPreTraining(config)
    marker = initial.sop_classifier.classifier.bias
    marker.set_data(ms.Tensor(np.array([5.0, -5.0], np.float32)))  # SOP predicts class 0 for everything
    ms.save_checkpoint(initial, str(tmp_path / "init.ckpt"))
    args = pretrain(data, tmp_path / "run", "--load_checkpoint_path", str(tmp_path / "init.ckpt"),
                    "--save_checkpoint_steps", "1", "--log_steps", "1",
                    "--optimizer_cfg.AdamWeightDecay.learning_rate", "1e-9")
    first = ok(run(args + ["--train_steps", "2"]))
    assert f"initialised the network from {tmp_path / 'init.ckpt'}" in first.stdout
    trained = ms.load_checkpoint(str(tmp_path / "run" / "checkpoints" / "albert_pretrain-2.ckpt"))
    np.testing.assert_allclose(trained["sop_classifier.classifier.bias"].asnumpy(), [5.0, -5.0], atol=1e-4)
    second = ok(run(args + ["--train_steps", "3"]))
    assert "already holds this run's checkpoints: continuing from them" in second.stdout
    assert f"resumed from {tmp_path / 'run' / 'checkpoints' / 'albert_pretrain-2.ckpt'}" in second.stdout
    assert sorted(metrics_by_step(tmp_path / "run" / "metrics.jsonl")) == [1, 2, 3]
    # the same folder given other initial weights: said in a warning (was: the same plain line as a restart)
    shutil.copy(tmp_path / "init.ckpt", tmp_path / "other.ckpt")
    third = ok(run(args + ["--train_steps", "3", "--load_checkpoint_path", str(tmp_path / "other.ckpt")]))
    assert (f"warning: {tmp_path / 'run' / 'checkpoints'} holds the checkpoints of a run that started from "
            f"{tmp_path / 'init.ckpt'}: continuing that run, not starting from {tmp_path / 'other.ckpt'}") \
        in third.stdout


def test_a_fresh_run_moves_an_earlier_metrics_file_aside_and_leaves_no_lock(data, tmp_path):
    """metrics.jsonl of an earlier run into the same folder is kept (moved aside, never deleted); the run's lock on
    its output folders is gone when it ends."""
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "loss": 9.5}\n')
    (tmp_path / "tensorboard").mkdir()
    (tmp_path / "tensorboard" / "events.out.tfevents.earlier").write_bytes(b"theirs")
    ok(run(pretrain(data, tmp_path, "--train_steps", "2", "--log_steps", "1", "--enable_save_ckpt", "false")))
    assert (tmp_path / "metrics.jsonl.previous").read_text() == '{"step": 1, "loss": 9.5}\n'
    assert (tmp_path / "tensorboard.previous" / "events.out.tfevents.earlier").read_bytes() == b"theirs"
    assert sorted(metrics_by_step(tmp_path / "metrics.jsonl")) == [1, 2]
    check_curves(tmp_path, metrics_by_step(tmp_path / "metrics.jsonl"))  # the new curves alone
    assert not list(tmp_path.rglob("*.lock"))
