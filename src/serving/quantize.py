"""int8 serving: an exported ONNX task head turned into ONNX Runtime's dynamically quantized form, or into an
OpenVINO model quantized by NNCF (see "int8 for OpenVINO" below).

What is quantized, and why (ONNX Runtime's recipe for BERT-family models, `quantize_dynamic`):
- the weight matrices of the dense layers (embedding projection, query/key/value, attention output, feed-forward,
  pooler) are stored as int8 with one scale per matrix; their inputs are quantized to uint8 on every call
  (`DynamicQuantizeLinear`), the products run as integer dot products (VNNI where the CPU has it) and come back to
  float32 before the bias. These products are nearly all of the work.
- float32 stays float32 where accuracy needs it or where there is no work to save: the embedding tables (a lookup),
  LayerNorm, GELU, the softmax and the two attention products between activations (scores and context: both operands
  change per request, and the softmax's small probabilities do not survive 8 bits), and the heads' last layers (the
  classifier, the answer start/end layers), whose outputs are the answers themselves.

MindSpore writes a dense layer as ONNX `Gemm` (bias included), which ONNX Runtime's dynamic quantization does not
take, so each is first rewritten as `MatMul` by the transposed weight (stored once, however many layers share it:
ALBERT's layers share their weights) followed by `Add` of the bias: the same function.

int8 for OpenVINO (`export.py --quantize int8 --engine openvino`): NNCF's post-training quantization, the path
OpenVINO documents for its int8 models. `nncf.quantize` runs the float32 ONNX export as OpenVINO reads it on real
inputs (calibration: the first rows of a MindRecord of the task's features), records the range of the activations
that enter each product and inserts int8 quantization there (static: the scales are fixed, nothing is measured per
call); `model_type=TRANSFORMER` is NNCF's setting for BERT-family models (it keeps softmax, LayerNorm and the
residual additions out of int8). How the activations entering the products are quantized is the export's choice
(Calibration.symmetric): symmetric (NNCF's PERFORMANCE preset: signed int8 around zero, so OpenVINO's int8 products need
no zero-point correction; faster at batch 32, level at batch 1) or asymmetric (its MIXED preset, NNCF's default for
this model type: each range as calibrated, with a zero point, which keeps the full 8 bits for GELU's mostly positive
outputs); their speed and their cost on real dev sets (bench_accuracy.py) are in benchmarks/results. The result is saved
as OpenVINO IR (<name>.xml + <name>.bin, with the ONNX file's records of its checkpoint's run, tokenizer and task, in
its rt_info; the weights left float stay float32: save_model does not compress a model NNCF quantized), which the CPU
plugin compiles into int8 products (AMX-INT8 or VNNI where the CPU has them).
"""
import logging
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Set

import numpy as np

from model_utils.errors import UserError
from src.serving.onnx_labels import RUN_RECORDS, rt_info_path

QUANTIZED_OPS = ("MatMul",)
CALIBRATION_ROWS = 300  # NNCF's default subset_size: the rows whose activations set the int8 ranges
VOCAB_INFO = ["albert", "vocab_size"]  # where the IR keeps the vocabulary size (NNCF's int8 table loses its name)


def _initializers(model) -> Dict[str, object]:
    return {init.name: init for init in model.graph.initializer}


def gemm_to_matmul(model) -> int:
    """Rewrite `Gemm(x, W, b)` with transB=1 and constant W (a dense layer) as `Add(MatMul(x, W^T), b)`, in place;
    returns how many were rewritten."""
    import onnx
    from onnx import helper, numpy_helper

    inits = _initializers(model)
    transposed: Dict[str, str] = {}
    nodes, rewritten = [], 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = attrs.get("transA", 0) == 0 and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
        if node.op_type != "Gemm" or not plain or attrs.get("transB", 0) != 1 or node.input[1] not in inits:
            nodes.append(node)
            continue
        weight = node.input[1]
        if weight not in transposed:
            transposed[weight] = f"{weight}.transposed"
            model.graph.initializer.append(numpy_helper.from_array(
                numpy_helper.to_array(inits[weight]).T.copy(), transposed[weight]))
        product = f"{node.output[0]}.matmul" if len(node.input) > 2 else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], transposed[weight]], [product], name=f"{node.name}.mm"))
        if len(node.input) > 2:
            nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]], name=f"{node.name}.add"))
        rewritten += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    used = {name for node in model.graph.node for name in node.input}
    kept = [init for init in model.graph.initializer if init.name in used]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    onnx.checker.check_model(model)
    return rewritten


def last_layers(model) -> List[str]:
    """Names of the MatMul nodes nearest each graph output (the head's last layers), found by walking back from
    the outputs through the nodes that are not products."""
    producer = {output: node for node in model.graph.node for output in node.output}
    found: Set[str] = set()
    seen: Set[str] = set()
    stack = [output.name for output in model.graph.output]
    while stack:
        name = stack.pop()
        node = producer.get(name)
        if node is None or node.name in seen:
            continue
        seen.add(node.name)
        if node.op_type in QUANTIZED_OPS:
            found.add(node.name)
        else:
            stack.extend(node.input)
    return sorted(found)


