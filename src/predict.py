"""Run a fine-tuned ALBERT on raw text: sentence (pair) labels, RACE choices or SQuAD answers.

One request is given by flags; a file of requests (--input_file) is answered in batches.

    python -m src.predict --model out/albert_mrpc.mindir --task classifier --spm_model_file 30k-clean.model \
        --text_a "The cat sat." --text_b "A cat was sitting." [--labels not_equivalent,equivalent]
    python -m src.predict --model out/albert_race.mindir --task race --spm_model_file 30k-clean.model \
        --article "..." --question "The writer thinks _ ." --option "..." --option "..." --option "..." --option "..."
    python -m src.predict --model out/albert_squad_v1.onnx --task squad_v1 --spm_model_file 30k-clean.model \
        --question "Who wrote it?" --context "It was written by ..."
    python -m src.predict --model output/mrpc/checkpoints/albert_classifier-800.ckpt --task classifier \
        --spm_model_file 30k-clean.model --input_file requests.jsonl --output_file answers.jsonl --batch_size 32

The file's suffix picks the engine:
- .mindir (export.py): MindSpore, ms.load + nn.GraphCell. The portable path: any MindSpore 2.x loads it.
- .onnx (export.py --file_format ONNX, also --quantize int8): ONNX Runtime (ORT_ENABLE_ALL but SLOW_FUSIONS, CPU;
  needs `pip install onnxruntime onnx`, not part of requirements.txt). The process never imports MindSpore: on CPU the
  fastest at batch 1, in a fraction of the memory; int8 files 2.5-2.8x faster again. With --engine openvino:
  OpenVINO's CPU plugin instead (`pip install openvino`), --precision its precision hint.
- .xml (export.py --quantize int8 --engine openvino: NNCF's int8 as OpenVINO IR, the .bin beside it): OpenVINO's CPU
  plugin (the suffix decides: no --engine needed); --precision is the hint for the parts left float.
- .ckpt (a run_*.py checkpoint): the task head built in this process as fine-tuning evaluation builds it, so on CPU
  in float32 it runs this package's compiled kernels (built with g++ on first use): the fastest for batches on CPU,
  but only where this repository is installed (nothing to ship). --config_path is the task yaml it was fine-tuned
  with (default: the shipped one; the classifier's class count comes from the checkpoint), --seq_length the feature
  length (default: the max_seq_length of its fine-tuning data, which a run records in its checkpoints, else 128),
  --precision bfloat16 the kernels' products in bfloat16 (CPUs with AVX512_BF16 or AMX-BF16), --precision int8
  the dense layers' in int8 (weights quantized per output channel and packed for oneDNN once at load, inputs per
  row on each call; CPUs whose oneDNN int8 matmul is AMX-INT8 or VNNI) and, on AMX, attention's in bfloat16
  (float32 elsewhere, faster there).

--input_file holds JSON lines, one request per line with the keys of the flags (classifier: text_a and optionally
text_b; race: article, question and options, a list; squad_v1/v2: question and context) and optionally an id;
classifier and race requests may carry their gold answer as `label` or `gold` (a label name or index; RACE: A-D or
0-3), which the model never sees: it is echoed as `gold` in the answer, and the accuracy over such requests is printed
on stderr at the end. The answers are JSON lines in the input's order, each with the request's id (else its line
number), written to
--output_file (whole, or not at all; an existing one only with --overwrite, never the requests or the model, and one
that appears while it runs is kept) or stdout. Requests are answered
--batch_size rows at a time. The file is
read twice, streamed: every request is checked before the model is loaded, then CHUNK_REQUESTS at a time are
answered, so memory does not grow with the file. Caps: MAX_REQUEST_BYTES (1 MiB) per line, --max_windows (256)
SQuAD windows per request, and a range for every integer flag (FLAG_RANGES).

Text becomes features exactly as the data tools make them (src/data/features.py) at the sequence length the model
was exported with; the task's inputs come from the task registry (src/tasks/registry.py); SQuAD answers come from
src/tasks/squad_answers.py, as in evaluation. One request prints one JSON object on stdout. The engines, requests
and answers live in src/serving/; this module holds the flags and their checks.
"""
import argparse
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.config import ArgumentParser, boolean, integer, real
from model_utils.errors import UserError, run_cli
from src.common.atomic_files import atomic_path, check_outputs, claimed_folder_of
from src.serving.answers import ANSWERS, MAX_WINDOWS, Accuracy, write_answers
from src.serving.engines import (DEFAULT_BATCH, DEFAULT_SEQ, SUFFIXES, ModelShape, load_runner, model_shape,
                                 rows_per_call, run_rows)
