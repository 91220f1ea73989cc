"""int8 for OpenVINO: `export.py --file_format ONNX --quantize int8 --engine openvino` quantizes the ONNX export with
NNCF, calibrated on real MindRecord rows, into an OpenVINO IR whose answers stay close to the float32 ONNX export run
by ONNX Runtime (the independent reference); src.predict serves the .xml; bad calibration input is one line and
leaves no file; the benchmarks' OpenVINO sides run.

What is int8 is held to the architecture (which layers are dense, their shapes), not to our code's counts.
"""
import errno
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.finetune_helpers import make_glue
from tests.pretrain_helpers import ok, run
from tests.test_benchmarks import TINY, TINY_NET, bench, check_report
from tests.test_export import (BATCH, MNLI_META, NUM_CLASS, SEQ, export, heads,  # noqa: F401 (heads: a fixture)
                               tiny_config, with_tokenizer_record)

pytest.importorskip("openvino", reason="OpenVINO not installed (requirements-dev.txt installs it)")
pytest.importorskip("nncf", reason="NNCF not installed (requirements-dev.txt installs it)")

CALIBRATION_ROWS = 40  # the training rows the fixture makes
DEV_ROWS = 40
# The int8 tolerance on the tiny heads, whose weights of std 0.3 make activations far wider than a trained model's (a
# coarse case for ranges fixed at calibration; ONNX Runtime's int8 measures them per call and is held to 0.2): every
# logit within 0.3 of the logits' spread, 0.05 on average, the label unchanged on 90% of the rows. Measured here on
# 200 MRPC dev pairs: max 0.17 and mean 0.027 of the spread, 95% of the labels.
LOGIT_TOLERANCE = 0.3
MEAN_TOLERANCE = 0.05
AGREEMENT = 0.9


@pytest.fixture(scope="module")
def mrpc(tmp_path_factory):
    """Real MRPC pairs as MindRecord at the export's sequence length: train (calibration) and dev."""
    return make_glue(tmp_path_factory.mktemp("mrpc"), "mrpc", 40, DEV_ROWS, SEQ)


@pytest.fixture(scope="module")
def exports(heads, mrpc, tmp_path_factory):  # noqa: F811
    """The tiny classifier exported as float32 ONNX and as NNCF int8 OpenVINO IR (batch 2), with the activations
    quantized symmetrically (the default) and asymmetrically."""
    pytest.importorskip("onnxruntime")
    folder = tmp_path_factory.mktemp("ov_int8")
    checkpoint = heads["classifier"][1]
    ok(export("classifier", checkpoint, folder / "float", "--file_format", "ONNX", "--export_batch_size", str(BATCH)))
    # named as the IR it becomes: the .xml is not doubled (int8.xml.xml)
    done = ok(export("classifier", checkpoint, folder / "int8.xml", "--file_format", "ONNX", "--quantize", "int8",
                     "--engine", "openvino", "--calibration_file", str(mrpc["train"]), "--calibration_rows",
                     str(CALIBRATION_ROWS), "--export_batch_size", str(BATCH)))
    assert f"as OpenVINO IR int8: {folder / 'int8.bin'}, {folder / 'int8.xml'}" in done.stdout
    assert f"activations symmetric, calibrated on {CALIBRATION_ROWS} row(s)" in done.stdout
    done = ok(export("classifier", checkpoint, folder / "asym", "--file_format", "ONNX", "--quantize", "int8",
                     "--engine", "openvino", "--int8_activations", "asymmetric", "--calibration_file",
                     str(mrpc["train"]), "--calibration_rows", str(CALIBRATION_ROWS),
                     "--export_batch_size", str(BATCH)))
    assert f"activations asymmetric, calibrated on {CALIBRATION_ROWS} row(s)" in done.stdout
    # the IRs only (their float ONNX was an intermediate), beside the float export and the exports' log
    assert sorted(p.name for p in folder.iterdir()) == ["asym.bin", "asym.xml", "float.onnx", "int8.bin", "int8.xml",
                                                        "logs"]
    return {"float": folder / "float.onnx", "int8": folder / "int8.xml", "asym": folder / "asym.xml"}


