"""The bad-input matrix of every entry point: a user's mistake stops the run with one line
`error: ...` on stderr that names the culprit (file, line or key), exit code 2, no traceback (unless --verbose),
and nothing written where the run would have put its outputs.

`MATRIX` is the table (docs/troubleshooting.md and docs/troubleshooting_CN.md, "Bad-input matrix", show it to users). A
row: entry point, the bad input in words, the arguments, fragments the error line must hold, and how the bad input is
made. In argv and fragments, {fx} is this module's fixture folder (tiny data and checkpoints, made once), {tmp} the
row's own folder, {bad} the bad input made there, {out} where the run would write (it must stay absent or empty),
{assets} the real test assets, {spm} ALBERT's SentencePiece model and {root} the project.

Rows run in-process through `run_cli(main, argv)`, so MindSpore is imported once, not once per row. There the
device setup is stubbed (a started runtime cannot be reset) and the work itself (training, evaluation, export)
fails the test if it is reached: every check must come before any work. Rows marked `process=True` run the real
command in a subprocess, end to end, device setup included.
"""
import importlib
import json
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import pytest

from model_utils.errors import run_cli
from tests.pretrain_helpers import ENV, ROOT, flip_tensor_bytes

ASSETS = ROOT.parent / "shared" / "assets"
TINY_NET = ("--albert_network albert_tiny --net_cfg.hidden_size 32 --net_cfg.embedding_size 16 "
            "--net_cfg.num_hidden_layers 2 --net_cfg.num_attention_heads 2 --net_cfg.intermediate_size 64 "
            "--device_target CPU")
SQUAD_JSON = "{assets}/derived/squad_v1.1_dev_sample_SuperBowl50_5paras.json"
Maker = Callable[[Path, Path], None]  # (path of the bad input, fixture folder) -> writes the bad input


def text(content: str) -> Maker:
    return lambda bad, fx: bad.write_text(content, encoding="utf-8")


def raw(content: bytes) -> Maker:
    return lambda bad, fx: bad.write_bytes(content)


def beside(texts: Dict[str, str], copies: Sequence[Tuple[str, str]] = ()) -> Maker:
    """{bad}'s folder holding text files (name: content) and copies of fixture files ((fixture file, where: "{bad}"
    or "{bad}<ending>")), e.g. a requests file beside a model."""
    def make(bad: Path, fx: Path) -> None:
        for name, content in texts.items():
            (bad.parent / name).write_text(content, encoding="utf-8")
        for source, name in copies:
            shutil.copy(fx / source, name.format(bad=bad))
    return make


def gzip_cut(content: str) -> Maker:
    """`content` gzip-compressed, then cut in the middle of the stream (a download that stopped)."""
    import gzip
    return lambda bad, fx: bad.write_bytes(gzip.compress(content.encode("utf-8"))[:-40])


def parts(*runs: Sequence[str]) -> Maker:
    """A folder {bad} holding the pretraining data sets (parts) made by running the creator with each `runs` argv."""
    def make(bad: Path, fx: Path) -> None:
        from src import create_pretraining_data
        for extra in runs:
            argv = ["--input_file", str(ASSETS / "pretrain" / "bert_sample_text.txt"), "--output_file",
                    str(bad / "pt.mindrecord"), "--spm_model_file", str(ASSETS / "tokenizer" / "albert_30k-clean.model"),
                    "--dupe_factor", "1", "--max_predictions_per_seq", "5", "--progress", "false", *extra]
            assert create_pretraining_data.main(argv) == 0
    return make


def copy_of(name: str, truncate: int = 0, drop: str = "") -> Maker:
    """The fixture data set `name` (with its .db, meta and sidecars) copied as {bad}: the data file cut to
    `truncate` bytes, the sidecar ending in `drop` left out."""
    def make(bad: Path, fx: Path) -> None:
        for source in fx.glob(name + "*"):
            if not drop or not source.name.endswith(drop):
                shutil.copy(source, bad.parent / source.name)
        if truncate:
            bad.write_bytes((fx / bad.name).read_bytes()[:truncate])
    return make


_HOLDERS: List[subprocess.Popen] = []  # processes holding a lock for the current row (release_locks ends them)


@pytest.fixture(autouse=True)
def release_locks():
    """Each row's lock holders end with its test, whatever the outcome: no process outlives the row that made it."""
    yield
    while _HOLDERS:
        holder = _HOLDERS.pop()
        holder.kill()
        holder.communicate(timeout=30)


def held_lock() -> Maker:
    """{bad} is a lock file held by another process, as a first run holds its output's (src.common.atomic_files)."""
    def make(bad: Path, fx: Path) -> None:
        script = ("import sys; from src.common.atomic_files import lock_output; lock_output(sys.argv[1], 'x'); "
                  "print('locked', flush=True); sys.stdin.read()")
        holder = subprocess.Popen([sys.executable, "-c", script, str(bad)], cwd=ROOT, env=ENV, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
        assert holder.stdout.readline() == "locked\n"
        _HOLDERS.append(holder)
    return make


def symlink_to_victim() -> Maker:
    """{bad} is a symbolic link to {tmp}/victim.txt, planted where a run opens its lock, log or metrics file: the
    run must not write through it (the victim's bytes stay)."""
    def make(bad: Path, fx: Path) -> None:
        victim = bad.parent.parent / "victim.txt"
        victim.write_text("the user's file\n")
        bad.symlink_to(victim)
    return make


def folder() -> Maker:
    return lambda bad, fx: bad.mkdir()


def onnx_reading(location: str) -> Maker:
    """{bad}: a classifier-shaped ONNX model whose one weight keeps its bytes in the file `location`."""
    def make(bad: Path, fx: Path) -> None:
        import onnx
        from onnx import TensorProto, helper

        weight = helper.make_tensor("w", TensorProto.FLOAT, [1], [0.0])
        weight.ClearField("float_data")
        weight.data_location = TensorProto.EXTERNAL
        weight.external_data.add(key="location", value=location)
        inputs = [helper.make_tensor_value_info(name, TensorProto.INT32, [1, 8])
                  for name in ("input_ids", "token_type_ids", "input_mask")]
        graph = helper.make_graph([helper.make_node("Identity", ["w"], ["logits"])], "g", inputs,
                                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1])], [weight])
        onnx.save(helper.make_model(graph), str(bad))
    return make


def onnx_model(inputs: Sequence[str], outputs: int) -> Maker:
    """{bad}: an ONNX model taking int32 [1, 8] `inputs` and returning `outputs` outputs (as export.py writes a head:
    three inputs and one output for a classifier, four and two for SQuAD v1.1, four and five for v2.0)."""
    def make(bad: Path, fx: Path) -> None:
        import onnx
        from onnx import TensorProto, helper

        graph = helper.make_graph([helper.make_node("Identity", [inputs[0]], [f"out{i}"]) for i in range(outputs)], "g",
                                  [helper.make_tensor_value_info(name, TensorProto.INT32, [1, 8]) for name in inputs],
                                  [helper.make_tensor_value_info(f"out{i}", TensorProto.INT32, [1, 8])
                                   for i in range(outputs)])
        onnx.save(helper.make_model(graph), str(bad))
    return make


def onnx_trained_with_spm(bad: Path, fx: Path) -> None:
    """{bad}: a classifier-shaped ONNX model carrying the tokenizer record of a training run's data (ALBERT's
    SentencePiece model, lowercased) in its metadata, as export.py writes the export of such a run's checkpoint."""
    import onnx

    from src.data.tokenization import FullTokenizer
    from src.training.checkpoints import trained_tokenizer

    onnx_model(["input_ids", "token_type_ids", "input_mask"], 1)(bad, fx)
    model = onnx.load(str(bad))
    tokenizer = FullTokenizer(None, True, str(ASSETS / "tokenizer" / "albert_30k-clean.model"))
    model.metadata_props.add(key="albert.run_tokenizer",
                             value=json.dumps(trained_tokenizer({"tokenizer": tokenizer.describe()})))
    onnx.save(model, str(bad))


def hf_folder() -> Maker:
    """{bad}: an HF transformers model folder (config.json, model.safetensors), as save_pretrained writes one."""
    def make(bad: Path, fx: Path) -> None:
        bad.mkdir()
        (bad / "config.json").write_text('{"model_type": "albert", "architectures": ["AlbertForMaskedLM"]}')
        (bad / "model.safetensors").write_bytes(b"weights")
    return make


def _torch_bytes(value: object) -> bytes:
    """What torch.save writes for `value`."""
    import io

    import torch
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def meta_listing(name: str, entry: str) -> Maker:
    """The fixture data set `name` copied as {bad}, its .meta.json listing `entry` as a data file."""
    def make(bad: Path, fx: Path) -> None:
        copy_of(name)(bad, fx)
        meta = Path(f"{bad}.meta.json")
        meta.write_text(json.dumps(dict(json.loads(meta.read_text()), files=[entry])))
    return make


def edited_checkpoint(source: str, drop: str = "", add: str = "") -> Maker:
    """{bad}: the fixture checkpoint `source` (with its config beside it) without the weights starting with `drop`,
    with a weight `add` of 8 zeros (and without the digest of the original contents, as an edit by hand leaves it)."""
    def make(bad: Path, fx: Path) -> None:
        import mindspore as ms
        import numpy as np

        from src.common.checkpoint_io import DIGEST_KEY

        items = [{"name": name, "data": value} for name, value in ms.load_checkpoint(str(fx / source)).items()
                 if not (drop and name.startswith(drop)) and name != DIGEST_KEY]
        items += [{"name": add, "data": ms.Tensor(np.zeros(8, np.float32))}] if add else []
        ms.save_checkpoint(items, str(bad))
        shutil.copy(fx / f"{source}.json", f"{bad}.json")
    return make


def classifier_checkpoint(classes: int) -> Maker:
    """{bad}: a tiny classifier of `classes` outputs (one: RACE's head, or a regression's) with its config beside."""
    def make(bad: Path, fx: Path) -> None:
        from src.common.checkpoint_io import save_checkpoint_atomic
        from src.model.albert import AlbertConfig
        from src.model.task_heads import AlbertForSequenceClassification

        config = AlbertConfig.from_json_file(str(fx / "cls.ckpt.json"))
        save_checkpoint_atomic(AlbertForSequenceClassification(config, classes), str(bad))
        shutil.copy(fx / "cls.ckpt.json", f"{bad}.json")
    return make


def recorded_tokenizer(source: str, do_lower_case: bool = True) -> Maker:
    """{bad}: the fixture checkpoint `source` as a training run here writes it: recording the tokenizer of its data
    (ALBERT's SentencePiece model, `do_lower_case`), its config beside it."""
    def make(bad: Path, fx: Path) -> None:
        from src.common.checkpoint_io import read_checkpoint, save_checkpoint_atomic
        from src.data.tokenization import FullTokenizer
        from src.training.checkpoints import trained_tokenizer

        tokenizer = FullTokenizer(None, do_lower_case, str(ASSETS / "tokenizer" / "albert_30k-clean.model"))
        values = read_checkpoint(str(fx / source))
        record = json.dumps(trained_tokenizer({"tokenizer": tokenizer.describe()}))
        save_checkpoint_atomic([{"name": name, "data": value} for name, value in values.items()], str(bad),
                               append_dict={"run_tokenizer": record})
        shutil.copy(fx / f"{source}.json", f"{bad}.json")
    return make


trained_with_spm = recorded_tokenizer("cls.ckpt")


def recorded_task(source: str, data: str) -> Maker:
    """{bad}: the fixture checkpoint `source` as a fine-tuning run on the fixture data `data` writes it: recording
    that data's task (run_task: task_name, label_list, max_seq_length), its config beside it."""
    def make(bad: Path, fx: Path) -> None:
        from src.common.checkpoint_io import read_checkpoint, save_checkpoint_atomic
        from src.data.pipelines import load_data_meta
        from src.training.checkpoints import trained_data_task

        values = read_checkpoint(str(fx / source))
        record = json.dumps(trained_data_task(load_data_meta(str(fx / data))))
        save_checkpoint_atomic([{"name": name, "data": value} for name, value in values.items()], str(bad),
                               append_dict={"run_task": record})
        shutil.copy(fx / f"{source}.json", f"{bad}.json")
    return make


def damaged_task_record(bad: Path, fx: Path) -> None:
    """{bad}: the tiny classifier with a run_task record that is no JSON object (as an edited or foreign file has)."""
    from src.common.checkpoint_io import read_checkpoint, save_checkpoint_atomic

    values = read_checkpoint(str(fx / "cls.ckpt"))
    save_checkpoint_atomic([{"name": name, "data": value} for name, value in values.items()], str(bad),
                           append_dict={"run_task": "[mrpc"})
    shutil.copy(fx / "cls.ckpt.json", f"{bad}.json")


def damaged_tokenizer_record(bad: Path, fx: Path) -> None:
    """{bad}: the tiny classifier with a run_tokenizer record that is no JSON (as an edited or foreign file has)."""
    from src.common.checkpoint_io import read_checkpoint, save_checkpoint_atomic

    values = read_checkpoint(str(fx / "cls.ckpt"))
    save_checkpoint_atomic([{"name": name, "data": value} for name, value in values.items()], str(bad),
                           append_dict={"run_tokenizer": "{kind: sentencepiece"})
    shutil.copy(fx / "cls.ckpt.json", f"{bad}.json")


def uncased_data(bad: Path, fx: Path) -> None:
    """{bad}: the MRPC dev data made with --do_lower_case false (the fixtures' data is lowercased)."""
    from src import create_finetune_data

    assert create_finetune_data.main(["--task_name", "mrpc", "--input_file", str(fx / "mrpc.tsv"), "--split", "dev",
                                      "--output_file", str(bad), "--max_seq_length", "32", "--do_lower_case", "false",
                                      "--spm_model_file", str(ASSETS / "tokenizer" / "albert_30k-clean.model")]) == 0


