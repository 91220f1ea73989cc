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
  length, --precision bfloat16 the kernels' products in bfloat16 (CPUs with AVX512_BF16 or AMX-BF16), --precision int8
  the dense layers' in int8 (weights quantized once at load per output channel, inputs per row on each call; CPUs
  whose oneDNN int8 matmul is AMX-INT8 or VNNI) and attention's in bfloat16.

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

Text becomes features exactly as the data tools make them (create_finetune_data.classifier_feature and
race_feature, create_squad_data.example_features) at the sequence length the model was exported with; the task's
inputs come from the task registry (src/tasks.py); SQuAD answers come from
squad_get_predictions, as in evaluation. One request prints one JSON object on stdout.
"""
import argparse
import difflib
import itertools
import importlib.util
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from model_utils import json_input
from model_utils.config import ArgumentParser, Config, boolean, integer, real
from model_utils.errors import UserError, run_cli
from src.atomic_files import atomic_path, check_outputs, claimed_folder_of
from src.inference import Runner, cell_runner, real_rows, run_padded
from src.tasks import TASKS

# Feature key of the data tools (the task's head_inputs) -> the exported input's name (the head's argument).
EXPORT_NAMES = {"input_ids": "input_ids", "segment_ids": "token_type_ids", "input_mask": "input_mask",
                "p_mask": "p_mask"}
# The keys of a request in --input_file, per task, besides an optional `id`; the classifier's `text_b` is optional.
REQUEST_KEYS = {"classifier": ("text_a", "text_b"), "race": ("article", "question", "options"),
                "squad_v1": ("question", "context"), "squad_v2": ("question", "context")}
GOLD_KEYS = ("label", "gold")  # a request's known answer, for the accuracy line (classifier and race)
SCORED_TASKS = ("classifier", "race")
SHOWN_ANSWERS = 5
SUFFIXES = (".mindir", ".onnx", ".xml", ".ckpt")
DEFAULT_BATCH = 32
DEFAULT_SEQ = 128
CHUNK_REQUESTS = 1024  # requests read and made into features at a time: bounds the memory of a large --input_file
MAX_REQUEST_BYTES = 1 << 20  # one line of --input_file (read no further: a line with no end never fills memory)
MAX_WINDOWS = 256  # SQuAD windows one request may make (a 1 MiB context at --doc_stride 1 would make ~250,000)
# The integer flags' ranges: the upper bounds stop an absurd value before a model, a thread pool or a batch is
# allocated (8192 positions: 16 times the position table of every published ALBERT).
FLAG_RANGES = {"batch_size": (0, 65536), "threads": (0, 1024), "seq_length": (0, 8192), "max_qa_length": (1, 8192),
               "doc_stride": (1, 8192), "max_query_length": (1, 8192), "max_windows": (1, 65536),
               "n_best_size": (1, 512), "max_answer_length": (1, 8192)}


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
                        help=f".ckpt: sequence length of the features (0: {DEFAULT_SEQ}, as export.py)")
    parser.add_argument("--text_a", default=None, help="classifier: the sentence (first of the pair)")
    parser.add_argument("--text_b", default=None, help="classifier: the second sentence of a pair task")
    parser.add_argument("--labels", default="", help="classifier: comma-separated label names in label-id order")
    parser.add_argument("--article", default=None, help="RACE: the passage")
    parser.add_argument("--option", action="append", default=[], help="RACE: one answer option (repeat per choice)")
    parser.add_argument("--max_qa_length", type=integer, default=128, help="RACE: as create_finetune_data")
    parser.add_argument("--question", default=None, help="SQuAD and RACE: the question")
    parser.add_argument("--context", default=None, help="SQuAD: the paragraph to find the answer in")
    parser.add_argument("--doc_stride", type=integer, default=128, help="SQuAD: as create_squad_data")
    parser.add_argument("--max_windows", type=integer, default=MAX_WINDOWS,
                        help="SQuAD: most windows one request may make (a longer context is refused)")
    parser.add_argument("--max_query_length", type=integer, default=64, help="SQuAD: as create_squad_data")
    parser.add_argument("--n_best_size", type=integer, default=20)
    parser.add_argument("--max_answer_length", type=integer, default=30)
    parser.add_argument("--null_score_diff_threshold", type=real, default=0.0, help="squad_v2: answer '' above it")
    parser.add_argument("--device_target", default="auto", choices=("auto", "CPU", "GPU", "Ascend"),
                        help="MINDIR and .ckpt: where MindSpore runs it (ONNX runs on ONNX Runtime's CPU provider)")
    parser.add_argument("--precision", default="float32", choices=("float32", "bfloat16", "int8"),
                        help=".ckpt on CPU: bfloat16 runs the compiled kernels' dense products in bfloat16 with "
                             "float32 accumulation (needs AVX512_BF16 or AMX-BF16); int8 runs them in int8 (weights "
                             "quantized once at load per output channel, inputs per row on each call; needs VNNI or "
                             "AMX-INT8) and attention's products in bfloat16; softmax, LayerNorm and the rest stay "
                             "float32. .onnx with --engine openvino and .xml: OpenVINO's precision hint (int8 IR: "
                             "of the parts left float)")
    parser.add_argument("--engine", default="", choices=("onnxruntime", "openvino"),
                        help=".onnx: ONNX Runtime (the default), or OpenVINO's CPU plugin (pip install openvino); an "
                             "OpenVINO IR .xml runs on openvino")
    parser.add_argument("--threads", type=integer, default=0,
                        help="ONNX: intra-op threads (0: the engine's default); .ckpt on CPU: kernel threads "
                             "(0: all usable CPUs)")
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
        if not low <= getattr(args, flag) <= high:
            raise UserError(f"--{flag} must be in [{low}, {high}], got {getattr(args, flag)}")
    if args.model.endswith(".xml"):
        check_openvino_ir(args)
    elif args.model.endswith(".onnx"):
        args.engine = args.engine or "onnxruntime"
        engine = {"onnxruntime": ("ONNX Runtime", "onnxruntime"), "openvino": ("OpenVINO", "openvino")}[args.engine]
        missing = [name for name in (engine[1], "onnx") if importlib.util.find_spec(name) is None]
        if missing:
            raise UserError(f"--engine {args.engine}: an ONNX model runs on {engine[0]} here: pip install "
                            f"{' '.join(missing)}")
    elif args.engine == "openvino":
        raise UserError(f"--engine {args.engine} serves an .onnx model (export.py --file_format ONNX): {args.model} "
                        f"(an OpenVINO IR .xml runs on OpenVINO without it)")
    if not args.model.endswith(".ckpt"):
        if args.precision == "int8":
            raise UserError(f"--precision int8 quantizes a .ckpt as it loads; an exported model is quantized by "
                            f"export.py --quantize int8: {args.model}")
        used = [flag for flag in ("config_path", "seq_length") if getattr(args, flag)]
        used += ["precision"] if args.precision != "float32" and args.engine != "openvino" else []
        if used:
            raise UserError(f"--{used[0]} is for a .ckpt model; an exported model has its own")
    if args.precision == "bfloat16":
        from src.cpu_kernels import bf16_support

        supported, why = bf16_support()
        if not supported:
            raise UserError(f"--precision bfloat16 needs native bfloat16 dot products: {why}; use --precision float32")
    if args.precision == "int8":
        from src.cpu_kernels import int8_support

        supported, why = int8_support()
        if not supported:
            raise UserError(f"--precision int8: {why}; use --precision float32")
    text_flags = [flag for flag in ("text_a", "text_b", "article", "question", "context") if getattr(args, flag)]
    if args.input_file:
        if text_flags or args.option:
            raise UserError(f"--input_file holds the requests: drop --{(text_flags or ['option'])[0]}")
        if not Path(args.input_file).is_file():
            raise UserError(f"input_file not found: {args.input_file}")
        if args.output_file and os.path.isdir(args.output_file):
            raise UserError(f"--output_file must name a file, not a folder: {args.output_file}")
        if args.output_file:
            check_outputs([args.output_file], args.overwrite, {"--input_file": args.input_file, "--model": args.model},
                          flag="--overwrite")
    elif args.output_file:
        raise UserError("--output_file goes with --input_file; one request is printed on stdout")


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

@dataclass
class ModelShape:
    """What features a model takes, known before it is loaded."""
    batch: Optional[int]  # rows per call of a fixed-batch export; None when any batch runs
    seq: int
    choices: int  # RACE: options per question (1 for the other tasks)
    vocab: Optional[int]  # the model's vocabulary size, where the file says it


def model_signature(path: str) -> Tuple[List[Tuple[str, List[int]]], int, Optional[int]]:
    """(input name, shape) of each graph input (batch -1 when exported with a dynamic batch), the number of outputs
    and the model's vocabulary size, read from the MINDIR or ONNX file so features can be made at the exported
    sequence length."""
    if path.endswith(".onnx"):
        return _onnx_signature(path)
    if path.endswith(".xml"):
        return _openvino_signature(path)
    from mindspore.train.mind_ir_pb2 import ModelProto

    proto = ModelProto()
    try:
        proto.ParseFromString(Path(path).read_bytes())
    except Exception as err:  # protobuf's DecodeError: not a MINDIR, or an encrypted one
        raise UserError(f"{path} is not a readable MINDIR model ({type(err).__name__})") from err
    inputs = [(item.name.split(":")[-1], list(item.tensor[0].dims)) for item in proto.graph.input if item.tensor]
    # several outputs are one tuple output, its parts listed in attr_info
    outputs = sum(len(item.attr_info.values) if item.HasField("attr_info") else 1 for item in proto.graph.output)
    vocab = [p.dims[0] for p in proto.graph.parameter if p.name.endswith("word_embeddings.embedding_table")]
    return inputs, outputs, (int(vocab[0]) if vocab else None)


def _onnx_signature(path: str) -> Tuple[List[Tuple[str, List[int]]], int, Optional[int]]:
    import onnx

    try:
        graph = onnx.load_model(path, load_external_data=False).graph
    except Exception as err:  # protobuf's DecodeError
        raise UserError(f"{path} is not a readable ONNX model ({type(err).__name__})") from err
    check_external_data(path, graph)
    inputs = [(item.name, [dim.dim_value or -1 for dim in item.type.tensor_type.shape.dim]) for item in graph.input]
    vocab = [p.dims[0] for p in graph.initializer if p.name.endswith("word_embeddings.embedding_table")]
    return inputs, len(graph.output), (int(vocab[0]) if vocab else None)


def _openvino_signature(path: str) -> Tuple[List[Tuple[str, List[int]]], int, Optional[int]]:
    """An OpenVINO IR's inputs (a dynamic dimension -1), outputs and the vocabulary size export.py recorded."""
    import openvino

    from src.quantize import openvino_vocab_size

    try:
        model = openvino.Core().read_model(path)
    except RuntimeError as err:
        reason = next((line.strip() for line in str(err).splitlines() if line.strip()), type(err).__name__)
        raise UserError(f"{path} is not a readable OpenVINO IR model ({reason[:200]})") from err
    inputs = [(port.get_any_name(), [dim.get_length() if dim.is_static else -1 for dim in port.get_partial_shape()])
              for port in model.inputs]
    return inputs, len(model.outputs), openvino_vocab_size(model)


