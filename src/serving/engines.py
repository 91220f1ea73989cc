"""Serving engines: what an exported model or a checkpoint takes and returns, checked against its task, and one
runner per format (MindSpore for .mindir, ONNX Runtime or OpenVINO for .onnx, OpenVINO for .xml, this package's
network for .ckpt) that `src.predict` calls with fixed-shape batches."""
import argparse
import os
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from model_utils.config import Config
from model_utils.errors import UserError
from src.common.fixed_shape_batches import Runner, cell_runner, real_rows, run_padded
from src.tasks.registry import TASKS, check_trained_tokenizer, checkpoint_task

DEFAULT_BATCH = 32
DEFAULT_SEQ = 128
# Where a sequence length the model leaves open came from (ModelShape.seq_source; see open_length).
RECORDED_SEQ = "the max_seq_length of the data it was fine-tuned on"
DEFAULT_SEQ_SOURCE = f"the default, {DEFAULT_SEQ}"
SUFFIXES = (".mindir", ".onnx", ".xml", ".ckpt")
# Feature key of the data tools (the task's head_inputs) -> the exported input's name (the head's argument).
EXPORT_NAMES = {"input_ids": "input_ids", "segment_ids": "token_type_ids", "input_mask": "input_mask",
                "p_mask": "p_mask"}


@dataclass
class ModelShape:
    """What features a model takes, known before it is loaded."""
    batch: Optional[int]  # rows per call of a fixed-batch export; None when any batch runs
    seq: int
    choices: int  # RACE: options per question (1 for the other tasks)
    vocab: Optional[int]  # the model's vocabulary size, where the file says it
    # the records of its checkpoint's run (JSON by name: run_tokenizer, run_task) the .ckpt or its export carries
    records: Dict[str, str] = field(default_factory=dict)
    # the run_task record read: the task of the data it was fine-tuned on (task_name, label_list, max_seq_length)
    fine_tuned_on: Dict[str, object] = field(default_factory=dict)
    seq_source: str = "the length it was exported with"  # where `seq` came from, as messages name it


Signature = Tuple[List[Tuple[str, List[int]]], int, Optional[int], Dict[str, str]]


def model_signature(path: str) -> Signature:
    """(input name, shape) of each graph input (batch or sequence -1 when dynamic), the number of outputs, the
    model's vocabulary size and the records of its checkpoint's run it carries (ONNX, OpenVINO IR; none for MINDIR,
    which cannot carry them), read from the MINDIR, ONNX or IR file so features can be made at the exported sequence
    length."""
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
    return inputs, outputs, (int(vocab[0]) if vocab else None), {}


def _onnx_signature(path: str) -> Signature:
    import onnx

    from src.serving.onnx_labels import recorded_runs

    try:
        model = onnx.load_model(path, load_external_data=False)
        graph = model.graph
    except Exception as err:  # protobuf's DecodeError
        raise UserError(f"{path} is not a readable ONNX model ({type(err).__name__})") from err
    check_external_data(path, graph)
    inputs = [(item.name, [dim.dim_value or -1 for dim in item.type.tensor_type.shape.dim]) for item in graph.input]
    vocab = [p.dims[0] for p in graph.initializer if p.name.endswith("word_embeddings.embedding_table")]
    return inputs, len(graph.output), (int(vocab[0]) if vocab else None), recorded_runs(model)


