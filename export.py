"""Export a fine-tuned ALBERT task head to MINDIR, ONNX or AIR for inference, or a pretrained or fine-tuned ALBERT
to an HF transformers model folder with its tokenizer.

    python export.py --config_path task_squad_v1_config.yaml --export_ckpt_file albert_squad_v1-1000.ckpt \
        --export_file_name out/albert_squad_v1 --file_format MINDIR [--export_seq_length 384] [--dynamic_batch true]
    python export.py ... --file_format ONNX --quantize int8      # int8 for ONNX Runtime (src/serving/quantize.py)
    python export.py ... --file_format ONNX --quantize int8 --engine openvino --calibration_file train.mindrecord
        # int8 for OpenVINO (NNCF, calibrated on the data's first rows): <name>.xml + <name>.bin
        # [--int8_activations asymmetric]: NNCF's default preset (symmetric: faster at batch 32)
    python export.py --file_format HF --task classifier --export_ckpt_file albert_classifier-800.ckpt \
        --export_file_name out/albert_mrpc --spm_model_file 30k-clean.model [--task_name mrpc]
    python export.py --file_format HF --task pretrain --export_ckpt_file albert_pretrain-1000.ckpt ...

--config_path is the task yaml the checkpoint was fine-tuned with. Its task is read from its file name
(task_<task>_config.yaml; any name containing classifier, race, squad_v1 or squad_v2, or pretrain for
pretrain_config.yaml), else from its keys when only one task's yaml has them all; --task overrides both (and without
--config_path uses the shipped yaml). Without either, the head is detected from the checkpoint's weights (and said).
Task yaml keys are flags here too (--num_class 3). The network is the yaml's albert_config_file, else the config saved
beside the checkpoint (run_*.py and src.convert_checkpoint write one), else the yaml's albert_network; then
net_cfg.

The exported model takes the head's inputs, int32 [batch, seq] ([batch, choices, seq] for RACE):
(input_ids, token_type_ids, input_mask[, p_mask for SQuAD]), and returns its float32 (and int32 index) outputs, in
ONNX (and the int8 and OpenVINO files made from it) under the names printed; an ONNX export of a checkpoint that
records its data's tokenizer and task carries those records (src/serving/onnx_labels.py), by which src.predict checks
the tokenizer and names the labels. See
`python -m src.predict` for running it on raw text. --file_format HF writes a folder for
`from_pretrained` instead (src/export/hf_export.py): the pretraining network (--task pretrain) or a classifier, RACE
or SQuAD v1.1 head; the SQuAD v2.0 head has no HF transformers class and is refused.
"""
import inspect
import os
import re
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from model_utils.config import (Config, check_not_network_config, flatten, load_yaml_documents, parse_cli,
                                suggestion)
from model_utils.errors import UserError, run_cli
from src.common.atomic_files import (check_folder_output, check_outputs, claimed_folder_of, make_readable, place,
                                     replace_folder)
from src.data.schema import column_dtype
from src.serving.quantize import (Calibration, calibration_batches, missing_openvino_tools, quantize_int8,
                                  quantize_openvino)
from src.tasks.registry import TASKS, Signature, tasks_accepting

ROOT = Path(__file__).resolve().parent
EXPORT_CONFIG = ROOT / "export_config.yaml"
# The yaml of each network export.py writes: the fine-tuning tasks' and, for --file_format HF, pretraining's.
TASK_CONFIGS = {**{name: task.config_file for name, task in TASKS.items()}, "pretrain": ROOT / "pretrain_config.yaml"}
ONNX_ACTIVATIONS = ("gelu", "gelu_new", "relu")  # exact GELU's Erf has no ONNX converter in MindSpore
MINDIR_VARIABLES = re.compile(r"data_\d+")  # the files of <name>_variables/, a split MINDIR's parameters