def same_text_twice(bad: Path, fx: Path) -> None:
    """{bad}: a folder holding the fixtures' pretraining data and an evaluation set made from the same text with
    another seed (as the quick start makes them, side by side)."""
    from src import create_pretraining_data

    bad.mkdir()
    for made in fx.glob("pt.mindrecord*"):
        shutil.copy(made, bad / made.name)
    assert create_pretraining_data.main([
        "--input_file", str(ASSETS / "pretrain" / "bert_sample_text.txt"), "--output_file", str(bad / "ev.mindrecord"),
        "--max_seq_length", "32", "--max_predictions_per_seq", "5", "--dupe_factor", "1", "--random_seed", "7",
        "--progress", "false", "--spm_model_file", str(ASSETS / "tokenizer" / "albert_30k-clean.model")]) == 0


def with_extra_question(bad: Path, fx: Path) -> None:
    """{bad}: the SQuAD sample the fixtures' evaluation data was made from, with one question more."""
    dataset = json.loads(Path(SQUAD_JSON.format(assets=ASSETS)).read_text(encoding="utf-8"))
    paragraph = dataset["data"][0]["paragraphs"][0]
    paragraph["qas"].append({"id": "not-in-the-data", "question": "Who?", "answers": [
        {"text": paragraph["context"][:5], "answer_start": 0}]})
    bad.write_text(json.dumps(dataset), encoding="utf-8")


def flipped_checkpoint(source: str) -> Maker:
    """{bad}: the fixture checkpoint `source` (config beside it) with 512 bytes inside its word embeddings inverted,
    as a failing disk or copy leaves a file: MindSpore still loads it (tests/test_checkpoint_trust.py shows so)."""
    def make(bad: Path, fx: Path) -> None:
        flip_tensor_bytes(fx / source, bad)
        shutil.copy(fx / f"{source}.json", f"{bad}.json")
    return make


@dataclass(frozen=True)
class Row:
    entry: str  # run_pretrain.py ... or a module run with -m
    case: str  # the bad input, in words
    argv: str
    expect: Sequence[str]  # fragments of the one error line
    make: Optional[Maker] = None  # writes {bad}; None: the argv itself is the bad input
    bad: str = "bad"  # file name of {bad} inside {tmp}
    process: bool = False
    env: Sequence[Sequence[str]] = ()  # (name, value) pairs set for a process row

    @property
    def id(self) -> str:
        return f"{self.entry.removesuffix('.py').split('.')[-1]}:{self.case}"


PRE = ("run_pretrain.py", "--output_dir {out} --data_dir {fx}/pt.mindrecord --train_steps 1 --batch_size 8 "
       + TINY_NET)
EVAL = ("pretrain_eval.py", "--output_dir {out} --eval_data_dir {fx}/pt.mindrecord --eval_ckpt {fx}/pre.ckpt "
        "--eval_batch_size 4 " + TINY_NET)
FINETUNE = "--output_dir {out} --train_steps 1 --train_batch_size 4 --eval_batch_size 4 " + TINY_NET
CLS = ("run_classifier.py", FINETUNE + " --train_data_file_path {fx}/mrpc_train.mindrecord "
       "--eval_data_file_path {fx}/mrpc_dev.mindrecord")
RACE = ("run_race.py", FINETUNE + " --train_data_file_path {fx}/race.mindrecord "
        "--eval_data_file_path {fx}/race.mindrecord")
SQUAD = FINETUNE + " --train_data_file_path {fx}/sq_train.mindrecord --eval_data_file_path {fx}/sq_eval.mindrecord " \
                   "--eval_json_path " + SQUAD_JSON
SQ1, SQ2 = ("run_squad_v1.py", SQUAD), ("run_squad_v2.py", SQUAD)
MAKE_PT = ("src.create_pretraining_data", "--output_file {out}/pt.mindrecord --spm_model_file {spm} --max_seq_length "
           "32 --dupe_factor 1 --progress false --input_file {assets}/pretrain/bert_sample_text.txt")
MAKE_FT = ("src.create_finetune_data", "--output_file {out}/ft.mindrecord --spm_model_file {spm} --max_seq_length 32 "
           "--task_name mrpc --input_file {fx}/mrpc.tsv")
MAKE_RACE = ("src.create_finetune_data", "--output_file {out}/race.mindrecord --spm_model_file {spm} "
             "--max_seq_length 64 --task_name race --split dev --data_dir {tmp}/RACE")
MAKE_SQ = ("src.create_squad_data", "--output_file {out}/sq.mindrecord --spm_model_file {spm} --max_seq_length 64 "
           "--doc_stride 32 --max_query_length 24 --input_file " + SQUAD_JSON)
EXPORT = ("export.py", "--export_file_name {out}/model --export_seq_length 32 --device_target CPU "
          "--config_path task_classifier_config.yaml --export_ckpt_file {fx}/cls.ckpt")
CONVERT = ("src.convert_checkpoint", "--src hf --output {out}/c.ckpt")
PREDICT = ("src.predict", "--model {fx}/cls.ckpt --task classifier --spm_model_file {spm} --device_target CPU")
PREDICT_FILE = ("src.predict", PREDICT[1] + " --input_file {bad} --output_file {out}/answers.jsonl")
PLOT = ("src.plot_metrics", "{bad} --output {out}/curves.png")
SCORE = ("src.squad_postprocess", "--version 1.1 --data_file " + SQUAD_JSON + " --pred_file {fx}/predictions.json")
RACE_FILE = "RACE/dev/high/1.txt"
RACE_OK = '{"article": "A text.", "questions": ["Why?"], "options": [["a", "b", "c", "d"]], "answers": ["A"]}'
SQUAD_ROW = '{"data": [{"paragraphs": [{"context": "abc", "qas": [%s]}]}]}'


def row(command, case: str, extra: str, expect: Sequence[str], make: Optional[Maker] = None, **kwargs) -> Row:
    """A Row of `command` = (entry point, its usual arguments), with `extra` arguments appended (the last
    occurrence of a flag wins)."""
    entry, base = command
    return Row(entry, case, f"{base} {extra}".strip(), tuple(expect), make, **kwargs)