def _graph_tensors(graph) -> Iterator[object]:
    """Every tensor a graph stores: initializers and attribute tensors, subgraphs (If, Loop) included."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            yield from ([attribute.t] if attribute.HasField("t") else [])
            yield from attribute.tensors
            for subgraph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                yield from _graph_tensors(subgraph)


def check_external_data(path: str, graph) -> None:
    """An ONNX tensor may keep its bytes in another file named by the model: a crafted model naming ../../secret or
    /etc/shadow would make ONNX Runtime read that file as weights (older versions do not check). Only files inside
    the model's folder are accepted, whatever the onnxruntime version, before it opens the model."""
    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    for tensor in _graph_tensors(graph):
        location = next((entry.value for entry in tensor.external_data if entry.key == "location"), None)
        if location is None:
            continue
        target = os.path.realpath(os.path.join(folder, location))
        if os.path.isabs(location) or os.path.commonpath([folder, target]) != folder:
            raise UserError(f"{path}: tensor {tensor.name or '(unnamed)'} keeps its data in {location!r}, outside the "
                            f"model's folder; refused (a model's external data must lie beside it)")


def check_model(path: str, task: str, inputs: List[Tuple[str, List[int]]], outputs: int) -> None:
    """The exported model must be `task`'s (its inputs' names and rank, its number of outputs); else the tasks it
    fits are named, as for a checkpoint of another head."""
    fitting = fitting_tasks(inputs, outputs)
    if task in fitting:
        return
    found = ", ".join(f"{name} {shape}" for name, shape in inputs)
    wanted = ", ".join(EXPORT_NAMES[column] for column in TASKS[task].head_inputs)
    layout = "[batch, choices, seq]" if TASKS[task].choices else "[batch, seq]"
    hint = f": it is a {' or '.join(fitting)} model, use --task {' or --task '.join(fitting)}" if fitting else \
        " (nor those of another task)"
    raise UserError(f"{path} takes ({found}) and returns {outputs} output(s), not the {layout} inputs ({wanted}) and "
                    f"{len(task_outputs(task))} output(s) of a {task} model exported by export.py{hint}")