def infer_task(path: str) -> str:
    """The task of a task yaml: from its file name, else from the only shipped task yaml accepting all its keys."""
    name = Path(path).name.lower()
    named = [task for task in TASK_CONFIGS if re.search(rf"(^|[^a-z0-9]){task}([^a-z0-9]|$)", name)]
    if len(named) == 1:
        return named[0]
    fitting = tasks_accepting(path, TASK_CONFIGS)
    if len(fitting) == 1:
        return fitting[0]
    why = f"its keys fit the {' and '.join(fitting)} yamls" if fitting else "its keys fit no task yaml"
    raise UserError(f"cannot tell the task of {path} ({why}; its name has none of {', '.join(TASK_CONFIGS)}): pass "
                    f"--task {'|'.join(fitting or TASK_CONFIGS)}")


def _flag_value(argv: Sequence[str], index: int) -> Tuple[Optional[str], int]:
    """The value of the flag at argv[index] (`--key value` or `--key=value`; None for a flag given alone, which
    parse_cli takes as true for a true/false key) and how many items it took."""
    if "=" in argv[index]:
        return argv[index].split("=", 1)[1], 1
    if index + 1 >= len(argv) or argv[index + 1].startswith("--"):
        return None, 1
    return argv[index + 1], 2


def split_argv(argv: Sequence[str], export_keys: Sequence[str]) -> Tuple[str, List[str], List[str]]:
    """(task yaml path, export flags, task yaml flags): --config_path names the task yaml, not an export yaml."""
    config_path, mine, theirs = "", [], []
    index = 0
    while index < len(argv):
        arg = argv[index]
        if arg in ("-h", "--help"):
            mine.append(arg)
            index += 1
            continue
        name = arg[2:].split("=", 1)[0] if arg.startswith("--") else None
        if name is None:
            theirs.append(arg)  # parse_cli reports it as an unexpected argument
            index += 1
            continue
        value, used = _flag_value(argv, index)
        if name == "config_path":
            if value is None:
                raise UserError("--config_path needs a value: the task yaml the checkpoint was trained with")
            config_path = value
        else:
            (mine if name in export_keys else theirs).extend(argv[index:index + used])
        index += used
    return config_path, mine, theirs


def read_configs(argv: Sequence[str]) -> Tuple[Config, Config, str, str, str]:
    """(export config, task config, task, where the task came from, the task yaml given or "")."""
    export_keys = list(flatten(load_yaml_documents(EXPORT_CONFIG)[0]))
    config_path, mine, theirs = split_argv(argv, export_keys)
    args = parse_cli(EXPORT_CONFIG, mine, __doc__.splitlines()[0] + " --config_path is the task yaml the checkpoint "
                     "was trained with (task_<task>_config.yaml); its keys are flags too (--num_class 3).")
    if config_path and not os.path.isfile(config_path):
        if not (ROOT / config_path).is_file():  # a shipped task yaml named from another working directory
            raise UserError(f"config_path not found: {config_path}")
        config_path = str(ROOT / config_path)
    if config_path:  # before its task is inferred from its keys
        check_not_network_config(config_path, load_yaml_documents(config_path)[0], "pass it as --albert_config_file "
                                 "(--config_path takes the task yaml the checkpoint was fine-tuned with)")
    if args.task:
        task, source = args.task, f"--task {args.task}"
    elif config_path:
        task, source = infer_task(config_path), config_path
    else:
        task, theirs, detected = detect_task(args.export_ckpt_file, theirs)
        source = f"the head detected in {args.export_ckpt_file}"
    task_file = TASK_CONFIGS[task]
    _check_flags(theirs, export_keys, list(flatten(load_yaml_documents(task_file)[0])))
    task_argv = (["--config_path", config_path] if config_path else []) + theirs
    task_config = parse_cli(task_file, task_argv)
    if not (args.task or config_path):
        print(detected)  # once the flags are known good: a misspelled flag is the one line of a failed run
    return args, task_config, task, source, config_path


