"""What export.py adds to the ONNX file MindSpore writes, and where servers read it back.

Output names: MindSpore names an ONNX graph's outputs by its own node numbers ("178"), while export.py prints the
task's names (`outputs: logits float32 [1, 2]`) and ONNX Runtime's `session.run(["logits"], ...)` or OpenVINO's
`compiled.output("logits")` take outputs by name. `label_onnx` renames them to the task's (the registry's
`<task>_outputs`) in the staged file, before it is moved into place; the int8 ONNX file (ONNX Runtime's
quantize_dynamic keeps the graph's output names) and NNCF's OpenVINO IR (OpenVINO keeps an ONNX output's name as its
tensor name) are made from that file and inherit them. Their order is unchanged: taking outputs by position works.

The run's records: a train checkpoint records the tokenizer its data was made with (run_tokenizer), which src.predict
checks for a .ckpt (src.tasks.registry.check_trained_tokenizer), and a fine-tuning one the task of its data (run_task:
its label names and max_seq_length, src.tasks.registry.checkpoint_task), which src.predict answers with. An ONNX
export of such a checkpoint carries each record in the model's metadata_props (metadata_key: albert.run_tokenizer,
albert.run_task), which ONNX Runtime's quantize_dynamic keeps in the int8 file; NNCF's IR carries them in its rt_info
(rt_info_path: albert / run_tokenizer, albert / run_task; copied by src.serving.quantize.quantize_openvino: how
OpenVINO maps ONNX metadata on reading differs between its versions). MINDIR and AIR have no field of ours to carry
them (and export.py writes no file beside them): their tokenizer is not checked and their labels are 0, 1, ...
"""
import importlib.util
from typing import Dict, List, Sequence

from model_utils.errors import UserError

RUN_RECORDS = ("run_tokenizer", "run_task")  # a checkpoint's records of its run that its exports carry


def metadata_key(record: str) -> str:
    """The ONNX model's metadata_props key of the checkpoint's `record`."""
    return f"albert.{record}"


def rt_info_path(record: str) -> List[str]:
    """Where an OpenVINO IR made by export.py keeps the checkpoint's `record` (rt_info)."""
    return ["albert", record]


def require_onnx() -> None:
    """Before an ONNX export spends any time: the onnx package that label_onnx needs (not in requirements.txt, as
    for serving the file with ONNX Runtime)."""
    if importlib.util.find_spec("onnx") is None:
        raise UserError("--file_format ONNX: export.py names the file's outputs (and records the checkpoint's "
                        "tokenizer) with the onnx package: pip install onnx")


def checkpoint_labels(values: Dict[str, object]) -> Dict[str, str]:
    """The metadata an ONNX export of the checkpoint `values` carries: the records of its run it holds (none for
    converted weights and checkpoints of earlier versions, which stay unchecked as their .ckpt does)."""
    return {metadata_key(name): str(values[name]) for name in RUN_RECORDS if values.get(name) is not None}


def label_onnx(path: str, output_names: Sequence[str], metadata: Dict[str, str]) -> None:
    """The ONNX file `path` rewritten in place with its outputs named `output_names` (in order) and `metadata`
    added to its metadata_props; checked by onnx's checker before it is saved (a rename must leave a valid graph)."""
    import onnx

    model = onnx.load(path)
    if output_names:
        name_outputs(model.graph, output_names, path)
    for key, value in metadata.items():
        entry = next((prop for prop in model.metadata_props if prop.key == key), None) or model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.checker.check_model(model)
    onnx.save(model, path)


def name_outputs(graph, names: Sequence[str], path: str) -> None:
    """Rename the graph's outputs to `names`: the tensor itself (every node that writes or reads it, its
    value_info), so the graph keeps its nodes; a tensor returned twice, or a graph input returned as it is, gets an
    Identity node of the new name instead."""
    from onnx import helper

    old = [item.name for item in graph.output]
    if len(old) != len(names):
        raise UserError(f"{path}: MindSpore's ONNX export has {len(old)} output(s) ({', '.join(old)}), the task "
                        f"returns {len(names)} ({', '.join(names)})")
    written = {name for node in graph.node for name in node.output}
    renamed = {}
    for item, name in zip(graph.output, names):
        if item.name == name:
            continue
        if old.count(item.name) == 1 and item.name in written:
            renamed[item.name] = name
        else:
            graph.node.append(helper.make_node("Identity", [item.name], [name], name=f"{name}.identity"))
        item.name = name
    _rename_tensors(graph, renamed)


def _rename_tensors(graph, renamed: Dict[str, str]) -> None:
    """Every reference to a renamed tensor in `graph` and its subgraphs (If, Loop bodies read outer tensors)."""
    for node in graph.node:
        node.input[:] = [renamed.get(name, name) for name in node.input]
        node.output[:] = [renamed.get(name, name) for name in node.output]
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                _rename_tensors(subgraph, renamed)
    for info in graph.value_info:
        info.name = renamed.get(info.name, info.name)


def recorded_runs(model) -> Dict[str, str]:
    """The records of its checkpoint's run (JSON, keyed as in the checkpoint: run_tokenizer, run_task) an ONNX
    ModelProto carries; {} when it has none."""
    found = {prop.key: prop.value for prop in model.metadata_props}
    return {name: found[metadata_key(name)] for name in RUN_RECORDS if metadata_key(name) in found}