MATRIX: List[Row] = [
    # ---------------------------------------------------------------------------------------------- run_pretrain.py
    row(PRE, "missing data file", "--data_dir {tmp}/missing.mindrecord",
        ["data not found: {tmp}/missing.mindrecord"], process=True),
    row(PRE, "a folder of the training set and an evaluation set of the same text (was: trained on both)",
        "--data_dir {bad}", ["{bad}: ev.mindrecord and pt.mindrecord were made from the same text (the same input "
                             "files, bytes and documents): one is another masking of the other (an evaluation set?)"],
        same_text_twice,
        bad="data"),
    row(PRE, "empty data file", "--data_dir {bad}", ["{bad}: empty file, not MindRecord data"], raw(b""),
        bad="bad.mindrecord"),
    row(PRE, "truncated data file", "--data_dir {tmp}/pt.mindrecord", ["{bad}: not readable MindRecord data"],
        copy_of("pt.mindrecord", truncate=3000), bad="pt.mindrecord00000"),
    row(PRE, "data of another task", "--data_dir {fx}/mrpc_train.mindrecord",
        ["{fx}/mrpc_train.mindrecord: columns", "missing", "written for this task?"]),
    row(PRE, "data meta listing a file outside its folder", "--data_dir {bad}",
        ["{bad}.meta.json: files entry '../../etc/passwd' is not a plain file name"],
        meta_listing("pt.mindrecord", "../../etc/passwd"), bad="pt.mindrecord"),
    row(PRE, "output folder in use by another run", "",
        ["output_dir {out} is in use by another run (pid ", "wait for it to end"], held_lock(),
        bad="out/.albert-run.lock"),
    row(PRE, "run lock planted as a symbolic link", "", ["{bad} is a symbolic link", "never opened through one"],
        symlink_to_victim(), bad="out/.albert-run.lock"),
    row(PRE, "malformed yaml", "--config_path {bad}", ["{bad} line 2: malformed yaml"], text("batch_size: [8\n"),
        bad="bad.yaml"),
    row(PRE, "unknown yaml key", "--config_path {bad}", ["{bad}: unknown key 'bach_size'; did you mean 'batch_size'?"],
        text("bach_size: 8\n"), bad="bad.yaml"),
    row(PRE, "unknown flag", "--save_checkpoint_step 5", ["did you mean '--save_checkpoint_steps'?"]),
    row(PRE, "last part of a nested key as a flag (was: did you mean '--train_steps')", "--warmup_steps 100",
        ["unknown option '--warmup_steps'; did you mean '--optimizer_cfg.AdamWeightDecay.warmup_steps'?"]),
    row(PRE, "--lr, within the optimizer the run selects (was: no suggestion)", "--optimizer Lamb --lr 1e-4",
        ["unknown option '--lr'; did you mean '--optimizer_cfg.Lamb.learning_rate'?"]),
    row(PRE, "HF's --warmup_ratio (was: no suggestion)", "--warmup_ratio 0.1",
        ["unknown option '--warmup_ratio'; did you mean '--optimizer_cfg.AdamWeightDecay.warmup_steps' (given in steps "
         "here, not as a fraction of training)?"]),
    row(PRE, "Google's --max_seq_length (was: no suggestion)", "--max_seq_length 128",
        ["unknown option '--max_seq_length'; it is the data's here: set it when making the data "
         "(src.create_pretraining_data"]),
    row(PRE, "optimizer section misspelled in yaml", "--config_path {bad}",
        ["{bad}: unknown key 'optimizer_cfg.AdamW.learning_rate'; "
         "did you mean 'optimizer_cfg.AdamWeightDecay.learning_rate'?"],
        text("optimizer_cfg:\n  AdamW:\n    learning_rate: 0.001\n"), bad="bad.yaml"),
    row(PRE, "wrong type in yaml", "--config_path {bad}", ["{bad}: key 'batch_size' expects int, got 'eight'"],
        text("batch_size: eight\n"), bad="bad.yaml"),
    row(PRE, "batch_size 0", "--batch_size 0", ["key 'batch_size' must be in [1, 65536], got 0"]),
    row(PRE, "absurd batch_size", "--batch_size 1000000000",
        ["key 'batch_size' must be in [1, 65536], got 1000000000"]),
    row(PRE, "negative learning rate", "--optimizer_cfg.AdamWeightDecay.learning_rate -1e-4",
        ["key 'optimizer_cfg.AdamWeightDecay.learning_rate' must be in (0, 1], got -0.0001"]),
    row(PRE, "learning rate above 1", "--optimizer_cfg.Lamb.learning_rate 2",
        ["key 'optimizer_cfg.Lamb.learning_rate' must be in (0, 1], got 2.0"]),
    row(PRE, "learning rate beyond float32 (trained to NaN)", "--optimizer_cfg.AdamWeightDecay.learning_rate 1e39",
        ["key 'optimizer_cfg.AdamWeightDecay.learning_rate' must be finite in float32", "got '1e39'"]),
    row(PRE, "negative seed", "--seed -7", ["key 'seed' must be in [0, 2147483647], got -7"]),
    row(PRE, "seed beyond numpy's 2**32 - 1", "--seed 1099511627776",
        ["key 'seed' must be in [0, 2147483647], got 1099511627776"]),
    row(PRE, "absurd train_steps", "--train_steps 10000000000",
        ["key 'train_steps' must be in [-1, 1000000000], got 10000000000"]),
    row(PRE, "absurd network size", "--net_cfg.hidden_size 1000000000",
        ["key 'net_cfg.hidden_size' must be in [1, 16384], got 1000000000"]),
    row(PRE, "network size not an integer (a float reached the cells)", "--net_cfg.hidden_size 32.0",
        ["invalid ALBERT config: hidden_size must be int, got 32.0"]),
    row(PRE, "integer flag of 5000 digits", "--train_steps " + "9" * 5000,
        ["command line: key 'train_steps': an integer of 5000 digits is refused (at most 100)"]),
    row(PRE, "yaml alias bomb", "--config_path {bad}",
        ["{bad} line 1: yaml anchors and aliases are refused (&a0): write the values out"],
        text("".join(f"a{i}: &a{i} {{" + ", ".join(f"k{j}: {f'*a{i - 1}' if i else 'x'}" for j in range(9)) + "}\n"
                     for i in range(7))), bad="bad.yaml"),
    row(PRE, "scale_factor 1", "--scale_factor 1", ["key 'scale_factor' must be in (1, 65536], got 1"]),
    row(PRE, "dropout out of range", "--net_cfg.hidden_dropout_prob 1.5",
        ["key 'net_cfg.hidden_dropout_prob' must be in [0, 1), got 1.5"]),
    # Without the kernels (here: switched off; no compiler, say) or, on a CPU without native bfloat16, for that
    # reason first (tests/test_bf16_training.py checks that message alone).
    row(PRE, "bfloat16 on CPU without the compiled kernels", "--net_cfg.compute_type bfloat16",
        ["compute_type bfloat16 on CPU", "; use float32"], process=True, env=(("ALBERT_CPU_KERNELS", "0"),)),
    row(PRE, "seq_length > max_position_embeddings", "--net_cfg.max_position_embeddings 16",
        ["{fx}/pt.mindrecord: sequences of 32 tokens but the network's max_position_embeddings is 16"]),
    row(PRE, "token ids >= vocab_size", "--net_cfg.vocab_size 1000",
        ["30000-token vocabulary", "albert_30k-clean.model", "vocab_size 1000"]),
    row(PRE, "missing albert_config_file", "--albert_config_file {tmp}/missing.json",
        ["config file not found: {tmp}/missing.json"]),
    row(PRE, "malformed albert_config_file", "--albert_config_file {bad}", ["{bad} line 1: malformed json"],
        text("{hidden_size: 32}"), bad="bad.json"),
    row(PRE, "missing checkpoint", "--load_checkpoint_path {tmp}/missing.ckpt",
        ["checkpoint not found: {tmp}/missing.ckpt"]),
    row(PRE, "checkpoint of another config", "--load_checkpoint_path {fx}/wide.ckpt",
        ["{fx}/wide.ckpt: shapes do not match the network", "(48, 48) vs network (32, 32)"]),
    row(PRE, "corrupt checkpoint", "--load_checkpoint_path {bad}", ["cannot read checkpoint {bad}"],
        raw(b"not a checkpoint" * 8), bad="bad.ckpt"),
    # ---------------------------------------------------------------------------------------------- pretrain_eval.py
    row(EVAL, "missing checkpoint", "--eval_ckpt {tmp}/missing.ckpt", ["checkpoint not found: {tmp}/missing.ckpt"],
        process=True),
    row(EVAL, "data of another casing than the checkpoint's (was: scored)", "--eval_ckpt {bad}",
        ["{fx}/pt.mindrecord was made with albert_30k-clean.model (sha256 ", "do_lower_case True), but {bad} was "
         "trained on data made with albert_30k-clean.model", "do_lower_case False): its ids would mean other words"],
        recorded_tokenizer("pre.ckpt", do_lower_case=False), bad="uncased.ckpt"),
    row(EVAL, "empty checkpoint", "--eval_ckpt {bad}", ["cannot read checkpoint {bad}"], raw(b""), bad="bad.ckpt"),
    row(EVAL, "checkpoint of another config", "--eval_ckpt {fx}/wide.ckpt",
        ["{fx}/wide.ckpt: shapes do not match the network"]),
    row(EVAL, "checkpoint copied without its config json (was: no word of it)", "--eval_ckpt {bad}",
        ["{bad}: shapes do not match the network", "the network is the preset albert_tiny, as no albert_config.json "
         "or .ckpt.json is beside the checkpoint: pass the run's albert_config.json with --albert_config_file"],
        lambda bad, fx: shutil.copy(fx / "wide.ckpt", bad), bad="alone.ckpt"),
    row(EVAL, "checkpoint of a fine-tuning task", "--eval_ckpt {fx}/cls.ckpt",
        ["{fx}/cls.ckpt: 7 network parameters are not in the checkpoint", "predictions.bias"]),
    row(EVAL, "token ids >= vocab_size", "--eval_ckpt {fx}/v1000.ckpt",
        ["30000-token vocabulary", "vocab_size 1000"]),
    row(EVAL, "data of another task", "--eval_data_dir {fx}/mrpc_dev.mindrecord",
        ["{fx}/mrpc_dev.mindrecord: columns", "missing"]),
    row(EVAL, "unknown nested yaml key", "--config_path {bad}",
        ["{bad}: unknown key 'net_cfg.hiden_size'; did you mean 'net_cfg.hidden_size'?"],
        text("net_cfg:\n  hiden_size: 32\n"), bad="bad.yaml"),
    row(EVAL, "wrong type", "--eval_batch_size 1.5", ["key 'eval_batch_size' expects int, got '1.5'"]),
    row(EVAL, "eval_batch_size 0", "--eval_batch_size 0", ["key 'eval_batch_size' must be in [1, 65536], got 0"]),
    row(EVAL, "output is the checkpoint (was: replaced by the json)", "--eval_output_file {fx}/pre.ckpt",
        ["{fx}/pre.ckpt is --eval_ckpt ({fx}/pre.ckpt): an output never replaces what the run reads"]),
    row(EVAL, "output is the data's meta (was: replaced)", "--eval_output_file {fx}/pt.mindrecord.meta.json",
        ["is --eval_data_dir's pt.mindrecord.meta.json"]),
    row(EVAL, "output is a folder (was: named a temporary file after the evaluation)", "--eval_output_file {bad}",
        ["{bad} is a folder: name the file to write"], lambda bad, fx: bad.mkdir()),
    # ---------------------------------------------------------------------------------------------- src.plot_metrics
    row(PLOT, "output is the metrics file (was: replaced by the PNG)", "--output {bad}",
        ["{bad} is the metrics file ({bad}): an output never replaces what the run reads"],
        text('{"step": 1, "loss": 2.0, "lr": 0.1}\n'), bad="metrics.jsonl"),
    row(PLOT, "output is a folder (was: named a temporary file)", "--output {tmp}/pngs", ["{tmp}/pngs is a folder"],
        lambda bad, fx: (bad.write_text('{"step": 1, "loss": 2.0, "lr": 0.1}\n'), (bad.parent / "pngs").mkdir()),
        bad="metrics.jsonl"),
    row(PLOT, "misspelled flag (was: argparse's usage text, no suggestion)", "--outptu x.png",
        ["unrecognized arguments: --outptu x.png; did you mean '--output'?"],
        text('{"step": 1, "loss": 2.0, "lr": 0.1}\n'), bad="metrics.jsonl"),
    row(PLOT, "not UTF-8 (was: traceback)", "", ["{bad}: not a metrics.jsonl (not UTF-8 text"],
        raw(b'{"step": 1, "loss": 2.0}\n\xff\xfe\n'), bad="metrics.jsonl"),
    # ---------------------------------------------------------------------------------------------- run_classifier.py
    row(CLS, "missing data file", "--train_data_file_path {tmp}/missing.mindrecord",
        ["data not found: {tmp}/missing.mindrecord"]),
    row(CLS, "HF transformers folder as the pretrained checkpoint (was: not found)", "--load_pretrain_checkpoint_path "
        "{bad}", ["{bad} is HF transformers / PyTorch weights, which MindSpore cannot read: convert it first with "
                  "python -m src.convert_checkpoint --src hf --input {bad} --output model.ckpt, then pass model.ckpt"],
        hf_folder(), bad="albert-base-v2"),
    row(EVAL, "HF safetensors as the checkpoint (was: MindSpore's format message)", "--eval_ckpt {bad}",
        ["{bad} is HF transformers / PyTorch weights, which MindSpore cannot read: convert it first"],
        raw(b"weights"), bad="model.safetensors"),
    row(PRE, "TensorFlow checkpoint of Google's release (was: not found)",
        "--load_checkpoint_path {tmp}/model.ckpt-best",
        ["{tmp}/model.ckpt-best is a TensorFlow checkpoint, which MindSpore cannot read: convert it first with "
         "python -m src.convert_checkpoint --src tf --input {tmp}/model.ckpt-best --config {tmp}/albert_config.json "
         "--output model.ckpt"], raw(b"index"), bad="model.ckpt-best.index"),
    row(CLS, "TensorFlow checkpoint as the fine-tuned one (was: not found)", "--do_train false "
        "--load_finetune_checkpoint_path {tmp}/model.ckpt-best", ["{tmp}/model.ckpt-best is a TensorFlow checkpoint"],
        raw(b"index"), bad="model.ckpt-best.index"),
    row(CLS, "pretrained on data of another casing (was: fine-tuned)", "--load_pretrain_checkpoint_path {bad}",
        ["{fx}/mrpc_train.mindrecord was made with albert_30k-clean.model", "do_lower_case True), but {bad} was "
         "trained on data made with", "do_lower_case False)"], recorded_tokenizer("pre.ckpt", do_lower_case=False),
        bad="uncased.ckpt"),
    row(CLS, "evaluated on data of another casing (was: scored)", "--do_train false --load_finetune_checkpoint_path "
        "{bad}", ["{fx}/mrpc_dev.mindrecord was made with", "do_lower_case True), but {bad} was trained on data made "
                  "with", "do_lower_case False)"], recorded_tokenizer("cls.ckpt", do_lower_case=False),
        bad="uncased.ckpt"),
    row(CLS, "eval data of another casing than the training data (was: scored)", "--eval_data_file_path {bad}",
        ["{bad} was made with albert_30k-clean.model", "do_lower_case False), but this run trains on "
         "{fx}/mrpc_train.mindrecord, made with albert_30k-clean.model", "do_lower_case True)"], uncased_data,
        bad="dev_uncased.mindrecord"),
    row(CLS, "empty data file", "--eval_data_file_path {bad}", ["{bad}: empty file"], raw(b""),
        bad="bad.mindrecord"),
    row(CLS, "malformed yaml", "--config_path {bad}", ["{bad} line 2: malformed yaml"], text("do_train: [\n"),
        bad="bad.yaml"),
    row(CLS, "unknown yaml key", "--config_path {bad}",
        ["{bad}: unknown key 'train_batch_sise'; did you mean 'train_batch_size'?"], text("train_batch_sise: 4\n"),
        bad="bad.yaml"),
    row(CLS, "wrong type in yaml", "--config_path {bad}", ["{bad}: key 'do_train' expects true or false, got 'sure'"],
        text("do_train: sure\n"), bad="bad.yaml"),
    row(CLS, "yaml not a mapping (was: no line)", "--config_path {bad}",
        ["{bad} line 2: every yaml document must be a mapping of keys to values, got a list"],
        text("# my settings\n- do_train: true\n- train_batch_size: 4\n"), bad="bad.yaml"),
    row(CLS, "--learning_rate (was: no suggestion)", "--learning_rate 2e-5",
        ["unknown option '--learning_rate'; did you mean '--optimizer_cfg.AdamWeightDecay.learning_rate'?"]),
    row(CLS, "pretraining's --batch_size (was: did you mean '--eval_batch_size')", "--batch_size 16",
        ["unknown option '--batch_size'; did you mean '--train_batch_size' or '--eval_batch_size'?"]),
    row(CLS, "Google's --num_train_epochs (was: did you mean '--train_steps')", "--num_train_epochs 3",
        ["unknown option '--num_train_epochs'; did you mean '--epoch_num'?"]),
    row(CLS, "an unknown --flag=value (was: named '--use_tpu=True')", "--use_tpu=True", ["unknown option '--use_tpu'"]),
    row(CLS, "HF's config.json as --config_path (was: unknown key 'architectures')", "--config_path {bad}",
        ["{bad} is a network config (ALBERT's config json), not a yaml of this script: pass it as "
         "--albert_config_file"], text('{"architectures": ["AlbertForMaskedLM"], "vocab_size": 30000}'),
        bad="config.json"),
    row(CLS, "train_batch_size 0", "--train_batch_size 0", ["key 'train_batch_size' must be in [1, 65536], got 0"]),
    row(CLS, "yaml integer of 5000 digits (was a traceback)", "--config_path {bad}",
        ["{bad} line 2: an integer of 5000 digits is refused (at most 100)"],
        text("do_train: true\ntrain_batch_size: " + "9" * 5000 + "\n"), bad="bad.yaml"),
    row(CLS, "yaml learning rate beyond float32", "--config_path {bad}",
        ["{bad}: key 'optimizer_cfg.AdamWeightDecay.learning_rate' must be finite in float32", "got inf"],
        text("optimizer_cfg:\n  AdamWeightDecay:\n    learning_rate: .inf\n"), bad="bad.yaml"),
    row(CLS, "optimizer section misspelled", "--optimizer_cfg.AdamW.learning_rate 1e-4",
        ["unknown option '--optimizer_cfg.AdamW.learning_rate'; "
         "did you mean '--optimizer_cfg.AdamWeightDecay.learning_rate'?"]),
    row(CLS, "raw GLUE tsv as data", "--eval_data_file_path {fx}/mrpc.tsv",
        ["{fx}/mrpc.tsv: not MindRecord data; make it with src.create_finetune_data"]),
    row(CLS, ".meta.json as data", "--train_data_file_path {fx}/mrpc_train.mindrecord.meta.json",
        ["{fx}/mrpc_train.mindrecord.meta.json: not MindRecord data but the description of a data set: pass "
         "{fx}/mrpc_train.mindrecord "]),
    row(CLS, "classifier_dropout_prob 1", "--classifier_dropout_prob 1",
        ["key 'classifier_dropout_prob' must be in [0, 1), got 1.0"]),
    row(CLS, "warmup_proportion 2", "--optimizer_cfg.AdamWeightDecay.warmup_proportion 2",
        ["key 'optimizer_cfg.AdamWeightDecay.warmup_proportion' must be in [0, 1], got 2.0"]),
    row(CLS, "num_class not the data's", "--num_class 3",
        ["{fx}/mrpc_dev.mindrecord: task mrpc has 2 label(s)", "num_class is 3"], process=True),
    row(CLS, "RACE data (was: a traceback with --num_class 4)", "--eval_data_file_path {fx}/race.mindrecord",
        ["{fx}/race.mindrecord: race data, not classifier data: run_race.py takes it"]),
    row(CLS, "test split to evaluate (was: scored against placeholder labels)",
        "--eval_data_file_path {fx}/mrpc_test.mindrecord",
        ["{fx}/mrpc_test.mindrecord: the mrpc test split, whose labels are placeholders"]),
    row(CLS, "evaluation data of another GLUE task", "--eval_data_file_path {fx}/cola.mindrecord",
        ["{fx}/cola.mindrecord is cola data but the run trains on mrpc"]),
    row(CLS, "prediction data of another GLUE task than the training data (was: predicted)",
        "--do_eval false --do_predict true --predict_data_file_path {fx}/cola.mindrecord",
        ["{fx}/cola.mindrecord is cola data but the run trains on mrpc ({fx}/mrpc_train.mindrecord): predict mrpc "
         "data"]),
    row(CLS, "prediction data of another GLUE task than the checkpoint's (was: predicted)", "--do_train false "
        "--do_eval false --do_predict true --load_finetune_checkpoint_path {bad} "
        "--predict_data_file_path {fx}/cola.mindrecord",
        ["{fx}/cola.mindrecord is cola data but {bad} was fine-tuned on mrpc data: predict mrpc data"],
        recorded_task("cls.ckpt", "mrpc_train.mindrecord"), bad="mrpc.ckpt"),
    row(CLS, "evaluation data of another GLUE task than the checkpoint's (was: scored)", "--do_train false "
        "--load_finetune_checkpoint_path {bad} --eval_data_file_path {fx}/cola.mindrecord",
        ["{fx}/cola.mindrecord is cola data but {bad} was fine-tuned on mrpc data: evaluate on the mrpc dev split"],
        recorded_task("cls.ckpt", "mrpc_train.mindrecord"), bad="mrpc.ckpt"),
    row(CLS, "metric of another task", "--assessment_method spearman_correlation",
        ["assessment_method spearman_correlation does not fit classification"]),
    row(CLS, "seq_length > max_position_embeddings", "--net_cfg.max_position_embeddings 16",
        ["{fx}/mrpc_train.mindrecord: sequences of 32 tokens", "max_position_embeddings is 16"]),
    row(CLS, "token ids >= vocab_size", "--load_pretrain_checkpoint_path {fx}/v1000.ckpt",
        ["30000-token vocabulary", "vocab_size 1000"]),
    row(CLS, "checkpoint of another config", "--load_pretrain_checkpoint_path {fx}/wide.ckpt",
        ["{fx}/wide.ckpt: shapes do not match the network", "(48, 48) vs network (32, 32)"], process=True),
    row(CLS, "pretraining checkpoint to evaluate",
        "--do_train false --load_finetune_checkpoint_path {fx}/pre.ckpt",
        ["{fx}/pre.ckpt: 2 network parameters are not in the checkpoint", "classifier.weight"]),
    # ---------------------------------------------------------------------------------------------- run_race.py
    row(RACE, "classifier data", "--train_data_file_path {fx}/mrpc_train.mindrecord",
        ["{fx}/mrpc_train.mindrecord: classifier data, not race data: run_classifier.py takes it"]),
    row(RACE, "a regression's checkpoint of the same head shape (was: evaluated)",
        "--do_train false --load_finetune_checkpoint_path {bad}",
        ["{bad} was fine-tuned by run_classifier.py, not run_race.py: evaluate it with run_classifier.py"],
        classifier_checkpoint(1), bad="albert_classifier-3.ckpt"),
    row(RACE, "num_class not 4", "--num_class 5", ["{fx}/race.mindrecord: 4 choices per question but num_class is 5"]),
    row(RACE, "seq_length > max_position_embeddings", "--net_cfg.max_position_embeddings 32",
        ["{fx}/race.mindrecord: sequences of 64 tokens", "max_position_embeddings is 32"]),
    row(RACE, "classifier checkpoint to evaluate", "--do_train false --load_finetune_checkpoint_path {fx}/cls.ckpt",
        ["{fx}/cls.ckpt: shapes do not match the network", "classifier.weight: checkpoint (2, 32) vs network (1, 32)"]),
    row(RACE, "unknown metric", "--assessment_method f1",
        ["key 'assessment_method' must be one of ['accuracy', 'macro_f1', 'mcc'], got 'f1'"]),
    row(RACE, "missing finetune checkpoint", "--do_train false --load_finetune_checkpoint_path {tmp}/missing.ckpt",
        ["load_finetune_checkpoint_path not found: {tmp}/missing.ckpt"]),
    # ---------------------------------------------------------------------------------------------- run_squad_v1.py
    row(SQ1, "eval json of another data set", "--eval_json_path {assets}/squad/v2.0/dev-v2.0.subset_Normans_Rhine.json",
        ["117 questions of {fx}/sq_eval.mindrecord", "are not in eval_json_path", "another SQuAD file?"],
        process=True),
    row(SQ1, "eval json with questions the data lacks (was: scored them 0, after the whole evaluation)",
        "--eval_json_path {bad}", ["1 of the 118 questions of eval_json_path {bad} (e.g. not-in-the-data) are not in "
                                   "{fx}/sq_eval.mindrecord, and would be scored as unanswered: pass the SQuAD file "
                                   "the data was made from"], with_extra_question, bad="dev.json"),
    row(SQ1, "missing eval json", "--eval_json_path {tmp}/missing.json",
        ["eval_json_path not found: {tmp}/missing.json"]),
    row(SQ1, "empty eval json", "--eval_json_path {bad}", ["{bad}: empty file, expected json"], text(""),
        bad="bad.json"),
    row(SQ1, "malformed eval json", "--eval_json_path {bad}", ["{bad} line 2: malformed json"], text('{"data": [\n'),
        bad="bad.json"),
    row(SQ1, "eval json without paragraphs", "--eval_json_path {bad}", ["{bad}: data[0]: missing field 'paragraphs'"],
        text('{"data": [{"title": "x"}]}'), bad="bad.json"),
    row(SQ1, "training data to evaluate", "--eval_data_file_path {fx}/sq_train.mindrecord",
        ["{fx}/sq_train.mindrecord: columns ['unique_ids'] missing"]),
    row(SQ1, "eval data without its feature map", "--eval_data_file_path {bad}",
        ["{tmp}/sq_eval.mindrecord.features.jsonl not found", "--is_training false"],
        copy_of("sq_eval.mindrecord", drop=".features.jsonl"), bad="sq_eval.mindrecord"),
    row(SQ1, "n_best_size 0", "--n_best_size 0", ["key 'n_best_size' must be in [1, 512], got 0"]),
    row(SQ1, "seq_length > max_position_embeddings", "--net_cfg.max_position_embeddings 32",
        ["{fx}/sq_train.mindrecord: sequences of 64 tokens", "max_position_embeddings is 32"]),
    row(SQ1, "token ids >= vocab_size", "--load_pretrain_checkpoint_path {fx}/v1000.ckpt",
        ["30000-token vocabulary", "vocab_size 1000"]),
    # ---------------------------------------------------------------------------------------------- run_squad_v2.py
    row(SQ2, "missing train data", "--train_data_file_path {tmp}/missing.mindrecord",
        ["data not found: {tmp}/missing.mindrecord"]),
    row(SQ2, "unknown yaml key", "--config_path {bad}",
        ["{bad}: unknown key 'null_score_diff_treshold'; did you mean 'null_score_diff_threshold'?"],
        text("null_score_diff_treshold: 0.5\n"), bad="bad.yaml"),
    row(SQ2, "wrong type", "--null_score_diff_threshold high",
        ["key 'null_score_diff_threshold' expects float, got 'high'"]),
    row(SQ2, "start_n_top 0", "--start_n_top 0", ["key 'start_n_top' must be in [1, 512], got 0"]),
    row(SQ2, "infinite null threshold", "--null_score_diff_threshold inf",
        ["key 'null_score_diff_threshold' must be finite in float32"]),
    row(SQ2, "v1.1 data (was: the v2 head trained as if every question had an answer)",
        "--do_train false --load_finetune_checkpoint_path {fx}/cls.ckpt",
        ["{fx}/sq_eval.mindrecord: SQuAD v1.1 data (made with --version_2_with_negative false): run_squad_v1.py takes "
         "it"]),
    # ---------------------------------------------------------------------------------------------- create_pretraining
    row(MAKE_PT, "SentencePiece model as --vocab_file (was: traceback)", "--spm_model_file '' --vocab_file {spm}",
        ["{spm}: not a WordPiece vocab.txt (not UTF-8 text at byte ", "a SentencePiece .model goes to "
         "--spm_model_file"]),
    row(MAKE_PT, "the SentencePiece pieces file alone as --vocab_file", "--spm_model_file '' --vocab_file "
        "{assets}/tokenizer/albert_30k-clean.vocab", ["{assets}/tokenizer/albert_30k-clean.vocab: vocabulary lacks the "
                                                     "special tokens", "it is a SentencePiece model's pieces file "
                                                     "(piece<TAB>score lines): pass the .model beside it as "
                                                     "--spm_model_file"]),
    row(MAKE_PT, "albert_zh's vocab.txt beside the SentencePiece model (was: ignored)", "--vocab_file "
        "{assets}/tokenizer/albert_zh_vocab.txt", ["--vocab_file {assets}/tokenizer/albert_zh_vocab.txt is not the "
                                                   "pieces file of --spm_model_file {spm}: pass one vocabulary"]),
    row(MAKE_PT, "missing input", "--input_file {tmp}/missing.txt", ["input_file: nothing matches '{tmp}/missing.txt'"]),
    row(MAKE_PT, "empty corpus", "--input_file {bad}", ["empty corpus: no text in {bad}"], text("\n \n"),
        bad="bad.txt"),
    row(MAKE_PT, "one-sentence documents", "--input_file {bad}",
        ["no document can make a sentence pair", "{bad} line 1"], text("One sentence.\n\nAnother one.\n"),
        bad="bad.txt"),
    row(MAKE_PT, "not UTF-8", "--input_file {bad}", ["{bad} line 1: not UTF-8 text"], raw(b"\xff\xfe\x00text\n"),
        bad="bad.txt", process=True),
    row(MAKE_PT, "UTF-16 corpus without a byte-order mark (was: garbage records, a NUL every other character)",
        "--input_file {bad}", ["{bad} line 1: NUL characters in the text; it looks like UTF-16 text: save it as UTF-8"],
        raw("One sentence here.\nAnother one.\n\nA second document.\nWith two lines.\n".encode("utf-16-le")),
        bad="bad.txt"),
    row(MAKE_PT, "malformed JSON line", "--input_file {bad}", ["{bad} line 2: malformed json"],
        text('{"text": "One. Two."}\n{"text": \n'), bad="bad.jsonl"),
    row(MAKE_PT, "JSON line without the text field", "--input_file {bad}",
        ["{bad} line 1: no 'text' or 'content' field (keys: body)", "--text_key"], text('{"body": "One. Two."}\n'),
        bad="bad.jsonl"),
    row(MAKE_PT, "empty folder", "--input_file {bad}", ["input_file: no input file in the folder '{bad}'"],
        lambda bad, fx: bad.mkdir(), bad="corpus"),
    row(MAKE_PT, "JSON lines declared as text", "--input_file {bad} --input_format text",
        ["{bad} line 1: the file starts with a JSON object (JSON lines) but --input_format is text",
         "use --input_format auto (or jsonl)"], text('{"text": "One. Two."}\n'), bad="wiki_00"),
    row(MAKE_PT, "WikiExtractor <doc> line in a text file (was: use --input_format auto)", "--input_file {bad}",
        ["{bad} line 3: a WikiExtractor <doc ...> line in a file read as text",
         "WikiExtractor output is read with --input_format wikiextractor"],
        text('One sentence.\nAnother one.\n<doc id="1" url="u" title="T">\n'), bad="bad.txt"),
    row(MAKE_PT, "text outside a <doc> block", "--input_file {bad}",
        ["{bad} line 4: text outside a <doc ...> block in a WikiExtractor file"],
        text('<doc id="1" url="u" title="T">\nOne. Two.\n</doc>\nstray\n'), bad="wiki_00"),
    row(MAKE_PT, "a line over 16 MB (gzip bomb)", "--input_file {bad}",
        ["{bad} line 1: longer than 16 MB without a line break"],
        lambda bad, fx: bad.write_bytes(__import__("gzip").compress(b"a" * (17 << 20))), bad="bomb.txt.gz"),
    row(MAKE_PT, "Parquet without the text column", "--input_file {bad}",
        ["{bad}: no 'text' or 'content' column (columns: body); set --text_key"],
        lambda bad, fx: __import__("pyarrow.parquet").parquet.write_table(
            __import__("pyarrow").table({"body": ["One. Two."]}), bad), bad="train.parquet"),
    row(MAKE_PT, "JSON text not a string", "--input_file {bad}",
        ["{bad} line 1: field 'text' should be a string, got list"], text('{"text": ["One."]}\n'), bad="bad.jsonl"),
    row(MAKE_PT, "truncated gzip", "--input_file {bad}", ["{bad} line", "damaged or truncated compressed data"],
        gzip_cut("First sentence here.\nSecond sentence here.\n" * 400), bad="bad.txt.gz"),
    row(MAKE_PT, "damaged bz2", "--input_file {bad}", ["{bad} line 1: damaged or truncated compressed data"],
        raw(b"BZh9" + b"not bzip2 data" * 8), bad="bad.txt.bz2"),
    row(MAKE_PT, "not UTF-8 inside gzip", "--input_file {bad}", ["{bad} line 2: not UTF-8 text"],
        lambda bad, fx: bad.write_bytes(__import__("gzip").compress(b"fine.\n\xff bad\n")), bad="bad.txt.gz"),
    row(MAKE_PT, "shard_index >= num_shards", "--num_shards 2 --shard_index 2",
        ["shard_index must be in [0, num_shards), got shard_index=2 with num_shards=2"]),
    row(MAKE_PT, "missing SentencePiece model", "--spm_model_file {tmp}/missing.model",
        ["SentencePiece model not found: {tmp}/missing.model"]),
    row(MAKE_PT, "not a SentencePiece model", "--spm_model_file {bad}", ["{bad}: not a SentencePiece model"],
        raw(b"not a model" * 10), bad="bad.model"),
    row(MAKE_PT, "malformed yaml", "--config_path {bad}", ["{bad} line 2: malformed yaml"], text("pretraining: [\n"),
        bad="bad.yaml"),
    row(MAKE_PT, "unknown yaml key", "--config_path {bad}",
        ["{bad}: unknown key 'dupe_factr'; did you mean 'dupe_factor'?"], text("pretraining:\n  dupe_factr: 2\n"),
        bad="bad.yaml"),
    row(MAKE_PT, "wrong type", "--max_seq_length sixty", ["key 'max_seq_length' expects int, got 'sixty'"]),
    row(MAKE_PT, "masked_lm_prob 1.5", "--masked_lm_prob 1.5", ["key 'masked_lm_prob' must be in (0, 1), got 1.5"]),
    row(MAKE_PT, "max_seq_length 4", "--max_seq_length 4", ["key 'max_seq_length' must be in [8, 8192], got 4"]),
    row(MAKE_PT, "absurd max_predictions_per_seq (was a numpy MemoryError)", "--max_predictions_per_seq 1000000000000",
        ["key 'max_predictions_per_seq' must be in [1, 8192], got 1000000000000"]),
    row(MAKE_PT, "absurd ngram (was a numpy MemoryError)", "--ngram 1000000000000",
        ["key 'ngram' must be in [1, 256], got 1000000000000"]),
    row(MAKE_PT, "yaml anchor", "--config_path {bad}", ["{bad} line 2: yaml anchors and aliases are refused (&p)"],
        text("# mine\npretraining: &p {dupe_factor: 1}\n"), bad="bad.yaml"),
    row(MAKE_PT, "JSON line with a 5000-digit number", "--input_file {bad}",
        ["{bad} line 2: malformed json (an integer of 5000 digits exceeds Python's limit of 4300 at column 20)"],
        text('{"text": "One. Two."}\n{"text": "a", "n": ' + "9" * 5000 + "}\n"), bad="bad.jsonl"),
    row(MAKE_PT, "max_seq_length beyond the position table", "--max_seq_length 1024",
        ["max_seq_length 1024 exceeds max_position_embeddings 512", "set --max_position_embeddings"]),
    row(MAKE_PT, "existing output", "--output_file {bad}", ["output already exists: {bad}", "--overwrite true"],
        copy_of("pt.mindrecord"), bad="pt.mindrecord"),
    # ------------------------------------------------------------------------- run_pretrain on a folder of parts
    row(PRE, "parts of different settings in one folder", "--data_dir {bad}",
        ["{bad}/pt-00000-of-00002.mindrecord.meta.json and {bad}/pt-00001-of-00002.mindrecord.meta.json were made with "
         "different settings (max_seq_length 32 vs 48", "separate folders"],
        parts(("--num_shards", "2", "--shard_index", "0", "--max_seq_length", "32"),
              ("--num_shards", "2", "--shard_index", "1", "--max_seq_length", "48")), bad="parts"),
    row(PRE, "a part missing", "--data_dir {bad}", ["{bad}: part 1 of 2 of pt.mindrecord is missing (found parts [0])"],
        parts(("--num_shards", "2", "--shard_index", "0", "--max_seq_length", "32"),), bad="parts"),
    # ---------------------------------------------------------------------------------------------- create_finetune
    row(MAKE_FT, "output in use by another run", "",
        ["output_file {out}/ft.mindrecord is in use by another run (pid "], held_lock(), bad="out/.ft.mindrecord.lock"),
    row(MAKE_FT, "data set lock planted as a symbolic link", "", ["{bad} is a symbolic link"], symlink_to_victim(),
        bad="out/.ft.mindrecord.lock"),
    row(MAKE_FT, "missing input", "--input_file {tmp}/missing.tsv", ["input file not found: {tmp}/missing.tsv"]),
    row(MAKE_FT, "empty tsv", "--input_file {bad}", ["{bad}: no examples"], text(""), bad="bad.tsv"),
    row(MAKE_FT, "malformed tsv row", "--input_file {bad}",
        ["{bad} line 2: expected at least 5 tab-separated fields, found 4"],
        text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t2\t3\tonly one text\n"), bad="bad.tsv", process=True),
    row(MAKE_FT, "unknown label", "--input_file {bad}", ["{bad} line 2: unknown label '7' for mrpc"],
        text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n7\t2\t3\ta\tb\n"), bad="bad.tsv"),
    row(MAKE_FT, "a tsv quoted as Excel or pandas save it (was: the quotes read as text)", "--input_file {bad}",
        ["{bad} line 2: field 4 is quoted as Excel or pandas quote it (in quotes, its quotes doubled), but GLUE's tsv "
         "files are not quoted: save it without quoting (pandas: quoting=csv.QUOTE_NONE)"],
        text('Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t2\t3\t"He said ""yes"" ."\tb\n'), bad="bad.tsv"),
    row(MAKE_FT, "UTF-16 tsv without a byte-order mark (was: a header of NUL characters in the message)",
        "--input_file {bad}", ["{bad} line 1: NUL characters in the text; it looks like UTF-16 text: save it as UTF-8"],
        raw("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t2\t3\ta\tb\n".encode("utf-16-le")), bad="bad.tsv"),
    row(MAKE_FT, "UTF-16 tsv (Excel's Unicode text)", "--input_file {bad}",
        ["{bad} line 1: not UTF-8 text", "; it looks like UTF-16 text: save it as UTF-8"],
        raw("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t2\t3\ta\tb\n".encode("utf-16")), bad="bad.tsv"),
    row(MAKE_FT, "an argument ending in a carriage return (a script with Windows line endings; was: output named "
        "'ft.mindrecord\\r')", "--output_file '{out}/ft.mindrecord\r'",
        ["argument '{out}/ft.mindrecord\\r' ends in a carriage return (\\r): the script that ran this command has "
         "Windows line endings; convert it to LF (e.g. dos2unix SCRIPT)"]),
    row(MAKE_FT, "file of another task", "--task_name sst-2",
        ["{fx}/mrpc.tsv line 1: header column 1 should be 'sentence'", "is this a sst-2 file?"]),
    row(MAKE_FT, "unknown task", "--task_name mrcp", ["key 'task_name' must be one of", "got 'mrcp'"]),
    row(MAKE_FT, "absl's --nodo_lower_case (was: no suggestion)", "--nodo_lower_case",
        ["unknown option '--nodo_lower_case'; did you mean '--do_lower_case false'?"]),
    row(MAKE_FT, "unknown yaml key", "--config_path {bad}", ["{bad}: unknown key 'task'; did you mean 'task_name'?"],
        text("finetune:\n  task: mrpc\n"), bad="bad.yaml"),
    row(MAKE_FT, "empty vocab.txt", "--spm_model_file '' --vocab_file {bad}", ["{bad}: empty vocabulary"], text(""),
        bad="vocab.txt"),
    row(MAKE_RACE, "RACE: malformed json", "", ["{bad} line 1: malformed json"],
        text(RACE_OK[:-12]), bad=RACE_FILE),
    row(MAKE_RACE, "RACE: empty file", "", ["{bad}: empty file, expected json"], text(""), bad=RACE_FILE),
    row(MAKE_RACE, "RACE: wrong field type", "", ["{bad}: field 'article' should be str, got int"],
        text(RACE_OK.replace('"A text."', "5")), bad=RACE_FILE),
    row(MAKE_RACE, "RACE: 3 options", "", ["{bad}: question 0: expected 4 option strings"],
        text(RACE_OK.replace(', "d"', "")), bad=RACE_FILE),
    row(MAKE_RACE, "RACE: max_qa_length 0", "--max_qa_length 0", ["key 'max_qa_length' must be in [1, 8192], got 0"],
        text(RACE_OK), bad=RACE_FILE),
    row(MAKE_RACE, "RACE: no files of the split", "--split train", ["no RACE files of split train in {tmp}/RACE"],
        text(RACE_OK), bad=RACE_FILE),
    # ---------------------------------------------------------------------------------------------- create_squad_data
    row(MAKE_SQ, "missing input", "--input_file {tmp}/missing.json", ["input file not found: {tmp}/missing.json"]),
    row(MAKE_SQ, "empty json", "--input_file {bad}", ["{bad}: empty file, expected json"], text(""), bad="bad.json"),
    row(MAKE_SQ, "malformed json", "--input_file {bad}", ["{bad} line 2: malformed json"], text('{"data": [\n'),
        bad="bad.json"),
    row(MAKE_SQ, "not SQuAD json", "--input_file {bad}", ["{bad}: expected an object with field 'data', got list"],
        text("[1, 2]"), bad="bad.json"),
    row(MAKE_SQ, "missing answers", "--input_file {bad}",
        ["{bad}: data[0].paragraphs[0].qas[0]: missing field 'answers'"],
        text(SQUAD_ROW % '{"id": "1", "question": "q"}'), bad="bad.json"),
    row(MAKE_SQ, "wrong field type", "--input_file {bad}", ["answers[0]: field 'answer_start' should be int, got str"],
        text(SQUAD_ROW % '{"id": "1", "question": "q", "answers": [{"text": "abc", "answer_start": "0"}]}'),
        bad="bad.json"),
    row(MAKE_SQ, "v2.0 data without the v2 flag", "--input_file {bad}",
        ["{bad}: data[0].paragraphs[0].qas[0]: question 1 is_impossible but version_2_with_negative is false"],
        text(SQUAD_ROW % '{"id": "1", "question": "q", "is_impossible": true, "answers": []}'), bad="bad.json"),
    row(MAKE_SQ, "is_impossible as a string (was: \"false\" taken as impossible)", "--input_file {bad}",
        ["{bad}: data[0].paragraphs[0].qas[0]: field 'is_impossible' should be bool, got str"],
        text(SQUAD_ROW % '{"id": "1", "question": "q", "is_impossible": "false", "answers": []}'), bad="bad.json"),
    row(MAKE_SQ, "an impossible question with answers (was: accepted)", "--input_file {bad} --version_2_with_negative "
        "true", ["{bad}: data[0].paragraphs[0].qas[0]: question 1 is_impossible but has 1 answer(s): training "
                 "takes it as unanswerable, the official scoring as answerable"],
        text(SQUAD_ROW % '{"id": "1", "question": "q", "is_impossible": true, '
                         '"answers": [{"text": "abc", "answer_start": 0}]}'), bad="bad.json"),
    row(MAKE_SQ, "two questions of one id (was: accepted)", "--input_file {bad}",
        ["{bad}: data[0].paragraphs[0].qas[1]: question id 1 is also the id of {bad}: data[0].paragraphs[0].qas[0]"],
        text(SQUAD_ROW % ('{"id": "1", "question": "q", "answers": [{"text": "abc", "answer_start": 0}]}, '
                          '{"id": "1", "question": "r", "answers": [{"text": "abc", "answer_start": 0}]}')),
        bad="bad.json"),
    row(MAKE_SQ, "answers not at answer_start", "--input_file {bad}",
        ["{bad}: no questions left: the answers of all 1 are not at their answer_start"],
        text(SQUAD_ROW % '{"id": "1", "question": "q", "answers": [{"text": "abc", "answer_start": 40}]}'),
        bad="bad.json"),
    row(MAKE_SQ, "max_query_length too long", "--max_query_length 100",
        ["max_query_length 100 leaves no room for context in max_seq_length 64"]),
    row(MAKE_SQ, "wrong type", "--is_training maybe", ["key 'is_training' expects true or false, got 'maybe'"]),
    # ---------------------------------------------------------------------------------------------- export.py
    row(EXPORT, "missing checkpoint", "--export_ckpt_file {tmp}/missing.ckpt",
        ["export_ckpt_file not found: {tmp}/missing.ckpt"]),
    row(EXPORT, "corrupt checkpoint", "--export_ckpt_file {bad}", ["cannot read checkpoint {bad}"],
        raw(b"not a checkpoint" * 8), bad="bad.ckpt"),
    row(EXPORT, "pretraining checkpoint", "--export_ckpt_file {fx}/pre.ckpt",
        ["{fx}/pre.ckpt has no task head", "a pretraining checkpoint?"]),
    row(EXPORT, "checkpoint of another task", "--config_path task_squad_v1_config.yaml",
        ["{fx}/cls.ckpt holds a classifier/RACE head", "is a squad_v1 config"]),
    row(EXPORT, "classifier checkpoint as --task squad_v1", "--config_path '' --task squad_v1",
        ["{fx}/cls.ckpt holds a classifier/RACE head (classifier.*) but --task squad_v1 needs a squad_v1 head: use "
         "--task classifier"]),
    row(EXPORT, "checkpoint of another config", "--net_cfg.hidden_size 48",
        ["{fx}/cls.ckpt: shapes do not match the network"]),
    row(EXPORT, "classifier checkpoint as RACE", "--task race",
        ["{fx}/cls.ckpt: its classifier has 2 outputs", "RACE scores each choice with one output",
         "use it as --task classifier (num_class 2)"]),
    row(EXPORT, "num_class not the checkpoint's", "--num_class 3",
        ["{fx}/cls.ckpt: the checkpoint's classifier has 2 class(es) but num_class is 3"]),
    row(EXPORT, "seq_length > max_position_embeddings", "--export_seq_length 1000",
        ["export_seq_length 1000 exceeds the network's max_position_embeddings 512"]),
    row(EXPORT, "int8 without ONNX", "--quantize int8",
        ["--quantize int8 makes an ONNX model for ONNX Runtime", "add --file_format ONNX"]),
    row(EXPORT, "int8 for OpenVINO without ONNX (was: named ONNX Runtime)", "--quantize int8 --engine openvino "
        "--calibration_file {fx}/mrpc_train.mindrecord",
        ["--quantize int8 quantizes the ONNX export into OpenVINO IR", "add --file_format ONNX"]),
    row(EXPORT, "export_batch_size 0", "--export_batch_size 0",
        ["key 'export_batch_size' must be in [1, 65536], got 0"]),
    row(EXPORT, "absurd export_seq_length", "--export_seq_length 100000",
        ["key 'export_seq_length' must be in [1, 8192], got 100000"]),
    row(EXPORT, "existing export", "", ["output already exists: {bad} (pass --overwrite true to replace it)"],
        raw(b"an earlier export"), bad="out/model.mindir"),
    row(EXPORT, "--overwrite of a folder where the export file goes", "--overwrite true",
        ["{bad} is a folder: --overwrite replaces only the files this command writes"], folder(),
        bad="out/model.mindir"),
    row(EXPORT, "--overwrite alone (was: --overwrite needs a value)", "--overwrite --device_target CPU",
        ["{bad} is a folder: --overwrite replaces only the files this command writes"], folder(),
        bad="out/model.mindir"),
    row(EXPORT, "--overwrite of another word", "--overwrite maybe",
        ["command line: key 'overwrite' expects true or false, got 'maybe'"]),
    row(EXPORT, "missing task yaml", "--config_path {tmp}/task_classifier_mine.yaml",
        ["config_path not found: {tmp}/task_classifier_mine.yaml"]),
    row(EXPORT, "malformed task yaml", "--config_path {bad}", ["{bad} line 2: malformed yaml"], text("num_class: [\n"),
        bad="task_classifier_mine.yaml"),
    row(EXPORT, "task yaml with an alias", "--config_path {bad}",
        ["{bad} line 2: yaml anchors and aliases are refused (*n)"], text("num_class: 2\neval_batch_size: *n\n"),
        bad="task_classifier_mine.yaml"),
    row(EXPORT, "unknown task yaml key", "--config_path {bad}",
        ["{bad}: unknown key 'num_clas'; did you mean 'num_class'?"], text("num_clas: 2\n"),
        bad="task_classifier_mine.yaml"),
    row(EXPORT, "unknown flag", "--file_fromat ONNX", ["unknown option '--file_fromat'; did you mean '--file_format'?"]),
    row(EXPORT, "a checkpoint's network json as --config_path (was: cannot tell the task)", "--config_path {bad}",
        ["{bad} is a network config (ALBERT's config json), not a yaml of this script: pass it as "
         "--albert_config_file (--config_path takes the task yaml"], beside({}, [("cls.ckpt.json", "{bad}")]),
        bad="cls.ckpt.json"),
    row(PREDICT, "a checkpoint's network json as --config_path (was: unknown key 'vocab_size')", "--text_a hi "
        "--config_path {bad}", ["{bad} is a network config (ALBERT's config json), not a yaml of this script: "
                                "src.predict reads the network from the json beside --model"],
        beside({}, [("cls.ckpt.json", "{bad}")]), bad="net.json"),
    row(EXPORT, "AIR off Ascend", "--file_format AIR", ["AIR export needs an Ascend device"], process=True),
    row(EXPORT, "neither task yaml nor --task: the head is detected (was: say which head to export)",
        "--config_path '' --export_ckpt_file {fx}/pre.ckpt",
        ["--task pretrain exports the pretraining network as an HF transformers folder only: add --file_format HF"]),
    row(EXPORT, "neither task yaml nor --task: a one-output head", "--config_path '' --export_ckpt_file {bad}",
        ["{bad} holds a one-output classifier head (classifier.*), which is RACE's or a regression's: pass --task race "
         "(or --task classifier --num_class 1 for a regression head)"], classifier_checkpoint(1), bad="one.ckpt"),
    row(EXPORT, "neither task yaml nor --task nor checkpoint", "--config_path '' --export_ckpt_file ''",
        ["set --export_ckpt_file (the checkpoint to export)"]),
    row(EXPORT, "vocabulary flag without --file_format HF", "--spm_model_file {spm}",
        ["--spm_model_file, --vocab_file, --task_name, --eval_results and --base_model go with --file_format HF"]),
    row(EXPORT, "--task pretrain without --file_format HF", "--config_path '' --task pretrain",
        ["--task pretrain exports the pretraining network as an HF transformers folder only: add --file_format HF"]),
    row(EXPORT, "HF: squad_v2 head", "--file_format HF --config_path '' --task squad_v2",
        ["--file_format HF cannot export the squad_v2 head: its start_logits.*, end_logits.*",
         "answer_class.* layers", "AlbertForQuestionAnswering has only qa_outputs.*"]),
    row(EXPORT, "HF: checkpoint of another task than --task", "--file_format HF --config_path '' --task squad_v1",
        ["{fx}/cls.ckpt holds a classifier/RACE head (classifier.*) but --task squad_v1 needs a squad_v1 head"]),
    row(EXPORT, "HF: fine-tuned checkpoint as --task pretrain", "--file_format HF --config_path '' --task pretrain",
        ["{fx}/cls.ckpt holds a classifier/RACE head (classifier.*), not the pretraining heads (predictions.*, "
         "sop_classifier.*): use --task classifier"]),
    row(EXPORT, "HF: pretraining checkpoint as --task classifier", "--file_format HF --export_ckpt_file {fx}/pre.ckpt",
        ["{fx}/pre.ckpt is a pretraining checkpoint (predictions.*, sop_classifier.*), not a classifier head: export "
         "it with --task pretrain"]),
    row(EXPORT, "HF: weight the HF class has no place for", "--file_format HF --export_ckpt_file {bad}",
        ["{bad}: weights that HF's AlbertForSequenceClassification has no place for: predictions.bias"],
        edited_checkpoint("cls.ckpt", add="predictions.bias"), bad="extra.ckpt"),
    row(EXPORT, "HF: weight the HF class needs, missing", "--file_format HF --config_path '' --task pretrain "
        "--export_ckpt_file {bad}", ["{bad}: 2 network parameters are not in the checkpoint",
                                     "sop_classifier.classifier.weight"],
        edited_checkpoint("pre.ckpt", drop="sop_classifier."), bad="no_sop.ckpt"),
    row(EXPORT, "checkpoint with flipped bytes", "--export_ckpt_file {bad}",
        ["checkpoint {bad} is damaged: its contents do not match the sha256 stored in it"],
        flipped_checkpoint("cls.ckpt"), bad="flipped.ckpt"),
    row(EXPORT, "HF: checkpoint with flipped bytes", "--file_format HF --export_ckpt_file {bad}",
        ["checkpoint {bad} is damaged"], flipped_checkpoint("cls.ckpt"), bad="flipped.ckpt"),
    row(PREDICT, "checkpoint with flipped bytes", "--model {bad} --text_a hi --text_b there",
        ["checkpoint {bad} is damaged"],
        flipped_checkpoint("cls.ckpt"), bad="flipped.ckpt"),
    row(EVAL, "checkpoint with flipped bytes", "--eval_ckpt {bad}", ["checkpoint {bad} is damaged"],
        flipped_checkpoint("pre.ckpt"), bad="flipped.ckpt"),
    row(CLS, "pretrained checkpoint with flipped bytes", "--load_pretrain_checkpoint_path {bad}",
        ["checkpoint {bad} is damaged"], flipped_checkpoint("pre.ckpt"), bad="flipped.ckpt"),
    row(EXPORT, "HF: missing vocabulary", "--file_format HF --spm_model_file {tmp}/missing.model",
        ["SentencePiece model not found: {tmp}/missing.model"]),
    row(EXPORT, "HF: vocabulary of another size",
        "--file_format HF --vocab_file {assets}/tokenizer/albert_zh_vocab.txt", ["{assets}/tokenizer/albert_zh_vocab.txt holds 21128 tokens but the word embeddings of {fx}/cls.ckpt have "
         "30000 rows"]),
    row(EXPORT, "HF: missing --eval_results", "--file_format HF --eval_results {tmp}/missing.json",
        ["eval_results not found: {tmp}/missing.json"]),
    row(EXPORT, "HF: malformed --eval_results", "--file_format HF --eval_results {bad}",
        ["{bad} line 1: malformed json"], text('{"accuracy": 0.9,'), bad="eval_results.json"),
    row(EXPORT, "HF: --eval_results not an object", "--file_format HF --eval_results {bad}",
        ["{bad}: not an eval_results.json (a JSON object of metrics), got list"], text("[0.9]"),
        bad="eval_results.json"),
    row(EXPORT, "model card flag without --file_format HF", "--eval_results {bad}",
        ["--eval_results and --base_model go with --file_format HF"], text("{}"), bad="eval_results.json"),
    row(EXPORT, "HF: two vocabularies", "--file_format HF --spm_model_file {spm} --vocab_file {tmp}/vocab.txt",
        ["pass one vocabulary: --spm_model_file (SentencePiece) or --vocab_file (WordPiece vocab.txt)"]),
    row(EXPORT, "HF: label names of another count", "--file_format HF --task_name mnli",
        ["--task_name mnli has 3 label(s) but the checkpoint's classifier has 2 output(s)"]),
    row(EXPORT, "HF: network HF has no class for", "--file_format HF --net_cfg.ln_type preln",
        ["the network's ln_type preln has no HF transformers counterpart"]),
    row(EXPORT, "HF: existing folder", "--file_format HF",
        ["output already exists: {out}/model (a folder that is not empty; pass --overwrite true"], text("{}"),
        bad="out/model/config.json"),
    row(EXPORT, "HF: --overwrite of a folder holding other files", "--file_format HF --overwrite true",
        ["{out}/model holds notes.txt, which this command does not write", "--overwrite replaces only its own files"],
        text("mine"), bad="out/model/notes.txt"),
    row(EXPORT, "HF: --overwrite of the checkpoint's folder", "--file_format HF --overwrite true --export_file_name {fx}",
        ["{fx} holds --export_ckpt_file ({fx}/cls.ckpt)"]),
    row(EXPORT, "HF: --overwrite of the working directory", "--file_format HF --overwrite true --export_file_name .",
        [". is the working directory"]),
    row(EXPORT, "HF: output is a file", "--file_format HF",
        ["export_file_name must name a folder for --file_format HF", "not a file: {out}/model"], text("mine"),
        bad="out/model"),
    # ---------------------------------------------------------------------------------------------- convert_checkpoint
    row(CONVERT, "missing input", "--input {tmp}/missing", ["input not found: {tmp}/missing"]),
    row(CONVERT, "empty weights file", "--input {bad} --config {fx}/pre.ckpt.json", ["{bad}: empty file"], raw(b""),
        bad="model.safetensors"),
    row(CONVERT, "corrupt weights file", "--input {bad} --config {fx}/pre.ckpt.json", ["cannot read {bad}"],
        raw(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}"), bad="model.safetensors"),
    row(CONVERT, "pytorch_model.bin of garbage bytes", "--input {bad} --config {fx}/pre.ckpt.json",
        ["cannot read {bad}: not a PyTorch weights file (neither torch.save's zip archive nor its legacy format)"],
        raw(b"\x00garbage" * 100), bad="pytorch_model.bin"),
    row(CONVERT, "truncated pytorch_model.bin", "--input {bad} --config {fx}/pre.ckpt.json",
        ["cannot read {bad}: a damaged or truncated zip archive (an interrupted download?)"],
        lambda bad, fx: bad.write_bytes(_torch_bytes({"w": __import__("torch").zeros(64)})[:300]),
        bad="pytorch_model.bin"),
    row(CONVERT, "zip that is not a torch file", "--input {bad} --config {fx}/pre.ckpt.json",
        ["cannot read {bad}: a zip archive but not one of torch.save (no data.pkl inside)"],
        lambda bad, fx: __import__("zipfile").ZipFile(bad, "w").writestr("weights.txt", "1 2 3"),
        bad="pytorch_model.bin"),
    row(CONVERT, "torch file that is not a state dict", "--input {bad} --config {fx}/pre.ckpt.json",
        ["cannot read {bad}: not a state dict of tensor names to tensors (found list)"],
        lambda bad, fx: bad.write_bytes(_torch_bytes([1, 2])), bad="pytorch_model.bin"),
    row(CONVERT, "weights of another config", "--input {fx}/hf_vocab100.safetensors --config {fx}/pre.ckpt.json",
        ["the config does not match the weights", "weights (100, 16) vs config (30000, 16)"]),
    row(CONVERT, "malformed config json", "--input {fx}/hf_vocab100.safetensors --config {bad}",
        ["{bad} line 1: malformed json"], text("{vocab_size: 100}"), bad="config.json"),
    row(CONVERT, "missing --input", "", ["the following arguments are required: --input"], process=True),
    row(CONVERT, "unknown --src", "--src pt --input {fx}", ["argument --src: invalid choice: 'pt'"]),
    row(CONVERT, "tf without --config", "--src tf --input {tmp}/model.ckpt",
        ["--config albert_config.json is required with --src tf"]),
    row(CONVERT, "existing output", "--input {fx}/hf_vocab100.safetensors --config {fx}/pre.ckpt.json --output {bad}",
        ["output already exists: {bad} (pass --overwrite to replace it)"], text("mine"), bad="bad.ckpt"),
    row(CONVERT, "existing config beside the output", "--input {fx}/hf_vocab100.safetensors --config "
        "{fx}/pre.ckpt.json", ["output already exists: {bad} (pass --overwrite to replace it)"], text("{}"),
        bad="out/c.ckpt.json"),
    row(CONVERT, "--overwrite of its own --config", "--input {fx}/hf_vocab100.safetensors --config {bad} --overwrite",
        ["{bad} is --config ({bad}): an output never replaces what the run reads"],
        lambda bad, fx: shutil.copy(fx / "pre.ckpt.json", bad), bad="out/c.ckpt.json"),
    row(CONVERT, "--overwrite true (was: unrecognized argument)", "--input {fx}/hf_vocab100.safetensors --config {bad} "
        "--overwrite true", ["{bad} is --config ({bad}): an output never replaces what the run reads"],
        lambda bad, fx: shutil.copy(fx / "pre.ckpt.json", bad), bad="out/c.ckpt.json"),
    # ---------------------------------------------------------------------------------------------- src.predict
    row(PREDICT, "misspelled flag (was: no suggestion)", "--text_a hi --precison int8",
        ["unrecognized arguments: --precison int8; did you mean '--precision'?"]),
    row(PREDICT, "another tokenizer than the run's data (was: answered)", "--model {bad} --text_a hi --spm_model_file "
        "'' --vocab_file {assets}/tokenizer/albert_zh_vocab.txt",
        ["{bad} was trained on data made with albert_30k-clean.model (sha256 ", "not with albert_zh_vocab.txt",
         "pass the tokenizer the run's data was made with"], trained_with_spm, bad="trained.ckpt"),
    row(PREDICT, "ONNX export of a run's checkpoint, another tokenizer (was: answered)", "--model {bad} --text_a hi "
        "--spm_model_file '' --vocab_file {assets}/tokenizer/albert_zh_vocab.txt",
        ["{bad} was trained on data made with albert_30k-clean.model (sha256 ", "not with albert_zh_vocab.txt",
         "pass the tokenizer the run's data was made with"], onnx_trained_with_spm, bad="model.onnx"),
    row(EXPORT, "HF: the run's vocabulary uncased (was: exported)", "--file_format HF --export_ckpt_file {bad} "
        "--spm_model_file {spm} --do_lower_case false --export_file_name {out}/hf",
        ["{bad} was trained on data made with albert_30k-clean.model", "do_lower_case True), not with "
         "albert_30k-clean.model", "do_lower_case False)"], trained_with_spm, bad="trained.ckpt"),
    row(PREDICT, "a damaged task record", "--model {bad} --text_a hi",
        ["{bad}: its task record (run_task) is damaged: not a JSON object"], damaged_task_record,
        bad="albert_classifier-3.ckpt"),
    row(PREDICT, "a damaged tokenizer record (was: a JSONDecodeError traceback)", "--model {bad} --text_a hi",
        ["{bad}: its tokenizer record (run_tokenizer) is damaged: not a JSON object"], damaged_tokenizer_record,
        bad="trained.ckpt"),
    row(PREDICT, "missing model", "--model {tmp}/missing.ckpt --text_a hi", ["model not found: {tmp}/missing.ckpt"]),
    row(PREDICT, "OpenVINO for a checkpoint", "--engine openvino --text_a hi",
        ["--engine chooses the engine of an .onnx model (export.py --file_format ONNX): {fx}/cls.ckpt runs in this "
         "process"]),
    row(PREDICT, "ONNX Runtime for a checkpoint (was: ignored)", "--engine onnxruntime --text_a hi",
        ["--engine chooses the engine of an .onnx model (export.py --file_format ONNX): {fx}/cls.ckpt runs in this "
         "process"]),
    row(PREDICT, "model of another kind", "--model {bad} --text_a hi", ["--model must be a .mindir", "{bad}"],
        text("weights"), bad="model.pb"),
    row(PREDICT, "HF transformers folder as model (was: model not found)", "--model {bad} --text_a hi",
        ["{bad} is an HF transformers model folder (config.json + model.safetensors), which src.predict does not run: "
         "serve it with transformers", "python -m src.convert_checkpoint --src hf --input {bad} --output model.ckpt "
         "and fine-tune that with run_classifier.py"], hf_folder(), bad="albert-mlm"),
    row(PREDICT, "a folder as model", "--model {tmp} --text_a hi",
        ["--model must be a model file (.mindir, .onnx or a fine-tuned .ckpt), not a folder: {tmp}"]),
    row(PREDICT, "ONNX SQuAD v1.1 model as classifier (was: no task named)", "--model {bad} --text_a hi",
        ["{bad} takes (input_ids [1, 8], token_type_ids [1, 8], input_mask [1, 8], p_mask [1, 8]) and returns 2 "
         "output(s), not the [batch, seq] inputs (input_ids, token_type_ids, input_mask) and 1 output(s) of a "
         "classifier model exported by export.py: it is a squad_v1 model, use --task squad_v1"],
        onnx_model(["input_ids", "token_type_ids", "input_mask", "p_mask"], 2), bad="model.onnx"),
    row(PREDICT, "ONNX SQuAD v2.0 model as v1.1", "--model {bad} --task squad_v1 --question q --context c",
        ["returns 5 output(s)", "and 2 output(s) of a squad_v1 model", "it is a squad_v2 model, use --task squad_v2"],
        onnx_model(["input_ids", "token_type_ids", "input_mask", "p_mask"], 5), bad="model.onnx"),
    row(PREDICT, "ONNX model of no task", "--model {bad} --text_a hi",
        ["{bad} takes (input_ids [1, 8]) and returns 1 output(s)", "(nor those of another task)"],
        onnx_model(["input_ids"], 1), bad="model.onnx"),
    row(PREDICT, "pretraining checkpoint", "--model {fx}/pre.ckpt --text_a hi",
        ["{fx}/pre.ckpt has no task head", "a pretraining checkpoint?"]),
    row(PREDICT, "classifier checkpoint as RACE", "--task race --article a --question q --option a --option b "
        "--option c --option d", ["{fx}/cls.ckpt: its classifier has 2 outputs", "use it as --task classifier"]),
    row(PREDICT, "classifier checkpoint as SQuAD", "--task squad_v1 --question q --context c",
        ["{fx}/cls.ckpt holds a classifier/RACE head (classifier.*) but --task squad_v1 needs a squad_v1 head: use "
         "--task classifier"]),
    row(PREDICT, "SQuAD question longer than the sequence (was: named max_seq_length, after loading)",
        "--task squad_v1 --question q --context c --seq_length 64 --max_query_length 64",
        ["--max_query_length 64 leaves no room for context in the model's sequence length 64 (--seq_length): give at "
         "most 60"]),
    row(PREDICT, "seq_length > max_position_embeddings", "--seq_length 1000 --text_a hi",
        ["--seq_length 1000 exceeds the network's max_position_embeddings 512"]),
    row(PREDICT, "no text", "", ["--task classifier needs --text_a"]),
    row(PREDICT, "bfloat16 for an ONNX model on ONNX Runtime", "--model {bad} --precision bfloat16 --text_a hi",
        ["--precision bfloat16 is for a .ckpt or OpenVINO's precision hint (.onnx with --engine openvino, .xml); "
         "{bad} runs as it was exported: add --engine openvino"], text("not read"), bad="model.onnx"),
    row(PREDICT, "bfloat16 for a MINDIR", "--model {bad} --precision bfloat16 --text_a hi",
        ["{bad} runs as it was exported: serve the .ckpt, or an .onnx export with --engine openvino"],
        text("not read"), bad="model.mindir"),
    row(PREDICT, "negative batch size", "--batch_size -1 --text_a hi", ["--batch_size must be in [0, 65536], got -1"]),
    row(PREDICT, "output file without requests file", "--text_a hi --output_file {out}/answers.jsonl",
        ["--output_file goes with --input_file"]),
    row(PREDICT, "missing requests file", "--input_file {tmp}/missing.jsonl",
        ["input_file not found: {tmp}/missing.jsonl"]),
    row(PREDICT_FILE, "text flag beside requests file", "--text_a hi",
        ["--input_file holds the requests: drop --text_a"], text('{"text_a": "a"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "request not json", "", ["{bad} line 3: not JSON"], text('{"text_a": "a"}\n\n{"text_a": \n'),
        bad="requests.jsonl"),
    row(PREDICT_FILE, "request nested too deeply", "", ["{bad} line 2: JSON nested too deeply"],
        text('{"text_a": "a"}\n' + "[" * 100000 + "]" * 100000 + "\n"), bad="requests.jsonl"),
    row(PREDICT_FILE, "request over the size cap", "", ["{bad} line 1: a request is longer than 1048576 bytes"],
        text('{"text_a": "' + "a" * (1 << 20) + '"}\n'), bad="requests.jsonl"),
    row(PREDICT, "onnx weights outside the model's folder", "--model {bad} --text_a hi",
        ["{bad}: tensor w keeps its data in '../../etc/passwd', outside the model's folder; refused"],
        onnx_reading("../../etc/passwd"), bad="model.onnx"),
    row(PREDICT, "onnx weights at an absolute path", "--model {bad} --text_a hi",
        ["{bad}: tensor w keeps its data in '/etc/passwd', outside the model's folder"], onnx_reading("/etc/passwd"),
        bad="model.onnx"),
    row(PREDICT, "max_windows 0", "--max_windows 0 --text_a hi", ["--max_windows must be in [1, 65536], got 0"]),
    row(PREDICT, "integer flag of 5000 digits", "--text_a hi --batch_size " + "9" * 5000,
        ["argument --batch_size: an integer of 5000 digits is refused (at most 100)"]),
    row(PREDICT, "threshold not finite", "--text_a hi --null_score_diff_threshold inf",
        ["argument --null_score_diff_threshold: expected a finite number, got 'inf'"]),
    row(PREDICT_FILE, "request id of 5000 digits (was a traceback)", "",
        ["{bad} line 2: not JSON (an integer of 5000 digits exceeds Python's limit of 4300 at column 23)"],
        text('{"text_a": "a"}\n{"text_a": "a", "id": ' + "9" * 5000 + "}\n"), bad="requests.jsonl"),
    row(PREDICT, "RACE checkpoint as classifier (was: answered as a regression)", "--model {bad} --text_a hi",
        ["{bad} was fine-tuned by run_race.py but --task classifier needs a classifier head: use --task race"],
        classifier_checkpoint(1), bad="albert_race-3.ckpt"),
    row(PREDICT, "seq_length below a pair's special tokens (was: a traceback)", "--seq_length 2 --text_a hi",
        ["--seq_length must be in [8, 8192] (or 0: the default), got 2"]),
    row(PREDICT, "a label named twice (was: its probability lost)", "--labels a,a --text_a hi",
        ["--labels must name each class once, by a non-empty name: 'a,a'"]),
    row(PREDICT, "an empty label name", "--labels a, --text_a hi",
        ["--labels must name each class once, by a non-empty name: 'a,'"]),
    row(PREDICT, "another task's yaml (was: unknown key eval_json_path)", "--config_path {bad} --text_a hi",
        ["{bad} is a squad_v1 or squad_v2 task yaml, not a classifier one: pass the task yaml the checkpoint was "
         "fine-tuned with, or the --task it fits (squad_v1, squad_v2)"],
        text("eval_json_path: dev-v1.1.json\nn_best_size: 10\n"), bad="mine.yaml"),
    row(PREDICT, "SQuAD v1.1's yaml for a v2.0 model (was: its settings taken silently)", "--task squad_v2 "
        "--config_path {root}/task_squad_v1_config.yaml --question Who? --context 'The cat.'",
        ["{root}/task_squad_v1_config.yaml is a squad_v1 task yaml (it holds every key of task_squad_v1_config.yaml "
         "and none of squad_v2's own: classifier_dropout_prob, end_n_top, null_score_diff_threshold, start_n_top), "
         "not a squad_v2 one: pass the task yaml the checkpoint was fine-tuned with, or the --task it fits"]),
    row(PREDICT, "a text flag of another task (was: ignored)", "--text_a hi --context paragraph",
        ["--context is not a classifier input (a squad_v1 or squad_v2 one): drop it"]),
    row(PREDICT, "absurd thread count", "--threads 100000 --text_a hi", ["--threads must be in [0, 1024], got 100000"]),
    row(PREDICT_FILE, "request not an object", "", ["{bad} line 1: a request is a JSON object, got list"],
        text('["a", "b"]\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "unknown request key", "", ["{bad} line 2: unknown key 'txt_b'", "did you mean 'text_b'?"],
        text('{"text_a": "a"}\n{"text_a": "a", "txt_b": "b"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "request without its text", "", ["{bad} line 1: a classifier request needs text_a"],
        text('{"id": "q1", "text_b": "b"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "request text not a string", "", ["{bad} line 1: text_a must be a string"],
        text('{"text_a": 5}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "request id not a string or integer", "", ["{bad} line 1: id must be a string or an integer"],
        text('{"text_a": "a", "id": [1]}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "requests with gold labels (were refused: unknown key 'label')", "",
        ["{bad} line 3: text_a must be a string"],
        text('{"text_a": "a", "label": "1"}\n{"text_a": "b", "gold": 0}\n{"text_a": 5, "label": "0"}\n'),
        bad="requests.jsonl"),
    row(PREDICT_FILE, "request with both label and gold", "",
        ["{bad} line 1: give the gold answer once, as label or as gold"],
        text('{"text_a": "a", "label": "1", "gold": "1"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "gold label not a string or integer", "", ["{bad} line 1: label must be a string or an integer"],
        text('{"text_a": "a", "label": [1]}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "gold label for SQuAD", "--task squad_v1",
        ["{bad} line 1: unknown key 'label' for squad_v1 (keys: question, context, id)"],
        text('{"question": "q", "context": "c", "label": "x"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "race request with too few options", "--task race",
        ["{bad} line 1: the model chooses among 4 options but 2 were given"],
        text('{"article": "A text.", "question": "Why?", "options": ["a", "b"]}\n'), bad="requests.jsonl"),
    row(PREDICT, "SQuAD context of whitespace only (was: answered)", "--task squad_v2 --question q --context '   '",
        ["--task squad_v2 needs --question and --context (--context is blank)"]),
    row(PREDICT, "SQuAD question of whitespace only (was: answered)", "--task squad_v1 --question ' ' --context c",
        ["--task squad_v1 needs --question and --context (--question is blank)"]),
    row(PREDICT_FILE, "SQuAD request context of whitespace only (was: answered)", "--task squad_v2",
        ["{bad} line 2: a squad_v2 request needs context (context is blank)"],
        text('{"question": "q", "context": "c"}\n{"question": "q", "context": " \\n\\t "}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "two requests of one id (was: answered twice under it)", "",
        ['{bad} line 3: id "q1" is also the id of line 1: ids must be unique'],
        text('{"id": "q1", "text_a": "a"}\n{"id": "q2", "text_a": "b"}\n{"id": "q1", "text_a": "c"}\n'),
        bad="requests.jsonl"),
    row(PREDICT_FILE, "a request's id is another's line number (was: answered twice under it)", "",
        ["{bad} line 2: id 1 is also the id of line 1: ids must be unique"],
        text('{"text_a": "a"}\n{"id": 1, "text_a": "b"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "empty requests file", "", ["{bad} holds no request"], text("\n\n"), bad="requests.jsonl"),
    row(PREDICT_FILE, "requests file not utf-8", "", ["{bad} line 2: not UTF-8 text"],
        raw(b'{"text_a": "a"}\n{"text_a": "caf\xe9"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "output file exists (here the requests file itself)", "--output_file {bad}",
        ["output already exists: {bad} (pass --overwrite to replace it)"], text('{"text_a": "a"}\n'),
        bad="requests.jsonl"),
    row(PREDICT_FILE, "--overwrite of the requests file", "--output_file {bad} --overwrite",
        ["{bad} is --input_file ({bad}): an output never replaces what the run reads"],
        text('{"text_a": "a"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "--overwrite true of the requests file (was: unrecognized argument)",
        "--output_file {bad} --overwrite true", ["{bad} is --input_file ({bad}): an output never replaces"],
        text('{"text_a": "a"}\n'), bad="requests.jsonl"),
    row(PREDICT, "--overwrite of the checkpoint's network config (was: replaced)", "--model {bad} --input_file "
        "{tmp}/m/requests.jsonl --output_file {bad}.json --overwrite",
        ["{bad}.json is the network config of --model ({bad}.json): an output never replaces what the run reads"],
        beside({"requests.jsonl": '{"text_a": "a"}\n'}, [("cls.ckpt", "{bad}"), ("cls.ckpt.json", "{bad}.json")]),
        bad="m/cls.ckpt"),
    row(PREDICT, "--overwrite of an OpenVINO IR's weights (was: replaced)", "--model {tmp}/ir/m.xml --input_file "
        "{tmp}/ir/requests.jsonl --output_file {bad} --overwrite",
        ["{bad} is the weights of --model ({bad}): an output never replaces what the run reads"],
        beside({"m.xml": "<net/>", "m.bin": "weights", "requests.jsonl": '{"text_a": "a"}\n'}), bad="ir/m.bin"),
    row(PREDICT, "--overwrite of the tokenizer (was: replaced)", "--spm_model_file {bad} --input_file "
        "{tmp}/t/requests.jsonl --output_file {bad} --overwrite",
        ["{bad} is --spm_model_file ({bad}): an output never replaces what the run reads"],
        beside({"spiece.model": "not read", "requests.jsonl": '{"text_a": "a"}\n'}), bad="t/spiece.model"),
    row(PREDICT_FILE, "--overwrite of another word", "--overwrite maybe",
        ["argument --overwrite: expected true or false, got 'maybe'"], text('{"text_a": "a"}\n'), bad="requests.jsonl"),
    row(PREDICT_FILE, "output file is a folder", "--output_file {tmp}",
        ["--output_file must name a file, not a folder: {tmp}"], text('{"text_a": "a"}\n'), bad="requests.jsonl"),
    # ---------------------------------------------------------------------------------------------- squad_postprocess
    row(SCORE, "predictions for another data set",
        "--pred_file {assets}/squad/v2.0/cs224n_bert_base/predictions.json",
        ["cs224n_bert_base/predictions.json: none of its", "question ids is in", "predictions for another data set?"],
        process=True),
    row(SCORE, "missing predictions", "--pred_file {tmp}/missing.json",
        ["predictions file not found: {tmp}/missing.json"]),
    row(SCORE, "empty predictions", "--pred_file {bad}", ["{bad}: empty file, expected json"], text(""),
        bad="bad.json"),
    row(SCORE, "malformed predictions", "--pred_file {bad}", ["{bad} line 2: malformed json"], text('{"a": "b",\n'),
        bad="bad.json"),
    row(SCORE, "predictions not strings", "--pred_file {bad}",
        ["{bad}: expected a json object mapping question ids to answer strings"],
        text('{"56be4db0acb8001400a502ec": 3}'), bad="bad.json"),
    row(SCORE, "data file not SQuAD", "--data_file {bad}", ["{bad}: not a SQuAD data file (no 'data' list)"],
        text("[1, 2]"), bad="bad.json"),
    row(SCORE, "data file without paragraphs", "--data_file {bad}", ["{bad}: data[0]: missing field 'paragraphs'"],
        text('{"data": [{"title": "x"}]}'), bad="bad.json"),
    row(SCORE, "null odds not numbers", "--version 2.0 --na_prob_file {bad} --na_prob_thresh 0.0",
        ["{bad}: expected a json object mapping question ids to null odds (numbers)"],
        text('{"56be4db0acb8001400a502ec": "high"}'), bad="bad.json"),
    row(SCORE, "v2.0 predictions missing questions", "--version 2.0 --pred_file {bad}",
        ["116 of 117 questions have no prediction"], text('{"56be4db0acb8001400a502ec": "Denver Broncos"}'),
        bad="bad.json"),
    row(SCORE, "v2.0 data as --version 1.1 (was: a traceback, max() arg is an empty sequence)", "--data_file {bad}",
        ["{bad}: data[0].paragraphs[0].qas[1]: question q2 has no gold answers (an unanswerable SQuAD v2.0 "
         "question?): score this file with --version 2.0"],
        text(json.dumps({"version": "v2.0", "data": [{"paragraphs": [{"context": "Denver Broncos", "qas": [
            {"id": "56be4db0acb8001400a502ec", "answers": [{"text": "Denver Broncos", "answer_start": 0}]},
            {"id": "q2", "is_impossible": True, "answers": []}]}]}]})), bad="bad.json"),
    row(SCORE, "null odds without a threshold (was: 1.0, the official script's, for null scores)",
        "--version 2.0 --na_prob_file {fx}/predictions.json",
        ["--na_prob_file needs --na_prob_thresh: the run's null_score_diff_threshold (0.0 by default) for this "
         "package's null_odds.json (null scores, not probabilities), 1.0 for the official script's probabilities"]),
    row(SCORE, "threshold without null odds (was: ignored)", "--version 2.0 --na_prob_thresh 0.0",
        ["--na_prob_thresh goes with --na_prob_file (the null odds it is compared with)"]),
    row(SCORE, "threshold with --version 1.1 (was: ignored)", "--na_prob_thresh 0.0",
        ["--na_prob_thresh is for --version 2.0"]),
    row(SCORE, "wrong type", "--na_prob_thresh high", ["argument --na_prob_thresh: expected a finite number, got 'high'"]),
    row(SCORE, "threshold not finite", "--na_prob_thresh nan", ["argument --na_prob_thresh: expected a finite number"]),
    row(SCORE, "unknown version", "--version 3", ["argument --version: invalid choice: '3'"]),
]


# ---------------------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def fx(tmp_path_factory, assets) -> Path:
    """Tiny data of every kind (made by the package's own tools) and tiny checkpoints, shared by all rows."""
    from src import create_finetune_data, create_pretraining_data, create_squad_data

    folder = tmp_path_factory.mktemp("matrix_fixtures")
    spm = str(assets / "tokenizer" / "albert_30k-clean.model")
    mrpc = (assets / "glue" / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines(keepends=True)
    (folder / "mrpc.tsv").write_text("".join(mrpc[:17]), encoding="utf-8")
    jobs = [(create_pretraining_data, ["--input_file", str(assets / "pretrain" / "bert_sample_text.txt"),
                                       "--output_file", str(folder / "pt.mindrecord"), "--max_seq_length", "32",
                                       "--max_predictions_per_seq", "5", "--dupe_factor", "1", "--progress", "false"])]
    jobs += [(create_finetune_data, ["--task_name", "mrpc", "--input_file", str(folder / "mrpc.tsv"), "--split", split,
                                     "--output_file", str(folder / f"mrpc_{split}.mindrecord"), "--max_seq_length",
                                     "32"]) for split in ("train", "dev", "test")]
    cola = (assets / "glue" / "CoLA" / "in_domain_train.tsv").read_text(encoding="utf-8").splitlines(keepends=True)
    (folder / "cola.tsv").write_text("".join(cola[:16]), encoding="utf-8")
    jobs.append((create_finetune_data, ["--task_name", "cola", "--input_file", str(folder / "cola.tsv"),
                                        "--output_file", str(folder / "cola.mindrecord"), "--max_seq_length", "32"]))
    jobs.append((create_finetune_data, ["--task_name", "race", "--data_dir", str(assets / "race" / "RACE"), "--split",
                                        "dev", "--output_file", str(folder / "race.mindrecord"), "--max_seq_length",
                                        "64", "--max_qa_length", "16"]))
    jobs += [(create_squad_data, ["--input_file", SQUAD_JSON.format(assets=assets), "--output_file",
                                  str(folder / f"sq_{split}.mindrecord"), "--is_training", str(split == "train"),
                                  "--max_seq_length", "64", "--doc_stride", "32", "--max_query_length", "24"])
             for split in ("train", "eval")]
    for tool, argv in jobs:
        assert tool.main(argv + ["--spm_model_file", spm]) == 0
    _save_checkpoints(folder)
    (folder / "predictions.json").write_text('{"56be4db0acb8001400a502ec": "Denver Broncos"}')
    return folder


def _save_checkpoints(folder: Path) -> None:
    """pre.ckpt (pretraining network), wide.ckpt (hidden 48: another config), v1000.ckpt (a 1000-token vocabulary),
    cls.ckpt (a 2-class classifier), each with its config json beside it as src.convert_checkpoint writes it;
    and hf_vocab100.safetensors, HF-named weights whose word embeddings have 100 rows."""
    import numpy as np
    from safetensors.numpy import save_file

    from src.common.checkpoint_io import save_checkpoint_atomic
    from src.model.albert import AlbertConfig
    from src.model.pretraining_heads import AlbertPreTraining
    from src.model.task_heads import AlbertForSequenceClassification

    tiny = AlbertConfig.from_preset("albert_tiny", vocab_size=30000, hidden_size=32, embedding_size=16,
                                    num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
    networks = {"pre": (AlbertPreTraining, tiny), "wide": (AlbertPreTraining, tiny.replace(hidden_size=48)),
                "v1000": (AlbertPreTraining, tiny.replace(vocab_size=1000)),
                "cls": (lambda config: AlbertForSequenceClassification(config, 2), tiny)}
    for name, (build, config) in networks.items():
        network = build(config)
        save_checkpoint_atomic([{"name": p.name, "data": p} for p in network.get_parameters()],
                               str(folder / f"{name}.ckpt"))
        config.to_json_file(str(folder / f"{name}.ckpt.json"))
    save_file({"albert.embeddings.word_embeddings.weight": np.zeros((100, 16), np.float32)},
              str(folder / "hf_vocab100.safetensors"))


@pytest.fixture
def no_work(monkeypatch):
    """In-process runs: no device setup (a started MindSpore runtime cannot be reset for the next row), and any
    training, evaluation, export or prediction fails the test, since the bad input should have stopped the run
    before it."""
    import export
    import pretrain_eval
    import src.devices.device_setup
    import src.export.hf_export
    import src.predict
    import src.tasks.registry
    import src.training.finetune
    import src.training.train_loop

    def reached(*args, **kwargs):
        raise AssertionError("the run reached its work: the bad input was not caught before it")

    monkeypatch.setattr(src.devices.device_setup, "setup_device", lambda *args, **kwargs: src.devices.device_setup.Device("CPU"))
    for module, name in ((src.training.train_loop, "train"), (src.training.finetune, "_predict_rows"), (pretrain_eval, "evaluate"),
                         (export, "export_atomically"), (src.predict, "run_rows"),
                         (src.export.hf_export, "write_model_folder")):
        monkeypatch.setattr(module, name, reached)
    src.tasks.registry.squad_eval_maps.cache_clear()  # a row's damaged copy must be read, not an earlier row's files
    yield
    src.tasks.registry.squad_eval_maps.cache_clear()


# ---------------------------------------------------------------------------------------------------------- checks
def error_line(stderr: str) -> str:
    """The one line of a user error; MindSpore's own log lines ([WARNING] ...) are not the package's output."""
    lines = [line for line in stderr.splitlines() if line.strip() and not line.startswith(("[WARNING]", "[INFO]"))]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    return lines[0]


def files_under(folder: Path) -> List[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def command(entry: str) -> List[str]:
    return [entry] if entry.endswith(".py") else ["-m", entry]


def paths(fx: Path, tmp: Path, row: Row) -> Dict[str, str]:
    return {"fx": str(fx), "tmp": str(tmp), "bad": str(tmp / row.bad), "out": str(tmp / "out"),
            "assets": str(ASSETS), "spm": str(ASSETS / "tokenizer" / "albert_30k-clean.model"), "root": str(ROOT)}


@pytest.mark.parametrize("row", [pytest.param(r, id=r.id) for r in MATRIX])
def test_each_bad_input_exits_2_with_one_error_line_and_writes_nothing(row: Row, fx: Path, tmp_path: Path,
                                                                       monkeypatch, capsys, request):
    names = paths(fx, tmp_path, row)
    if row.make:
        (tmp_path / row.bad).parent.mkdir(parents=True, exist_ok=True)
        row.make(tmp_path / row.bad, fx)
        capsys.readouterr()  # what making the input printed (e.g. a corpus warning) is not the failing run's output
    argv = [token.format(**names) for token in shlex.split(row.argv)]
    before = files_under(tmp_path)
    if row.process:
        done = subprocess.run([sys.executable, *command(row.entry), *argv], cwd=ROOT, env={**ENV, **dict(row.env)},
                              capture_output=True, text=True, timeout=300)
        code, stderr = done.returncode, done.stderr
    else:
        request.getfixturevalue("no_work")
        monkeypatch.chdir(tmp_path)  # anything written relative to the working directory would show below
        code = run_cli(importlib.import_module(row.entry.removesuffix(".py")).main, argv)
        stderr = capsys.readouterr().err
    assert code == 2, stderr[-3000:]
    line = error_line(stderr)
    for fragment in row.expect:
        assert fragment.format(**names) in line, line
    assert files_under(tmp_path) == before, "the failed run left files behind"


def test_verbose_shows_the_traceback(fx, tmp_path):
    """--verbose is how a user (or a bug report) gets the traceback of the same one-line error."""
    done = subprocess.run([sys.executable, "run_classifier.py", "--output_dir", str(tmp_path / "out"), "--verbose",
                           "--train_data_file_path", str(tmp_path / "missing.mindrecord")], cwd=ROOT, env=ENV,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" in done.stderr, done.stderr[-3000:]
    assert done.stderr.rstrip().splitlines()[-1] == f"error: data not found: {tmp_path / 'missing.mindrecord'}"


def test_every_entry_point_is_in_the_matrix():
    entries = {r.entry for r in MATRIX}
    assert entries == {"run_pretrain.py", "pretrain_eval.py", "run_classifier.py", "run_race.py", "run_squad_v1.py",
                       "run_squad_v2.py", "src.create_pretraining_data", "src.create_finetune_data",
                       "src.create_squad_data", "export.py", "src.convert_checkpoint", "src.squad_postprocess",
                       "src.predict", "src.plot_metrics"}
    assert len({r.id for r in MATRIX}) == len(MATRIX)


ARGPARSE_TOOLS = ("src.predict", "src.squad_postprocess", "src.convert_checkpoint", "src.plot_metrics",
                  "src.model_summary", "src.devices.distributed_launch")


def _actions(parser) -> List:
    """The parser's actions, its subcommands' included."""
    import argparse
    found = []
    for action in parser._actions:
        found.append(action)
        if isinstance(action, argparse._SubParsersAction):
            found += [nested for sub in action.choices.values() for nested in _actions(sub)]
    return found


def test_every_number_flag_of_the_argparse_tools_is_bounded(monkeypatch):
    """The yaml-driven tools' numbers are bounded in their yaml (tests/test_config.py); the tools whose flags are
    argparse's read a number with model_utils.config's integer or real (an over-long or non-finite number is one
    line, not int()'s or float()'s), and src.predict's integers each have a range (FLAG_RANGES). A number flag
    added without either fails here."""
    import argparse

    from model_utils.config import integer, real
    from src.predict import FLAG_RANGES

    class Parsed(Exception):
        pass

    parsers = {}

    def record(self, *args, **kwargs):
        parsers.setdefault(module, self)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", record)
    for module in ARGPARSE_TOOLS:
        with pytest.raises(Parsed):
            importlib.import_module(module).main([])
    numbers = {(module, action.dest): action.type for module, parser in parsers.items() for action in _actions(parser)
               if action.type in (int, float, integer, real)}
    assert [key for key, kind in numbers.items() if kind in (int, float)] == []
    assert {dest for (module, dest), kind in numbers.items() if kind is integer} == set(FLAG_RANGES)
    assert ("src.squad_postprocess", "na_prob_thresh") in numbers