def detect_task(checkpoint: str, flags: List[str]) -> Tuple[str, List[str], str]:
    """The task of a checkpoint exported without --config_path or --task, told by its weights, the task yaml flags
    with a classifier's class count added (unless they set num_class), and the line that says so."""
    from src.common.checkpoint_io import read_checkpoint
    from src.serving.finetuned_heads import detected_task

    check_checkpoint_given(checkpoint)
    values = read_checkpoint(checkpoint)
    task, why = detected_task(values, checkpoint)
    detected = f"task: {task}, detected from the weights of {checkpoint} ({why}); --task or --config_path chooses"
    if task == "classifier" and not any(flag.split("=", 1)[0] == "--num_class" for flag in flags):
        flags = [*flags, "--num_class", str(int(values["classifier.weight"].shape[0]))]
    return task, flags, detected


def check_checkpoint_given(checkpoint: str) -> None:
    if not checkpoint:
        raise UserError("set --export_ckpt_file (the checkpoint to export)")
    if not os.path.isfile(checkpoint):
        raise UserError(f"export_ckpt_file not found: {checkpoint}")


def _check_flags(flags: Sequence[str], export_keys: List[str], task_keys: List[str]) -> None:
    """An unknown flag is named with the closest export or task key (the task yaml alone would miss typos of
    export flags)."""
    for flag in flags:
        name = flag[2:].split("=", 1)[0] if flag.startswith("--") else None
        if name is not None and name not in task_keys:
            raise UserError(f"unknown option '--{name}'{suggestion(name, export_keys + task_keys, prefix='--')}")


def check_request(args: Config, task: str) -> None:
    """Everything decidable from the flags alone, before MindSpore does any work."""
    check_checkpoint_given(args.export_ckpt_file)
    if args.quantize == "int8" and args.file_format != "ONNX":
        made = ("quantizes the ONNX export into OpenVINO IR" if args.engine == "openvino" else
                "makes an ONNX model for ONNX Runtime")
        raise UserError(f"--quantize int8 {made} (MindSpore has no int8 {args.file_format} export on this path): add "
                        f"--file_format ONNX")
    check_openvino_request(args)
    if args.dynamic_batch and args.file_format != "MINDIR":
        raise UserError(f"dynamic_batch works with MINDIR only (MindSpore exports {args.file_format} with fixed "
                        f"shapes): drop --dynamic_batch or use --file_format MINDIR")
    if args.file_format == "HF":
        from src.export.hf_export import check_hf_request

        check_hf_request(args, task, output_name(args))
        return
    if task == "pretrain":
        raise UserError(f"--task pretrain exports the pretraining network as an HF transformers folder only: add "
                        f"--file_format HF ({args.file_format} exports fine-tuned task heads)")
    if args.spm_model_file or args.vocab_file or args.task_name or args.eval_results or args.base_model:
        raise UserError("--spm_model_file, --vocab_file, --task_name, --eval_results and --base_model go with "
                        "--file_format HF (the tokenizer, label names and model card of an HF model folder); a "
                        f"{args.file_format} file takes token ids")
    if args.file_format == "ONNX":
        from src.serving.onnx_labels import require_onnx
        require_onnx()
    inputs = {"--export_ckpt_file": args.export_ckpt_file,
              **({"--calibration_file": args.calibration_file} if args.calibration_file else {})}
    files, folders = planned_outputs(output_name(args), args.file_format, args.engine)
    check_outputs(files, args.overwrite, inputs)
    for folder in folders:
        check_folder_output(folder, args.overwrite, MINDIR_VARIABLES.fullmatch, inputs)


