"""Accuracy cost of the low-precision serving paths, measured on real dev sets: float32, bfloat16 and int8, in
this package's process, ONNX Runtime and OpenVINO.

    python benchmarks/bench_accuracy.py --workdir WORK [--assets ../shared/assets] [--tasks mrpc,cola,squad]
        [--init_checkpoint albert_base_v2.ckpt] [--set KEY=VALUE ...] [--epochs 3] [--squad_epochs 2]
        [--learning_rate 1e-4] [--squad_learning_rate 2e-4] [--train_batch_size 32] [--seq_length 128]
        [--squad_seq_length 384] [--max_train_rows N] [--max_dev_rows N] [--batch_size 32] [--threads 0]
        [--paths fp32,bf16,int8,ckpt_int8,ov_bf16,ov_f32,ov_int8,ov_int8_asym] [--calibration_rows 300]
        [--output results.json]

Each task goes the way a user goes, with the package's own tools, each in its own process:

1. data: src.create_finetune_data (MRPC train/dev.tsv; CoLA in_domain_train/in_domain_dev.tsv) or
   src.create_squad_data (SQuAD v1.1: trained on dev-v1.1.part1, evaluated on the real questions of dev-v1.1.part2,
   the other half of the official dev set: no training set is among the assets);
2. fine-tuning: run_classifier.py / run_squad_v1.py, which also evaluate the run's checkpoint on the dev data;
3. export.py of that checkpoint as the paths need it: --file_format ONNX --quantize int8 (int8), --file_format ONNX
   (ov_bf16, ov_f32) and --file_format ONNX --quantize int8 --engine openvino calibrated on the first
   --calibration_rows rows of the training MindRecord (ov_int8: NNCF's int8 OpenVINO IR; ov_int8_asym: the same
   with --int8_activations asymmetric);
4. the dev set as src.predict requests, answered on each path of --paths (PATHS): the .ckpt in float32 (fp32, the
   reference, always run), the .ckpt with --precision bfloat16 (bf16) and with --precision int8 (ckpt_int8), the int8
   .onnx on ONNX Runtime (int8), the float32 .onnx on OpenVINO with the precision hint bfloat16 (ov_bf16, OpenVINO's
   default on CPUs with AMX or AVX512_BF16) and float32 (ov_f32), and the int8 IRs on OpenVINO (ov_int8,
   ov_int8_asym; the parts left float with the bfloat16 hint where the CPU has it, else float32).

Reported per task: the task's metrics on each path (MRPC accuracy and F1, CoLA MCC, SQuAD EM and F1 by the official
v1.1 rules of src.tasks.squad_metrics; all in percent), their deltas from float32, the share of predictions equal to
float32's (labels; SQuAD: identical answer strings) and the largest |logit| difference from float32 (classifier:
every dev row; SQuAD: the start/end logits of the answerable positions of the first --squad_logit_rows features, as
src.predict's answers carry no logits). The float32 metrics are also held against the fine-tuning run's own
evaluation. The answers of every path stay in WORK/<task>/answers_<path>.jsonl, one per dev example in file order.

Without --init_checkpoint the network starts from random weights at the size of SCRATCH_NET (public weights cannot
be downloaded everywhere): modest scores, the point being the deltas. With --init_checkpoint (e.g. albert-base-v2
from src.conversion.convert_checkpoint) the network is the checkpoint's and SCRATCH_NET is not applied; --set applies
either way. bf16 and ov_bf16 are skipped, with their reason, on CPUs without native bfloat16 dot products (bf16 also
without the compiled kernels), ckpt_int8 without the kernels' exact int8 products (VNNI or AMX-INT8), the OpenVINO paths
without openvino (ov_int8, ov_int8_asym: or nncf) installed.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

import bench_common as common
from bench_common import ROOT, UserError, WorkerError

PROBE_FLAG = "--probe"  # internal: `bench_accuracy.py --probe SPEC.json` computes SQuAD logits in its own process
PATHS = ("fp32", "bf16", "int8", "ckpt_int8", "ov_bf16", "ov_f32", "ov_int8", "ov_int8_asym")
OPENVINO_INT8 = ("ov_int8", "ov_int8_asym")  # NNCF's IRs: symmetric activations (export.py's default), asymmetric
PATH_TEXT = {"fp32": "src.predict on the .ckpt, float32", "bf16": "src.predict on the .ckpt, --precision bfloat16",
             "int8": "src.predict on export.py --file_format ONNX --quantize int8 (ONNX Runtime)",
             "ckpt_int8": "src.predict on the .ckpt, --precision int8 (weights quantized at load per output channel, "
                          "inputs per row)",
             "ov_bf16": "src.predict --engine openvino --precision bfloat16 on export.py --file_format ONNX",
             "ov_f32": "src.predict --engine openvino --precision float32 on export.py --file_format ONNX",
             "ov_int8": "src.predict on export.py --file_format ONNX --quantize int8 --engine openvino (NNCF, "
                        "symmetric activations, calibrated on the training MindRecord's first --calibration_rows "
                        "rows), --precision bfloat16 where the CPU has it",
             "ov_int8_asym": "the same with export.py --int8_activations asymmetric (NNCF's MIXED preset)"}
# The network trained from scratch (no --init_checkpoint): big enough to learn something in minutes on 2 cores.
SCRATCH_NET = {"hidden_size": 256, "embedding_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4,
               "intermediate_size": 1024, "hidden_dropout_prob": 0.1}
LOG_TAIL = 2000


@dataclass(frozen=True)
class Glue:
    """A GLUE classification task of the assets: its folder, files, metrics and run_classifier's assessment."""
    folder: str
    train: str
    dev: str
    metrics: Tuple[str, ...]
    assessment: str