from src.serving.requests import (check_task_flags, flag_request, load_tokenizer, read_requests, survey_requests,
                                  warn_single_sentences)
from src.tasks.registry import TASKS

# The integer flags' ranges: the upper bounds stop an absurd value before a model, a thread pool or a batch is
# allocated (8192 positions: 16 times the position table of every published ALBERT).
FLAG_RANGES = {"batch_size": (0, 65536), "threads": (0, 1024), "seq_length": (8, 8192), "max_qa_length": (1, 8192),
               "doc_stride": (1, 8192), "max_query_length": (1, 8192), "max_windows": (1, 65536),
               "n_best_size": (1, 512), "max_answer_length": (1, 8192)}
ZERO_IS_DEFAULT = ("seq_length",)  # the others take 0 in their range
# SQuAD's answer settings: the flag when given, else the task yaml's (--config_path's, else the shipped one).
ANSWER_SETTINGS = ("n_best_size", "max_answer_length", "null_score_diff_threshold")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--model", required=True,
                        help=".mindir (MindSpore), .onnx (ONNX Runtime) or OpenVINO IR .xml (export.py --quantize "
                             "int8 --engine openvino) file of export.py, or a fine-tuned .ckpt "
                             "(run in this process: the compiled CPU kernels)")
    parser.add_argument("--task", required=True, choices=list(TASKS))
    parser.add_argument("--spm_model_file", default="", help="SentencePiece model the model was fine-tuned with")
    parser.add_argument("--vocab_file", default="",
                        help="WordPiece vocab.txt (albert_zh) instead of a SentencePiece model")
    parser.add_argument("--do_lower_case", type=boolean, default=True, help="true or false")
    parser.add_argument("--input_file", default="", help="JSON lines, a request per line (instead of the text flags)")
    parser.add_argument("--output_file", default="", help="with --input_file: the answers' JSON lines (else stdout)")
    parser.add_argument("--overwrite", type=boolean, nargs="?", const=True, default=False,
                        help="replace an existing --output_file (true or false; alone: true)")
    parser.add_argument("--batch_size", type=integer, default=0,
                        help=f"rows per model call (0: the exported batch; dynamic batch and .ckpt: {DEFAULT_BATCH})")
    parser.add_argument("--config_path", default="", help=".ckpt: the task yaml it was fine-tuned with")
    parser.add_argument("--seq_length", type=integer, default=0,
                        help=f".ckpt: sequence length of the features (0: the max_seq_length of the data it was "
                             f"fine-tuned on, as its run recorded it; else {DEFAULT_SEQ}, as export.py)")
    parser.add_argument("--text_a", default=None, help="classifier: the sentence (first of the pair)")
    parser.add_argument("--text_b", default=None, help="classifier: the second sentence of a pair task")
    parser.add_argument("--labels", default="",
                        help="classifier: comma-separated label names in label-id order (default: those of the data "
                             "it was fine-tuned on, as its run recorded them in the .ckpt or ONNX export; else 0, 1, "
                             "...)")
    parser.add_argument("--article", default=None, help="RACE: the passage")
    parser.add_argument("--option", action="append", default=[], help="RACE: one answer option (repeat per choice)")
    parser.add_argument("--max_qa_length", type=integer, default=128, help="RACE: as create_finetune_data")
    parser.add_argument("--question", default=None, help="SQuAD and RACE: the question")
    parser.add_argument("--context", default=None, help="SQuAD: the paragraph to find the answer in")
    parser.add_argument("--doc_stride", type=integer, default=128, help="SQuAD: as create_squad_data")
    parser.add_argument("--max_windows", type=integer, default=MAX_WINDOWS,
                        help="SQuAD: most windows one request may make (a longer context is refused)")
    parser.add_argument("--max_query_length", type=integer, default=64, help="SQuAD: as create_squad_data")
    parser.add_argument("--n_best_size", type=integer, default=None,
                        help="SQuAD: candidate answers kept (default: the task yaml's, 20)")
    parser.add_argument("--max_answer_length", type=integer, default=None,
                        help="SQuAD: longest answer in tokens (default: the task yaml's, 30)")
    parser.add_argument("--null_score_diff_threshold", type=real, default=None,
                        help="squad_v2: answer '' above it (default: the task yaml's, 0.0)")
    parser.add_argument("--device_target", default="auto", choices=("auto", "CPU", "GPU", "Ascend"),
                        help="MINDIR and .ckpt: where MindSpore runs it (ONNX runs on ONNX Runtime's CPU provider)")
    parser.add_argument("--precision", default="float32", choices=("float32", "bfloat16", "int8"),
                        help=".ckpt on CPU: bfloat16 runs the compiled kernels' dense products in bfloat16 with "
                             "float32 accumulation (needs AVX512_BF16 or AMX-BF16); int8 runs them in int8 (weights "
                             "quantized per output channel and packed once at load, inputs per row on each call; "
                             "needs VNNI or AMX-INT8) and, on AMX, attention's products in bfloat16; softmax, "
                             "LayerNorm and the rest stay float32. .onnx with --engine openvino and .xml: OpenVINO's "
                             "precision hint "
                             "(int8 IR: of the parts left float)")
    parser.add_argument("--engine", default="", choices=("onnxruntime", "openvino"),
                        help=".onnx: ONNX Runtime (the default), or OpenVINO's CPU plugin (pip install openvino); an "
                             "OpenVINO IR .xml runs on openvino")
    parser.add_argument("--threads", type=integer, default=0,
                        help="ONNX Runtime's intra-op or OpenVINO's inference threads (0: the engine's default); "
                             ".ckpt on CPU: kernel threads (0: all usable CPUs)")
    return parser.parse_args(list(argv))