def check_openvino_request(args: Config) -> None:
    """--engine openvino (int8 by NNCF) and its flags (calibration, activations) go together, with nncf and openvino
    installed."""
    if args.engine == "openvino" and args.quantize != "int8":
        raise UserError("--engine openvino makes the int8 model for OpenVINO (NNCF): add --quantize int8 (a float32 "
                        ".onnx export is served by OpenVINO as it is: src.predict --engine openvino)")
    if args.engine != "openvino":
        defaults = load_yaml_documents(EXPORT_CONFIG)[0]
        given = [f"--{key}" for key in ("calibration_file", "calibration_rows", "int8_activations")
                 if args[key] != defaults[key]]
        if given:
            raise UserError(f"{given[0]} goes with --quantize int8 --engine openvino (ONNX Runtime's int8 quantizes "
                            f"activations per call, its own way, and needs no calibration)")
        return
    if not args.calibration_file:
        raise UserError("--quantize int8 --engine openvino calibrates on real inputs: set --calibration_file (a "
                        "MindRecord of the task's features made by src.create_finetune_data or src.create_squad_data, "
                        "e.g. the fine-tuning train set)")
    missing = missing_openvino_tools()
    if missing:
        raise UserError(f"--engine openvino: int8 for OpenVINO is made by NNCF: pip install {' '.join(missing)}")


def output_name(args: Config) -> str:
    """Where the export goes, before MindSpore's suffix (the checkpoint's path when not given)."""
    return args.export_file_name or os.path.splitext(args.export_ckpt_file)[0]


def split_suffix(file_name: str, file_format: str, engine: str = "onnxruntime") -> Tuple[str, str]:
    """(name without the format's suffix, the suffix): MindSpore appends the suffix itself. For OpenVINO the name
    may also end in .xml, the suffix of the IR written in the ONNX file's place."""
    suffix = "." + file_format.lower()
    for ending in (suffix, ".xml") if engine == "openvino" else (suffix,):
        if file_name.lower().endswith(ending):
            return file_name[:-len(ending)], suffix
    return file_name, suffix


def planned_outputs(file_name: str, file_format: str, engine: str = "onnxruntime") -> Tuple[List[str], List[str]]:
    """(files, folders): every path an export of `file_name` may write (a MINDIR over 1 GB is <name>_graph.mindir +
    <name>_variables/; int8 for OpenVINO is <name>.xml + <name>.bin)."""
    base, suffix = split_suffix(file_name, file_format, engine)
    if engine == "openvino":
        return [base + ".xml", base + ".bin"], []
    if file_format == "MINDIR":
        return [base + suffix, base + "_graph.mindir"], [base + "_variables"]
    return [base + suffix], []


def export_runtime(file_format: str, target: str, compute_type: str):
    """How a network is built for export to `file_format` on `target` (a src.model.albert.Runtime): never with the
    compiled CPU kernels (the file must load where this machine's .so is not). MINDIR and AIR keep the layout the
    network has on `target` without them. ONNX moves the heads by transposes (MindSpore's ONNX export has no Unstack
    converter), adds the mask by broadcasting, and writes LayerNorm and the tanh GELU as the patterns ONNX Runtime
    fuses.
    A compute type `target` cannot run is refused as for training."""
    from src.devices.device_setup import model_runtime
    from src.model.albert import Runtime

    on_device = model_runtime(target, compute_type, kernels=False)
    if file_format == "ONNX":
        return Runtime(onnx_patterns=True)
    return on_device


def build_network(args: Config, task: str, task_config: Config, source: str, target: str):
    """The task head with the checkpoint's weights (every parameter loaded), in inference mode, built for export
    from `target`; its network config; the metadata an ONNX export of it carries (src/serving/onnx_labels.py)."""
    from src.common.checkpoint_io import read_checkpoint
    from src.serving.finetuned_heads import build_head, head_network
    from src.serving.onnx_labels import checkpoint_labels

    checkpoint = args.export_ckpt_file
    values = read_checkpoint(checkpoint)
    net = head_network(values, task, task_config, checkpoint, source, by_flag=bool(args.task))
    if args.file_format == "ONNX" and net.hidden_act not in ONNX_ACTIVATIONS:
        raise UserError(f"ONNX export needs hidden_act {', '.join(ONNX_ACTIVATIONS)} (MindSpore cannot convert "
                        f"{net.hidden_act}'s Erf to ONNX); use MINDIR, or a model fine-tuned with a tanh GELU")
    if args.export_seq_length > net.max_position_embeddings:
        raise UserError(f"export_seq_length {args.export_seq_length} exceeds the network's max_position_embeddings "
                        f"{net.max_position_embeddings}")
    if target == "CPU" and net.compute_type == "bfloat16":
        # bfloat16 on CPU exists only as the compiled kernels' products in this package's process: the file is float32
        print("note: compute_type bfloat16 (the CPU kernels' products) is exported as float32; for bfloat16 products "
              "serve the .ckpt with src.predict --precision bfloat16")
        net = replace(net, compute_type="float32")
    runtime = export_runtime(args.file_format, target, net.compute_type)
    return build_head(values, task, task_config, net, runtime, checkpoint), net, checkpoint_labels(values)