GLUE = {"mrpc": Glue("MRPC", "train.tsv", "dev.tsv", ("accuracy", "f1"), "f1"),
        "cola": Glue("CoLA", "in_domain_train.tsv", "in_domain_dev.tsv", ("mcc",), "mcc")}
SQUAD_FILES = ("squad/v1.1/dev-v1.1.part1_bloomsbury.json", "squad/v1.1/dev-v1.1.part2_bloomsbury.json")
SQUAD_METRICS = ("exact_match", "f1")
TASK_NAMES = (*GLUE, "squad")


# ------------------------------------------------------------------------------------------------ command line
def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = common.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False,
                                   formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("--workdir", required=True, help="new or empty folder for data, runs, exports and answers")
    parser.add_argument("--assets", default=str(ROOT.parent / "shared" / "assets"),
                        help="folder with glue/, squad/ and tokenizer/ (the shared test assets' layout)")
    parser.add_argument("--tasks", default=",".join(TASK_NAMES), help=f"comma-separated: {', '.join(TASK_NAMES)}")
    parser.add_argument("--spm_model_file", default="", help="default: ASSETS/tokenizer/albert_30k-clean.model")
    parser.add_argument("--init_checkpoint", default="",
                        help="pretrained weights to fine-tune from (src.convert_checkpoint or run_pretrain.py)")
    parser.add_argument("--network", default="albert_base_v2", help="preset the from-scratch network starts from")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="network config override, e.g. --set num_hidden_layers=2 (repeatable)")
    parser.add_argument("--epochs", type=int, default=3, help="fine-tuning epochs of the classifier tasks")
    parser.add_argument("--squad_epochs", type=int, default=2)
    parser.add_argument("--learning_rate", type=float, default=1e-4, help="classifier tasks (albert-base: 2e-5)")
    parser.add_argument("--squad_learning_rate", type=float, default=2e-4, help="SQuAD (albert-base: 5e-5)")
    parser.add_argument("--train_batch_size", type=int, default=32)
    parser.add_argument("--seq_length", type=int, default=128, help="classifier tasks")
    parser.add_argument("--squad_seq_length", type=int, default=384)
    parser.add_argument("--max_train_rows", type=int, default=0, help="train on the first N rows/questions (0: all)")
    parser.add_argument("--max_dev_rows", type=int, default=0, help="evaluate the first N rows/questions (0: all)")
    parser.add_argument("--batch_size", type=int, default=32, help="rows per call when evaluating (and of the export)")
    parser.add_argument("--squad_logit_rows", type=int, default=256, help="SQuAD features whose logits are compared")
    parser.add_argument("--threads", type=int, default=0, help="src.predict --threads (0: every usable CPU)")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help=f"comma-separated serving paths to compare with fp32 (always run): {', '.join(PATHS)}")
    parser.add_argument("--calibration_rows", type=int, default=300,
                        help="ov_int8, ov_int8_asym: export.py --calibration_rows (training rows NNCF calibrates on)")
    parser.add_argument("--device_target", default="auto", help="fine-tuning's device; evaluation runs on CPU")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--output", default="", help="write the report as JSON here")
    args = parser.parse_args(argv)
    check_args(args)
    return args


