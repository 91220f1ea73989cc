"""export.py (MINDIR, ONNX, dynamic batch, errors) and src.predict on real text, with tiny random-weight heads.

Every head is built here, saved as a checkpoint with its albert_config.json (as run_*.py save them) and exported
by export.py in a subprocess; the exported model must give the in-process network's outputs on the same inputs.
"""
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import numpy as np
import pytest

from tests.pretrain_helpers import ENV, ROOT, ok, one_line_error, run, tool

SEQ = 64
BATCH = 2
NUM_CLASS = 3
START_N_TOP, END_N_TOP = 3, 2
TASK_FLAGS = {"classifier": ["--num_class", str(NUM_CLASS)], "race": [], "squad_v1": [],
              "squad_v2": ["--start_n_top", str(START_N_TOP), "--end_n_top", str(END_N_TOP)]}
INPUTS = {"classifier": 3, "race": 3, "squad_v1": 4, "squad_v2": 4}
RACE_CHOICES = 4  # num_class of task_race_config.yaml


def tiny_config():
    from src.model.albert import AlbertConfig

    # vocab_size of the real SentencePiece model, so src.predict can feed real text.
    return AlbertConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=2, num_hidden_groups=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=SEQ,
                        initializer_range=0.3)  # large weights: outputs react to every input


def build_head(task: str):
    from src.model.task_heads import (AlbertForMultipleChoice, AlbertForQuestionAnswering,
                                         AlbertForSequenceClassification, AlbertForSquadV2)

    config = tiny_config()
    head = {"classifier": lambda: AlbertForSequenceClassification(config, NUM_CLASS),
            "race": lambda: AlbertForMultipleChoice(config),
            "squad_v1": lambda: AlbertForQuestionAnswering(config),
            "squad_v2": lambda: AlbertForSquadV2(config, start_n_top=START_N_TOP, end_n_top=END_N_TOP)}[task]()
    head.set_train(False)
    return head


@pytest.fixture(scope="module")
def heads(tmp_path_factory) -> Iterator[Dict[str, Tuple[object, Path]]]:
    """task -> (head with random weights, its checkpoint with albert_config.json beside it)."""
    import mindspore as ms

    from src.common.checkpoint_io import save_checkpoint_atomic

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_seed(7)
    made = {}
    for task in INPUTS:
        folder = tmp_path_factory.mktemp(f"ckpt_{task}")
        head = build_head(task)
        save_checkpoint_atomic(head, str(folder / f"albert_{task}-10.ckpt"))
        tiny_config().to_json_file(str(folder / "albert_config.json"))
        made[task] = (head, folder / f"albert_{task}-10.ckpt")
    yield made
    ms.set_context(mode=ms.PYNATIVE_MODE)


def export(task: str, checkpoint: Path, output: Path, *extra: str):
    return run(["export.py", "--config_path", f"task_{task}_config.yaml", "--export_ckpt_file", str(checkpoint),
                "--export_file_name", str(output), "--export_seq_length", str(SEQ), *TASK_FLAGS[task], *extra])


@pytest.fixture(scope="module")
def mindirs(heads, tmp_path_factory) -> Dict[str, Path]:
    """Every head exported once as MINDIR with batch 2 (shared by the equality and predict tests)."""
    folder = tmp_path_factory.mktemp("mindir")
    paths = {}
    for task, (_, checkpoint) in heads.items():
        name = folder / (f"{task}.mindir" if task == "race" else task)  # with and without MindSpore's suffix
        result = ok(export(task, checkpoint, name, "--export_batch_size", str(BATCH)))
        paths[task] = folder / f"{task}.mindir"
        assert f"as MINDIR: {paths[task]}" in result.stdout
        assert f"input_ids int32 [{BATCH}, " in result.stdout
    # Nothing else left but the exports' log (every run's lines, appended)
    assert sorted(p.name for p in folder.iterdir()) == sorted([p.name for p in paths.values()] + ["logs"])
    log = (folder / "logs" / "export.log").read_text()
    assert all(f"as MINDIR: {path}" in log for path in paths.values()) and log.count("--- ") == len(paths)
    return paths