def test_every_dense_layer_of_the_ir_has_int8_weights(exports):
    import openvino

    model = openvino.Core().read_model(str(exports["int8"]))
    int8 = Counter(tuple(sorted(op.get_output_shape(0))) for op in model.get_ops()
                   if op.get_type_name() == "Constant" and op.get_element_type().get_type_name() == "i8"
                   and len(op.get_output_shape(0)) == 2)
    config = tiny_config()
    h, e, i, groups = config.hidden_size, config.embedding_size, config.intermediate_size, config.num_hidden_groups
    # the distinct dense matrices: embedding projection, per group query/key/value/output and the two feed-forward
    # layers (the layers of a group share them), the pooler and the classifier; in either orientation
    dense = Counter({tuple(sorted((e, h))): 1, (h, h): 4 * groups + 1, tuple(sorted((h, i))): 2 * groups,
                     tuple(sorted((NUM_CLASS, h))): 1})
    assert not dense - int8, (dense, int8)
    assert any(op.get_type_name() == "FakeQuantize" for op in model.get_ops())  # activations quantized too
    assert exports["int8"].with_suffix(".bin").stat().st_size < exports["float"].stat().st_size


def _activation_ranges(path: Path):
    """(low, high) of each FakeQuantize on an activation (not on a constant weight) of the IR at `path`."""
    import openvino

    ranges = []
    for op in openvino.Core().read_model(str(path)).get_ops():
        if op.get_type_name() == "FakeQuantize" and op.input_value(0).get_node().get_type_name() != "Constant":
            low, high = (op.input_value(i).get_node().get_data() for i in (1, 2))
            ranges.extend(zip(low.ravel().tolist(), high.ravel().tolist()))
    return ranges


def _symmetric(low: float, high: float) -> bool:
    """An int8 range around zero: signed, [-s, s * 127/128] (256 levels), or unsigned from zero."""
    return low == 0 or high == pytest.approx(-low * 127 / 128, rel=1e-5)


def test_the_activations_are_quantized_as_chosen(exports):
    """--int8_activations symmetric (the default): every activation's range is centred on zero (OpenVINO's int8
    products then need no zero-point correction); asymmetric: ranges as calibrated, e.g. the GELU outputs'
    [-0.17, max], which a symmetric range would halve the steps of."""
    symmetric, asymmetric = _activation_ranges(exports["int8"]), _activation_ranges(exports["asym"])
    assert len(symmetric) == len(asymmetric) > 0  # the same quantization points
    assert all(_symmetric(low, high) for low, high in symmetric), symmetric
    assert any(low < 0 < high and not _symmetric(low, high) for low, high in asymmetric), asymmetric


def _dev_columns(assets, tokenizer):
    """(input_ids, token_type_ids, input_mask) of the first MRPC dev pairs, made by the data tool's feature code."""
    from src.data.features import InputExample, classifier_feature
    from src.data.input_text import read_tsv

    pairs = [fields for _, fields in read_tsv(assets / "glue" / "MRPC" / "dev.tsv")][1:DEV_ROWS + 1]
    features = [classifier_feature(InputExample(str(n), f[3], f[4], None, ""), tokenizer, {}, SEQ)
                for n, f in enumerate(pairs)]
    return [np.stack([f[k] for f in features]).astype(np.int32) for k in ("input_ids", "segment_ids", "input_mask")]


def test_int8_ir_answers_agree_with_the_float_onnx_in_onnxruntime(exports, assets, tokenizer):
    import onnxruntime
    import openvino

    columns = _dev_columns(assets, tokenizer)
    session = onnxruntime.InferenceSession(str(exports["float"]), providers=["CPUExecutionProvider"])
    compiled = openvino.Core().compile_model(str(exports["int8"]), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()
    batches = [[c[s:s + BATCH] for c in columns] for s in range(0, DEV_ROWS, BATCH)]
    want = np.concatenate([session.run(None, dict(zip(("input_ids", "token_type_ids", "input_mask"), b)))[0]
                           for b in batches])
    got = np.concatenate([request.infer(b)[compiled.outputs[0]] for b in batches])
    spread = np.abs(want).max()
    assert spread > 0.5  # a model whose outputs move with the input
    assert not np.array_equal(got, want)  # it did compute in int8
    assert np.abs(got - want).max() < LOGIT_TOLERANCE * spread
    assert np.abs(got - want).mean() < MEAN_TOLERANCE * spread
    assert (got.argmax(1) == want.argmax(1)).mean() >= AGREEMENT


def test_predict_serves_the_ir_on_openvino(exports, assets, spm_path, tmp_path):
    """src.predict on the .xml (engine told by the suffix, said on stderr) answers a file of real pairs as the float
    export does on ONNX Runtime, to int8 tolerance."""
    from src.data.input_text import read_tsv

    pairs = [fields for _, fields in read_tsv(assets / "glue" / "MRPC" / "dev.tsv")][1:11]
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"text_a": f[3], "text_b": f[4]}) + "\n" for f in pairs))
    answers, logs = {}, {}
    for name in ("float", "int8"):
        done = ok(run(["-m", "src.predict", "--model", str(exports[name]), "--task", "classifier", "--spm_model_file",
                       spm_path, "--input_file", str(requests), "--threads", "1"]))
        answers[name] = [json.loads(line) for line in done.stdout.splitlines()]
        logs[name] = done.stderr
    assert "OpenVINO" in logs["int8"] and "int8 products" in logs["int8"] and "OpenVINO" not in logs["float"]
    logits = {name: np.array([a["logits"] for a in found]) for name, found in answers.items()}
    assert logits["int8"].shape == (len(pairs), NUM_CLASS)
    assert np.abs(logits["int8"] - logits["float"]).max() < LOGIT_TOLERANCE * np.abs(logits["float"]).max()
    labels = {name: [a["label"] for a in found] for name, found in answers.items()}
    assert np.mean(np.equal(labels["int8"], labels["float"])) >= AGREEMENT