def check_args(args: argparse.Namespace) -> None:
    """Everything decidable from the flags, before any work."""
    common.check_output(args.output)
    args.tasks = list(dict.fromkeys(part.strip() for part in args.tasks.split(",") if part.strip()))
    if not args.tasks or any(task not in TASK_NAMES for task in args.tasks):
        raise UserError(f"--tasks takes a comma-separated list of {', '.join(TASK_NAMES)}, got {','.join(args.tasks)}")
    paths = {part.strip() for part in args.paths.split(",") if part.strip()}
    if not paths <= set(PATHS):
        raise UserError(f"--paths takes a comma-separated list of {', '.join(PATHS)}, got {args.paths}")
    args.paths = [path for path in PATHS if path in paths or path == "fp32"]
    for name, low in (("epochs", 1), ("squad_epochs", 1), ("train_batch_size", 1), ("seq_length", 16),
                      ("squad_seq_length", 64), ("max_train_rows", 0), ("max_dev_rows", 0), ("batch_size", 1),
                      ("squad_logit_rows", 1), ("threads", 0), ("calibration_rows", 1)):
        if getattr(args, name) < low:
            raise UserError(f"--{name} must be >= {low}, got {getattr(args, name)}")
    # absolute: the package's tools run from the repository root, the user's paths mean what they do where they are
    args.assets = Path(os.path.abspath(args.assets))
    args.spm_model_file = os.path.abspath(args.spm_model_file or args.assets / "tokenizer" / "albert_30k-clean.model")
    args.init_checkpoint = os.path.abspath(args.init_checkpoint) if args.init_checkpoint else ""
    args.workdir = os.path.abspath(args.workdir)
    needed = [Path(args.spm_model_file)] + [args.assets / "glue" / GLUE[t].folder for t in args.tasks if t in GLUE]
    needed += [args.assets / name for name in SQUAD_FILES] if "squad" in args.tasks else []
    needed += [Path(args.init_checkpoint)] if args.init_checkpoint else []
    for path in needed:
        if not path.exists():
            raise UserError(f"not found: {path}")
    workdir = Path(args.workdir)
    if workdir.exists() and (not workdir.is_dir() or any(workdir.iterdir())):
        raise UserError(f"--workdir must be a new or empty folder: {workdir}")
    args.net = {**({} if args.init_checkpoint else SCRATCH_NET), **common.parse_overrides(args.overrides, "--set")}


# ------------------------------------------------------------------------------------------------ running tools
def run_tool(command: List[str], log: Path) -> float:
    """Run one of the package's entry points from the repository root, its output kept in `log`; wall seconds.
    A failure is a WorkerError quoting the end of the log."""
    start = time.perf_counter()
    with open(log, "w", encoding="utf-8") as out:
        code = subprocess.run([sys.executable, *command], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT).returncode
    if code:
        tail = log.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL:]
        raise WorkerError(f"{' '.join(command[:2])} failed (exit code {code}; log {log}):\n{tail}")
    return time.perf_counter() - start


def flag_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def network_flags(args: argparse.Namespace) -> List[str]:
    """run_*.py flags of the network: the pretrained checkpoint, or the from-scratch preset; then --set."""
    flags = ["--load_pretrain_checkpoint_path", args.init_checkpoint] if args.init_checkpoint \
        else ["--albert_network", args.network]
    for key, value in args.net.items():
        flags += [f"--net_cfg.{key}", flag_value(value)]
    return flags


def newest_checkpoint(folder: Path, task: str) -> str:
    from src.training.checkpoints import list_checkpoints

    found = list_checkpoints(str(folder / "checkpoints"), f"albert_{task}")
    if not found:
        raise WorkerError(f"the fine-tuning run wrote no albert_{task} checkpoint in {folder / 'checkpoints'}")
    return found[-1][1]