def check_args(args: argparse.Namespace) -> None:
    """Everything decidable from the flags alone, before a model is read."""
    if Path(args.model).is_dir():
        raise UserError(folder_refusal(args.model, args.task))
    if not Path(args.model).is_file():
        raise UserError(f"model not found: {args.model}")
    if not args.model.endswith(SUFFIXES):
        raise UserError(f"--model must be a .mindir (MindSpore), .onnx (ONNX Runtime) or .xml (OpenVINO IR) file "
                        f"written by export.py, or a fine-tuned .ckpt: {args.model}")
    for flag, (low, high) in FLAG_RANGES.items():
        value = getattr(args, flag)
        if value is not None and not low <= value <= high and not (value == 0 and flag in ZERO_IS_DEFAULT):
            zero = " (or 0: the default)" if flag in ZERO_IS_DEFAULT else ""
            raise UserError(f"--{flag} must be in [{low}, {high}]{zero}, got {value}")
    labels = args.labels.split(",") if args.labels else []
    if labels and (len(set(labels)) != len(labels) or not all(label.strip() for label in labels)):
        raise UserError(f"--labels must name each class once, by a non-empty name: {args.labels!r}")
    if args.model.endswith(".xml"):
        check_openvino_ir(args)
    elif args.model.endswith(".onnx"):
        args.engine = args.engine or "onnxruntime"
        engine = {"onnxruntime": ("ONNX Runtime", "onnxruntime"), "openvino": ("OpenVINO", "openvino")}[args.engine]
        missing = [name for name in (engine[1], "onnx") if importlib.util.find_spec(name) is None]
        if missing:
            raise UserError(f"--engine {args.engine}: an ONNX model runs on {engine[0]} here: pip install "
                            f"{' '.join(missing)}")
    elif args.engine:
        raise UserError(f"--engine chooses the engine of an .onnx model (export.py --file_format ONNX): {args.model} "
                        f"runs {'in this process' if args.model.endswith('.ckpt') else 'on MindSpore'} (an OpenVINO "
                        f"IR .xml runs on OpenVINO without it)")
    if not args.model.endswith(".ckpt"):
        if args.precision == "int8":
            raise UserError(f"--precision int8 quantizes a .ckpt as it loads; an exported model is quantized by "
                            f"export.py --quantize int8: {args.model}")
        if args.precision != "float32" and args.engine != "openvino":
            onnx = args.model.endswith(".onnx")
            fix = "add --engine openvino" if onnx else "serve the .ckpt, or an .onnx export with --engine openvino"
            raise UserError(f"--precision {args.precision} is for a .ckpt or OpenVINO's precision hint (.onnx with "
                            f"--engine openvino, .xml); {args.model} runs as it was exported: {fix}")
        used = [flag for flag in ("config_path", "seq_length") if getattr(args, flag)]
        if used:
            raise UserError(f"--{used[0]} is for a .ckpt model; an exported model has its own")
    if args.precision == "bfloat16":
        from src.model.cpu_kernels import bf16_support

        supported, why = bf16_support()
        if not supported:
            raise UserError(f"--precision bfloat16 needs native bfloat16 dot products: {why}; use --precision float32")
    if args.precision == "int8":
        from src.model.cpu_kernels import int8_support

        supported, why = int8_support()
        if not supported:
            raise UserError(f"--precision int8: {why}; use --precision float32")
    check_task_flags(args)
    text_flags = [flag for flag in ("text_a", "text_b", "article", "question", "context") if getattr(args, flag)]
    if args.input_file:
        if text_flags or args.option:
            raise UserError(f"--input_file holds the requests: drop --{(text_flags or ['option'])[0]}")
        if not Path(args.input_file).is_file():
            raise UserError(f"input_file not found: {args.input_file}")
        if args.output_file and os.path.isdir(args.output_file):
            raise UserError(f"--output_file must name a file, not a folder: {args.output_file}")
        if args.output_file:
            check_outputs([args.output_file], args.overwrite, files_read(args), flag="--overwrite")
    elif args.output_file:
        raise UserError("--output_file goes with --input_file; one request is printed on stdout")