@pytest.fixture(scope="module")
def onnx_files(heads, tmp_path_factory) -> Dict[str, Path]:
    """The classifier and SQuAD v1.1 heads exported once as ONNX with batch 2 (for src.predict on ONNX Runtime)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    folder = tmp_path_factory.mktemp("onnx")
    for task in ("classifier", "squad_v1"):
        ok(export(task, heads[task][1], folder / task, "--file_format", "ONNX", "--export_batch_size", str(BATCH)))
    return {task: folder / f"{task}.onnx" for task in ("classifier", "squad_v1")}


def test_checkpoints_and_exports_are_readable_by_other_users(heads, mindirs, onnx_files):
    """MindSpore writes checkpoints and exports 0400 (owner only); ours get 0644 minus the umask, so that a model
    server running as another user can read them."""
    umask = os.umask(0)
    os.umask(umask)
    files = [heads["classifier"][1], mindirs["classifier"], onnx_files["classifier"]]
    assert [stat.S_IMODE(path.stat().st_mode) for path in files] == [0o644 & ~umask] * 3


def test_an_existing_export_is_replaced_only_with_overwrite(heads, tmp_path):
    """Without --overwrite an existing output stops the run (a matrix row); with it, the export takes its place."""
    planted = tmp_path / "model.mindir"
    planted.write_bytes(b"an earlier export")
    ok(export("classifier", heads["classifier"][1], tmp_path / "model", "--overwrite", "true"))
    arrays = random_inputs("classifier", 1, seed=3)
    assert_same(outputs_of(heads["classifier"][0], arrays), outputs_of(graph_cell(planted), arrays))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs", "model.mindir"]


def random_inputs(task: str, batch: int, seed: int) -> List[np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (batch, RACE_CHOICES, SEQ) if task == "race" else (batch, SEQ)
    arrays = [rng.integers(0, 30000, shape), rng.integers(0, 2, shape),
              (np.arange(SEQ) < rng.integers(8, SEQ, shape[:-1] + (1,))).astype(np.int32)]
    if INPUTS[task] == 4:
        arrays.append((rng.random(shape) < 0.3).astype(np.int32))
    return [a.astype(np.int32) for a in arrays]


def outputs_of(cell, arrays: List[np.ndarray]) -> List[np.ndarray]:
    from mindspore import Tensor

    outputs = cell(*[Tensor(a) for a in arrays])
    return [o.asnumpy() for o in (outputs if isinstance(outputs, (tuple, list)) else (outputs,))]


def graph_cell(path: Path):
    import mindspore as ms
    from mindspore import nn

    return nn.GraphCell(ms.load(str(path)))


def assert_same(expected: List[np.ndarray], actual: List[np.ndarray], atol: float = 1e-5) -> None:
    assert len(expected) == len(actual)
    for want, got in zip(expected, actual):
        assert want.shape == got.shape and want.dtype == got.dtype
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)


@pytest.mark.parametrize("task", list(INPUTS))
def test_mindir_gives_the_network_outputs(task, heads, mindirs):
    arrays = random_inputs(task, BATCH, seed=1)
    assert_same(outputs_of(heads[task][0], arrays), outputs_of(graph_cell(mindirs[task]), arrays))


@pytest.mark.parametrize("task", ["race", "squad_v2"])
def test_dynamic_batch_mindir_runs_any_batch(task, heads, tmp_path):
    head, checkpoint = heads[task]
    result = ok(export(task, checkpoint, tmp_path / "model", "--dynamic_batch", "true"))
    assert "input_ids int32 [batch, " in result.stdout
    cell = graph_cell(tmp_path / "model.mindir")
    for batch in (1, 3):
        arrays = random_inputs(task, batch, seed=batch)
        assert_same(outputs_of(head, arrays), outputs_of(cell, arrays))


# The outputs of each head, by the names of docs/serving.md's table.
OUTPUT_NAMES = {"classifier": ["logits"], "race": ["choice_logits"], "squad_v1": ["start_logits", "end_logits"],
                "squad_v2": ["start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index",
                             "cls_logits"]}


@pytest.mark.parametrize("task", ["classifier", "squad_v1", "squad_v2"])
def test_onnx_gives_the_network_outputs_under_the_names_export_prints(task, heads, tmp_path):
    """Taken by name, as ONNX Runtime users do (was: the outputs were named by MindSpore's node numbers, e.g. 178,
    while export.py printed `outputs: logits ...`, so session.run(["logits"], ...) failed); by position too."""
    onnxruntime = pytest.importorskip("onnxruntime")
    head, checkpoint = heads[task]
    done = ok(export(task, checkpoint, tmp_path / "model", "--file_format", "ONNX", "--export_batch_size", str(BATCH)))
    printed = re.findall(r"(\w+) (?:float32|int32) \[", done.stdout.split("outputs: ", 1)[1])
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [item.name for item in session.get_outputs()] == printed == OUTPUT_NAMES[task]
    names = [item.name for item in session.get_inputs()]
    assert names == ["input_ids", "token_type_ids", "input_mask", "p_mask"][:INPUTS[task]]
    arrays = random_inputs(task, BATCH, seed=2)
    # onnxruntime's own GEMM/GELU kernels round differently: ~1e-5 on outputs of magnitude ~1 (MINDIR: exact).
    assert_same(outputs_of(head, arrays), session.run(OUTPUT_NAMES[task], dict(zip(names, arrays))), atol=5e-5)
    assert_same(outputs_of(head, arrays), session.run(None, dict(zip(names, arrays))), atol=5e-5)


# The .meta.json of MNLI-like fine-tuning data at a length the tiny heads' position table holds.
MNLI_META = {"kind": "classifier", "task_name": "mnli", "split": "train", "max_seq_length": 32,
             "label_list": ["contradiction", "entailment", "neutral"]}


def with_tokenizer_record(checkpoint: Path, target: Path, spm_path: str, data_meta: Optional[dict] = None) -> str:
    """`checkpoint` saved as `target` the way a training run here writes it: recording the tokenizer of its data
    (ALBERT's SentencePiece model, lowercased) as run_tokenizer, and with `data_meta` (the .meta.json of its data)
    its task as run_task; its config beside it; returns the tokenizer record."""
    import shutil

    from src.common.checkpoint_io import read_checkpoint, save_checkpoint_atomic
    from src.data.tokenization import FullTokenizer
    from src.training.checkpoints import trained_data_task, trained_tokenizer

    record = json.dumps(trained_tokenizer({"tokenizer": FullTokenizer(None, True, spm_path).describe()}))
    records = {"run_tokenizer": record}
    if data_meta:
        records["run_task"] = json.dumps(trained_data_task(data_meta))
    target.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint_atomic([{"name": name, "data": value} for name, value in read_checkpoint(str(checkpoint)).items()],
                           str(target), append_dict=records)
    shutil.copy(checkpoint.parent / "albert_config.json", target.parent / "albert_config.json")
    return record


def test_onnx_exports_carry_the_checkpoints_tokenizer_and_predict_checks_it(heads, spm_path, tmp_path):
    """The float32 and int8 ONNX exports of a checkpoint that records its data's tokenizer carry the record (read by
    onnx and ONNX Runtime) and src.predict refuses another casing on either engine, as for the .ckpt (was: an .onnx
    answered with any tokenizer: ids meaning other words, no warning); the right tokenizer answers."""
    onnxruntime = pytest.importorskip("onnxruntime")
    import onnx

    checkpoint = tmp_path / "run" / "albert_classifier-10.ckpt"
    record = with_tokenizer_record(heads["classifier"][1], checkpoint, spm_path)
    for name, extra in (("float", []), ("int8", ["--quantize", "int8"])):
        ok(export("classifier", checkpoint, tmp_path / name, "--file_format", "ONNX", "--export_batch_size",
                  str(BATCH), *extra))
        path = tmp_path / f"{name}.onnx"
        assert {prop.key: prop.value for prop in onnx.load(str(path)).metadata_props}["albert.run_tokenizer"] == record
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert session.get_modelmeta().custom_metadata_map["albert.run_tokenizer"] == record
        assert [item.name for item in session.get_outputs()] == ["logits"]
        base = ["-m", "src.predict", "--model", str(path), "--task", "classifier", "--spm_model_file", spm_path,
                "--text_a", "The cat sat."]
        for engine in ("onnxruntime", "openvino")[:1 + (name == "float")]:
            one_line_error(run(base + ["--engine", engine, "--do_lower_case", "false"]),
                           f"{path} was trained on data made with albert_30k-clean.model", "do_lower_case True), "
                           "not with albert_30k-clean.model", "do_lower_case False)")
        assert set(json.loads(ok(run(base)).stdout)["probabilities"]) == {"0", "1", "2"}


def predict_in_process(argv: List[str], monkeypatch, capsys) -> Tuple[dict, str]:
    """src.predict run here (MindSpore's operations, no device set up) on one request: its answer and stderr."""
    import src.devices.device_setup
    import src.predict
    from model_utils.errors import run_cli

    monkeypatch.setenv("ALBERT_CPU_KERNELS", "0")
    monkeypatch.setattr(src.devices.device_setup, "setup_device",
                        lambda *args, **kwargs: src.devices.device_setup.Device("CPU"))
    code = run_cli(src.predict.main, argv)
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    return json.loads(out.out), out.err


def test_predict_names_the_labels_and_takes_the_length_the_checkpoints_data_recorded(heads, spm_path, tmp_path,
                                                                                    monkeypatch, capsys):
    """A checkpoint whose run recorded its data's task (MNLI's label names, max_seq_length 32) is answered with
    those names and at that length, said on stderr, on the .ckpt and on its ONNX export (was: labels "0", "1", "2"
    in HF's MNLI order or not, and the .ckpt at 128 tokens: beyond these heads' position table); --labels and
    --seq_length still win."""
    pytest.importorskip("onnxruntime")
    import onnx

    checkpoint = tmp_path / "run" / "albert_classifier-10.ckpt"
    with_tokenizer_record(heads["classifier"][1], checkpoint, spm_path, MNLI_META)
    names = MNLI_META["label_list"]
    base = ["--model", str(checkpoint), "--task", "classifier", "--spm_model_file", spm_path, "--device_target",
            "CPU", "--text_a", "The cat sat.", "--text_b", "A cat was sitting."]
    answer, err = predict_in_process(base, monkeypatch, capsys)
    assert list(answer["probabilities"]) == names and answer["label"] == names[int(np.argmax(answer["logits"]))]
    assert f"{checkpoint}: sequence length 32, the max_seq_length of the data it was fine-tuned on (--seq_length " \
           f"sets another)" in err and ", seq 32, " in err
    answer, err = predict_in_process(base + ["--labels", "a,b,c", "--seq_length", str(SEQ)], monkeypatch, capsys)
    assert list(answer["probabilities"]) == ["a", "b", "c"] and f", seq {SEQ}, " in err and "sequence length" not in err

    ok(export("classifier", checkpoint, tmp_path / "model", "--file_format", "ONNX", "--export_batch_size", "1"))
    metadata = {prop.key: prop.value for prop in onnx.load(str(tmp_path / "model.onnx")).metadata_props}
    assert json.loads(metadata["albert.run_task"]) == {key: MNLI_META[key] for key in
                                                       ("task_name", "label_list", "max_seq_length")}
    exported, err = predict_in_process(["--model", str(tmp_path / "model.onnx")] + base[2:], monkeypatch, capsys)
    assert list(exported["probabilities"]) == names and "sequence length" not in err  # fixed at export: SEQ


def open_length_onnx(path: Path, record: Optional[dict]) -> None:
    """A classifier-shaped ONNX model taking int32 [1, seq] inputs of any seq whose logits are seq * (1, 0, -1),
    carrying `record` (a run_task) in its metadata as export.py writes it."""
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Shape", ["input_ids"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Cast", ["seq"], ["length"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["length", "signs"], ["logits"])]
    constants = [helper.make_tensor("one", TensorProto.INT64, [], [1]),
                 helper.make_tensor("signs", TensorProto.FLOAT, [1, 3], [1.0, 0.0, -1.0])]
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT32, [1, "seq"])
              for name in ("input_ids", "token_type_ids", "input_mask")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 3])],
                              constants)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    if record is not None:
        model.metadata_props.add(key="albert.run_task", value=json.dumps(record))
    onnx.save(model, str(path))