def test_the_ir_keeps_the_output_names_and_the_checkpoints_tokenizer(heads, mrpc, spm_path, tmp_path):  # noqa: F811
    """The int8 IR of a checkpoint that records its data's tokenizer and task names its output as export.py prints it
    and carries the records (read by OpenVINO), and src.predict refuses the .xml another casing, as the .ckpt (was:
    the output was MindSpore's node number and the IR answered with any tokenizer); the right tokenizer answers,
    with the task's label names (was: 0, 1, 2)."""
    import openvino

    checkpoint = tmp_path / "run" / "albert_classifier-10.ckpt"
    record = with_tokenizer_record(heads["classifier"][1], checkpoint, spm_path, MNLI_META)
    done = ok(export("classifier", checkpoint, tmp_path / "int8", "--file_format", "ONNX", "--quantize", "int8",
                     "--engine", "openvino", "--calibration_file", str(mrpc["train"]), "--calibration_rows",
                     str(CALIBRATION_ROWS), "--export_batch_size", str(BATCH)))
    assert f"outputs: logits float32 [{BATCH}, {NUM_CLASS}]" in done.stdout
    model = openvino.Core().read_model(str(tmp_path / "int8.xml"))
    assert [port.get_any_name() for port in model.outputs] == ["logits"]
    assert model.get_rt_info(["albert", "run_tokenizer"]).astype(str) == record
    assert json.loads(model.get_rt_info(["albert", "run_task"]).astype(str))["label_list"] == MNLI_META["label_list"]
    base = ["-m", "src.predict", "--model", str(tmp_path / "int8.xml"), "--task", "classifier", "--spm_model_file",
            spm_path, "--text_a", "The cat sat."]
    one_line_error(run(base + ["--do_lower_case", "false"]), f"{tmp_path / 'int8.xml'} was trained on data made with "
                   "albert_30k-clean.model", "do_lower_case True), not with albert_30k-clean.model")
    assert list(json.loads(ok(run(base)).stdout)["probabilities"]) == MNLI_META["label_list"]


def one_line_error(result, *parts: str) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and all(p in lines[0] for p in parts), result.stderr
    return lines[0]