def fill_answer_settings(args: argparse.Namespace) -> None:
    """SQuAD's answer settings not given as flags come from the task yaml (--config_path for a .ckpt, else the
    shipped one), so that the answers are those the fine-tuning run's evaluation gave with the same yaml."""
    if not args.task.startswith("squad"):
        return
    from src.serving.engines import task_config

    config = task_config(args)
    for key in ANSWER_SETTINGS:
        if getattr(args, key) is None and key in config:
            setattr(args, key, config[key])


def check_query_length(args: argparse.Namespace, shape: ModelShape) -> None:
    """SQuAD: the question (at most --max_query_length pieces) must leave room for context in the model's sequence
    length, known before the model is loaded."""
    seq = shape.seq
    if args.task.startswith("squad") and args.max_query_length > seq - 4:
        raise UserError(f"--max_query_length {args.max_query_length} leaves no room for context in the model's "
                        f"sequence length {seq} ({shape.seq_source}): give at most {max(seq - 4, 1)}")


def files_read(args: argparse.Namespace) -> Dict[str, str]:
    """Every file the run reads, by what names it: --output_file never replaces one of them (an IR's weights are
    the .bin beside its .xml, a checkpoint's network the config saved beside it)."""
    files = {"--input_file": args.input_file, "--model": args.model, "--spm_model_file": args.spm_model_file,
             "--vocab_file": args.vocab_file, "--config_path": args.config_path}
    if args.model.endswith(".xml"):
        files["the weights of --model"] = str(Path(args.model).with_suffix(".bin"))
    if args.model.endswith(".ckpt"):
        from src.common.checkpoint_io import config_beside

        files["the network config of --model"] = config_beside(args.model)
    return files