def quantize_int8(source: str, target: str) -> Dict[str, int]:
    """The float32 ONNX file `source` as a dynamically quantized int8 model at `target` (see the module docstring);
    returns counts for the log: dense layers quantized, kept float."""
    try:
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as err:
        raise UserError(f"int8 export needs onnx and onnxruntime ({err}): pip install onnx onnxruntime") from None
    model = onnx.load(source)
    rewritten = gemm_to_matmul(model)
    kept_float = last_layers(model)
    dense = [node.name for node in model.graph.node if node.op_type == "MatMul"
             and node.input[1] in _initializers(model)]
    prepared = f"{target}.float.onnx"
    onnx.save(model, prepared)
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process first: gemm_to_matmul is that step here
    try:
        quantize_dynamic(prepared, target, weight_type=QuantType.QInt8, op_types_to_quantize=list(QUANTIZED_OPS),
                         nodes_to_exclude=kept_float, extra_options={"MatMulConstBOnly": True})
    finally:
        root.setLevel(level)
        os.remove(prepared)
    return {"dense_layers": len(dense), "rewritten_gemm": rewritten,
            "quantized": len([name for name in dense if name not in kept_float]), "kept_float": len(kept_float)}


def missing_openvino_tools() -> List[str]:
    """The packages int8 for OpenVINO needs that are not installed (NNCF makes it, OpenVINO reads and writes it),
    found without importing them."""
    import importlib.util

    return [name for name in ("nncf", "openvino") if importlib.util.find_spec(name) is None]


def calibration_batches(path: str, columns: Sequence[str], row_shape: Sequence[int], batch: int,
                        rows: int) -> List[List[np.ndarray]]:
    """The first `rows` rows of the MindRecord data `path` (src.create_*'s features of the task: `columns`, each row
    of `row_shape`) as the export's input batches of `batch` rows, int32: the calibration of quantize_openvino.
    Only whole batches are used (the export takes `batch` rows a call); a shape the export does not take and fewer
    rows than one batch are refused, naming the file."""
    from src.data.pipelines import read_rows

    try:
        found = read_rows(path, columns, rows)
    except UserError as err:
        raise UserError(f"calibration_file: {err}") from None
    for column, values in found.items():
        if list(values.shape[1:]) != list(row_shape):
            raise UserError(f"calibration_file {path}: its {column} rows are {list(values.shape[1:])}, the export "
                            f"takes {list(row_shape)} (the last is export_seq_length): make the data with that "
                            f"--max_seq_length, or export at the data's")
    read = len(found[columns[0]])
    count = read // batch * batch
    if not count:
        fix = (f"raise calibration_rows ({rows})" if read == rows else
               "calibrate on a file with more rows, or export a smaller export_batch_size")
        raise UserError(f"calibration_file {path}: {read} row(s) read, fewer than one batch of the export "
                        f"(export_batch_size {batch}): {fix}")
    return [[found[column][start:start + batch].astype(np.int32) for column in columns]
            for start in range(0, count, batch)]


@dataclass(frozen=True)
class Calibration:
    """What NNCF quantizes an export with: input batches (arrays in the graph's order) and whether the activations
    entering the products get ranges centred on zero (see the module docstring)."""
    batches: Sequence[List[np.ndarray]]
    symmetric: bool = True


def quantize_openvino(source: str, target: str, calibration: Calibration) -> Dict[str, int]:
    """The float32 ONNX file `source` read by OpenVINO, quantized by NNCF on `calibration` and saved as OpenVINO IR
    `target` (.xml, the weights in the .bin beside it); returns counts for the log: quantization points inserted,
    calibration rows."""
    try:
        import nncf
        import openvino
    except ImportError as err:
        raise UserError(f"int8 for OpenVINO needs nncf and openvino ({err}): pip install nncf openvino") from None
    model = openvino.Core().read_model(source)
    vocab = _vocab_size(model)
    records = _onnx_records(source)
    preset = nncf.QuantizationPreset.PERFORMANCE if calibration.symmetric else nncf.QuantizationPreset.MIXED
    # each batch is one of NNCF's samples (its Dataset is not told the batch size, so it collects no statistics row by
    # row inside a batch: batchwise_statistics stays off)
    batches = list(calibration.batches)
    quantized = nncf.quantize(model, nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER, preset=preset,
                              subset_size=len(batches))
    if vocab is not None:
        quantized.set_rt_info(vocab, VOCAB_INFO)
    for name, record in records.items():
        quantized.set_rt_info(record, rt_info_path(name))
    openvino.save_model(quantized, target)
    return {"quantized": sum(op.get_type_name() == "FakeQuantize" for op in quantized.get_ops()),
            "rows": sum(len(inputs[0]) for inputs in batches)}


def _onnx_records(path: str) -> Dict[str, str]:
    """The records of its checkpoint's run export.py wrote into the ONNX file `path` (src/serving/onnx_labels.py)."""
    import onnx

    from src.serving.onnx_labels import recorded_runs

    return recorded_runs(onnx.load_model(path, load_external_data=False))


def openvino_records(model) -> Dict[str, str]:
    """The records of its checkpoint's run quantize_openvino copied into an IR ({} for an IR without them)."""
    return {name: str(model.get_rt_info(rt_info_path(name)).astype(str)) for name in RUN_RECORDS
            if model.has_rt_info(rt_info_path(name))}


def _vocab_size(model) -> Optional[int]:
    """The row count of the word-embedding table of an OpenVINO model read from our ONNX export."""
    return next((int(op.get_output_shape(0)[0]) for op in model.get_ops() if op.get_type_name() == "Constant"
                 and op.get_friendly_name().endswith("word_embeddings.embedding_table")), None)


def openvino_vocab_size(model) -> Optional[int]:
    """The vocabulary size quantize_openvino recorded in an IR (None for an IR made elsewhere)."""
    return int(model.get_rt_info(VOCAB_INFO).astype(int)) if model.has_rt_info(VOCAB_INFO) else None