def _openvino_signature(path: str) -> Signature:
    """An OpenVINO IR's inputs (a dynamic dimension -1), outputs and the vocabulary size and records of its
    checkpoint's run export.py kept."""
    import openvino

    from src.serving.quantize import openvino_records, openvino_vocab_size

    try:
        model = openvino.Core().read_model(path)
    except RuntimeError as err:  # "Exception from <file:line>:", "Check ... failed at <file:line>:", then the reason
        reason = next((line.strip() for line in reversed(str(err).splitlines()) if line.strip()), type(err).__name__)
        raise UserError(f"{path} is not a readable OpenVINO IR model ({reason[:200]})") from err
    inputs = [(port.get_any_name(), [dim.get_length() if dim.is_static else -1 for dim in port.get_partial_shape()])
              for port in model.inputs]
    return inputs, len(model.outputs), openvino_vocab_size(model), openvino_records(model)


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
    from model_utils.config import ConfigError, check_not_network_config, load_yaml_documents, parse_cli
    from src.tasks.registry import task_copied, tasks_accepting

    if args.config_path:  # parse_cli's advice, --albert_config_file, is no flag of src.predict
        check_not_network_config(args.config_path, load_yaml_documents(args.config_path)[0], "src.predict reads "
                                 "the network from the json beside --model (MODEL.json or albert_config.json); "
                                 "--config_path takes the task yaml it was fine-tuned with")
    argv = ["--config_path", args.config_path] if args.config_path else []
    shipped = {name: task.config_file for name, task in TASKS.items()}
    try:
        config = parse_cli(TASKS[args.task].config_file, argv + (["--num_class", str(num_class)] if num_class else []))
    except ConfigError as err:
        fitting = tasks_accepting(args.config_path, shipped) if args.config_path and "unknown key" in str(err) else []
        if fitting:
            raise UserError(f"{args.config_path} is a {' or '.join(fitting)} task yaml, not a {args.task} one: pass "
                            f"the task yaml the checkpoint was fine-tuned with, or the --task it fits "
                            f"({', '.join(fitting)})") from None
        raise
    other, missing = task_copied(args.config_path, shipped, args.task) if args.config_path else ("", [])
    if other:
        raise UserError(f"{args.config_path} is a {other} task yaml (it holds every key of "
                        f"{Path(shipped[other]).name} and none of {args.task}'s own: {', '.join(missing)}), not a "
                        f"{args.task} one: pass the task yaml the checkpoint was fine-tuned with, or the --task it "
                        f"fits")
    return config


def model_shape(args: argparse.Namespace) -> ModelShape:
    """An export's input shape from its file; a checkpoint's from --seq_length and the task yaml (RACE's choices).
    A length the model leaves open (a .ckpt without --seq_length, an export of dynamic sequence length) is taken by
    open_length."""
    if args.model.endswith(".ckpt"):
        choices = task_config(args).num_class if TASKS[args.task].choices else 1
        records = checkpoint_records(args.model)
        shape = ModelShape(None, args.seq_length, choices, None, records, checkpoint_task(records, args.model),
                           "--seq_length")
        return shape if args.seq_length else open_length(shape)
    inputs, outputs, vocab, records = model_signature(args.model)
    check_model(args.model, args.task, inputs, outputs)
    dims = inputs[0][1]
    shape = ModelShape(dims[0] if dims[0] > 0 else None, dims[-1], dims[1] if len(dims) == 3 else 1, vocab, records,
                       checkpoint_task(records, args.model))
    return shape if shape.seq > 0 else open_length(shape)


def open_length(shape: ModelShape) -> ModelShape:
    """`shape` with the sequence length the model leaves open: the max_seq_length of the data it was fine-tuned on,
    where its run recorded it (was: 128 without a word, whatever the data's length), else DEFAULT_SEQ."""
    recorded = shape.fine_tuned_on.get("max_seq_length")
    if isinstance(recorded, int) and recorded > 0:
        return replace(shape, seq=recorded, seq_source=RECORDED_SEQ)
    return replace(shape, seq=DEFAULT_SEQ, seq_source=DEFAULT_SEQ_SOURCE)


