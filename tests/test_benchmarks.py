"""The benchmark scripts run end to end on a tiny config with both sides and write the JSON they promise
(numbers are not checked: timings belong in benchmarks, never in tests)."""
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Tuple

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_common  # noqa: E402
from src.model import cpu_kernels  # noqa: E402

TINY = ["--set", "vocab_size=100", "--set", "hidden_size=32", "--set", "embedding_size=16",
        "--set", "num_hidden_layers=2", "--set", "num_attention_heads=2", "--set", "intermediate_size=64",
        "--batch_size", "2", "--seq_length", "32", "--steps", "2", "--rounds", "1", "--threads", "1",
        "--peak_size", "128"]


def bench(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def check_report(path: Path, benchmark: str, unit: str, others: Tuple[str, ...] = ("torch",)) -> dict:
    report = json.loads(path.read_text())
    assert report["benchmark"] == benchmark and report["unit"] == unit
    assert report["flop_formula"].startswith("training step = 3 x forward" if benchmark == "train" else "one forward")
    assert set(report["environment"]["frameworks"]) == {"ours", *others}
    assert report["environment"]["commit"] and report["environment"]["cpu_model"]  # what was measured, where
    (result,) = report["results"]
    assert (result["variant"], result["batch_size"], result["seq_length"]) == ("base", 2, 32)
    assert result["same_weights"] is True
    sides = result["sides"]
    for key in (f"flops_per_{unit}", *(["machine_peak_gflops"] * any(s["precision"] == "float32"
                                                                      for s in sides.values()))):
        assert math.isfinite(result[key]) and result[key] > 0, key
    for side in ("ours", *others):
        for key in bench_common.STAT_KEYS:
            value = sides[side][key]
            assert isinstance(value, float) and math.isfinite(value) and value > 0, (side, key, value)
        assert len(sides[side]["times_ms"]) == 2
        if "int8" not in side:  # int8 products are not held to the float32 peak
            assert sides[side]["fraction_of_peak"] <= 1.5  # against the best product rate measured in the same run
        start, end = sides[side]["matmul_gflops_start"], sides[side]["matmul_gflops_end"]  # each worker measures twice
        assert min(start, end) > 0 and sides[side]["matmul_gflops"] == max(start, end)
    # The machine's peak in each precision: the best rate of the sides computing in it (float32 and bfloat16 apart).
    by_precision = result["machine_peak_gflops_by_precision"]
    assert set(by_precision) == {s["precision"] for s in sides.values()}
    for precision, peak in by_precision.items():
        assert peak == max(s["matmul_gflops"] for s in sides.values() if s["precision"] == precision)
    assert result["machine_peak_gflops"] == by_precision.get("float32")
    for side in others:
        assert result["speed_ratios"][side] == pytest.approx(sides[side]["median_ms"] / sides["ours"]["median_ms"])
    return result


def test_bench_train_against_torch(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "train.json"
    done = bench("bench_train.py", *TINY, "--compare", "torch", "--profile", "2", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = check_report(out, "train", "step")
    assert result["first_loss_abs_diff"] < 1e-4  # same weights, same batch: the same loss before any update
    assert result["sides"]["ours"]["masked_positions"] == 15  # 20 asked, at most seq/2 - 1 fit
    assert "ms/step" in done.stdout and "ratio" in done.stdout
    # --profile: time per operation type of each side; the products are there under their framework's names (ours:
    # the compiled kernels by name from their own counters, and inside them the threads' CPU time of the products).
    for side, products in (("ours", {"kernel MatMulNTBias", "kernel DenseGrad", "MatMul"}),
                           ("torch", {"aten::addmm", "aten::mm"})):
        rows = result["sides"][side]["op_profile"]
        profile = [row for row in rows if not row.get("cpu_time")]
        assert profile and all(row["ms_per_step"] > 0 and row["calls_per_step"] > 0 for row in rows)
        assert [row["ms_per_step"] for row in profile] == sorted((row["ms_per_step"] for row in profile),
                                                                reverse=True)
        assert products & {row["op"] for row in profile}, (side, [row["op"] for row in profile])
    inside = {row["op"] for row in result["sides"]["ours"]["op_profile"] if row.get("cpu_time")}
    assert "thread: sgemm" in inside and "Custom" not in {row["op"] for row in result["sides"]["ours"]["op_profile"]}
    assert "time per operation type" in done.stdout and "inside the kernels, CPU time" in done.stdout


@pytest.mark.skipif(not (cpu_kernels.available() and cpu_kernels.bf16_support()[0]),
                    reason=f"bfloat16 training: {cpu_kernels.bf16_support()[1] or cpu_kernels.status()}")
def test_bench_train_in_bfloat16_against_torch_bfloat16_autocast(tmp_path):
    """--compute_type bfloat16: our step with the kernels' bfloat16 products beside HF on PyTorch under bfloat16
    autocast, both held to the bfloat16 product peak (the float32 sides of test_bench_train_against_torch to
    sgemm's)."""
    pytest.importorskip("transformers")
    out = tmp_path / "train_bf16.json"
    done = bench("bench_train.py", *TINY, "--compute_type", "bfloat16", "--compare", "torch_bf16", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = check_report(out, "train", "step", ("torch_bf16",))
    assert {side: facts["precision"] for side, facts in result["sides"].items()} == {"ours": "bfloat16",
                                                                                    "torch_bf16": "bfloat16"}
    assert result["config"]["compute_type"] == "bfloat16" and result["machine_peak_gflops"] is None
    # Same weights, same batch, both in bfloat16 products: close, within bfloat16's rounding, not equal.
    losses = result["first_loss"]
    assert 0 < abs(losses["ours"] - losses["torch_bf16"]) < 5e-3 * losses["torch_bf16"]
    assert result["first_loss_abs_diff_by_side"] == {"torch_bf16": abs(losses["ours"] - losses["torch_bf16"])}
    assert "torch_bf16" in done.stdout and "first loss: ours" in done.stdout


def test_bench_infer_against_torch_and_the_compiled_kernels(tmp_path):
    """HF on PyTorch and, with --compare kernels, our network in-process on the compiled CPU kernels (not exported):
    same weights, so both sides' logits agree with the exported MINDIR's. Where the CPU has native bfloat16,
    --compare bf16 adds PyTorch's bfloat16 autocast and our kernels' bfloat16 products, and where it has exact int8
    products --compare int8 our kernels' int8 ones: close, not equal; each low-precision side's peak in its own
    precision. --profile lists each side's own operators."""
    pytest.importorskip("transformers")
    out = tmp_path / "infer.json"
    bf16 = ("torch_bf16", "ours_kernels_bf16") if cpu_kernels.bf16_support()[0] else ()
    int8 = ("ours_kernels_int8",) if cpu_kernels.int8_support()[0] else ()
    compare = "torch,kernels" + (",bf16" if bf16 else "") + (",int8" if int8 else "")
    done = bench("bench_infer.py", *TINY, "--compare", compare, "--profile", "1", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = check_report(out, "infer", "batch", ("torch", "ours_kernels", *bf16, *int8))
    # --profile: each MindSpore side its own operators: the exported MINDIR's products are MatMul, the kernels' sides
    # have none (every dense layer a kernel), though they profile after it in the same work folder.
    mindspore_sides = [side for side in result["sides"] if side.startswith("ours")]
    ops = {side: {row["op"] for row in result["sides"][side]["op_profile"]} for side in mindspore_sides}
    assert "MatMul" in ops["ours"], ops["ours"]
    for side in set(ops) - {"ours"}:
        assert "MatMul" not in ops[side] and any(op.startswith("kernel ") for op in ops[side]), (side, ops[side])
    assert result["speed_ratio"] == result["speed_ratios"]["torch"]
    assert result["sides"]["ours"]["export_s"] > 0
    assert result["sides"]["ours_kernels"]["kernels"] is cpu_kernels.available()
    assert all(result["sides"][side]["precision"] == "int8" for side in int8)
    diffs = result["logits_max_abs_diff_by_side"]
    assert set(diffs) == {"torch", "ours_kernels", *bf16, *int8}
    assert max(diffs["torch"], diffs["ours_kernels"]) < 1e-5 < result["logits_max_abs"]
    assert all(0 < diffs[side] < 0.05 * result["logits_max_abs"] for side in bf16)
    assert all(0 < diffs[side] < 0.1 * result["logits_max_abs"] for side in int8)
    assert "ms/batch" in done.stdout


ORT_FLOAT_SIDES = ("ort_hf", "ort_hf_fused", "ort_ours")
ORT_INT8_SIDES = ("ort_hf_int8", "ort_ours_int8")


def test_bench_infer_against_onnxruntime(tmp_path):
    """HF's torch.onnx.export (plain, fused and made int8 by ONNX Runtime's recipe) and our ONNX export (float32 and
    int8) in ONNX Runtime: same weights, so the float logits of every side agree with ours and the int8 ones come
    close; the int8 sides run integer products (ORT's own profile)."""
    for module in ("transformers", "onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(module)
    out = tmp_path / "infer.json"
    done = bench("bench_infer.py", *TINY, "--compare", "onnxruntime", "--profile", "1", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    result = check_report(out, "infer", "batch", ORT_FLOAT_SIDES + ORT_INT8_SIDES)
    assert result["speed_ratio"] is None  # the torch ratio: no torch side
    diffs = result["logits_max_abs_diff_by_side"]
    assert set(diffs) == set(ORT_FLOAT_SIDES + ORT_INT8_SIDES)
    assert max(diffs[side] for side in ORT_FLOAT_SIDES) < 1e-5 < result["logits_max_abs"]
    assert all(0 < diffs[side] < 0.2 * result["logits_max_abs"] for side in ORT_INT8_SIDES)
    for side in ORT_FLOAT_SIDES + ORT_INT8_SIDES:
        facts = result["sides"][side]
        assert facts["framework"].startswith("onnxruntime ") and facts["export_s"] > 0
        assert facts["peak_rss_mb"] < result["sides"]["ours"]["peak_rss_mb"]  # its own process: no MindSpore
        ops = {row["op"] for row in facts["op_profile"]}
        expected = {"MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"} if "int8" in side else {
            "MatMul", "Gemm", "FusedMatMul"}
        assert expected & ops, (side, ops)
    assert "ort_ours_int8 logits max abs diff from ours" in done.stdout


@pytest.mark.parametrize("script", ["bench_train.py", "bench_infer.py"])
@pytest.mark.parametrize("args, message", [
    (["--bogus"], "unrecognized arguments: --bogus"),
    (["--batch_size", "0"], "--batch_size"),
    (["--compare", "tf"], "--compare"),
    (["--compare", "none,torch"], "--compare"),
    (["--steps", "0"], "--steps must be >= 1"),
])
def test_bad_flag_is_one_line(script, args, message):
    done = bench(script, *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and message in done.stderr, done.stderr


@pytest.mark.parametrize("script, extra", [
    ("bench_train.py", []), ("bench_infer.py", []), ("bench_products.py", []),
    ("bench_accuracy.py", ["--tasks", "mrpc"]),  # each would measure for minutes before writing
])
def test_an_output_that_cannot_be_written_stops_the_run_before_it_measures(script, extra, tmp_path):
    (tmp_path / "afile").write_text("")
    for output, message in ((tmp_path, f"--output {tmp_path} is a folder: name the JSON file to write"),
                            (tmp_path / "afile" / "x.json", f"{tmp_path / 'afile'} is a file, not a folder")):
        workdir = ["--workdir", str(tmp_path / "work")] if script == "bench_accuracy.py" else []
        done = bench(script, *workdir, *extra, "--output", str(output))
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == ["afile"]  # nothing made, no temporary file left


def test_bad_config_key_is_one_line():
    done = bench("bench_train.py", "--set", "hidden_sise=8")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "hidden_sise" in done.stderr, done.stderr


def test_a_failing_configuration_is_reported_and_the_sweep_goes_on(monkeypatch, capsys):
    """As when a worker is killed for memory at seq 512: the other configurations are still measured."""
    calls = []

    def run_pair(script, specs, steps, rounds, run_dir, prepare, progress, profile_steps):
        calls.append(specs["ours"]["seq_length"])
        if specs["ours"]["seq_length"] == 512:
            raise bench_common.WorkerError("the ours worker failed: exited with code -9")
        return {"ours": {"seq": specs["ours"]["seq_length"]}}

    monkeypatch.setattr(bench_common, "run_pair", run_pair)
    monkeypatch.setattr(bench_common, "summarize", lambda raw, *args: {"sides": raw})
    args = bench_common.argparse.Namespace(compare=[], seq_length=[128, 512, 256], batch_size=[8], threads=2,
                                           peak_size=64, seed=0, rounds=1, steps=1, profile=0)
    results, failures = bench_common.run_grid(Path("bench.py"), args, [("base", {})], "step", {},
                                              lambda config, batch, seq: (1.0, {}), lambda raw: {})
    assert calls == [128, 512, 256]
    assert [r["seq_length"] for r in results] == [128, 256]
    assert failures == [{"variant": "base", "batch_size": 8, "seq_length": 512,
                         "error": "the ours worker failed: exited with code -9"}]
    assert bench_common.report_failures(failures) == 1
    assert "[base b8 s512] not measured: the ours worker failed" in capsys.readouterr().err


def test_a_side_that_computes_another_network_fails_the_run(capsys):
    """Sides that share our weights but not our numbers measured another computation: the run reports them and
    exits 1. The figures are the day's (2026-12-06, ALBERT-base): bfloat16 first losses 11.52 (ours, a wrong
    feed-forward) against PyTorch's 12.278 (the fixed kernels: 12.2776), bfloat16 serving logits off by 1.46 of 1.01
    (fixed: 0.024, int8's 0.28); a side with its own weights, or a NaN, as they are."""
    import bench_infer
    import bench_train

    def result(field, diffs, same_weights=True, **extra):
        return {"variant": "base", "batch_size": 8, "seq_length": 128, "same_weights": same_weights, field: diffs,
                **extra}

    def failing(field, scale, limit, *results):
        found = bench_common.disagreements(list(results), field, scale, limit, "output")
        return [failure["error"].split(":")[0] for failure in found]

    loss = "first_loss_abs_diff_by_side"
    of_loss = lambda r: abs(r["first_loss"]["ours"])  # noqa: E731
    assert failing(loss, of_loss, bench_train.FIRST_LOSS_LIMIT,
                   result(loss, {"torch_bf16": 12.278 - 11.52}, first_loss={"ours": 11.52}),
                   result(loss, {"torch_compile_bf16": 12.2781 - 12.2776}, first_loss={"ours": 12.2776}),
                   result(loss, {"torch": 0.9}, same_weights=False, first_loss={"ours": 11.0}),
                   result(loss, {"torch": math.nan}, first_loss={"ours": 11.0})) == ["torch_bf16", "torch"]
    logits = "logits_max_abs_diff_by_side"
    of_logits = lambda r: r["logits_max_abs"]  # noqa: E731
    found = failing(logits, of_logits, bench_infer.LOGITS_LIMIT,
                    result(logits, {"ours_kernels_bf16": 1.46, "torch_bf16": 0.0258}, logits_max_abs=1.015),
                    result(logits, {"ours_kernels_bf16": 0.0238, "ours_kernels_int8": 0.2845}, logits_max_abs=1.015))
    assert found == ["ours_kernels_bf16"]
    failure = bench_common.disagreements([result(logits, {"ours_kernels_bf16": 1.46}, logits_max_abs=1.015)],
                                         logits, of_logits, bench_infer.LOGITS_LIMIT, "logits")
    assert bench_common.report_failures(failure) == 1
    assert ("[base b8 s128] not comparable: ours_kernels_bf16: logits 1.46 away from ours, more than 0.5 x 1.01: "
            "the two do not compute the same network") in capsys.readouterr().err


@pytest.mark.slow
def test_bench_data_every_mode_on_tiny_settings(tmp_path, assets):
    """--scale (with its plot), --stages, --finetune_scale and --readers each report rows whose counts agree with
    what the tools wrote."""
    plot, report = tmp_path / "scale.png", tmp_path / "data.json"
    done = bench("bench_data.py", "--scale", "0.2,0.4", "--plot", str(plot), "--stages", "--stage_mb", "0.2",
                 "--finetune_scale", "--finetune_fraction", "0.001", "--readers", "--max_seq_length", "64",
                 "--max_predictions_per_seq", "10", "--dupe_factor", "2", "--json_out", str(report))
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(report.read_text())
    assert data["environment"]["commit"] and data["environment"]["cpu_model"]  # what was measured, where
    assert [row["corpus_mb"] for row in data["scale"]] == [0.2, 0.4]
    for row in data["scale"]:
        assert row["instances"] > 0 and row["peak_rss_mb"] > 50 and row["output_mb_on_disk"] >= 0
        assert row["MB/s"] == pytest.approx(row["corpus_mb"] / row["seconds"], rel=0.01)
    assert data["scale"][1]["instances"] > 1.5 * data["scale"][0]["instances"]  # twice the text
    assert plot.stat().st_size > 10000 and plot.read_bytes()[:4] == b"\x89PNG"
    assert [row["stage"] for row in data["stages"]] == ["read + split documents", "tokenize (SentencePiece)",
                                                        "pair + mask (x dupe_factor)", "write MindRecord"]
    squad, mnli, race = data["finetune_scale"]
    assert squad["questions"] >= 130 and squad["records"] >= squad["questions"]
    assert mnli["pairs"] == 392 == mnli["records"]
    assert race["questions"] >= 87 and race["records"] == race["questions"]
    assert [row["rows"] > 0 for row in data["readers"]] == [True] * 3


@pytest.mark.parametrize("args, message", [
    (["--scale", "16,x"], "--scale takes comma-separated corpus sizes in MB, got '16,x'"),
    (["--scale", "-1"], "--scale sizes must be > 0 MB"),
    (["--stages", "--corpus", "/nonexistent.txt"], "--corpus not found: /nonexistent.txt"),
    (["--readers", "--spm_model_file", "/nonexistent.model"], "--spm_model_file not found: /nonexistent.model"),
    (["--scale", "1", "--json_out", "/proc/version/d.json"], "/proc/version is a file, not a folder"),
])
def test_bench_data_bad_flag_is_one_line(args, message):
    done = bench("bench_data.py", *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and message in done.stderr, done.stderr


# bench_accuracy.py on a slice: a tiny network, one epoch, the first rows of the real dev sets. The report is held to
# what this test recomputes itself from the answers the script leaves in its work folder and from the dev files read
# here with csv/json (labels, gold answers), not through the package's readers or metrics.
TINY_NET = ["--set", "hidden_size=32", "--set", "embedding_size=16", "--set", "num_hidden_layers=2",
            "--set", "num_attention_heads=2", "--set", "intermediate_size=64", "--epochs", "1", "--squad_epochs", "1",
            "--train_batch_size", "16", "--batch_size", "8", "--max_train_rows", "48"]
# Every in-process and ONNX Runtime path this CPU can run (the OpenVINO paths: test_openvino_serving.py).
ACCURACY_PATHS = tuple(path for path, runs in (("fp32", True), ("bf16", cpu_kernels.bf16_support()[0]), ("int8", True),
                                               ("ckpt_int8", cpu_kernels.int8_support()[0])) if runs)


def run_accuracy_bench(tmp_path, assets, *args: str) -> Tuple[dict, Path]:
    pytest.importorskip("onnxruntime")
    work, out = tmp_path / "work", tmp_path / "accuracy.json"
    done = bench("bench_accuracy.py", "--workdir", str(work), "--assets", str(assets), *TINY_NET, *args,
                 "--paths", "fp32,bf16,int8,ckpt_int8", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "max |logit diff|" in done.stdout
    report = json.loads(out.read_text())
    assert report["environment"]["commit"] and report["environment"]["cpu_model"]
    assert "oneDNN " in report["environment"]["kernels"]  # the version and the ISA its products ran on
    assert [p for p in ("fp32", "bf16", "int8", "ckpt_int8") if p in next(iter(report["tasks"].values()))["paths"]] == \
        list(ACCURACY_PATHS)
    assert bool(report["bf16_skipped"]) == ("bf16" not in ACCURACY_PATHS)
    return report, work


def answers_of(folder: Path) -> dict:
    return {path: [json.loads(line) for line in (folder / f"answers_{path}.jsonl").read_text().splitlines()]
            for path in ACCURACY_PATHS}


def check_paths(result: dict, metrics: dict, agreement: dict, logit_diff: dict = None) -> None:
    """The report's per-path numbers against the ones recomputed here."""
    for path in ACCURACY_PATHS:
        reported = result["paths"][path]
        for name, value in metrics[path].items():
            assert reported["metrics"][name] == pytest.approx(value, abs=1e-9), (path, name)
            assert reported["delta"][name] == pytest.approx(value - metrics["fp32"][name], abs=1e-9), (path, name)
        assert reported["agreement"] == pytest.approx(agreement[path]), path
        if logit_diff is not None:
            assert reported["max_abs_logit_diff"] == pytest.approx(logit_diff[path], rel=1e-6, abs=1e-12), path


def test_bench_accuracy_mrpc_slice_against_the_dev_labels(tmp_path, assets):
    import csv

    import numpy as np
    import onnx

    dev_rows = 40
    report, work = run_accuracy_bench(tmp_path, assets, "--tasks", "mrpc", "--max_dev_rows", str(dev_rows),
                                      "--seq_length", "64")
    with open(assets / "glue" / "MRPC" / "dev.tsv", encoding="utf-8-sig", newline="") as tsv:
        rows = list(csv.reader(tsv, delimiter="\t", quoting=csv.QUOTE_NONE))[1:dev_rows + 1]
    labels = np.array([int(row[0]) for row in rows])
    folder = work / "mrpc"
    requests = [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]
    assert [(r["text_a"], r["text_b"]) for r in requests] == [(row[3], row[4]) for row in rows]  # dev order, pairs
    answers = answers_of(folder)
    predicted, logits = {}, {}
    for path, rows_out in answers.items():
        assert [a["id"] for a in rows_out] == [r["id"] for r in requests]
        logits[path] = np.array([a["logits"] for a in rows_out])
        predicted[path] = np.array([int(a["label"]) for a in rows_out])
        assert (predicted[path] == logits[path].argmax(1)).all()

    def metrics(pred):
        tp, fp, fn = (np.sum((pred == 1) & (labels == 1)), np.sum((pred == 1) & (labels == 0)),
                      np.sum((pred == 0) & (labels == 1)))
        return {"accuracy": 100 * np.mean(pred == labels), "f1": 100 * 2 * tp / (2 * tp + fp + fn)}

    result = report["tasks"]["mrpc"]
    assert result["dev_examples"] == dev_rows and result["train_rows"] == 48
    check_paths(result, {p: metrics(predicted[p]) for p in ACCURACY_PATHS},
                {p: np.mean(predicted[p] == predicted["fp32"]) for p in ACCURACY_PATHS},
                {p: np.abs(logits[p] - logits["fp32"]).max() for p in ACCURACY_PATHS})
    assert result["majority_class_accuracy"] == pytest.approx(100 * max(np.mean(labels), 1 - np.mean(labels)))
    # float32 through src.predict scores as the fine-tuning run's own evaluation of the checkpoint
    evaluation = json.loads((folder / "finetune" / "eval" / "eval_results.json").read_text())
    assert 100 * evaluation["accuracy"] == pytest.approx(metrics(predicted["fp32"])["accuracy"])
    # the report names the checkpoint and data within --workdir, as the evaluation's file does on this machine
    reported = result["fine_tuning"]["eval"]
    assert [work / reported[key] for key in ("checkpoint", "data")] == [Path(evaluation[key])
                                                                      for key in ("checkpoint", "data")]
    assert not any(Path(reported[key]).is_absolute() for key in ("checkpoint", "data"))
    # the int8 path ran the quantized file: integer products; bfloat16 said it used its products
    assert "MatMulInteger" in {node.op_type for node in onnx.load(str(folder / "model_int8.onnx")).graph.node}
    if "bf16" in ACCURACY_PATHS:
        assert "bfloat16 products" in (folder / "predict_bf16.log").read_text()
    if "ckpt_int8" in ACCURACY_PATHS:
        assert "int8 products" in (folder / "predict_ckpt_int8.log").read_text()
        assert 0 < result["paths"]["bf16"]["max_abs_logit_diff"]


def _normalize(text: str) -> str:
    """The official SQuAD v1.1 script's normalization, written out here."""
    import re
    import string

    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def _f1(gold: str, prediction: str) -> float:
    import collections

    gold_tokens, predicted_tokens = _normalize(gold).split(), _normalize(prediction).split()
    common = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    return 0.0 if common == 0 else 2 * common / (len(gold_tokens) + len(predicted_tokens))


def test_bench_accuracy_squad_slice_against_the_gold_answers(tmp_path, assets):
    questions = 24
    report, work = run_accuracy_bench(tmp_path, assets, "--tasks", "squad", "--max_dev_rows", str(questions),
                                      "--squad_seq_length", "128", "--squad_logit_rows", "12")
    source = json.loads((assets / "squad" / "v1.1" / "dev-v1.1.part2_bloomsbury.json").read_text())
    gold = [(qa["id"], [answer["text"] for answer in qa["answers"]]) for article in source["data"]
            for paragraph in article["paragraphs"] for qa in paragraph["qas"]][:questions]
    answers = {path: {a["id"]: a["answer"] for a in rows} for path, rows in answers_of(work / "squad").items()}
    assert all(list(texts) == [qid for qid, _ in gold] for texts in answers.values())
    metrics = {path: {"exact_match": 100 * sum(max(_normalize(g) == _normalize(texts[qid]) for g in golds)
                                               for qid, golds in gold) / questions,
                      "f1": 100 * sum(max(_f1(g, texts[qid]) for g in golds) for qid, golds in gold) / questions}
               for path, texts in answers.items()}
    agreement = {path: sum(texts[qid] == answers["fp32"][qid] for qid, _ in gold) / questions
                 for path, texts in answers.items()}
    result = report["tasks"]["squad"]
    assert result["dev_examples"] == questions and result["train_rows"] == 48
    check_paths(result, metrics, agreement)
    assert metrics["fp32"]["f1"] > 0  # some overlap with the gold answers, so the F1 check above means something
    evaluation = json.loads((work / "squad" / "finetune" / "eval" / "eval_results.json").read_text())
    assert evaluation["f1"] == pytest.approx(metrics["fp32"]["f1"])  # the run's own evaluation agrees
    # the logits compared: float32's own difference is 0, the low-precision paths move them, but not by much
    assert result["paths"]["fp32"]["max_abs_logit_diff"] == 0
    assert all(0 < result["paths"][p]["max_abs_logit_diff"] < 1 for p in ACCURACY_PATHS if p != "fp32")


@pytest.mark.parametrize("args, message", [
    (["--tasks", "sst2"], "--tasks takes a comma-separated list of mrpc, cola, squad"),
    (["--epochs", "0"], "--epochs must be >= 1"),
    (["--tasks", "mrpc", "--init_checkpoint", "missing.ckpt"], f"not found: {ROOT / 'missing.ckpt'}"),
])
def test_bench_accuracy_bad_flag_is_one_line(tmp_path, assets, args, message):
    done = bench("bench_accuracy.py", "--workdir", str(tmp_path / "work"), "--assets", str(assets), *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and message in done.stderr, done.stderr


def test_bench_accuracy_refuses_a_used_workdir(tmp_path):
    (tmp_path / "old.txt").write_text("a previous run")
    done = bench("bench_accuracy.py", "--workdir", str(tmp_path), "--tasks", "mrpc")
    assert done.returncode == 2 and "--workdir must be a new or empty folder" in done.stderr, done.stderr


def test_every_recorded_result_names_its_cpu():
    """A ratio holds only for the CPU it was measured on: every JSON in benchmarks/results says which."""
    results = sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    assert results
    for path in results:
        environment = json.loads(path.read_text(encoding="utf-8")).get("environment", {})
        assert environment.get("cpu_model"), path.name


def test_the_report_names_each_torch_side_eager_or_compiled():
    """The JSON's frameworks say how PyTorch ran: torch.compile sides are not labelled eager."""
    pytest.importorskip("transformers")
    labels = {}
    for name in ("torch_bf16", "torch_compile_bf16"):
        side = bench_common.TorchSide({"side": name, "seed": 0})
        side.set_threads(0)
        labels[name] = side.framework
    assert " eager," in labels["torch_bf16"] and "torch.compile" not in labels["torch_bf16"]
    assert " torch.compile (inductor)," in labels["torch_compile_bf16"] and "eager" not in labels["torch_compile_bf16"]


PRODUCTS_TINY = ["--batch_size", "2", "--seq_length", "64", "--hidden_size", "128", "--intermediate_size", "256",
                 "--embedding_size", "64", "--vocab_size", "300", "--max_predictions_per_seq", "5",
                 "--num_hidden_layers", "2", "--threads", "2", "--steps", "1", "--rounds", "1"]


def test_bench_products_measures_every_dense_product_three_ways(tmp_path):
    """Plain, packed and BLAS-style products of each dense layer of a pretraining step (forward, input and weight
    gradient) in float32, each checked against numpy inside the benchmark, split over the threads as the kernels
    split them."""
    out = tmp_path / "products.json"
    done = bench("bench_products.py", *PRODUCTS_TINY, "--dtypes", "f32", "--output", str(out))
    assert done.returncode == 0, done.stderr
    report = json.loads(out.read_text())
    assert report["onednn"].count(".") == 2 and report["environment"]["cpu_model"]
    # The version the kernels report, in fields of its own, is the one libdnnl itself gives (dnnl_version).
    recorded = report["environment"]["onednn"]
    assert recorded.get("version", report["onednn"]) == report["onednn"], recorded
    results = report["results"]
    tokens, masked = 2 * 64, 2 * 5
    expected = []
    for layer, out_features, in_features, rows, calls in (
            ("embedding projection", 128, 64, tokens, 1), ("query/key/value/output", 128, 128, tokens, 2 * 4),
            ("ffn", 256, 128, tokens, 2), ("ffn_output", 128, 256, tokens, 2), ("masked-LM dense", 64, 128, masked, 1),
            ("masked-LM decoder", 300, 64, masked, 1)):
        expected += [(f"{layer} forward", rows, out_features, in_features, calls),
                     (f"{layer} input grad", rows, in_features, out_features, calls),
                     (f"{layer} weight grad", out_features, in_features, rows, calls)]
    assert [(r["product"], r["m"], r["n"], r["k"], r["calls_per_step"]) for r in results] == expected
    # As the kernels split them: forwards of fewer than 512 rows by columns, the rest by rows, 64 or more a part.
    slices = {r["product"]: r["slices"] for r in results}
    assert slices["ffn forward"] == [[128, 128], [128, 128]]
    assert slices["ffn input grad"] == [[64, 128], [64, 128]]
    assert slices["masked-LM decoder forward"] == [[10, 150], [10, 150]]
    assert slices["masked-LM dense forward"] == [[10, 64]]  # 64 columns: one part
    assert slices["masked-LM dense input grad"] == [[10, 128]]  # 10 rows: one part
    assert slices["query/key/value/output weight grad"] == [[64, 128], [64, 128]]
    for r in results:
        assert all(r["max_relative_error"][side] <= 1e-4 for side in ("plain", "packed", "blas")), r
        assert all(r["call_ms"][side] > 0 for side in ("plain", "packed", "blas", "reorder"))
        assert r["step_ms"]["plain"] == pytest.approx(r["calls_per_step"] * r["call_ms"]["plain"], abs=2e-3)
        assert r["implementation"]["plain"] and r["implementation"]["packed"]
    total = report["step_totals_ms"]["f32"]
    assert total["blas"] == pytest.approx(sum(r["step_ms"]["blas"] for r in results), abs=0.02)
    assert total["fastest"] <= min(total["plain"], total["packed"], total["blas"]) + 0.02
    assert "f32: ms per training step" in done.stdout


@pytest.mark.parametrize("dtype", [
    "f32", pytest.param("bf16", marks=pytest.mark.skipif(not cpu_kernels.bf16_support()[0],
                                                         reason="no bfloat16 matrix instructions on this CPU"))])
def test_bench_products_checks_each_product_against_numpy(dtype):
    """Every side of every kind of product equals numpy's product of the same (in bfloat16: rounded) operands, and
    the check fails once the operand multiplied is no longer the reference's."""
    import bench_products

    dnnl = bench_products.Dnnl(bench_products.libdnnl_path())
    for kind in ("forward", "input grad", "weight grad"):
        product = bench_products.Product(dnnl, 40, 24, 64, kind, dtype, seed=1)
        for side in ("plain", "packed", "blas"):
            assert product.error(side) <= 1e-4, (kind, side)
        four = np.array([4.0], np.float32)
        product.b[0, 0] = bench_products.to_bf16(four)[0] if dtype == "bf16" else four[0]  # after the reference
        for side in ("plain", "packed", "blas"):
            assert product.error(side) > 1e-3, (kind, side)


@pytest.mark.parametrize("args, message", [
    (["--dtypes", "int4"], "--dtypes"),
    (["--dtypes", "none"], "--dtypes: expected a comma-separated list of bf16, f32, got 'none'"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--seq_length", "16", "--max_predictions_per_seq", "17"],
     "--max_predictions_per_seq 17 is above --seq_length 16: a row has no more positions to mask"),
    (["--bogus"], "unrecognized arguments: --bogus"),
])
def test_bench_products_bad_flag_is_one_line(args, message):
    done = bench("bench_products.py", *args)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("error: ") and message in done.stderr, done.stderr


def test_a_worker_that_hangs_after_its_last_answer_is_killed_and_its_answer_kept(tmp_path, monkeypatch, capsys):
    """A worker that answers `quit` and then never exits (a library's teardown hanging) must not stop the benchmark:
    its answer is kept, the process killed, one line says so."""
    script = tmp_path / "hanging_worker.py"
    script.write_text("import json, sys, time\n"
                      "spec = json.loads(sys.stdin.readline())\n"
                      "print(json.dumps({'ready': spec['side']}), flush=True)\n"
                      "sys.stdin.readline()\n"
                      "print(json.dumps({'done': True}), flush=True)\n"
                      "time.sleep(600)\n")
    monkeypatch.setattr(bench_common.Worker, "EXIT_WAIT_S", 1)
    worker = bench_common.Worker(script, {"side": "export"}, tmp_path)
    assert worker.ready == {"ready": "export"}
    assert worker.quit() == {"done": True}
    assert worker.proc.poll() is not None  # killed, not left running
    assert capsys.readouterr().err.strip() == "the export worker had not exited 1 s after its last answer: killed"


FIRST_ROUND_SLOW_WORKER = '''
import sys
sys.path.insert(0, {benchmarks!r})
import bench_common


class FirstRoundSlow(bench_common.Side):
    """Steps of 1 ms, except the first round after the first step: 10 ms each (as PyTorch eager autocast's first
    round ran ~15% slower)."""
    framework = "fake"

    def set_threads(self, threads):
        pass

    def matmul_gflops(self, size):
        return 100.0

    def build(self):
        self.rounds = 0
        return {{}}

    def first(self):
        return {{"check": 0.0}}

    def run(self, steps):
        self.rounds += 1
        return [0.010 if self.rounds == 1 else 0.001] * steps


sys.exit(bench_common.worker_main({{"ours": FirstRoundSlow, "other": FirstRoundSlow}}))
'''


def test_the_first_round_is_an_untimed_warm_up(tmp_path):
    """A side's first round after its first step ran slower than its later ones: run_pair runs it untimed for every
    side, so the medians are of the later rounds only, and the JSON keeps the warm-up's times apart."""
    script = tmp_path / "fake_bench.py"
    script.write_text(FIRST_ROUND_SLOW_WORKER.format(benchmarks=str(ROOT / "benchmarks")))
    specs = {side: {"side": side, "threads": 1, "peak_size": 16} for side in ("ours", "other")}
    raw = bench_common.run_pair(script, specs, steps=2, rounds=2, log_dir=tmp_path, progress=lambda line: None)
    for side in ("ours", "other"):
        assert raw[side]["warmup"] == [0.010, 0.010]
        assert raw[side]["rounds"] == [[0.001, 0.001], [0.001, 0.001]]
    summary = bench_common.summarize(raw, 1, 8, 1e6, {"ours": 1e6, "other": 1e6}, "step")
    assert summary["sides"]["ours"]["median_ms"] == pytest.approx(1.0)
    assert summary["sides"]["other"]["warmup_ms"] == pytest.approx([10.0, 10.0])
    assert summary["speed_ratios"] == {"other": pytest.approx(1.0)}