def task_outputs(task: str) -> List[Tuple[str, str, List[object]]]:
    """The outputs of `task`'s export, as the shipped yaml shapes them."""
    from model_utils.config import parse_cli

    return TASKS[task].outputs(parse_cli(TASKS[task].config_file, []), None, 0)


def fitting_tasks(inputs: List[Tuple[str, List[int]]], outputs: int) -> List[str]:
    """The tasks whose export takes inputs of these names and rank and returns `outputs` outputs."""
    names = [name for name, _ in inputs]
    ranks = {len(shape) for _, shape in inputs}
    return [name for name, task in TASKS.items()
            if names == [EXPORT_NAMES[column] for column in task.head_inputs]
            and ranks == {3 if task.choices else 2} and len(task_outputs(name)) == outputs]


def task_config(args: argparse.Namespace, num_class: Optional[int] = None) -> Config:
    """.ckpt: the task yaml it was fine-tuned with (--config_path, else the shipped one)."""
    from model_utils.config import parse_cli

    argv = ["--config_path", args.config_path] if args.config_path else []
    return parse_cli(TASKS[args.task].config_file, argv + (["--num_class", str(num_class)] if num_class else []))


def model_shape(args: argparse.Namespace) -> ModelShape:
    """An export's input shape from its file; a checkpoint's from --seq_length and the task yaml (RACE's choices)."""
    if args.model.endswith(".ckpt"):
        choices = task_config(args).num_class if TASKS[args.task].choices else 1
        return ModelShape(None, args.seq_length or DEFAULT_SEQ, choices, None)
    inputs, outputs, vocab = model_signature(args.model)
    check_model(args.model, args.task, inputs, outputs)
    shape = inputs[0][1]
    return ModelShape(shape[0] if shape[0] > 0 else None, shape[-1], shape[1] if len(shape) == 3 else 1, vocab)