def export_atomically(model, inputs: Sequence[object], file_name: str, file_format: str,
                      quantize: str = "none", overwrite: bool = False,
                      calibration: Optional[Calibration] = None, output_names: Sequence[str] = (),
                      metadata: Optional[Dict[str, str]] = None) -> List[str]:
    """ms.export of `model` (built with `export_runtime(file_format, ...)`) into a hidden folder beside the target
    (the folder claimed for this run: see claimed_folder_of), then move what it wrote into place, readable by others
    (MindSpore writes 0400; see make_readable): a failed export leaves nothing behind and readers never see half a
    file. MindSpore appends the format's suffix itself (and writes <name>_graph.mindir + <name>_variables/ for models
    over 1 GB); returns the written paths. `quantize` int8 (ONNX): the file is made int8 before it is moved, for
    ONNX Runtime, or, given `calibration` (NNCF's, src/serving/quantize.py), for OpenVINO: <name>.xml + <name>.bin
    in its place.
    `overwrite`: an earlier export of the name is replaced (check_request checked what it is), else never.
    ONNX: the file's outputs get `output_names` and its metadata_props `metadata` before any of that
    (src/serving/onnx_labels.py), so the int8 file and the IR made from it carry them too."""
    base, suffix = split_suffix(file_name, file_format, "openvino" if calibration is not None else "onnxruntime")
    if not os.path.basename(base) or os.path.isdir(base):
        raise UserError(f"export_file_name must name a file (MindSpore adds {suffix}), not a folder: {file_name}")
    with claimed_folder_of(base, "export_file_name"):
        labels = (output_names, metadata or {})
        return _export_staged(model, inputs, base, file_format, quantize, overwrite, calibration, labels)


def _export_staged(model, inputs: Sequence[object], base: str, file_format: str, quantize: str,
                   overwrite: bool, calibration: Optional[Calibration],
                   labels: Tuple[Sequence[str], Dict[str, str]]) -> List[str]:
    import mindspore as ms

    suffix = "." + file_format.lower()
    folder = os.path.dirname(os.path.abspath(base))
    staging = tempfile.mkdtemp(prefix=".tmp-export-", dir=folder)
    try:
        try:
            ms.export(model, *inputs, file_name=os.path.join(staging, os.path.basename(base)),
                      file_format=file_format)
        except (RuntimeError, ValueError, TypeError) as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise UserError(f"MindSpore could not export the model to {file_format}: {reason}") from err
        if file_format == "ONNX" and any(labels):
            from src.serving.onnx_labels import label_onnx

            label_onnx(os.path.join(staging, os.path.basename(base) + suffix), *labels)
        if quantize == "int8" and calibration is not None:
            _quantize_openvino_in_place(os.path.join(staging, os.path.basename(base)), suffix, calibration)
        elif quantize == "int8":
            _quantize_in_place(os.path.join(staging, os.path.basename(base) + suffix))
        written = []
        for entry in sorted(os.listdir(staging)):
            source, target = os.path.join(staging, entry), os.path.join(folder, entry)
            make_readable(source)
            if overwrite and os.path.isdir(source) and os.path.lexists(target):
                replace_folder(source, target, staging + ".old", MINDIR_VARIABLES.fullmatch)
            else:
                place(source, target, overwrite)
            written.append(target)
        return written
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _quantize_in_place(path: str) -> None:
    float_copy = path + ".float32"
    os.replace(path, float_copy)
    counts = quantize_int8(float_copy, path)
    os.remove(float_copy)
    print(f"int8: {counts['quantized']} dense layer(s) quantized, {counts['kept_float']} kept float32 (the layers "
          f"giving the outputs); embeddings, LayerNorm, softmax and the attention products float32")


