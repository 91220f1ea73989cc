"""int8 serving: an exported ONNX task head turned into ONNX Runtime's dynamically quantized form.

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
"""
import logging
import os
from pathlib import Path
from typing import Dict, List, Set

from model_utils.errors import UserError

QUANTIZED_OPS = ("MatMul",)


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


def is_int8(path: str) -> bool:
    """Whether an ONNX file holds dynamically quantized products (what src.predict reports as its precision)."""
    import onnx

    model = onnx.load(str(Path(path)), load_external_data=False)
    return any(node.op_type in ("MatMulInteger", "DynamicQuantizeMatMul", "DynamicQuantizeLinear")
               for node in model.graph.node)