def rows_per_call(args: argparse.Namespace, shape: ModelShape) -> int:
    if shape.batch is None:
        return args.batch_size or DEFAULT_BATCH
    if args.batch_size not in (0, shape.batch):
        raise UserError(f"{args.model} was exported for batches of {shape.batch} rows: drop --batch_size, or "
                        f"export it again with --export_batch_size {args.batch_size} (or --dynamic_batch true)")
    return shape.batch


def mindspore_runner(path: str, device_target: str) -> Runner:
    """ms.load + nn.GraphCell: the portable path."""
    import mindspore as ms
    from mindspore import nn

    from src.device_setup import setup_device

    setup_device(device_target)
    return cell_runner(nn.GraphCell(ms.load(path)))


# ONNX Runtime graph optimizations left out because they make ALBERT slower: ONNX Runtime 1.32's CPU kernel of
# SkipLayerNormalization (a residual Add fused into the LayerNormalization after it) ran 5-10x slower than the Add and
# LayerNormalization it replaces (on [32, 128, 768], 2 threads, Zen 4: 17.6 vs 1.6 ms), so ALBERT-base's 25 of them
# cost 10-15% of a call, int8 or float32 (benchmarks/results/README.md).
SLOW_FUSIONS = ("SkipLayerNormFusion",)


def onnxruntime_session(path: str, threads: int, disabled: Sequence[str] = SLOW_FUSIONS, profile_prefix: str = ""):
    """An ONNX Runtime session on CPU with all graph optimizations (ORT_ENABLE_ALL) but `disabled`; with
    `profile_prefix`, one that records ORT's profile."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    if profile_prefix:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"],
                                        disabled_optimizers=list(disabled))


def onnxruntime_runner(path: str, threads: int) -> Runner:
    """An ONNX Runtime session (see onnxruntime_session); inputs in the graph's order."""
    session = onnxruntime_session(path, threads)
    names = [item.name for item in session.get_inputs()]

    def run(arrays: List[np.ndarray]) -> List[np.ndarray]:
        return session.run(None, dict(zip(names, arrays)))
    return run