def test_an_onnx_export_of_open_sequence_length_takes_the_recorded_one(spm_path, tmp_path, monkeypatch, capsys):
    """An ONNX model whose inputs take any sequence length is fed the max_seq_length its checkpoint's data recorded,
    else 128, and says which on stderr (was: features of length -1)."""
    pytest.importorskip("onnxruntime")
    record = {"task_name": "mnli", "label_list": ["contradiction", "entailment", "neutral"], "max_seq_length": 24}
    for name, recorded, seq, source in (("recorded", record, 24, "the max_seq_length of the data it was fine-tuned on"),
                                        ("bare", None, 128, "the default, 128")):
        path = tmp_path / f"{name}.onnx"
        open_length_onnx(path, recorded)
        answer, err = predict_in_process(["--model", str(path), "--task", "classifier", "--spm_model_file", spm_path,
                                          "--text_a", "The cat sat."], monkeypatch, capsys)
        assert answer["logits"] == [seq, 0, -seq] and f"{path}: sequence length {seq}, {source}\n" in err
        assert answer["label"] == ("contradiction" if recorded else "0")


def test_an_onnx_export_without_the_onnx_package_is_refused_before_any_work(heads, monkeypatch):
    """export.py names the ONNX file's outputs and records the tokenizer with the onnx package: without it the run
    stops at the flags' checks with one line saying what to install (not after MindSpore's export)."""
    import export as export_module
    from model_utils.errors import UserError

    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx raises ImportError, as where it is not installed
    args, _, task, _, _ = export_module.read_configs(["--config_path", "task_classifier_config.yaml", "--file_format",
                                                      "ONNX", "--export_ckpt_file", str(heads["classifier"][1])])
    with pytest.raises(UserError, match=r"--file_format ONNX: .* with the onnx package: pip install onnx"):
        export_module.check_request(args, task)


@pytest.mark.parametrize("name", ["groups2_inner2_gelu_new", "groups3_relu_typevocab3"])
def test_onnx_in_onnxruntime_matches_hf_transformers(name, tmp_path):
    """Our ONNX export run by ONNX Runtime gives HF transformers' logits for HF's weights (converted by our name
    table): the file a deployment hands to ORT computes the reference model, not only our network."""
    onnxruntime = pytest.importorskip("onnxruntime")
    import mindspore as ms
    import torch
    from mindspore import Tensor
    from transformers import AlbertConfig as HfConfig
    from transformers import AlbertForSequenceClassification as HfClassifier

    from export import export_atomically, export_runtime
    from tests.hf_reference import TINY_CONFIGS, random_batch
    from src.common.checkpoint_io import load_weights
    from src.conversion.convert_checkpoint import hf_name
    from src.model.albert import AlbertConfig
    from src.model.task_heads import AlbertForSequenceClassification

    torch.manual_seed(3)
    hf = HfClassifier(HfConfig(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               classifier_dropout_prob=0.0, attn_implementation="eager", num_labels=NUM_CLASS,
                               **TINY_CONFIGS[name])).eval()
    with torch.no_grad():
        for param in hf.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    weights = {(key if key.startswith("classifier.") else hf_name(key)): value.numpy()
               for key, value in hf.state_dict().items()}
    config = AlbertConfig.from_dict(hf.config.to_dict())
    ours = AlbertForSequenceClassification(config, NUM_CLASS,
                                           runtime=export_runtime("ONNX", "CPU", config.compute_type))
    ours.set_train(False)
    load_weights(ours, {key: value for key, value in weights.items() if key is not None})
    input_ids, token_type_ids, input_mask, _ = random_batch(hf.config.vocab_size, hf.config.type_vocab_size)
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        export_atomically(ours, [Tensor(np.zeros(input_ids.shape, np.int32)) for _ in range(3)],
                          str(tmp_path / "model"), "ONNX")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    session = onnxruntime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    logits = session.run(None, {"input_ids": input_ids, "token_type_ids": token_type_ids, "input_mask": input_mask})[0]
    with torch.no_grad():
        expected = hf(input_ids=torch.from_numpy(input_ids).long(),
                      token_type_ids=torch.from_numpy(token_type_ids).long(),
                      attention_mask=torch.from_numpy(input_mask).long()).logits.numpy()
    assert np.abs(expected).max() > 0.1  # not a degenerate model
    np.testing.assert_allclose(logits, expected, rtol=0, atol=1e-5)


def test_exports_never_need_the_kernels_and_onnx_takes_the_patterns_onnxruntime_fuses(monkeypatch):
    """MINDIR and AIR keep the layout of the device they are exported on without the compiled kernels, never asking
    whether they are built (a fresh machine would compile them for nothing); ONNX moves heads by transposes, adds the mask by broadcasting and writes LayerNorm and GELU as
    ONNX Runtime's fusable patterns, on any device; a compute type the device cannot run is refused."""
    from export import export_runtime
    from model_utils.errors import UserError
    from src.model import cpu_kernels
    from src.model.albert import Runtime

    def available() -> bool:
        raise AssertionError("an export asked whether the kernels are built (which builds them)")

    monkeypatch.setattr(cpu_kernels, "available", available)
    assert export_runtime("MINDIR", "CPU", "float32") == Runtime(split_heads=True, broadcast_mask=True,
                                                                 keyed_dropout=True)  # no effect: no training
    assert export_runtime("MINDIR", "GPU", "float16") == Runtime()
    assert export_runtime("AIR", "Ascend", "float32") == Runtime()
    for target in ("CPU", "GPU", "Ascend"):
        assert export_runtime("ONNX", target, "float32") == Runtime(onnx_patterns=True)
    # bfloat16 on CPU is the compiled kernels' products only, which no exported file carries (export.py exports such
    # a network as float32 before asking for its runtime).
    with pytest.raises(UserError, match="compute_type bfloat16 on CPU"):
        export_runtime("MINDIR", "CPU", "bfloat16")