def fine_tune(args: argparse.Namespace, script: str, folder: Path, data: Dict[str, Path], epochs: int,
              learning_rate: float, extra: List[str]) -> Dict[str, Any]:
    """Fine-tune and evaluate with the task's run_*.py; its checkpoint, evaluation and first/last loss."""
    out = folder / "finetune"
    seconds = run_tool([script, "--output_dir", str(out), "--device_target", args.device_target,
                        "--train_data_file_path", str(data["train"]), "--eval_data_file_path", str(data["dev"]),
                        "--train_batch_size", str(args.train_batch_size), "--eval_batch_size", str(args.batch_size),
                        "--epoch_num", str(epochs), "--optimizer_cfg.AdamWeightDecay.learning_rate",
                        str(learning_rate), "--seed", str(args.seed), "--log_steps", "10",
                        *network_flags(args), *extra], folder / "finetune.log")
    losses = [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines() if line]
    evaluation = json.loads((out / "eval" / "eval_results.json").read_text())
    for key in ("data", "checkpoint"):  # no machine's path in the report: relative to --workdir
        evaluation[key] = os.path.relpath(evaluation[key], folder.parent)
    return {"seconds": round(seconds, 1), "loss_first": losses[0], "loss_last": losses[-1], "eval": evaluation,
            "network": json.loads((out / "albert_config.json").read_text())}


# The exports of the paths: model key -> (file name, export.py flags, suffix); a path's model is MODEL_OF[path].
EXPORTS = {"onnx_int8": ("model_int8", ["--quantize", "int8"], ".onnx"), "onnx": ("model", [], ".onnx"),
           "ov_int8": ("model_ov_int8", ["--quantize", "int8", "--engine", "openvino"], ".xml"),
           "ov_int8_asym": ("model_ov_int8_asym", ["--quantize", "int8", "--engine", "openvino", "--int8_activations",
                                                   "asymmetric"], ".xml")}
MODEL_OF = {"fp32": "ckpt", "bf16": "ckpt", "ckpt_int8": "ckpt", "int8": "onnx_int8", "ov_bf16": "onnx",
            "ov_f32": "onnx", **{path: path for path in OPENVINO_INT8}}


def export_models(args: argparse.Namespace, task: str, checkpoint: str, seq: int, folder: Path, train: Path,
                  paths: Sequence[str]) -> Tuple[Dict[str, str], Dict[str, float]]:
    """The checkpoint and export.py's files that `paths` serve, fixed at --batch_size rows of `seq` tokens (the
    OpenVINO int8 IR calibrated on the first --calibration_rows rows of `train`); the export seconds."""
    models, seconds = {"ckpt": checkpoint}, {}
    for key in dict.fromkeys(MODEL_OF[path] for path in paths if MODEL_OF[path] != "ckpt"):
        name, flags, suffix = EXPORTS[key]
        if key in OPENVINO_INT8:
            flags = [*flags, "--calibration_file", str(train), "--calibration_rows", str(args.calibration_rows)]
        seconds[key] = round(run_tool(
            ["export.py", "--config_path", f"task_{task}_config.yaml", "--export_ckpt_file", checkpoint,
             "--export_file_name", str(folder / name), "--export_seq_length", str(seq), "--export_batch_size",
             str(args.batch_size), "--file_format", "ONNX", "--device_target", "CPU", *flags],
            folder / f"export_{key}.log"), 1)
        models[key] = str(folder / name) + suffix
    return models, seconds


def path_flags(path: str, models: Dict[str, str], seq: int) -> List[str]:
    """src.predict's model flags of one serving path."""
    bf16 = path in ("bf16", "ov_bf16") or (path in OPENVINO_INT8 and not bf16_missing())
    precision = "int8" if path == "ckpt_int8" else "bfloat16" if bf16 else "float32"
    if path in ("fp32", "bf16", "ckpt_int8"):
        return ["--model", models["ckpt"], "--seq_length", str(seq), "--precision", precision, "--device_target",
                "CPU"]
    if path == "int8":
        return ["--model", models["onnx_int8"]]
    return ["--model", models[MODEL_OF[path]], "--engine", "openvino", "--precision", precision]