def checkpoint_runner(args: argparse.Namespace, shape: ModelShape, tokenizer) -> Runner:
    """The checkpoint's task head built in this process for the device, as fine-tuning evaluation builds it: on
    CPU with the compiled kernels (src/cpu_kernels.py), in float32 or with bfloat16 or int8 products (--precision)."""
    from src.device_setup import kernels_status, serving_runtime, setup_device
    from src.finetuned import build_head, head_network
    from src.utils import read_checkpoint

    device = setup_device(args.device_target, cpu_threads=args.threads)
    values = read_checkpoint(args.model)
    classes = values.get("classifier.weight")
    num_class = int(classes.shape[0]) if args.task == "classifier" and classes is not None else None
    source = args.config_path or f"the shipped {Path(TASKS[args.task].config_file).name}"
    config = task_config(args, num_class)
    net = head_network(values, args.task, config, args.model, source, by_flag=True)
    if shape.seq > net.max_position_embeddings:
        raise UserError(f"--seq_length {shape.seq} exceeds the network's max_position_embeddings "
                        f"{net.max_position_embeddings}")
    check_vocabulary(tokenizer, net.vocab_size)
    if args.precision != "float32":
        check_low_precision_products(device.target, args.precision)
    if device.target == "CPU":  # --precision decides, whatever compute type the checkpoint was trained in
        net = replace(net, compute_type="bfloat16" if args.precision == "bfloat16" else "float32")
    runtime = serving_runtime(device.target, net.compute_type, args.precision)
    model = build_head(values, args.task, config, net, runtime, args.model)
    engine = kernels_status(device.target) if runtime.kernels else "MindSpore operations"
    engine += f", {args.precision} products" if args.precision != "float32" else ""
    print(f"{args.model}: {args.task} head, {net.num_hidden_layers} layers, hidden {net.hidden_size}, seq {shape.seq}, "
          f"on {device.target} in this process ({engine})", file=sys.stderr)
    return cell_runner(model)


def check_low_precision_products(target: str, precision: str) -> None:
    """--precision bfloat16 and int8 are the compiled kernels' products in that precision (the CPU's support for
    them is checked with the flags): say in one line why they do not run here."""
    from src import cpu_kernels
    from src.device_setup import kernels_status

    if target != "CPU" or not cpu_kernels.available():
        raise UserError(f"--precision {precision} runs the compiled CPU kernels' products in {precision}; here the "
                        f"model runs on {target} with {kernels_status(target)}")


def openvino_runner(path: str, threads: int, precision: str) -> Runner:
    """The ONNX file or OpenVINO IR compiled by OpenVINO for its CPU plugin, with `threads` threads (0: its default)
    and the precision hint `precision` (bfloat16: OpenVINO's own default on CPUs with AMX or AVX512_BF16; measured
    the fastest way to serve on a Xeon with AMX, benchmarks/results/README.md); inputs in the graph's order."""
    import openvino

    properties = {"INFERENCE_PRECISION_HINT": "bf16" if precision == "bfloat16" else "f32"}
    if threads:
        properties["INFERENCE_NUM_THREADS"] = threads
    core = openvino.Core()
    model = core.read_model(path)
    int8 = any(op.get_type_name() == "FakeQuantize" for op in model.get_ops())
    request = core.compile_model(model, "CPU", properties).create_infer_request()
    print(f"{path}: OpenVINO {openvino.__version__} CPU plugin, {'int8 products, ' if int8 else ''}precision hint "
          f"{properties['INFERENCE_PRECISION_HINT']}", file=sys.stderr)

    def run(arrays: List[np.ndarray]) -> List[np.ndarray]:
        outputs = request.infer(list(arrays))
        return [outputs[port] for port in request.model_outputs]
    return run


def load_runner(args: argparse.Namespace, shape: ModelShape, tokenizer) -> Runner:
    if args.engine == "openvino":
        return openvino_runner(args.model, args.threads, args.precision)
    if args.model.endswith(".onnx"):
        return onnxruntime_runner(args.model, args.threads)
    if args.model.endswith(".ckpt"):
        return checkpoint_runner(args, shape, tokenizer)
    return mindspore_runner(args.model, args.device_target)


def load_tokenizer(args: argparse.Namespace, model_vocab: Optional[int]):
    from src.tokenization import FullTokenizer

    tokenizer = FullTokenizer(args.vocab_file or None, args.do_lower_case, args.spm_model_file or None)
    check_vocabulary(tokenizer, model_vocab)
    return tokenizer


def check_vocabulary(tokenizer, model_vocab: Optional[int]) -> None:
    if model_vocab is not None and tokenizer.vocab_size > model_vocab:
        raise UserError(f"the tokenizer has {tokenizer.vocab_size} pieces but the model's vocabulary has "
                        f"{model_vocab}: use the tokenizer the model was trained with")