def checkpoint_records(path: str) -> Dict[str, str]:
    """The records of its run a .ckpt carries (RUN_RECORDS), read alone: its weights are read once, by
    checkpoint_runner, which names a file MindSpore cannot read in one line ({} here)."""
    import mindspore as ms

    from src.serving.onnx_labels import RUN_RECORDS

    try:
        values = ms.load_checkpoint(path, choice_func=RUN_RECORDS.__contains__)
    except Exception:  # MindSpore raises ValueError/RuntimeError for damaged or foreign files
        return {}
    return {name: str(values[name]) for name in RUN_RECORDS if name in values}


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

    from src.devices.device_setup import setup_device

    setup_device(device_target)
    return cell_runner(nn.GraphCell(ms.load(path)))

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
    CPU with the compiled kernels (src/model/cpu_kernels.py), in float32 or with bfloat16 or int8 products
    (--precision)."""
    from src.common.checkpoint_io import read_checkpoint
    from src.devices.device_setup import kernels_status, serving_runtime, setup_device
    from src.model import cpu_kernels
    from src.serving.finetuned_heads import build_head, head_network

    device = setup_device(args.device_target, cpu_threads=args.threads)
    values = read_checkpoint(args.model)
    classes = values.get("classifier.weight")
    num_class = int(classes.shape[0]) if args.task == "classifier" and classes is not None else None
    source = args.config_path or f"the shipped {Path(TASKS[args.task].config_file).name}"
    config = task_config(args, num_class)
    net = head_network(values, args.task, config, args.model, source, by_flag=True)
    if shape.seq > net.max_position_embeddings:
        given = shape.seq_source == "--seq_length"
        length = f"--seq_length {shape.seq}" if given else f"sequence length {shape.seq} ({shape.seq_source})"
        raise UserError(f"{length} exceeds the network's max_position_embeddings {net.max_position_embeddings}"
                        f"{'' if given else ': pass a --seq_length within it'}")
    check_vocabulary(tokenizer, net.vocab_size)
    check_trained_tokenizer(values, tokenizer, args.model)
    if args.precision != "float32":
        check_low_precision_products(device.target, args.precision)
    if device.target == "CPU":  # --precision decides, whatever compute type the checkpoint was trained in
        net = replace(net, compute_type="bfloat16" if args.precision == "bfloat16" else "float32")
    runtime = serving_runtime(device.target, net.compute_type, args.precision)
    model = build_head(values, args.task, config, net, runtime, args.model)
    # the kernels' status line, which says why when they are off here; "MindSpore operations" when not asked for
    kernels_off = device.target != "CPU" or not cpu_kernels.available()
    engine = kernels_status(device.target) if runtime.kernels or kernels_off else "MindSpore operations"
    engine += f", {args.precision} products" if args.precision != "float32" else ""
    print(f"{args.model}: {args.task} head, {net.num_hidden_layers} layers, hidden {net.hidden_size}, seq {shape.seq}, "
          f"on {device.target} in this process ({engine})", file=sys.stderr)
    return cell_runner(model)


def check_low_precision_products(target: str, precision: str) -> None:
    """--precision bfloat16 and int8 are the compiled kernels' products in that precision (the CPU's support for
    them is checked with the flags): say in one line why they do not run here."""
    from src.devices.device_setup import kernels_status
    from src.model import cpu_kernels

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
    """The engine of the model's format; an export carrying its checkpoint's tokenizer record is checked against
    `tokenizer` first, as the .ckpt itself is (in checkpoint_runner). A sequence length the model left open is said
    in one line on stderr, once the model is ready."""
    if not args.model.endswith(".ckpt"):
        check_trained_tokenizer(shape.records, tokenizer, args.model)
    if args.engine == "openvino":
        runner = openvino_runner(args.model, args.threads, args.precision)
    elif args.model.endswith(".onnx"):
        runner = onnxruntime_runner(args.model, args.threads)
    elif args.model.endswith(".ckpt"):
        runner = checkpoint_runner(args, shape, tokenizer)
    else:
        runner = mindspore_runner(args.model, args.device_target)
    checkpoint = args.model.endswith(".ckpt")
    if shape.seq_source == RECORDED_SEQ or not checkpoint and shape.seq_source == DEFAULT_SEQ_SOURCE:
        flag = " (--seq_length sets another)" if checkpoint else ""
        print(f"{args.model}: sequence length {shape.seq}, {shape.seq_source}{flag}", file=sys.stderr)
    return runner


def run_rows(run: Runner, rows: List[Dict[str, np.ndarray]], columns: Sequence[str], batch: int,
             fixed: bool) -> List[np.ndarray]:
    """The model's outputs for feature rows, `batch` rows per call (the last call padded with zero rows); a model
    that runs any batch gets fewer when there are fewer rows."""
    size = batch if fixed else min(batch, len(rows))
    batches = ([np.stack([row[column] for row in rows[start:start + size]]).astype(np.int32) for column in columns]
               for start in range(0, len(rows), size))
    return real_rows(run_padded(run, batches, size))


def check_vocabulary(tokenizer, model_vocab: Optional[int]) -> None:
    if model_vocab is not None and tokenizer.vocab_size > model_vocab:
        raise UserError(f"the tokenizer has {tokenizer.vocab_size} pieces but the model's vocabulary has "
                        f"{model_vocab}: use the tokenizer the model was trained with")