ERRORS = {
    "air_on_cpu": ("classifier", "classifier", ["--file_format", "AIR"], "AIR export needs an Ascend device"),
    "other_head": ("squad_v1", "classifier", [], "holds a SQuAD v1.1 (squad_v1) head (qa_outputs.*) but "
                                                   "task_classifier_config.yaml is a classifier config"),
    "num_class": ("classifier", "classifier", ["--num_class", "2"], "classifier has 3 class(es) but num_class is 2"),
    "race_yaml_on_classifier": ("classifier", "race", [], "its classifier has 3 outputs"),
    "missing": (None, "classifier", [], "export_ckpt_file not found: "),
    "pretraining_checkpoint": ("backbone", "classifier", [], "has no task head"),
    "onnx_dynamic": ("classifier", "classifier", ["--file_format", "ONNX", "--dynamic_batch", "true"],
                     "dynamic_batch works with MINDIR only"),
    "onnx_exact_gelu": ("classifier", "classifier", ["--file_format", "ONNX", "--net_cfg.hidden_act", "gelu_exact"],
                        "ONNX export needs hidden_act gelu, gelu_new, relu"),
    "seq_too_long": ("classifier", "classifier", ["--export_seq_length", str(SEQ + 1)],
                     f"exceeds the network's max_position_embeddings {SEQ}"),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_are_one_line_and_leave_no_file(case, heads, tmp_path):
    source, yaml_task, extra, message = ERRORS[case]
    checkpoint = heads[source][1] if source in heads else tmp_path / f"{case}.ckpt"
    if source == "backbone":  # the weights of a pretraining run without its pretraining heads
        from src.common.checkpoint_io import save_checkpoint_atomic

        save_checkpoint_atomic([{"name": p.name, "data": p} for p in heads["classifier"][0].get_parameters()
                                if p.name.startswith("albert.")], str(checkpoint))
    args = ["export.py", "--config_path", f"task_{yaml_task}_config.yaml", "--export_ckpt_file", str(checkpoint),
            "--export_file_name", str(tmp_path / "out" / "model"), "--export_seq_length", str(SEQ)]
    if yaml_task == "classifier" and "--num_class" not in extra:
        args += ["--num_class", str(NUM_CLASS)]
    result = run(args + extra)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    if source:
        assert str(checkpoint) in lines[0] or case in ("air_on_cpu", "onnx_dynamic", "onnx_exact_gelu",
                                                       "seq_too_long")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_copy_of_another_tasks_yaml_is_told_from_a_yaml_of_ones_own(tmp_path, project_root):
    """SQuAD v1.1's yaml (or a copy) holds only keys v2.0's has too: it is named as v1.1's for a v2.0 model; a v2.0
    yaml of one's own (v1.1's keys plus a v2.0 one) and a copy of v2.0's are not; the classifier's and RACE's yamls
    have the same keys, so neither is taken for the other."""
    from src.tasks.registry import TASKS, task_copied

    shipped = {name: task.config_file for name, task in TASKS.items()}
    v1 = (project_root / "task_squad_v1_config.yaml").read_text()
    (tmp_path / "v1.yaml").write_text(v1)
    (tmp_path / "mine.yaml").write_text(v1.replace("n_best_size:", "null_score_diff_threshold: -1.5\nn_best_size:", 1))
    assert task_copied(tmp_path / "v1.yaml", shipped, "squad_v2") == (
        "squad_v1", ["classifier_dropout_prob", "end_n_top", "null_score_diff_threshold", "start_n_top"])
    assert task_copied(tmp_path / "mine.yaml", shipped, "squad_v2") == ("", [])
    assert task_copied(project_root / "task_squad_v2_config.yaml", shipped, "squad_v2") == ("", [])
    assert task_copied(project_root / "task_race_config.yaml", shipped, "classifier") == ("", [])


def test_task_from_yaml_keys_or_ambiguity(heads, tmp_path, project_root):
    """A copied yaml is recognised by its keys when only one task has them; otherwise --task is asked for."""
    (tmp_path / "mine.yaml").write_text((project_root / "task_squad_v2_config.yaml").read_text())
    ok(run(["export.py", "--config_path", str(tmp_path / "mine.yaml"), "--export_ckpt_file", str(heads["squad_v2"][1]),
            "--export_file_name", str(tmp_path / "v2"), "--export_seq_length", "16", *TASK_FLAGS["squad_v2"]]))
    assert (tmp_path / "v2.mindir").is_file()
    (tmp_path / "mine.yaml").write_text("num_class: 3\n")
    result = run(["export.py", "--config_path", str(tmp_path / "mine.yaml"),
                  "--export_ckpt_file", str(heads["classifier"][1])])
    assert result.returncode == 2 and "pass --task classifier|race" in result.stderr


def test_export_of_a_run_classifier_checkpoint_matches_its_eval(assets, spm_path, tmp_path):
    """The real flow: a run_classifier.py checkpoint (train cell: weights + optimizer state) exported with its
    task yaml gives the probabilities that run_classifier's own evaluation wrote."""
    from src.data.pipelines import read_column

    lines = (assets / "glue" / "MRPC" / "dev.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (tmp_path / "dev.tsv").write_text("".join(lines[:25]), encoding="utf-8")
    data = tmp_path / "dev.mindrecord"
    tool("create_finetune_data", ["--task_name", "mrpc", "--data_dir", assets / "glue" / "MRPC",
                                  "--input_file", tmp_path / "dev.tsv", "--split", "dev", "--output_file", data,
                                  "--spm_model_file", spm_path, "--max_seq_length", SEQ])
    ok(run(["run_classifier.py", "--train_data_file_path", str(data), "--eval_data_file_path", str(data),
            "--albert_network", "albert_tiny", "--net_cfg.hidden_size", "32", "--net_cfg.embedding_size", "16",
            "--net_cfg.num_hidden_layers", "2", "--net_cfg.num_attention_heads", "2", "--net_cfg.intermediate_size",
            "64", "--device_target", "CPU", "--train_steps", "3", "--train_batch_size", "8",
            "--output_dir", str(tmp_path / "run")]))
    ok(run(["export.py", "--config_path", "task_classifier_config.yaml", "--export_ckpt_file",
            str(tmp_path / "run" / "checkpoints" / "albert_classifier-3.ckpt"), "--export_file_name",
            str(tmp_path / "model"), "--export_seq_length", str(SEQ), "--dynamic_batch", "true"]))
    columns = [read_column(str(data), name).astype(np.int32) for name in ("input_ids", "segment_ids", "input_mask")]
    logits = outputs_of(graph_cell(tmp_path / "model.mindir"), columns)[0].astype(np.float64)
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    rows = (tmp_path / "run" / "eval" / "predictions.tsv").read_text().splitlines()[1:]
    written = np.array([[float(value) for value in row.split("\t")[2:-1]] for row in rows])  # then the id
    np.testing.assert_allclose(probabilities, written, rtol=0, atol=1e-6)  # the tsv has 6 decimals


# ------------------------------------------------------------------------------------------------ predict

def predict(*args: str) -> dict:
    result = ok(run(["-m", "src.predict", *args]))
    return json.loads(result.stdout.strip().splitlines()[-1])


def model_file(request, task: str) -> Path:
    """The exported `task` head in the format the test is parametrized with (fixtures made on demand)."""
    return request.getfixturevalue("mindirs" if request.node.callspec.params["fmt"] == "mindir" else "onnx_files")[task]


@pytest.mark.parametrize("fmt", ["mindir", "onnx"])
def test_predict_classifier_on_an_mrpc_pair(fmt, request, heads, assets, tokenizer, spm_path):
    from src.data.features import InputExample, classifier_feature
    from src.data.input_text import read_tsv

    fields = [f for _, f in read_tsv(assets / "glue" / "MRPC" / "dev.tsv")][1]
    printed = predict("--model", str(model_file(request, "classifier")), "--task", "classifier", "--spm_model_file",
                      spm_path, "--text_a", fields[3], "--text_b", fields[4], "--labels", "a,b,c")
    feature = classifier_feature(InputExample("x", fields[3], fields[4], None, ""), tokenizer, {}, SEQ)
    logits = outputs_of(heads["classifier"][0], [feature[k][None] for k in ("input_ids", "segment_ids",
                                                                            "input_mask")])[0][0].astype(np.float64)
    expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    np.testing.assert_allclose([printed["probabilities"][k] for k in "abc"], expected, rtol=0, atol=1e-5)
    assert printed["label"] == "abc"[int(expected.argmax())]


def test_a_classifier_request_on_onnx_imports_neither_mindspore_nor_training_nor_squad(onnx_files, spm_path):
    """The ONNX Runtime path serves without MindSpore in the process (its memory is the point of that path), and a
    classifier request loads only serving's modules: no training, data creation, MindRecord or SQuAD code."""
    code = ("import json, sys; from src.predict import main; main(sys.argv[1:]); "
            "print(json.dumps(sorted(sys.modules)), file=sys.stderr)")
    result = ok(run(["-c", code, "--model", str(onnx_files["classifier"]), "--task", "classifier",
                     "--spm_model_file", spm_path, "--text_a", "The cat sat.", "--threads", "1"]))
    loaded = json.loads(result.stderr.strip().splitlines()[-1])
    assert "mindspore" not in loaded and "src.serving.engines" in loaded and "src.data.features" in loaded
    unwanted = ("src.training", "src.create_", "src.data.pipelines", "src.data.mindrecord_io", "src.data.corpus",
                "src.tasks.squad_", "src.export", "src.conversion", "src.model")
    assert [name for name in loaded if name.startswith(unwanted)] == []
    assert set(json.loads(result.stdout)["probabilities"]) == {"0", "1", "2"}
    assert result.stderr.count("warning: no --text_b: answered as single sentences") == 1


def test_predict_warns_once_about_requests_without_text_b(onnx_files, spm_path, tmp_path):
    """Nothing in a model file says whether it was fine-tuned on sentence pairs (MRPC) or single sentences (CoLA):
    requests without text_b are answered as single sentences with one warning, not silently."""
    requests = requests_file(tmp_path / "requests.jsonl", [{"id": "q1", "text_a": "A cat sat."},
                                                           {"text_a": "A cat sat.", "text_b": "A dog ran."},
                                                           {"text_a": "A dog ran."}])
    result = ok(run(["-m", "src.predict", "--model", str(onnx_files["classifier"]), "--task", "classifier",
                     "--spm_model_file", spm_path, "--input_file", str(requests)]))
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(
        f"warning: 2 of 3 requests of {requests} have no text_b (the first: id q1): answered as single sentences; "
        f"a model fine-tuned on sentence pairs (mrpc, qqp, mnli"), warnings
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["q1", 2, 3]


def test_predict_serves_onnx_through_openvino_as_through_onnxruntime(onnx_files, spm_path, tmp_path, capsys):
    """--engine openvino: the same answers as ONNX Runtime's (float32 hint: to float32 rounding; bfloat16, on CPUs
    with native bfloat16: close, same labels), and the engine named on stderr."""
    from model_utils.errors import run_cli
    from src import predict
    from src.model import cpu_kernels

    pytest.importorskip("openvino", reason="OpenVINO not installed (requirements-dev.txt installs it)")
    requests = requests_file(tmp_path / "requests.jsonl", [{"text_a": "A cat sat.", "text_b": "A dog ran."},
                                                           {"text_a": "Rain fell all day.", "text_b": "It was dry."}])
    base = ["--model", str(onnx_files["classifier"]), "--task", "classifier", "--spm_model_file", spm_path,
            "--input_file", str(requests), "--threads", "1"]
    answers = {}
    precisions = ["float32"] + (["bfloat16"] if cpu_kernels.bf16_support()[0] else [])
    for engine, precision in [("onnxruntime", "float32")] + [("openvino", p) for p in precisions]:
        assert run_cli(predict.main, base + ["--engine", engine, "--precision", precision]) == 0
        out, err = capsys.readouterr()
        assert ("OpenVINO" in err) == (engine == "openvino"), err
        answers[engine, precision] = [json.loads(line) for line in out.splitlines()]
    probabilities = {key: np.array([[a["probabilities"][k] for k in "012"] for a in found])
                     for key, found in answers.items()}
    reference = probabilities["onnxruntime", "float32"]
    np.testing.assert_allclose(probabilities["openvino", "float32"], reference, atol=1e-5)
    if ("openvino", "bfloat16") in answers:
        assert np.abs(probabilities["openvino", "bfloat16"] - reference).max() < 0.05
        assert [a["label"] for a in answers["openvino", "bfloat16"]] == [a["label"] for a in answers["onnxruntime",
                                                                                                     "float32"]]


def expected_squad(task: str, head, tokenizer, question: str, context: str) -> Tuple[str, List[dict], int]:
    """(answer, n-best, windows) of evaluation's postprocessing on the in-process head's outputs for the windows the
    data tool makes (stride 24, query 16, as the predict tests ask for)."""
    from src.data.features import FIRST_UNIQUE_ID, SquadExample, SquadOptions, example_features, example_row
    from src.tasks.squad_answers import predictions_v1, predictions_v2

    example = SquadExample("q", question, context, [])
    windows = list(example_features(example, 0, tokenizer, SquadOptions(SEQ, 24, 16, False)))
    features = {FIRST_UNIQUE_ID + i: dict(unique_id=FIRST_UNIQUE_ID + i, **f) for i, (_, f) in enumerate(windows)}
    columns = [np.stack([r[k] for r, _ in windows]) for k in ("input_ids", "segment_ids", "input_mask", "p_mask")]
    outputs = outputs_of(head, columns)
    examples = [example_row(0, example)]
    if task == "squad_v1":
        answers, nbest = predictions_v1(examples, features, {u: (outputs[0][i], outputs[1][i])
                                                             for i, u in enumerate(features)})
    else:
        keys = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")
        results = {u: {k: outputs[j][i] for j, k in enumerate(keys)} for i, u in enumerate(features)}
        answers, nbest, _ = predictions_v2(examples, features, results, 20, 30, START_N_TOP, END_N_TOP)
    return answers["q"], nbest["q"][:5], len(windows)


def assert_squad_answer(printed: dict, expected: Tuple[str, List[dict], int]) -> None:
    answer, nbest, windows = expected
    assert printed["answer"] == answer and printed["windows"] == windows
    assert [e["text"] for e in printed["nbest"]] == [e["text"] for e in nbest]
    np.testing.assert_allclose([e["probability"] for e in printed["nbest"]], [e["probability"] for e in nbest],
                               rtol=0, atol=1e-5)


@pytest.mark.parametrize("task, fmt", [("squad_v1", "mindir"), ("squad_v2", "mindir"), ("squad_v1", "onnx")])
def test_predict_squad_answer_from_the_context(task, fmt, request, heads, assets, tokenizer, spm_path):
    data = json.loads((assets / "squad" / "v1.1" / "dev-v1.1.part1_bloomsbury.json").read_text(encoding="utf-8"))
    paragraph = data["data"][0]["paragraphs"][0]
    question, context = paragraph["qas"][0]["question"], paragraph["context"]
    printed = predict("--model", str(model_file(request, task)), "--task", task, "--spm_model_file", spm_path,
                      "--question", question, "--context", context, "--doc_stride", "24", "--max_query_length", "16")
    assert printed["windows"] > BATCH  # several windows, the last batch padded
    assert printed["answer"] in context and (printed["answer"] or task == "squad_v2")
    assert_squad_answer(printed, expected_squad(task, heads[task][0], tokenizer, question, context))


def requests_file(path: Path, requests: List[dict]) -> Path:
    path.write_text("".join(json.dumps(request) + "\n" for request in requests), encoding="utf-8")
    return path


def predict_lines(*args: str) -> List[dict]:
    """The JSON lines src.predict prints for a file of requests."""
    return [json.loads(line) for line in ok(run(["-m", "src.predict", *args])).stdout.strip().splitlines()]


@pytest.mark.parametrize("task, fmt", [("squad_v1", "onnx"), ("squad_v2", "ckpt")])
def test_predict_answers_a_file_of_questions_as_each_alone(task, fmt, heads, onnx_files, assets, tokenizer,
                                                           spm_path, tmp_path):
    """Questions on two paragraphs in one file: each line is evaluation's answer for that question alone, though
    their windows share batches (ONNX: the export's 2 rows; a .ckpt in-process: --batch_size 3)."""
    data = json.loads((assets / "squad" / "v1.1" / "dev-v1.1.part1_bloomsbury.json").read_text(encoding="utf-8"))
    asked = [(qa["question"], paragraph["context"]) for paragraph in data["data"][0]["paragraphs"][:2]
             for qa in paragraph["qas"][:2]]
    requests = requests_file(tmp_path / "questions.jsonl",
                             [{"question": q, "context": c, **({"id": "first"} if not i else {})}
                              for i, (q, c) in enumerate(asked)])
    if fmt == "ckpt":
        (tmp_path / "task_squad_v2_mine.yaml").write_text(f"start_n_top: {START_N_TOP}\nend_n_top: {END_N_TOP}\n")
        model = [str(heads[task][1]), "--seq_length", str(SEQ), "--batch_size", "3",
                 "--config_path", str(tmp_path / "task_squad_v2_mine.yaml")]
    else:
        model = [str(onnx_files[task])]
    printed = predict_lines("--model", *model, "--task", task, "--spm_model_file", spm_path, "--input_file",
                            str(requests), "--doc_stride", "24", "--max_query_length", "16")
    assert [line["id"] for line in printed] == ["first", 2, 3, 4]
    assert sum(line["windows"] for line in printed) > 3 * BATCH
    for line, (question, context) in zip(printed, asked):
        assert_squad_answer(line, expected_squad(task, heads[task][0], tokenizer, question, context))


def test_predict_race_chooses_from_a_real_article(heads, mindirs, assets, tokenizer, spm_path, tmp_path):
    """RACE from text: the printed choice and probabilities are the in-process head's on the data tool's features,
    for one question given by flags and for a file of the article's questions (batches of the export's 2 rows)."""
    from src.create_finetune_data import read_race_examples
    from src.data.features import race_feature

    examples = read_race_examples(assets / "race" / "RACE" / "dev" / "high" / "80.txt")[:3]
    example = examples[0]
    common = ["-m", "src.predict", "--model", str(mindirs["race"]), "--task", "race", "--spm_model_file", spm_path]
    printed = predict(*common[2:], "--article", example.article, "--question", example.question,
                      *[part for option in example.choices for part in ("--option", option)])
    requests = requests_file(tmp_path / "race.jsonl", [{"article": e.article, "question": e.question,
                                                        "options": e.choices, "id": e.guid} for e in examples])
    answers = ok(run(common + ["--input_file", str(requests), "--output_file", str(tmp_path / "out.jsonl")]))
    assert answers.stdout == "" and f"answered 3 requests of {requests}" in answers.stderr
    assert "requests: 3 requests in " in answers.stderr  # the progress's last line
    in_file = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [line["id"] for line in in_file] == [e.guid for e in examples]
    for line, one in zip([printed] + in_file, [example] + examples):
        feature = race_feature(one, tokenizer, SEQ, 128)
        logits = outputs_of(heads["race"][0], [feature[k][None] for k in ("input_ids", "segment_ids",
                                                                          "input_mask")])[0][0].astype(np.float64)
        expected = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
        np.testing.assert_allclose([line["probabilities"][k] for k in "ABCD"], expected, rtol=0, atol=1e-5)
        assert line["answer"] == "ABCD"[int(expected.argmax())]
        assert line["option"] == one.choices[int(expected.argmax())]
    again = run(common + ["--input_file", str(requests), "--output_file", str(tmp_path / "out.jsonl")])
    assert again.returncode == 2 and f"output already exists: {tmp_path / 'out.jsonl'}" in again.stderr
    (tmp_path / "out.jsonl").write_text("stale\n")
    ok(run(common + ["--input_file", str(requests), "--output_file", str(tmp_path / "out.jsonl"), "--overwrite"]))
    assert [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()] == in_file
    log = (tmp_path / "logs" / "predict.log").read_text()  # the two runs that answered; the refused one added nothing
    assert log.count("--- ") == 2 and log.count(f"answered 3 requests of {requests}") == 2
    too_few = run(common + ["--article", example.article, "--question", example.question, "--option", "yes"])
    assert too_few.returncode == 2 and "chooses among 4 options but 1 --option were given" in too_few.stderr
    other_batch = run(common + ["--input_file", str(requests), "--batch_size", "4"])
    assert other_batch.returncode == 2 and "was exported for batches of 2 rows: drop --batch_size" in other_batch.stderr


def test_predict_a_checkpoint_in_process_gives_hf_transformers_logits(assets, tokenizer, spm_path, tmp_path):
    """A fine-tuned .ckpt runs in src.predict's own process (on CPU: the compiled kernels) over a file of requests
    in batches of 2 (the last one padded); each line's logits are HF transformers' for HF's weights, converted by
    our name table, on the data tool's features. The class count comes from the checkpoint (the shipped yaml says
    2)."""
    import torch
    from mindspore import Tensor
    from transformers import AlbertConfig as HfConfig
    from transformers import AlbertForSequenceClassification as HfClassifier

    from src.common.checkpoint_io import save_checkpoint_atomic
    from src.conversion.convert_checkpoint import hf_name
    from src.data.features import InputExample, classifier_feature
    from src.data.input_text import read_tsv
    from src.model import cpu_kernels
    from src.model.albert import AlbertConfig

    torch.manual_seed(5)
    hf = HfClassifier(HfConfig(vocab_size=30000, embedding_size=16, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64, hidden_act="gelu_new",
                               max_position_embeddings=SEQ, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                               classifier_dropout_prob=0.0, attn_implementation="eager", num_labels=NUM_CLASS)).eval()
    with torch.no_grad():
        for param in hf.parameters():
            param.add_(torch.randn_like(param) * 0.1)
    names = {key: (key if key.startswith("classifier.") else hf_name(key)) for key in hf.state_dict()}
    save_checkpoint_atomic([{"name": names[key], "data": Tensor(value.numpy())}
                            for key, value in hf.state_dict().items() if names[key] is not None],
                           str(tmp_path / "albert_classifier-1.ckpt"))
    AlbertConfig.from_dict(hf.config.to_dict()).to_json_file(str(tmp_path / "albert_config.json"))

    pairs = [(f[3], f[4]) for _, f in read_tsv(assets / "glue" / "MRPC" / "dev.tsv")][1:5] + [("The cat sat.", None)]
    requests = requests_file(tmp_path / "pairs.jsonl", [{"text_a": a, "text_b": b} if b else {"text_a": a}
                                                        for a, b in pairs])
    argv = ["-m", "src.predict", "--model", str(tmp_path / "albert_classifier-1.ckpt"), "--task", "classifier",
            "--spm_model_file", spm_path, "--seq_length", str(SEQ), "--input_file", str(requests), "--batch_size", "2",
            "--labels", "a,b,c", "--device_target", "CPU"]
    done = ok(run(argv + ["--output_file", str(tmp_path / "answers.jsonl")]))
    assert ("in this process (compiled CPU kernels" in done.stderr) == cpu_kernels.available(), done.stderr[-2000:]
    # with the kernels switched off: MindSpore's operations, the start-up line saying why, the same answers
    off = subprocess.run([sys.executable, *argv], cwd=ROOT, env={**ENV, "ALBERT_CPU_KERNELS": "0"},
                         capture_output=True, text=True, timeout=300)
    assert off.returncode == 0 and "in this process (MindSpore operations (ALBERT_CPU_KERNELS=0))" in off.stderr, \
        off.stderr[-2000:]
    unfused = [json.loads(line)["logits"] for line in off.stdout.splitlines()]
    printed = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text(encoding="utf-8").splitlines()]
    np.testing.assert_allclose(unfused, [line["logits"] for line in printed], rtol=0, atol=1e-5)
    assert [line["id"] for line in printed] == [1, 2, 3, 4, 5]
    features = [classifier_feature(InputExample("x", a, b, None, ""), tokenizer, {}, SEQ) for a, b in pairs]
    with torch.no_grad():
        expected = hf(**{name: torch.from_numpy(np.stack([f[key] for f in features])).long() for name, key in
                         (("input_ids", "input_ids"), ("token_type_ids", "segment_ids"),
                          ("attention_mask", "input_mask"))}).logits.numpy()
    assert np.abs(expected).max() > 0.1  # not a degenerate model
    np.testing.assert_allclose([line["logits"] for line in printed], expected, rtol=0, atol=1e-5)
    assert [line["label"] for line in printed] == ["abc"[i] for i in expected.argmax(-1)]


def test_predict_refuses_a_context_of_more_windows_than_the_cap(mindirs, assets, spm_path, tmp_path):
    """A paragraph of over 120 tokens makes 3 or more windows of 64 tokens at stride 48: over --max_windows 2, the
    run stops with one line, before any features are made of it, and writes nothing."""
    context = (assets / "derived" / "squad_v1.1_dev_sample_SuperBowl50_5paras.json").read_text(encoding="utf-8")
    context = json.loads(context)["data"][0]["paragraphs"][0]["context"]
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps({"id": "q1", "question": "Who won Super Bowl 50?", "context": context}) + "\n")
    result = run(["-m", "src.predict", "--model", str(mindirs["squad_v1"]), "--task", "squad_v1", "--spm_model_file",
                  spm_path, "--input_file", str(requests), "--output_file", str(tmp_path / "answers.jsonl"),
                  "--doc_stride", "48", "--max_query_length", "16", "--max_windows", "2"])
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    found = re.search(r"error: request q1: its context \((\d+) tokens\) makes (\d+) windows of 64 tokens at "
                      r"--doc_stride 48, more than --max_windows 2", result.stderr)
    assert found, result.stderr[-2000:]
    tokens, windows = map(int, found.groups())
    assert tokens > 120 and windows == 1 + -(-(tokens - (64 - 3 - 6)) // 48)  # a 6-token question, 3 markers
    assert sorted(p.name for p in tmp_path.iterdir()) == ["requests.jsonl"]


def test_predict_rejects_a_model_of_another_task(mindirs, spm_path):
    """...naming the task whose inputs and outputs the model has (a MINDIR's several outputs are one tuple)."""
    for model, fits in (("classifier", "classifier"), ("squad_v2", "squad_v2")):
        result = run(["-m", "src.predict", "--model", str(mindirs[model]), "--task", "squad_v1",
                      "--spm_model_file", spm_path, "--question", "q", "--context", "c"])
        assert result.returncode == 2 and "not the [batch, seq] inputs" in result.stderr
        assert f"of a squad_v1 model exported by export.py: it is a {fits} model, use --task {fits}" in result.stderr


def test_onnx_external_data_is_read_only_from_the_models_folder(tmp_path):
    """A weight kept in a file beside the model (as onnx saves models over 2 GB) is accepted; one naming a file
    outside the folder through a symlinked subfolder is refused before ONNX Runtime could read it."""
    pytest.importorskip("onnx")
    from model_utils.errors import UserError
    from src.serving.engines import model_signature
    from tests.test_bad_input_matrix import onnx_reading

    onnx_reading("weights/w.bin")(tmp_path / "inside.onnx", tmp_path)
    assert [name for name, _ in model_signature(str(tmp_path / "inside.onnx"))[0]] == [
        "input_ids", "token_type_ids", "input_mask"]
    (tmp_path / "link").symlink_to("/etc")
    onnx_reading("link/passwd")(tmp_path / "linked.onnx", tmp_path)
    with pytest.raises(UserError, match="keeps its data in 'link/passwd', outside the model's folder"):
        model_signature(str(tmp_path / "linked.onnx"))


def test_overwrite_replaces_only_the_files_of_that_export(tmp_path, monkeypatch):
    """A split MINDIR (<name>_graph.mindir + <name>_variables/data_N, MindSpore's layout over 1 GB) exported again
    with --overwrite: the graph file is replaced, the parameter folder whole (no data_N of the old one stays);
    another export beside it stays. A parameter folder holding anything else is refused and kept; without
    --overwrite an export that appeared since the run's check is kept."""
    import mindspore as ms

    from export import export_atomically
    from model_utils.errors import UserError

    def split_export(model, *inputs, file_name, file_format):
        Path(file_name + "_graph.mindir").write_bytes(b"new graph")
        os.mkdir(file_name + "_variables")
        Path(file_name + "_variables", "data_0").write_bytes(b"new weights")

    monkeypatch.setattr(ms, "export", split_export)
    (tmp_path / "model_graph.mindir").write_bytes(b"old graph")
    (tmp_path / "model_variables").mkdir()
    for name in ("data_0", "data_1"):
        (tmp_path / "model_variables" / name).write_bytes(b"old weights")
    (tmp_path / "other.mindir").write_bytes(b"another export")
    written = export_atomically(None, [], str(tmp_path / "model"), "MINDIR", overwrite=True)
    assert written == [str(tmp_path / "model_graph.mindir"), str(tmp_path / "model_variables")]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_graph.mindir", "model_variables", "other.mindir"]
    assert [p.name for p in (tmp_path / "model_variables").iterdir()] == ["data_0"]
    assert (tmp_path / "model_variables" / "data_0").read_bytes() == b"new weights"
    assert (tmp_path / "other.mindir").read_bytes() == b"another export"

    (tmp_path / "model_variables" / "notes.txt").write_text("mine")
    with pytest.raises(UserError, match=f"{tmp_path / 'model_variables'} holds notes.txt, which this command"):
        export_atomically(None, [], str(tmp_path / "model"), "MINDIR", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "model_variables").iterdir()) == ["data_0", "notes.txt"]
    with pytest.raises(UserError, match=f"{tmp_path / 'model_graph.mindir'} appeared while this run was writing"):
        export_atomically(None, [], str(tmp_path / "model"), "MINDIR")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model_graph.mindir", "model_variables", "other.mindir"]