def run_rows(run: Runner, rows: List[Dict[str, np.ndarray]], columns: Sequence[str], batch: int,
             fixed: bool) -> List[np.ndarray]:
    """The model's outputs for feature rows, `batch` rows per call (the last call padded with zero rows); a model
    that runs any batch gets fewer when there are fewer rows."""
    size = batch if fixed else min(batch, len(rows))
    batches = ([np.stack([row[column] for row in rows[start:start + size]]).astype(np.int32) for column in columns]
               for start in range(0, len(rows), size))
    return real_rows(run_padded(run, batches, size))


# ------------------------------------------------------------------------------------------------- the requests

def flag_request(args: argparse.Namespace, choices: int) -> Dict[str, object]:
    """The one request of the text flags."""
    if args.task == "classifier":
        if not args.text_a:
            raise UserError("--task classifier needs --text_a (and --text_b for a sentence-pair task)")
        return {"text_a": args.text_a, "text_b": args.text_b}
    if args.task == "race":
        if not args.article or not args.question or not args.option:
            raise UserError("--task race needs --article, --question and one --option per choice")
        if len(args.option) != choices:
            raise UserError(f"the model chooses among {choices} options but {len(args.option)} --option were given")
        return {"article": args.article, "question": args.question, "options": list(args.option)}
    if not args.question or not args.context:
        raise UserError(f"--task {args.task} needs --question and --context")
    return {"question": args.question, "context": args.context}


def check_request(request: object, task: str, choices: int, where: str) -> None:
    """A request of --input_file: a JSON object with the task's keys, strings where text goes."""
    if not isinstance(request, dict):
        raise UserError(f"{where}: a request is a JSON object, got {type(request).__name__}")
    known = REQUEST_KEYS[task] + ("id",) + (GOLD_KEYS if task in SCORED_TASKS else ())
    for key in request:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
            raise UserError(f"{where}: unknown key '{key}' for {task} (keys: {', '.join(known)})"
                            + (f"; did you mean '{close[0]}'?" if close else ""))
    missing = [key for key in REQUEST_KEYS[task] if key != "text_b" and not request.get(key)]
    if missing:
        raise UserError(f"{where}: a {task} request needs {', '.join(missing)}")
    if all(key in request for key in GOLD_KEYS):
        raise UserError(f"{where}: give the gold answer once, as label or as gold")
    for key, value in request.items():
        if key == "options":
            if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
                raise UserError(f"{where}: options must be a list of non-empty strings")
            if len(value) != choices:
                raise UserError(f"{where}: the model chooses among {choices} options but {len(value)} were given")
        elif key == "id" or key in GOLD_KEYS:
            if not isinstance(value, (str, int)) or isinstance(value, bool):
                raise UserError(f"{where}: {key} must be a string or an integer")
        elif not isinstance(value, str) and not (key == "text_b" and value is None):
            raise UserError(f"{where}: {key} must be a string")


def warn_single_sentences(args: argparse.Namespace, total: int, alone: Tuple[int, object]) -> None:
    """A sentence-pair model answers a request without text_b as if it were one sentence, and nothing in the model
    file says which kind it is: say so once, on stderr, instead of answering silently. `alone`: how many of the
    `total` requests have no text_b, and the first one's id."""
    if args.task != "classifier" or not alone[0]:
        return
    from src.create_finetune_data import TSV_TASKS

    pairs = ", ".join(name for name, task in TSV_TASKS.items() if task.train_dev.text_b is not None)
    which = (f"{alone[0]} of {total} requests of {args.input_file} have no text_b (the first: id "
             f"{alone[1]})" if args.input_file else "no --text_b")
    print(f"warning: {which}: answered as single sentences; a model fine-tuned on sentence pairs ({pairs}) needs "
          f"text_b", file=sys.stderr)


def read_requests(path: str, task: str, choices: int) -> Iterator[Dict[str, object]]:
    """The requests of a JSON lines file, streamed (blank lines skipped), each checked and given its line number
    as id when it has none. A line over MAX_REQUEST_BYTES and JSON nested too deeply to parse are refused."""
    with open(path, "rb") as lines:  # decoded line by line, so a bad byte is named with its line
        for number, raw in enumerate(iter(lambda: lines.readline(MAX_REQUEST_BYTES + 1), b""), 1):
            where = f"{path} line {number}"
            if len(raw) > MAX_REQUEST_BYTES:
                raise UserError(f"{where}: a request is longer than {MAX_REQUEST_BYTES} bytes (the cap of one line); "
                                f"split the text")
            try:
                line = raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"{where}: not UTF-8 text ({err.reason})") from err
            if not line.strip():
                continue
            try:
                request = json_input.loads(line.rstrip())
            except json.JSONDecodeError as err:
                raise UserError(f"{where}: not JSON ({err.msg} at column {err.colno})") from err
            except RecursionError:
                raise UserError(f"{where}: JSON nested too deeply (a request is a flat JSON object)") from None
            check_request(request, task, choices, where)
            yield {"id": number, **request}