def check_openvino_ir(args: argparse.Namespace) -> None:
    """An OpenVINO IR (.xml, its weights in the .bin beside it) runs on OpenVINO, installed."""
    if args.engine == "onnxruntime":
        raise UserError(f"{args.model} is an OpenVINO IR: it runs on OpenVINO only (drop --engine onnxruntime)")
    args.engine = "openvino"
    weights = Path(args.model).with_suffix(".bin")
    if not weights.is_file():
        raise UserError(f"{args.model}: its weights {weights} are missing (an OpenVINO IR is the .xml and the .bin "
                        f"beside it, as export.py wrote them)")
    if importlib.util.find_spec("openvino") is None:
        raise UserError(f"{args.model} is an OpenVINO IR: it runs on OpenVINO: pip install openvino")


def folder_refusal(path: str, task: str) -> str:
    """What to do with a folder given as --model: an HF transformers folder (config.json beside the weights) is
    served by transformers, or converted for this package; any other folder is no model."""
    if not os.path.isfile(os.path.join(path, "config.json")):
        return f"--model must be a model file (.mindir, .onnx or a fine-tuned .ckpt), not a folder: {path}"
    return (f"{path} is an HF transformers model folder (config.json + model.safetensors), which src.predict does not "
            f"run: serve it with transformers (its pipeline or Auto classes), or convert its weights with python -m "
            f"src.convert_checkpoint --src hf --input {path} --output model.ckpt and fine-tune that with run_{task}.py "
            f"(the conversion keeps the backbone and the pretraining heads, not a task head)")


# ---------------------------------------------------------------------------------------------------- the model


# ONNX Runtime graph optimizations left out because they make ALBERT slower: ONNX Runtime 1.32's CPU kernel of
# SkipLayerNormalization (a residual Add fused into the LayerNormalization after it) ran 5-10x slower than the Add and
# LayerNormalization it replaces (on [32, 128, 768], 2 threads, Zen 4: 17.6 vs 1.6 ms), so ALBERT-base's 25 of them
# cost 10-15% of a call, int8 or float32 (benchmarks/results/README.md).


# ------------------------------------------------------------------------------------------------- the requests


# -------------------------------------------------------------------------------------------------- the answers
# Each takes (args, tokenizer, run, shape, requests) and returns one answer per request.


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    check_args(args)
    fill_answer_settings(args)
    shape = model_shape(args)
    check_query_length(args, shape)
    batch = rows_per_call(args, shape)
    if args.input_file:
        total, alone = survey_requests(args.input_file, args.task, shape.choices)
    else:
        request = flag_request(args, shape.choices)
        total, alone = 1, (0 if request.get("text_b") else 1, None)
    tokenizer = load_tokenizer(args, shape.vocab)
    runner = load_runner(args, shape, tokenizer)
    warn_single_sentences(args, total, alone)  # once every input is known good

    def run(rows: List[Dict[str, np.ndarray]]) -> List[np.ndarray]:
        return run_rows(runner, rows, TASKS[args.task].head_inputs, batch, fixed=shape.batch is not None)

    def answer_requests(chunk: List[Dict[str, object]]) -> List[Dict[str, object]]:
        return ANSWERS[args.task](args, tokenizer, run, shape, chunk)

    from src.common.progress import counting, progress
    from src.common.run_log import log_to

    accuracy = Accuracy()
    if not args.input_file:
        print(json.dumps(answer_requests([request])[0], ensure_ascii=False, default=float))
    elif not args.output_file:
        with progress("requests", total, " requests") as bar:
            write_answers(counting(answer_requests, bar), read_requests(args.input_file, args.task, shape.choices),
                          sys.stdout, accuracy)
    else:
        # Stopped (SIGTERM, Ctrl-C: model_utils/signals.py), it leaves no partial answers or lock behind.
        with claimed_folder_of(args.output_file, "--output_file"), \
                atomic_path(args.output_file, ".jsonl", replace=args.overwrite) as tmp, \
                open(tmp, "w", encoding="utf-8") as out, progress("requests", total, " requests") as bar:
            write_answers(counting(answer_requests, bar), read_requests(args.input_file, args.task, shape.choices),
                          out, accuracy)
        log_to(os.path.dirname(os.path.abspath(args.output_file)))
        print(f"answered {total} requests of {args.input_file}: {args.output_file}", file=sys.stderr)
    for line in accuracy.lines(args.input_file):
        print(line, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