def test_predict_keeps_an_output_file_that_appears_while_it_runs(spm_path, tmp_path, monkeypatch, capsys):
    """--output_file is checked absent at the start; one created before the answers are in place (by another run,
    by the user) is kept and the run stops with one line, where a rename would have clobbered it. With
    --overwrite it is replaced."""
    import src.devices.device_setup
    import src.predict
    from model_utils.errors import run_cli

    monkeypatch.setenv("ALBERT_CPU_KERNELS", "0")
    # a MindSpore runtime another test of this process started cannot be set up again (nor needs to be)
    monkeypatch.setattr(src.devices.device_setup, "setup_device", lambda *args, **kwargs: src.devices.device_setup.Device("CPU"))
    saved_classifier(tmp_path)
    requests = requests_file(tmp_path / "requests.jsonl", [{"text_a": "A short request."}])
    output = tmp_path / "answers.jsonl"
    real_write = src.predict.write_answers

    def user_creates_the_output(*args):
        output.write_text("the user's answers\n")
        real_write(*args)

    monkeypatch.setattr(src.predict, "write_answers", user_creates_the_output)
    argv = ["--model", str(tmp_path / "albert_classifier-1.ckpt"), "--task", "classifier", "--spm_model_file",
            spm_path, "--seq_length", str(SEQ), "--input_file", str(requests), "--output_file", str(output),
            "--device_target", "CPU"]
    assert run_cli(src.predict.main, argv) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (f"error: {output} appeared while this run was writing "
                                                                f"it: kept; pass --overwrite to replace it")
    assert output.read_text() == "the user's answers\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["albert_classifier-1.ckpt", "albert_config.json",
                                                          "answers.jsonl", "requests.jsonl"]
    assert run_cli(src.predict.main, argv + ["--overwrite"]) == 0
    assert json.loads(output.read_text())["label"] in ("0", "1", "2")