def survey_requests(path: str, task: str, choices: int) -> Tuple[int, Tuple[int, object]]:
    """Read every request once before the model is loaded, keeping none (memory stays flat): a bad line stops the
    run before any work. Returns the number of requests and, for the classifier, how many have no text_b and the
    first one's id."""
    total, alone, first = 0, 0, None
    for request in read_requests(path, task, choices):
        total += 1
        if task == "classifier" and not request.get("text_b"):
            alone, first = alone + 1, first if alone else request["id"]
    if not total:
        raise UserError(f"{path} holds no request")
    return total, (alone, first)


# -------------------------------------------------------------------------------------------------- the answers
# Each takes (args, tokenizer, run, shape, requests) and returns one answer per request.

def _softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max())
    return exp / exp.sum()


def classify(args: argparse.Namespace, tokenizer, run, shape: ModelShape,
             requests: List[Dict[str, object]]) -> List[Dict[str, object]]:
    from src.create_finetune_data import InputExample, classifier_feature

    features = [classifier_feature(InputExample(f"predict-{index}", request["text_a"], request.get("text_b"), None,
                                                "request"), tokenizer, {}, shape.seq)
                for index, request in enumerate(requests)]
    all_logits = run(features)[0].astype(np.float64)
    if all_logits.shape[1] == 1:
        return [{"prediction": float(logits[0])} for logits in all_logits]  # regression (sts-b)
    labels = args.labels.split(",") if args.labels else [str(i) for i in range(all_logits.shape[1])]
    if len(labels) != all_logits.shape[1]:
        raise UserError(f"--labels names {len(labels)} labels but the model has {all_logits.shape[1]} classes")
    return [{"label": labels[int(logits.argmax())], "probabilities": dict(zip(labels, _softmax(logits).tolist())),
             "logits": logits.tolist()} for logits in all_logits]


def choose(args: argparse.Namespace, tokenizer, run, shape: ModelShape,
           requests: List[Dict[str, object]]) -> List[Dict[str, object]]:
    """RACE: the option the model scores highest for the article and question."""
    from src.create_finetune_data import RaceExample, race_feature

    features = [race_feature(RaceExample(f"predict-{index}", request["article"], request["question"],
                                         list(request["options"]), "A", "request"),
                             tokenizer, shape.seq, args.max_qa_length) for index, request in enumerate(requests)]
    letters = [chr(ord("A") + index) for index in range(shape.choices)]
    answers = []
    for request, logits in zip(requests, run(features)[0].astype(np.float64)):
        best = int(logits.argmax())
        answers.append({"answer": letters[best], "option": request["options"][best],
                        "probabilities": dict(zip(letters, _softmax(logits).tolist())), "logits": logits.tolist()})
    return answers