def _quantize_openvino_in_place(base: str, suffix: str, calibration: Calibration) -> None:
    """The staged ONNX file <base><suffix> replaced by NNCF's int8 OpenVINO IR <base>.xml + <base>.bin."""
    counts = quantize_openvino(base + suffix, base + ".xml", calibration)
    os.remove(base + suffix)
    print(f"int8 for OpenVINO (NNCF): {counts['quantized']} quantization point(s), activations "
          f"{'symmetric' if calibration.symmetric else 'asymmetric'}, calibrated on {counts['rows']} row(s)")


def _describe(signature: Signature) -> str:
    return ", ".join(f"{name} {dtype} [{', '.join(str(d) for d in shape)}]" for name, dtype, shape in signature)


def export_hf_folder(args: Config, task: str, task_config: Config, source: str, config_path: str) -> int:
    """--file_format HF: weights, tokenizer files and model card, no device involved."""
    from src.common.run_log import log_to
    from src.export.hf_export import export_hf, summary_lines

    done = export_hf(args, task, task_config, source, output_name(args), config_path)
    log_to(os.path.dirname(os.path.abspath(output_name(args))))
    print("\n".join(summary_lines(task, args.export_ckpt_file, done)))
    return 0


def main(argv: List[str]) -> int:
    args, task_config, task, source, config_path = read_configs(argv)
    check_request(args, task)
    if args.file_format == "HF":
        return export_hf_folder(args, task, task_config, source, config_path)
    from src.devices.device_setup import pick_device_target, setup_device

    if args.file_format == "AIR" and pick_device_target(args.device_target) != "Ascend":
        raise UserError("AIR export needs an Ascend device; use MINDIR or ONNX")
    import mindspore as ms
    import numpy as np
    from mindspore import Tensor

    seq = args.export_seq_length
    batch = None if args.dynamic_batch else args.export_batch_size
    shape = TASKS[task].input_shape(task_config, batch, seq)
    calibration = None
    if args.engine == "openvino":  # read before any work: bad data stops the run at once
        calibration = Calibration(calibration_batches(args.calibration_file, TASKS[task].head_inputs, shape[1:],
                                                      batch, args.calibration_rows),
                                  symmetric=args.int8_activations == "symmetric")
    device = setup_device(args.device_target, args.device_id)
    model, net, metadata = build_network(args, task, task_config, source, device.target)
    names = list(inspect.signature(model.construct).parameters)
    dtypes = [column_dtype(column) for column in TASKS[task].head_inputs]  # in the head's argument order
    if batch is None:
        inputs = [Tensor(shape=shape, dtype=getattr(ms, dtype)) for dtype in dtypes]
    else:
        inputs = [Tensor(np.zeros(shape, dtype)) for dtype in dtypes]
    shown_batch = "batch" if batch is None else batch
    shown_shape = [shown_batch] + shape[1:]
    outputs = TASKS[task].outputs(task_config, shown_batch, seq)
    written = export_atomically(model, inputs, output_name(args), args.file_format, args.quantize, args.overwrite,
                                calibration, [name for name, _, _ in outputs], metadata)
    from src.common.run_log import log_to

    log_to(os.path.dirname(os.path.abspath(output_name(args))))
    made = "OpenVINO IR int8" if calibration is not None else \
        f"{args.file_format}{' int8' if args.quantize == 'int8' else ''}"
    print(f"exported the {task} head of {args.export_ckpt_file} ({net.num_hidden_layers} layers, hidden "
          f"{net.hidden_size}, {device.target}) as {made}: {', '.join(written)}")
    print(f"inputs:  {_describe([(name, dtype, shown_shape) for name, dtype in zip(names, dtypes)])}")
    print(f"outputs: {_describe(outputs)}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