def test_predict_stopped_by_sigterm_leaves_no_partial_answers_or_lock(spm_path, tmp_path, monkeypatch,
                                                                     stop_signals_as_started):
    """SIGTERM (a service manager, `timeout`) killed the run mid-file, leaving its hidden partial answers and lock in
    the output folder until the next run there."""
    import signal

    import src.devices.device_setup
    import src.predict
    from model_utils.errors import run_cli

    monkeypatch.setenv("ALBERT_CPU_KERNELS", "0")
    monkeypatch.setattr(src.devices.device_setup, "setup_device",
                        lambda *args, **kwargs: src.devices.device_setup.Device("CPU"))
    saved_classifier(tmp_path)
    requests = requests_file(tmp_path / "requests.jsonl", [{"text_a": "A short request."}] * 3)
    real_write = src.predict.write_answers

    def stopped_midway(answers, requests, out, accuracy):
        out.write("half an answer")
        os.kill(os.getpid(), signal.SIGTERM)
        real_write(answers, requests, out, accuracy)

    monkeypatch.setattr(src.predict, "write_answers", stopped_midway)
    handler = signal.getsignal(signal.SIGTERM)
    code = run_cli(src.predict.main, ["--model", str(tmp_path / "albert_classifier-1.ckpt"), "--task", "classifier",
                                      "--spm_model_file", spm_path, "--seq_length", str(SEQ), "--input_file",
                                      str(requests), "--output_file", str(tmp_path / "out" / "answers.jsonl"),
                                      "--device_target", "CPU"])
    assert code == 128 + signal.SIGTERM and signal.getsignal(signal.SIGTERM) == handler
    assert list((tmp_path / "out").iterdir()) == []