def predict_paths(args: argparse.Namespace, task: str, requests: Path, models: Dict[str, str], seq: int,
                  paths: Sequence[str], extra: List[str]) -> Dict[str, float]:
    """Answer the requests on each path with src.predict; its answers land in answers_<path>.jsonl; seconds."""
    seconds = {}
    for path in paths:
        folder = requests.parent
        seconds[path] = round(run_tool(
            ["-m", "src.predict", "--task", task, "--spm_model_file", args.spm_model_file, "--input_file",
             str(requests), "--output_file", str(folder / f"answers_{path}.jsonl"), "--batch_size",
             str(args.batch_size), "--threads", str(args.threads), *path_flags(path, models, seq), *extra],
            folder / f"predict_{path}.log"), 1)
    return seconds


def read_answers(folder: Path, path: str) -> List[Dict[str, Any]]:
    with open(folder / f"answers_{path}.jsonl", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines if line.strip()]


def write_jsonl(path: Path, rows: Sequence[Dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------------------------ scoring
def percent(values: Dict[str, float]) -> Dict[str, float]:
    return {key: 100.0 * value for key, value in values.items()}


def classifier_metrics(names: Sequence[str], labels: Sequence[int], predictions: Sequence[int]) -> Dict[str, float]:
    """The task's GLUE metrics in percent (src.tasks.assessment_method)."""
    from src.tasks import assessment_method as am

    functions: Dict[str, Callable[[Sequence[int], Sequence[int]], float]] = {
        "accuracy": am.accuracy, "f1": am.f1, "mcc": am.matthews_correlation}
    return percent({name: functions[name](labels, predictions) for name in names})


def compare_paths(metrics: Dict[str, Dict[str, float]], agreement: Dict[str, float],
                  logit_diff: Dict[str, float]) -> Dict[str, Dict[str, Any]]:
    """Per path: metrics, their deltas from fp32, agreement with fp32 and the max |logit difference|."""
    reference = metrics["fp32"]
    return {path: {"metrics": values, "delta": {key: values[key] - reference[key] for key in values},
                   "agreement": agreement.get(path, 1.0), "max_abs_logit_diff": logit_diff.get(path, 0.0)}
            for path, values in metrics.items()}


def score_classifier(glue: Glue, label_names: List[str], labels: List[int],
                     answers: Dict[str, List[Dict[str, Any]]]) -> Dict[str, Dict[str, Any]]:
    predictions = {path: [label_names.index(row["label"]) for row in rows] for path, rows in answers.items()}
    logits = {path: np.array([row["logits"] for row in rows]) for path, rows in answers.items()}
    metrics = {path: classifier_metrics(glue.metrics, labels, predicted) for path, predicted in predictions.items()}
    agreement = {path: float(np.mean(np.equal(predicted, predictions["fp32"])))
                 for path, predicted in predictions.items()}
    diff = {path: float(np.abs(values - logits["fp32"]).max()) for path, values in logits.items()}
    return compare_paths(metrics, agreement, diff)


def score_squad(dataset: List[dict], answers: Dict[str, List[Dict[str, Any]]],
                logit_diff: Dict[str, float]) -> Dict[str, Dict[str, Any]]:
    """Official v1.1 EM/F1 of each path; agreement: the share of answer strings identical to fp32's."""
    from src.tasks.squad_metrics import evaluate_v1

    texts = {path: {row["id"]: row["answer"] for row in rows} for path, rows in answers.items()}
    metrics = {path: evaluate_v1(dataset, predicted) for path, predicted in texts.items()}
    agreement = {path: float(np.mean([predicted[qid] == texts["fp32"][qid] for qid in predicted]))
                 for path, predicted in texts.items()}
    return compare_paths(metrics, agreement, logit_diff)


# ------------------------------------------------------------------------------------------------ the tasks
def first_tsv_rows(source: Path, target: Path, rows: int, header: bool) -> Path:
    """The first `rows` data lines of a GLUE tsv (all with 0), after its header line if it has one."""
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    target.write_text("".join(lines[:rows + int(header)] if rows else lines), encoding="utf-8")
    return target


def glue_data(args: argparse.Namespace, task: str, folder: Path) -> Dict[str, Path]:
    """train/dev MindRecord of the (first rows of the) task's files, by src.create_finetune_data; the dev tsv."""
    from src.create_finetune_data import main as create
    from src.data.tsv_tasks import TSV_TASKS

    glue = GLUE[task]
    header = TSV_TASKS[task].train_dev.header is not None
    out: Dict[str, Path] = {}
    for split, name, rows in (("train", glue.train, args.max_train_rows), ("dev", glue.dev, args.max_dev_rows)):
        out[f"{split}_tsv"] = first_tsv_rows(args.assets / "glue" / glue.folder / name, folder / f"{split}.tsv",
                                             rows, header)
        out[split] = folder / f"{split}.mindrecord"
        create(["--task_name", task, "--data_dir", str(args.assets / "glue" / glue.folder), "--input_file",
                str(out[f"{split}_tsv"]), "--split", split, "--output_file", str(out[split]),
                "--spm_model_file", args.spm_model_file, "--max_seq_length", str(args.seq_length)])
    return out


def run_classifier_task(args: argparse.Namespace, task: str, folder: Path, paths: Sequence[str]) -> Dict[str, Any]:
    from src.create_finetune_data import read_tsv_examples
    from src.data.tsv_tasks import label_list

    glue = GLUE[task]
    data = glue_data(args, task, folder)
    examples = list(read_tsv_examples(task, data["dev_tsv"], "dev"))
    label_names = label_list(task)
    requests = write_jsonl(folder / "requests.jsonl", [
        {"id": example.guid, "text_a": example.text_a, **({"text_b": example.text_b} if example.text_b else {})}
        for example in examples])
    run = fine_tune(args, "run_classifier.py", folder, data, args.epochs, args.learning_rate,
                    ["--num_class", str(len(label_names)), "--assessment_method", glue.assessment])
    checkpoint = newest_checkpoint(folder / "finetune", "classifier")
    models, export_s = export_models(args, "classifier", checkpoint, args.seq_length, folder, data["train"], paths)
    seconds = predict_paths(args, "classifier", requests, models, args.seq_length, paths,
                            ["--labels", ",".join(label_names)])
    answers = {path: read_answers(folder, path) for path in paths}
    labels = [label_names.index(example.label) for example in examples]
    results = score_classifier(glue, label_names, labels, answers)
    majority = max(np.mean(np.equal(labels, label)) for label in range(len(label_names)))
    return {"dev_file": f"glue/{glue.folder}/{glue.dev}", "dev_examples": len(examples),
            "train_rows": sum(1 for _ in read_tsv_examples(task, data["train_tsv"], "train")),
            "metric_names": list(glue.metrics), "majority_class_accuracy": 100.0 * float(majority),
            "fine_tuning": run, "finetune_eval_percent": percent({k: run["eval"][k] for k in glue.metrics}),
            "fp32_logits_max_abs": float(np.abs([row["logits"] for row in answers["fp32"]]).max()),
            "export_s": export_s, "predict_s": seconds, "paths": results}


def first_questions(source: Path, target: Path, questions: int) -> List[dict]:
    """A SQuAD json with the first `questions` questions of `source` (all with 0); its `data` list."""
    data = json.loads(source.read_text(encoding="utf-8"))
    if questions:
        kept, left = [], questions
        for article in data["data"]:
            paragraphs = []
            for paragraph in article["paragraphs"]:
                if left > 0:
                    paragraphs.append({**paragraph, "qas": paragraph["qas"][:left]})
                    left -= len(paragraphs[-1]["qas"])
            if paragraphs:
                kept.append({**article, "paragraphs": paragraphs})
        data["data"] = kept
    target.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return data["data"]


def squad_data(args: argparse.Namespace, folder: Path) -> Tuple[Dict[str, Path], List[dict]]:
    """Training features of part1, evaluation features of part2 (src.create_squad_data); part2's data list."""
    from src.create_squad_data import main as create

    out: Dict[str, Path] = {}
    dataset: List[dict] = []
    for split, name, rows in (("train", SQUAD_FILES[0], args.max_train_rows), ("dev", SQUAD_FILES[1],
                                                                             args.max_dev_rows)):
        out[f"{split}_json"] = folder / f"{split}.json"
        dataset = first_questions(args.assets / name, out[f"{split}_json"], rows)
        out[split] = folder / f"{split}.mindrecord"
        create(["--input_file", str(out[f"{split}_json"]), "--output_file", str(out[split]), "--is_training",
                str(split == "train").lower(), "--spm_model_file", args.spm_model_file, "--max_seq_length",
                str(args.squad_seq_length)])
    return out, dataset


def probe_squad_logits(args: argparse.Namespace, folder: Path, data: Path, models: Dict[str, str],
                       paths: Sequence[str]) -> Dict[str, float]:
    """Max |start/end logit - fp32's| over the answerable positions of the first --squad_logit_rows features."""
    logits = {}
    for path in paths:
        spec = {"predict": ["--task", "squad_v1", "--spm_model_file", args.spm_model_file, "--threads",
                            str(args.threads), *path_flags(path, models, args.squad_seq_length)],
                "data": str(data), "rows": args.squad_logit_rows, "output": str(folder / f"logits_{path}.npz")}
        spec_file = folder / f"probe_{path}.json"
        spec_file.write_text(json.dumps(spec), encoding="utf-8")
        run_tool([str(Path(__file__).resolve()), PROBE_FLAG, str(spec_file)], folder / f"probe_{path}.log")
        logits[path] = np.load(spec["output"])
    answerable = logits["fp32"]["p_mask"] == 0
    return {path: float(np.abs(values["logits"] - logits["fp32"]["logits"])[:, answerable].max())
            for path, values in logits.items()}


def run_squad_task(args: argparse.Namespace, folder: Path, paths: Sequence[str]) -> Dict[str, Any]:
    data, dataset = squad_data(args, folder)
    requests = write_jsonl(folder / "requests.jsonl", [
        {"id": qa["id"], "question": qa["question"], "context": paragraph["context"]}
        for article in dataset for paragraph in article["paragraphs"] for qa in paragraph["qas"]])
    run = fine_tune(args, "run_squad_v1.py", folder, data, args.squad_epochs, args.squad_learning_rate,
                    ["--eval_json_path", str(data["dev_json"])])
    checkpoint = newest_checkpoint(folder / "finetune", "squad_v1")
    models, export_s = export_models(args, "squad_v1", checkpoint, args.squad_seq_length, folder, data["train"], paths)
    seconds = predict_paths(args, "squad_v1", requests, models, args.squad_seq_length, paths, [])
    answers = {path: read_answers(folder, path) for path in paths}
    diff = probe_squad_logits(args, folder, data["dev"], models, paths)
    train = json.loads(data["train_json"].read_text(encoding="utf-8"))["data"]
    return {"dev_file": SQUAD_FILES[1], "train_file": SQUAD_FILES[0], "dev_examples": len(answers["fp32"]),
            "train_rows": sum(len(p["qas"]) for article in train for p in article["paragraphs"]),
            "metric_names": list(SQUAD_METRICS), "fine_tuning": run,
            "finetune_eval_percent": {key: run["eval"][key] for key in SQUAD_METRICS},
            "logit_rows": args.squad_logit_rows, "export_s": export_s, "predict_s": seconds,
            "paths": score_squad(dataset, answers, diff)}


# ------------------------------------------------------------------------------------------------ the probe
def probe_main(spec_file: str) -> int:
    """In its own process: src.predict's model of one path run on the first rows of the SQuAD eval MindRecord,
    as src.predict runs it; saves the start/end logits [2, rows, seq] and the rows' p_mask."""
    from mindspore.mindrecord import FileReader

    from src import predict
    from src.serving.engines import load_runner, model_shape, rows_per_call, run_rows
    from src.serving.requests import load_tokenizer
    from src.tasks.registry import TASKS

    spec = json.loads(Path(spec_file).read_text(encoding="utf-8"))
    args = predict.parse_args(spec["predict"])
    predict.check_args(args)
    shape = model_shape(args)
    runner = load_runner(args, shape, load_tokenizer(args, shape.vocab))
    reader = FileReader(spec["data"])
    rows = [row for _, row in zip(range(spec["rows"]), reader.get_next())]
    reader.close()
    outputs = run_rows(runner, rows, TASKS[args.task].head_inputs, rows_per_call(args, shape),
                       fixed=shape.batch is not None)
    np.savez(spec["output"], logits=np.stack(outputs[:2]), p_mask=np.stack([row["p_mask"] for row in rows]))
    return 0


# ------------------------------------------------------------------------------------------------ report
def bf16_missing() -> str:
    """Empty where the CPU has native bfloat16 dot products, else why not (one line)."""
    from src.model import cpu_kernels

    return cpu_kernels.bf16_support()[1] if not cpu_kernels.bf16_support()[0] else ""


def skip_reasons(paths: Sequence[str]) -> Dict[str, str]:
    """Why each of `paths` that cannot run here is skipped (one line each)."""
    import importlib.util

    from src.model import cpu_kernels

    reasons = {}
    for path in paths:
        needs = ("openvino", "nncf") if path in OPENVINO_INT8 else ("openvino",) if path.startswith("ov_") else ()
        missing = [name for name in needs if importlib.util.find_spec(name) is None]
        if missing:
            reasons[path] = f"not installed: {', '.join(missing)} (requirements-dev.txt)"
        elif path in ("bf16", "ov_bf16") and bf16_missing():
            reasons[path] = bf16_missing()
        elif path in ("bf16", "ckpt_int8") and not cpu_kernels.available():
            reasons[path] = f"the compiled CPU kernels are unavailable: {cpu_kernels.status()}"
        elif path == "ckpt_int8" and not cpu_kernels.int8_support()[0]:
            reasons[path] = cpu_kernels.int8_support()[1]
    return reasons


def frameworks() -> Dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("mindspore", "onnxruntime", "onnx", "openvino", "nncf", "numpy"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "not installed"
    return found


def print_table(tasks: Dict[str, Dict[str, Any]], others: Sequence[str]) -> None:
    """task | metric | fp32 | each other path: score (delta) | agreement | max |logit diff|, paths in `others` order
    ("skipped" where a path could not run)."""
    print(f"\ntask | metric | fp32 | {' | '.join(f'{p} (delta)' for p in others)} | agreement "
          f"{' / '.join(others)} | max |logit diff| {' / '.join(others)}")
    for task, result in tasks.items():
        paths = result["paths"]

        def cell(path: str, metric: str) -> str:
            if path not in paths:
                return "skipped"
            return f"{paths[path]['metrics'][metric]:.2f} ({paths[path]['delta'][metric]:+.2f})"

        def joined(key: str, fmt: str) -> str:
            return " / ".join(format(paths[p][key], fmt) if p in paths else "-" for p in others)

        for metric in result["metric_names"]:
            print(f"{task} | {metric} | {paths['fp32']['metrics'][metric]:.2f} | "
                  f"{' | '.join(cell(p, metric) for p in others)} | {joined('agreement', '.4f')} | "
                  f"{joined('max_abs_logit_diff', '.3g')}")


def main(argv: List[str]) -> int:
    if argv[:1] == [PROBE_FLAG]:
        return probe_main(argv[1])
    args = parse_args(argv)
    started = time.perf_counter()
    from src.model import cpu_kernels

    # with the commit and CPU measured, and the oneDNN version and ISA the kernels' paths ran on
    machine = {**common.environment([]), "frameworks": frameworks(), "kernels": cpu_kernels.status()}
    skipped = skip_reasons(args.paths)
    paths = [path for path in args.paths if path not in skipped]
    for path, reason in skipped.items():
        print(f"{path} skipped: {reason}", flush=True)
    workdir = Path(args.workdir)
    tasks: Dict[str, Dict[str, Any]] = {}
    for task in args.tasks:
        folder = workdir / task
        folder.mkdir(parents=True)
        print(f"[{task}] data, fine-tuning, exports, {len(paths)} evaluation path(s) ...", flush=True)
        task_start = time.perf_counter()
        tasks[task] = run_squad_task(args, folder, paths) if task == "squad" else \
            run_classifier_task(args, task, folder, paths)
        tasks[task]["seconds"] = round(time.perf_counter() - task_start, 1)
        print(f"[{task}] done in {tasks[task]['seconds']:.0f} s", flush=True)
    print_table(tasks, [path for path in args.paths if path != "fp32"])
    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()
                if key not in ("workdir", "output", "assets", "spm_model_file")}
    report = {"benchmark": "accuracy_low_precision", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "metric_scale": "percent", "settings": settings,
              "paths": {path: PATH_TEXT[path] for path in paths}, "skipped": skipped,
              "bf16_skipped": skipped.get("bf16", ""), "environment": machine,
              "seconds_total": round(time.perf_counter() - started, 1), "tasks": tasks}
    common.write_json(args.output, report)
    print(f"total {report['seconds_total']:.0f} s" + (f"; wrote {args.output}" if args.output else ""))
    return 0


if __name__ == "__main__":
    sys.exit(common.run_cli_with_workers(main))