def answer(args: argparse.Namespace, tokenizer, run, shape: ModelShape,
           requests: List[Dict[str, object]]) -> List[Dict[str, object]]:
    """SQuAD: the answer span (v2: or no answer) found in the context, windows as evaluation makes them."""
    from src.create_squad_data import (FIRST_UNIQUE_ID, SquadExample, SquadOptions, example_features, example_row,
                                       tokenize_context)
    from src.squad_get_predictions import predictions_v1, predictions_v2, results_from_outputs

    options = SquadOptions(shape.seq, args.doc_stride, args.max_query_length, is_training=False)
    options.check()
    examples, rows, features, windows = [], [], {}, []
    for index, request in enumerate(requests):
        example = SquadExample(f"predict-{index}", request["question"], request["context"], answers=[])
        examples.append(example_row(index, example))
        context = tokenize_context(tokenizer, example.context)
        check_windows(args, tokenizer, options, request, len(context.ids))
        made = list(example_features(example, index, tokenizer, options, context))
        for record, feature in made:
            unique_id = FIRST_UNIQUE_ID + len(rows)
            rows.append(record)
            features[unique_id] = dict(unique_id=unique_id, **feature)
        windows.append(len(made))
    outputs = run(rows)
    results = results_from_outputs(list(features), outputs)
    null_odds = {}
    if args.task == "squad_v1":
        predictions, nbest = predictions_v1(examples, features, results, args.n_best_size, args.max_answer_length)
    else:
        start_n_top = outputs[0].shape[1]
        predictions, nbest, null_odds = predictions_v2(
            examples, features, results, args.n_best_size, args.max_answer_length, start_n_top,
            outputs[2].shape[1] // start_n_top, args.null_score_diff_threshold)
    answers = []
    for example, count in zip(examples, windows):
        qas_id = example["qas_id"]
        shown = [{"text": entry["text"], "probability": entry["probability"]}
                 for entry in nbest[qas_id][:SHOWN_ANSWERS]]
        extra = {"null_score": null_odds[qas_id]} if qas_id in null_odds else {}
        answers.append({"answer": predictions[qas_id], **extra, "nbest": shown, "windows": count})
    return answers


def check_windows(args: argparse.Namespace, tokenizer, options, request: Dict[str, object], tokens: int) -> None:
    """A context longer than --max_windows windows is refused before its features are made (their memory and the
    model's time grow with the windows)."""
    from src.create_squad_data import doc_windows

    query = len(tokenizer.encode(request["question"])[:options.max_query_length])
    count = len(doc_windows(tokens, options.max_seq_length - query - 3, options.doc_stride))
    if count > args.max_windows:
        which = f"request {request['id']}" if "id" in request else "--context"
        raise UserError(f"{which}: its context ({tokens} tokens) makes {count} windows of "
                        f"{options.max_seq_length} tokens at --doc_stride {options.doc_stride}, more than "
                        f"--max_windows {args.max_windows}: split the context, or raise --max_windows")


ANSWERS = {"classifier": classify, "race": choose, "squad_v1": answer, "squad_v2": answer}


@dataclass
class Accuracy:
    """The answers to requests that carry their gold answer (GOLD_KEYS: a label name or index; RACE: a letter or
    index), scored as they are written."""
    correct: int = 0
    scored: int = 0
    foreign: int = 0  # gold answers that are none of the model's labels (scored as wrong)
    example: str = ""  # the first of them, with the model's labels
    unscored: int = 0  # gold values given to a regression model: echoed, not scored

    def add(self, gold: object, result: Dict[str, object]) -> None:
        predicted = result.get("label", result.get("answer"))
        if predicted is None:  # a regression's value
            self.unscored += 1
            return
        names = list(result["probabilities"])
        wanted = names[gold] if isinstance(gold, int) and 0 <= gold < len(names) else str(gold)
        if wanted not in names:
            self.foreign += 1
            self.example = self.example or f"{gold!r}; the model's: {', '.join(names)}"
        self.scored += 1
        self.correct += wanted == predicted

    def lines(self, path: str) -> List[str]:
        found = [f"accuracy {self.correct / self.scored:.4f}: {self.correct} of the {self.scored} requests of {path} "
                 f"with a gold answer"] if self.scored else []
        if self.foreign:
            found.append(f"warning: {self.foreign} gold answer(s) are none of the model's labels (first: "
                         f"{self.example}): scored as wrong; --labels names the labels in label-id order")
        if self.unscored:
            found.append(f"note: {self.unscored} gold value(s) given to a regression model: echoed, not scored")
        return found


def write_answers(answer_requests: Callable[[List[Dict[str, object]]], List[Dict[str, object]]],
                  requests: Iterable[Dict[str, object]], out: TextIO, accuracy: Accuracy) -> None:
    """One JSON line per request, with its id (and its gold answer, scored into `accuracy`), CHUNK_REQUESTS requests
    read and made into features at a time."""
    requests = iter(requests)
    while True:
        chunk = list(itertools.islice(requests, CHUNK_REQUESTS))
        if not chunk:
            return
        for request, result in zip(chunk, answer_requests(chunk)):
            gold = next((request[key] for key in GOLD_KEYS if key in request), None)
            if gold is not None:
                accuracy.add(gold, result)
            echoed = {} if gold is None else {"gold": gold}
            out.write(json.dumps({"id": request["id"], **result, **echoed}, ensure_ascii=False, default=float) + "\n")


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    check_args(args)
    shape = model_shape(args)
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

    from src.progress import counting, progress
    from src.run_log import log_to

    accuracy = Accuracy()
    if not args.input_file:
        print(json.dumps(answer_requests([request])[0], ensure_ascii=False, default=float))
    elif not args.output_file:
        with progress("requests", total, " requests") as bar:
            write_answers(counting(answer_requests, bar), read_requests(args.input_file, args.task, shape.choices),
                          sys.stdout, accuracy)
    else:
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