def test_predict_takes_squads_answer_settings_from_the_task_yaml(tmp_path):
    """--config_path's n_best_size, max_answer_length and null_score_diff_threshold were ignored (the flags' own
    defaults won), so answers differed from the evaluation run with the same yaml; a flag still wins."""
    from src.predict import fill_answer_settings, parse_args

    mine = tmp_path / "mine.yaml"
    mine.write_text("n_best_size: 7\nmax_answer_length: 12\nnull_score_diff_threshold: 5.0\n")
    base = ["--model", "m.ckpt", "--task", "squad_v2", "--config_path", str(mine)]
    args = parse_args(base + ["--n_best_size", "3"])
    fill_answer_settings(args)
    assert (args.n_best_size, args.max_answer_length, args.null_score_diff_threshold) == (3, 12, 5.0)
    shipped = parse_args(["--model", "m.onnx", "--task", "squad_v1"])
    fill_answer_settings(shipped)
    assert (shipped.n_best_size, shipped.max_answer_length) == (20, 30)  # task_squad_v1_config.yaml's


def test_predict_scores_requests_that_carry_their_gold_label(spm_path, tmp_path, monkeypatch, capsys):
    """Requests with a `label` or `gold` (a label name or index) were refused as unknown keys: they are answered as
    without it (the same logits), the gold label is echoed, and the accuracy over them is printed at the end; a gold
    label the model does not have is scored as wrong, with a warning."""
    import src.devices.device_setup
    import src.predict
    from model_utils.errors import run_cli

    monkeypatch.setenv("ALBERT_CPU_KERNELS", "0")
    monkeypatch.setattr(src.devices.device_setup, "setup_device", lambda *args, **kwargs: src.devices.device_setup.Device("CPU"))
    saved_classifier(tmp_path)
    texts = ["The cat sat.", "A dog barked twice.", "Rain fell all day.", "Nobody came.", "It was late."]
    golds = [{"label": "0"}, {"gold": 1}, {"label": "2"}, {"gold": "2"}, {"label": "positive"}]
    argv = ["--model", str(tmp_path / "albert_classifier-1.ckpt"), "--task", "classifier", "--spm_model_file",
            spm_path, "--seq_length", str(SEQ), "--device_target", "CPU"]
    answers = {}
    for name, extra in (("plain", [{}] * 5), ("gold", golds)):
        requests = requests_file(tmp_path / f"{name}.jsonl", [dict(text_a=t, **g) for t, g in zip(texts, extra)])
        assert run_cli(src.predict.main, argv + ["--input_file", str(requests)]) == 0
        out = capsys.readouterr()
        answers[name] = [json.loads(line) for line in out.out.strip().splitlines()]
    assert [{k: v for k, v in a.items() if k != "gold"} for a in answers["gold"]] == answers["plain"]
    assert [a["gold"] for a in answers["gold"]] == ["0", 1, "2", "2", "positive"]
    correct = sum(a["label"] == str(a["gold"]) for a in answers["gold"])
    assert f"accuracy {correct / 5:.4f}: {correct} of the 5 requests of {tmp_path / 'gold.jsonl'} with a gold answer" \
        in out.err
    assert "warning: 1 gold answer(s) are none of the model's labels (first: 'positive'; the model's: 0, 1, 2)" \
        in out.err