def test_predict_refuses_an_ir_without_its_weights_or_on_onnxruntime(exports, spm_path, tmp_path):
    lone = tmp_path / "lone.xml"
    lone.write_bytes(exports["int8"].read_bytes())
    base = ["-m", "src.predict", "--task", "classifier", "--spm_model_file", spm_path, "--text_a", "A cat sat."]
    one_line_error(run(base + ["--model", str(lone)]), f"its weights {tmp_path / 'lone.bin'} are missing")
    one_line_error(run(base + ["--model", str(exports["int8"]), "--engine", "onnxruntime"]),
                   "is an OpenVINO IR: it runs on OpenVINO only")
    # a damaged IR: OpenVINO's reason, not the source location its message starts with
    xml, weights = exports["int8"].read_bytes(), exports["int8"].with_suffix(".bin").read_bytes()
    (tmp_path / "cut.xml").write_bytes(xml[:len(xml) // 2])
    (tmp_path / "cut.bin").write_bytes(weights)
    (tmp_path / "short.xml").write_bytes(xml)
    (tmp_path / "short.bin").write_bytes(weights[:len(weights) // 2])
    for name in ("cut", "short"):
        line = one_line_error(run(base + ["--model", str(tmp_path / f"{name}.xml")]),
                              f"{tmp_path / name}.xml is not a readable OpenVINO IR model (")
        assert "Exception from" not in line and ".cpp:" not in line, line


# calibration and flag errors: (task, extra flags, what the one line says); "{train}" is the MRPC MindRecord
ERRORS = {
    "no_calibration_file": ("classifier", ["--quantize", "int8", "--engine", "openvino"],
                            ["--quantize int8 --engine openvino calibrates on real inputs: set --calibration_file"]),
    "missing_file": ("classifier", ["--quantize", "int8", "--engine", "openvino", "--calibration_file", "{missing}"],
                     ["calibration_file: data not found: {missing}"]),
    "not_mindrecord": ("classifier", ["--quantize", "int8", "--engine", "openvino", "--calibration_file", "{tsv}"],
                       ["{tsv}: not MindRecord data"]),
    "other_task": ("squad_v1", ["--quantize", "int8", "--engine", "openvino", "--calibration_file", "{train}"],
                   ["{train}: columns ['p_mask'] missing"]),
    "other_length": ("classifier", ["--quantize", "int8", "--engine", "openvino", "--calibration_file", "{train}",
                                    "--export_seq_length", "32"],
                     ["calibration_file {train}: its input_ids rows are [64], the export takes [32]"]),
    "less_than_a_batch": ("classifier", ["--quantize", "int8", "--engine", "openvino", "--calibration_file", "{train}",
                                         "--calibration_rows", "1"],
                          ["calibration_file {train}: 1 row(s) read, fewer than one batch of the export "
                           "(export_batch_size 2): raise calibration_rows (1)"]),
    "file_less_than_a_batch": ("classifier", ["--quantize", "int8", "--engine", "openvino", "--calibration_file",
                                              "{train}", "--export_batch_size", "64"],
                               ["calibration_file {train}: 40 row(s) read, fewer than one batch of the export "
                                "(export_batch_size 64): calibrate on a file with more rows, or export a smaller "
                                "export_batch_size"]),
    "engine_without_int8": ("classifier", ["--engine", "openvino"], ["--engine openvino makes the int8 model"]),
    "calibration_for_onnxruntime": ("classifier", ["--quantize", "int8", "--calibration_file", "{train}"],
                                    ["--calibration_file goes with --quantize int8 --engine openvino"]),
    "activations_for_onnxruntime": ("classifier", ["--quantize", "int8", "--int8_activations", "asymmetric"],
                                    ["--int8_activations goes with --quantize int8 --engine openvino"]),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_calibration_errors_are_one_line_and_leave_no_file(case, heads, mrpc, tmp_path):  # noqa: F811
    task, extra, message = ERRORS[case]
    places = {"train": str(mrpc["train"]), "missing": str(tmp_path / "nowhere.mindrecord"),
              "tsv": str(tmp_path / "train.tsv")}
    (tmp_path / "train.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA cat.\tA dog.\n")
    out = tmp_path / "out"
    result = export(task, heads[task][1], out / "model", "--file_format", "ONNX", "--export_batch_size", str(BATCH),
                    *[part.format(**places) for part in extra])
    one_line_error(result, *[part.format(**places) for part in message])
    assert not out.exists() or not any(out.iterdir())


def test_calibration_rows_without_openvino_is_refused_not_ignored():
    """`--calibration_rows` alone (ONNX Runtime's int8, which calibrates nothing) was silently ignored."""
    from export import EXPORT_CONFIG, check_openvino_request
    from model_utils.config import parse_cli
    from model_utils.errors import UserError

    common = ["--file_format", "ONNX", "--quantize", "int8"]
    with pytest.raises(UserError, match=r"^--calibration_rows goes with --quantize int8 --engine openvino "):
        check_openvino_request(parse_cli(EXPORT_CONFIG, common + ["--calibration_rows", "64"]))
    check_openvino_request(parse_cli(EXPORT_CONFIG, common))  # the default: nothing given


def test_a_failed_save_leaves_no_half_written_ir(heads, mrpc, tmp_path, monkeypatch, capsys):  # noqa: F811
    """The disk fills while the IR is written: one line, and neither the .xml, the .bin nor a staging folder
    remains."""
    import openvino

    import export as export_module
    import src.devices.device_setup
    from model_utils.errors import run_cli

    def half_written(model, path, *args, **kwargs):
        Path(path).write_text("<?xml")
        raise OSError(errno.ENOSPC, "No space left on device", path)

    monkeypatch.setattr(openvino, "save_model", half_written)
    # In this process MindSpore's runtime may already be started by earlier tests: the device setup is taken as done.
    monkeypatch.setattr(src.devices.device_setup, "setup_device", lambda *args, **kwargs: src.devices.device_setup.Device("CPU"))
    out = tmp_path / "out"
    out.mkdir()
    code = run_cli(export_module.main, [
        "--config_path", "task_classifier_config.yaml", "--export_ckpt_file", str(heads["classifier"][1]),
        "--export_file_name", str(out / "model"), "--export_seq_length", str(SEQ), "--num_class", str(NUM_CLASS),
        "--file_format", "ONNX", "--export_batch_size", str(BATCH), "--quantize", "int8", "--engine", "openvino",
        "--calibration_file", str(mrpc["train"]), "--calibration_rows", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "No space left on device" in err[0], err
    assert [p.name for p in out.iterdir()] in ([], ["logs"])


@pytest.mark.slow
def test_bench_infer_openvino_sides(tmp_path):
    """bench_infer --compare openvino: HF's and our float exports and our NNCF int8 IRs on OpenVINO, same weights:
    the float32 hint equals ours, the bfloat16 default comes close, int8 (either activation scheme) within its
    tolerance but not equal."""
    for module in ("transformers", "onnx", "onnxscript", "onnxruntime"):
        pytest.importorskip(module)
    out = tmp_path / "infer.json"
    done = bench("bench_infer.py", *TINY, "--compare", "openvino", "--profile", "1", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    int8 = ("ov_ours_int8", "ov_ours_int8_asym")
    sides = ("ov_hf", "ov_hf_f32", "ov_ours", *int8)
    result = check_report(out, "infer", "batch", sides)
    diffs, spread = result["logits_max_abs_diff_by_side"], result["logits_max_abs"]
    assert diffs["ov_hf_f32"] < 1e-5 < spread
    assert all(diffs[side] < 0.05 * spread for side in ("ov_hf", "ov_ours"))
    for side in int8:
        assert 0 < diffs[side] < LOGIT_TOLERANCE * spread
        assert result["sides"][side]["framework"].startswith("openvino ")
        assert result["sides"][side]["export_s"] > 0
        assert f"{side} logits max abs diff from ours" in done.stdout
    assert diffs["ov_ours_int8"] != diffs["ov_ours_int8_asym"]  # two quantizations, not one IR twice
    # --profile: the sides with a profiler profiled, OpenVINO's timed only (was: every side's timings lost)
    assert "op_profile" in result["sides"]["ours"] and not any("op_profile" in result["sides"][side] for side in sides)


@pytest.mark.slow
def test_bench_accuracy_openvino_paths_on_an_mrpc_slice(tmp_path, assets):
    """bench_accuracy's OpenVINO paths on a slice: the report's scores are the ones recomputed here from the answers
    it left and the dev labels read with csv; the int8 IR it served holds int8 weights."""
    import csv

    work, out = tmp_path / "work", tmp_path / "accuracy.json"
    done = bench("bench_accuracy.py", "--workdir", str(work), "--assets", str(assets), *TINY_NET, "--tasks", "mrpc",
                 "--max_dev_rows", "24", "--seq_length", "64", "--paths", "ov_bf16,ov_f32,ov_int8,ov_int8_asym",
                 "--calibration_rows", "16", "--output", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    from src.model import cpu_kernels

    paths = ["fp32"] + (["ov_bf16"] if cpu_kernels.bf16_support()[0] else []) + ["ov_f32", "ov_int8", "ov_int8_asym"]
    result = report["tasks"]["mrpc"]
    assert list(result["paths"]) == paths and set(report["paths"]) == set(paths)
    with open(assets / "glue" / "MRPC" / "dev.tsv", encoding="utf-8-sig", newline="") as tsv:
        labels = np.array([int(row[0]) for row in list(csv.reader(tsv, delimiter="\t",
                                                                  quoting=csv.QUOTE_NONE))[1:25]])
    folder = work / "mrpc"
    predicted = {path: np.array([int(json.loads(line)["label"]) for line in
                                 (folder / f"answers_{path}.jsonl").read_text().splitlines()]) for path in paths}
    for path in paths:
        assert result["paths"][path]["metrics"]["accuracy"] == pytest.approx(100 * np.mean(predicted[path] == labels))
        assert result["paths"][path]["agreement"] == pytest.approx(np.mean(predicted[path] == predicted["fp32"]))
    assert result["paths"]["ov_f32"]["max_abs_logit_diff"] < 1e-4  # float32 on OpenVINO: the checkpoint's logits
    for path, activations in (("ov_int8", "symmetric"), ("ov_int8_asym", "asymmetric")):
        assert "int8 products" in (folder / f"predict_{path}.log").read_text()
        assert f"activations {activations}," in (folder / f"export_{path}.log").read_text()