def saved_classifier(folder: Path) -> None:
    """A random 3-class classifier checkpoint with its albert_config.json, as run_classifier.py saves one."""
    from src.common.checkpoint_io import save_checkpoint_atomic

    save_checkpoint_atomic(build_head("classifier"), str(folder / "albert_classifier-1.ckpt"))
    tiny_config().to_json_file(str(folder / "albert_config.json"))


def test_outputs_returned_twice_or_straight_from_an_input_are_named_through_identity(tmp_path):
    """A graph whose outputs are one tensor twice, or an input as it is, cannot rename that tensor: each gets an
    Identity of its name, and ONNX Runtime returns the same values under the new names."""
    onnxruntime = pytest.importorskip("onnxruntime")
    import onnx
    from onnx import TensorProto, helper

    from src.serving.onnx_labels import label_onnx

    info = [helper.make_tensor_value_info(name, TensorProto.FLOAT, [2]) for name in ("x", "7", "7", "x")]
    graph = helper.make_graph([helper.make_node("Neg", ["x"], ["7"])], "g", info[:1], info)
    onnx.save(helper.make_model(graph), str(tmp_path / "m.onnx"))
    label_onnx(str(tmp_path / "m.onnx"), ["a", "b", "c", "d"], {"k": "v"})
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    x = np.array([1.0, -2.0], np.float32)
    assert [item.name for item in session.get_outputs()] == ["a", "b", "c", "d"]
    assert [got.tolist() for got in session.run(["a", "b", "c", "d"], {"x": x})] == [[1, -2], [-1, 2], [-1, 2], [1, -2]]
    assert session.get_modelmeta().custom_metadata_map["k"] == "v"
