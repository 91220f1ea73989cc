"""What bench_train.py and bench_infer.py share: the command line, the ALBERT config (ours and HF's), the worker
processes and their protocol, FLOP counts, statistics, the table and the JSON.

Why worker processes: each side (this package on MindSpore, HF transformers on PyTorch, ONNX Runtime) runs in its
own process that builds its model once and then runs rounds of N steps when the parent asks, so

- each side's peak RSS (VmHWM of its own process) holds only its own framework and model;
- the sides alternate (ours, torch, torch, ours, ...; with more sides the order reverses every round) within one
  run, so a noisy shared machine slows all alike; an idle side blocks on its stdin and takes no CPU;
- the thread count is set once per process (MindSpore's op_tuning.threads_num, torch.set_num_threads, ONNX
  Runtime's intra_op_num_threads).

Protocol (JSON lines; the worker's stdout is kept for it, anything the frameworks print goes to its stderr,
which the parent keeps in a log file and shows the end of when a worker fails):

    parent -> worker   {spec}                       worker builds, measures its sgemm peak, runs the first step
    worker -> parent   {"ready": true, "framework", "matmul_gflops", "build_s", "first_s", "check", ...}
    parent -> worker   {"cmd": "round", "steps": N}
    worker -> parent   {"times": [seconds per step], "rss_mb": ...}
    parent -> worker   {"cmd": "profile", "steps": N}          (--profile N, after the timed rounds)
    worker -> parent   {"profile": [{"op", "ms_per_step", "calls_per_step"}, ...]}
    parent -> worker   {"cmd": "quit"}
    worker -> parent   {"peak_rss_mb": ..., "matmul_gflops_end", ...}   measures its sgemm peak again and exits
    (any failure)      {"error": "..."}
"""
import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Type

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from model_utils.config import ArgumentParser  # noqa: E402  (light: no framework import in the CLI checks)
from model_utils.errors import UserError, as_user_error  # noqa: E402

WORKER_FLAG = "--worker"  # internal: `python bench_x.py --worker` is a worker process
PAUSE_S = 0.3  # between rounds, so the previous side's thread pool has gone to sleep before the next starts
SWEEP_SEQ_LENGTHS = (128, 256, 512)
# Ours -> HF hidden_act: our "gelu" is Google's tanh approximation, HF's "gelu" is the exact erf GELU.
HF_ACT = {"gelu": "gelu_new", "gelu_new": "gelu_new", "gelu_exact": "gelu", "relu": "relu"}
HF_KEYS = ("vocab_size", "embedding_size", "hidden_size", "num_hidden_layers", "num_hidden_groups",
           "inner_group_num", "num_attention_heads", "intermediate_size", "hidden_dropout_prob",
           "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size", "initializer_range",
           "layer_norm_eps")
# What each --compare choice needs installed.
COMPARE_MODULES = {"torch": ("torch", "transformers"),
                   "onnxruntime": ("torch", "transformers", "onnx", "onnxscript", "onnxruntime"),
                   "openvino": ("torch", "transformers", "onnx", "onnxscript", "onnxruntime", "openvino"),
                   "kernels": ("torch", "transformers"),  # HF's model makes the weights every side shares
                   "bf16": ("torch", "transformers"), "int8": ("torch", "transformers"),
                   "torch_bf16": ("torch", "transformers"),
                   "torch_compile": ("torch", "transformers"), "torch_compile_bf16": ("torch", "transformers")}
STAT_KEYS = ("median_ms", "min_ms", "samples_per_s", "tokens_per_s", "model_tflops", "fraction_of_peak",
             "matmul_gflops", "build_s", "first_s", "peak_rss_mb")


class WorkerError(Exception):
    """A worker process failed (not the user's input): one line plus the end of its log, exit code 1."""


# ---------------------------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------------------------
def int_list(text: str) -> List[int]:
    """'8' or '1,32' -> [8] or [1, 32], all >= 1."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return values


def compare_list(choices: Sequence[str], none: bool = True) -> Callable[[str], List[str]]:
    """--compare parser: 'none' -> [] (with `none`), 'torch,onnxruntime' -> ['torch', 'onnxruntime'] (each one of
    `choices`)."""
    def parse(text: str) -> List[str]:
        names = list(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
        if none and names == ["none"]:
            return []
        if not names or any(name not in choices for name in names):
            raise argparse.ArgumentTypeError(f"expected {'none or ' if none else ''}a comma-separated list of "
                                             f"{', '.join(choices)}, got {text!r}")
        return names
    return parse


def make_parser(doc: str, batch_default: str, steps_default: int, rounds_default: int,
                compare: Dict[str, str]) -> ArgumentParser:
    """The flags both benchmarks take (`compare`: --compare choice -> its help); the caller adds its own."""
    parser = ArgumentParser(description=doc.splitlines()[0], allow_abbrev=False,
                            formatter_class=argparse.RawDescriptionHelpFormatter, epilog=doc)
    parser.add_argument("--network", default="albert_base", help="preset name (src/model/albert.py PRESETS)")
    parser.add_argument("--albert_config_file", default="", help="an AlbertConfig json instead of the preset")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a config key, e.g. --set num_hidden_layers=2 (repeatable)")
    parser.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="also measure the config with these changes, e.g. share_type=none (repeatable)")
    parser.add_argument("--batch_size", type=int_list, default=int_list(batch_default), help="one or a list: 4,8")
    parser.add_argument("--seq_length", type=int_list, default=[128], help="one or a list: 128,256,512")
    parser.add_argument("--sweep", action="store_true",
                        help=f"seq_length {','.join(map(str, SWEEP_SEQ_LENGTHS))} (x every batch size and variant)")
    parser.add_argument("--steps", type=int, default=steps_default, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=rounds_default, help="rounds per side, alternating")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="threads of each framework (0 = the framework's default)")
    parser.add_argument("--compare", type=compare_list(tuple(compare)), default=[],
                        help="none, or a comma-separated list of " + "; ".join(f"{k}: {v}" for k, v in compare.items()))
    parser.add_argument("--peak_size", type=int, default=2048, help="n of the n^3 sgemm measuring the matmul peak")
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="after the timed rounds, profile N more steps per side and report time per operation "
                             "type (MindSpore's profiler, torch.profiler)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", default="", help="write the results as JSON here")
    return parser


def check_output(path: str, flag: str = "--output") -> None:
    """Where the JSON goes, checked before anything is measured (a run is not lost at its end): a file name whose
    folder exists or can be made."""
    if not path:
        return
    if os.path.isdir(path):
        raise UserError(f"{flag} {path} is a folder: name the JSON file to write")
    folder = Path(os.path.abspath(path)).parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"{flag} {path}: {folder} is a file, not a folder")


def check_common(args: argparse.Namespace) -> None:
    check_output(args.output)
    if args.sweep:
        args.seq_length = list(SWEEP_SEQ_LENGTHS)
    for name, low in (("steps", 1), ("rounds", 1), ("threads", 0), ("peak_size", 16), ("profile", 0)):
        if getattr(args, name) < low:
            raise UserError(f"--{name} must be >= {low}, got {getattr(args, name)}")
    import importlib.util
    for choice in args.compare:
        missing = [name for name in COMPARE_MODULES[choice] if importlib.util.find_spec(name) is None]
        if missing:
            raise UserError(f"--compare {choice} needs {' and '.join(missing)} (pip install -r requirements-dev.txt)")


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_overrides(items: Sequence[str], flag: str) -> Dict[str, Any]:
    """['num_hidden_layers=2', ...] -> {'num_hidden_layers': 2}; keys must be AlbertConfig fields."""
    from dataclasses import fields

    from src.model.albert import AlbertConfig

    known = [f.name for f in fields(AlbertConfig)]
    changes: Dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"{flag} expects KEY=VALUE, got {item!r}")
        if key not in known:
            raise UserError(f"{flag}: unknown config key {key!r}; keys: {', '.join(known)}")
        changes[key] = _parse_value(value.strip())
    return changes


def resolve_configs(args: argparse.Namespace) -> List[Tuple[str, Dict[str, Any]]]:
    """(label, our AlbertConfig as a dict) of the base config and of each --variant, validated."""
    from src.model.albert import AlbertConfig

    with as_user_error():
        base = AlbertConfig.from_json_file(args.albert_config_file) if args.albert_config_file \
            else AlbertConfig.from_preset(args.network)
        base = AlbertConfig.from_dict({**base.to_dict(), **parse_overrides(args.overrides, "--set")}, source="--set")
        configs = [("base", base.to_dict())]
        for text in args.variant:
            changes = parse_overrides([part for part in text.split(",") if part.strip()], "--variant")
            configs.append((text, AlbertConfig.from_dict({**base.to_dict(), **changes}, source="--variant").to_dict()))
    longest = max(args.seq_length)
    for label, config in configs:
        if longest > config["max_position_embeddings"]:
            raise UserError(f"seq_length {longest} exceeds max_position_embeddings {config['max_position_embeddings']}"
                            f" of the {label} config")
    return configs


def hf_config(config: Dict[str, Any]) -> Tuple[Dict[str, Any], bool]:
    """HF AlbertConfig kwargs doing the same math as our config, and whether our weights can be HF's exactly.

    share_type none = HF with one group per layer; attention/ffn sharing has no HF form, so HF runs unshared layers
    (same FLOPs, more parameters for its optimizer) with its own random weights.
    """
    if config["ln_type"] != "postln" or config["compute_type"] not in ("float32", "bfloat16"):
        raise UserError(f"--compare needs ln_type postln and compute_type float32 or bfloat16 (HF ALBERT has no "
                        f"other), got {config['ln_type']} and {config['compute_type']}")
    kwargs = {key: config[key] for key in HF_KEYS}
    kwargs["hidden_act"] = HF_ACT[config["hidden_act"]]
    kwargs["classifier_dropout_prob"] = 0.0  # HF's SOP head drops out in training; ours (as Google's) does not
    if config["share_type"] != "all":
        kwargs["num_hidden_groups"] = config["num_hidden_layers"]
    return kwargs, config["share_type"] in ("all", "none")


# ---------------------------------------------------------------------------------------------------------------
# FLOPs and statistics
# ---------------------------------------------------------------------------------------------------------------
FORWARD_FORMULA = ("forward = B*S*[2*E*H + L*(8*H^2 + 4*H*I + 4*S*H)] + B*[2*H^2 + {head}], L = num_hidden_layers * "
                   "inner_group_num (embedding projection E*H; per layer Q, K, V and output 4*H^2, FFN 2*H*I, "
                   "attention scores and context 2*S*H, as multiply-adds x 2; the pooler 2*H^2 per sequence; "
                   "{head_text})")


def albert_forward_flops(config: Dict[str, Any], batch: int, seq: int, head_per_sequence: float) -> float:
    """Analytic matmul FLOPs of one forward pass (see FORWARD_FORMULA); `head_per_sequence` is the task head's."""
    e, h, i = config["embedding_size"], config["hidden_size"], config["intermediate_size"]
    layers = config["num_hidden_layers"] * config["inner_group_num"]
    per_token = 2 * e * h + layers * (8 * h * h + 4 * h * i + 4 * seq * h)
    return float(batch * seq * per_token + batch * (2 * h * h + head_per_sequence))


def side_stats(times_s: Sequence[float], batch: int, seq: int, flops: float, executed_flops: float,
               peak_gflops: float) -> Dict[str, float]:
    """Median/min of the timed steps and the rates derived from the median."""
    median, fastest = statistics.median(times_s), min(times_s)
    return {"median_ms": median * 1e3, "min_ms": fastest * 1e3, "samples_per_s": batch / median,
            "tokens_per_s": batch * seq / median, "model_tflops": flops / median / 1e12,
            "executed_tflops": executed_flops / median / 1e12,
            "fraction_of_peak": flops / median / (peak_gflops * 1e9)}


# ---------------------------------------------------------------------------------------------------------------
# Worker side
# ---------------------------------------------------------------------------------------------------------------
def rss_mb() -> float:
    """Peak resident set of this process so far: Linux's VmHWM (KiB). Not ru_maxrss, which a child keeps from the
    parent it was forked from across exec, so every worker would report at least the parent's RSS (which imported
    MindSpore); ru_maxrss only where /proc is missing."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _best_rate(run: Callable[[], None], flops: float, repeats: int = 3) -> float:
    run()  # warm-up (and graph compilation)
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return flops / best / 1e9


class Side:
    """One side of a benchmark inside its worker: build once, then time `step()` calls (each must block until the
    work is done). Framework subclasses set threads and measure the sgemm peak; benchmark subclasses add the
    model."""

    framework = ""

    def __init__(self, spec: Dict[str, Any]):
        self.spec = spec

    def set_threads(self, threads: int) -> None:
        raise NotImplementedError

    def matmul_gflops(self, size: int) -> float:
        """The framework's rate for a size^3 product in `precision()`."""
        raise NotImplementedError

    def precision(self) -> str:
        """float32, bfloat16 or int8: the precision of this side's products, in which its peak is measured and its
        share of the machine's peak taken."""
        return "float32"

    def build(self) -> Dict[str, Any]:
        """Build the model and inputs; returns extra facts for the ready message."""
        raise NotImplementedError

    def first(self) -> Dict[str, Any]:
        """The first step (graph compilation for MindSpore); returns {"check": ...} for the parent to compare."""
        raise NotImplementedError

    def step(self) -> None:
        raise NotImplementedError

    def run(self, steps: int) -> List[float]:
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            self.step()
            times.append(time.perf_counter() - start)
        return times

    def final(self) -> Dict[str, Any]:
        return {}

    def profile(self, steps: int) -> Optional[List[Dict[str, Any]]]:
        """Time per operation type over `steps` more steps, most expensive first; None where the engine has no
        profiler this benchmark reads (OpenVINO's sides: timed, not profiled)."""
        return None


class MindSporeSide(Side):
    """GRAPH mode on CPU through the package's own setup_device (threads via op_tuning.threads_num); `device` is
    what it set up."""

    def set_threads(self, threads: int) -> None:
        import mindspore as ms

        from src.devices.device_setup import setup_device

        from src.model import cpu_kernels

        self.device = setup_device("CPU", cpu_threads=threads, seed=int(self.spec["seed"]))
        # oneDNN's version and the implementations (ISA) it picks on this CPU, as the kernels' status line says.
        self.framework = (f"mindspore {ms.__version__} (GRAPH mode), "
                          f"{cpu_kernels.onednn() or 'MindSpore operations: ' + cpu_kernels.status()}")

    def matmul_gflops(self, size: int) -> float:
        """MindSpore's MatMul in float32; in bfloat16, which MindSpore's CPU operations lack, the compiled kernels'
        product (a b^T, the same FLOPs) with bfloat16 products on b's bfloat16 copy, as a bfloat16 network runs its
        dense layers; in int8 their int8 product (a quantized per row in the call, b quantized and packed once
        before), as a network served with --precision int8 runs them."""
        import numpy as np
        from mindspore import Tensor, nn, ops

        from src.model import cpu_kernels

        precision = self.precision()
        if precision == "bfloat16":
            cpu_kernels.set_bf16(True)
        product = {"bfloat16": cpu_kernels.matmul_nt(copy=True), "int8": cpu_kernels.matmul_int8(False)}.get(
            precision, ops.matmul)

        class _MatMul(nn.Cell):
            def construct(self, *operands):
                if precision == "bfloat16":
                    return product(operands[0], operands[1], cpu_kernels.bf16_copy(operands[1]))
                return product(*operands)

        cell = _MatMul()
        rng = np.random.default_rng(0)
        a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
        if precision == "int8":
            values, scales = cpu_kernels.quantize_int8(b)
            operands = tuple(map(Tensor, (a, values, cpu_kernels.pack_int8(values), scales)))
        else:
            operands = (Tensor(a), Tensor(b))
        return _best_rate(lambda: cell(*operands).asnumpy(), 2.0 * size ** 3)

    def profile(self, steps: int) -> List[Dict[str, Any]]:
        """MindSpore's profiler over `steps` steps; its per-operator-type totals of the host (CPU) kernels."""
        import csv

        from mindspore import Profiler

        from src.model import cpu_kernels

        # A folder of the side's own: the CSVs below are read back by globbing it, and every side of a run shares
        # the work folder (a second MindSpore side would otherwise count the first one's operators too).
        folder = Path(self.spec["workdir"]) / f"ms_profile-{self.spec['side']}"
        kernels = cpu_kernels.available()
        profiler = Profiler(output_path=str(folder))
        if kernels:
            cpu_kernels.start_profile()
        self.run(steps)
        inside = cpu_kernels.stop_profile() if kernels else {}
        profiler.analyse()
        rows = []
        for path in folder.glob("**/FRAMEWORK/cpu_op_type_info_*.csv"):
            with open(path, newline="", encoding="utf-8") as handle:
                rows += [{"op": row["op_type"], "ms_per_step": float(row["total_compute_time"]) / steps,
                          "calls_per_step": float(row["execution_frequency(per-step)"])}
                         for row in csv.DictReader(handle) if not (inside and row["op_type"] == "Custom")]
        # The compiled kernels (all "Custom" to MindSpore's profiler) by name, from their own counters: kernels in
        # wall time; "thread: ..." parts inside them in CPU time summed over threads (not added to the total).
        rows += [{"op": f"kernel {name}" if not name.startswith("thread: ") else name, "ms_per_step": ms / steps,
                  "calls_per_step": calls / steps, "cpu_time": name.startswith("thread: ")}
                 for name, (calls, ms) in inside.items()]
        return sorted(rows, key=lambda row: (row.get("cpu_time", False), -row["ms_per_step"]))


class TorchSide(Side):
    """PyTorch, eager or under torch.compile as the side's name says (torch.set_num_threads)."""

    def set_threads(self, threads: int) -> None:
        import torch
        import transformers

        if threads > 0:
            torch.set_num_threads(threads)
        torch.manual_seed(int(self.spec["seed"]))
        mode = "torch.compile (inductor)" if self.spec["side"].startswith("torch_compile") else "eager"
        self.framework = f"torch {torch.__version__} {mode}, transformers {transformers.__version__}"

    def matmul_gflops(self, size: int) -> float:
        import torch

        generator = torch.Generator().manual_seed(0)
        dtype = torch.bfloat16 if self.precision() == "bfloat16" else torch.float32
        a, b = (torch.randn(size, size, generator=generator).to(dtype) for _ in range(2))
        return _best_rate(lambda: torch.mm(a, b), 2.0 * size ** 3)

    def profile(self, steps: int) -> List[Dict[str, Any]]:
        """torch.profiler over `steps` steps; the self CPU time of each aten operator."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU]) as recorded:
            self.run(steps)
        rows = [{"op": event.key, "ms_per_step": event.self_cpu_time_total / 1e3 / steps,
                 "calls_per_step": event.count / steps} for event in recorded.key_averages()]
        return sorted((row for row in rows if row["ms_per_step"] > 0), key=lambda row: -row["ms_per_step"])


class OrtSide(Side):
    """ONNX Runtime's CPU execution provider, ORT_ENABLE_ALL graph optimizations, intra_op_num_threads threads.
    A benchmark subclass opens `self.ort = self.open_session(self.onnx_path)` and sets the inputs `self.feed`."""

    threads = 0
    onnx_path = ""
    ort: Any = None
    feed: Dict[str, Any] = {}

    def set_threads(self, threads: int) -> None:
        import onnxruntime

        self.threads = threads
        disabled = self.disabled_optimizers()
        self.framework = (f"onnxruntime {onnxruntime.__version__} (ORT_ENABLE_ALL"
                          f"{' without ' + ', '.join(disabled) if disabled else ''})")

    def disabled_optimizers(self) -> Tuple[str, ...]:
        """ONNX Runtime graph optimizations this side's sessions leave out (none: ORT's defaults)."""
        return ()

    def open_session(self, path: str, profile_prefix: str = ""):
        """An InferenceSession of the ONNX file `path` (ORT_ENABLE_ALL but `disabled_optimizers()`); with
        `profile_prefix`, one that records ORT's profile."""
        from src.serving.engines import onnxruntime_session

        return onnxruntime_session(path, self.threads, self.disabled_optimizers(), profile_prefix)

    def matmul_gflops(self, size: int) -> float:
        import numpy as np
        import onnx
        from onnx import TensorProto, helper

        shape = [size, size]
        graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["c"])], "sgemm",
                                  [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "ab"],
                                  [helper.make_tensor_value_info("c", TensorProto.FLOAT, shape)])
        path = Path(self.spec["workdir"]) / f"sgemm-{self.spec['side']}.onnx"
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
        session = self.open_session(str(path))
        rng = np.random.default_rng(0)
        feed = {name: rng.standard_normal(shape, dtype=np.float32) for name in "ab"}
        return _best_rate(lambda: session.run(None, feed), 2.0 * size ** 3)

    def step(self) -> None:
        self.ort.run(None, self.feed)

    def profile(self, steps: int) -> List[Dict[str, Any]]:
        """ORT's own profiler (a second session of the same file) over `steps` steps; kernel time per op type."""
        prefix = str(Path(self.spec["workdir"]) / f"ort-profile-{self.spec['side']}")
        timed, self.ort = self.ort, self.open_session(self.onnx_path, prefix)
        try:
            self.run(1 + steps)
            trace = json.loads(Path(self.ort.end_profiling()).read_text())
        finally:
            self.ort = timed
        runs = sorted(event["ts"] + event["dur"] for event in trace if event.get("name") == "model_run")
        totals: Dict[str, List[float]] = {}
        for event in trace:  # the kernels of the timed runs (the first one allocates the session's buffers)
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time") and event["ts"] >= runs[0]:
                total = totals.setdefault(event["args"]["op_name"], [0.0, 0])
                total[0] += event["dur"] / 1e3
                total[1] += 1
        rows = [{"op": op, "ms_per_step": ms / steps, "calls_per_step": calls / steps}
                for op, (ms, calls) in totals.items()]
        return sorted(rows, key=lambda row: -row["ms_per_step"])


def hf_state_to_ours(path: str) -> Dict[str, Any]:
    """An HF state dict saved as .npz -> our parameter names (the converter's table for the backbone and the
    pretraining heads; task heads such as classifier.* keep their names)."""
    import numpy as np

    from src.conversion.convert_checkpoint import hf_name

    weights = {}
    with np.load(path) as state:
        for name in state.files:
            ours = hf_name(name) if name.startswith(("albert.", "predictions.", "sop_classifier.")) else name
            if ours is not None:
                weights[ours] = state[name].astype(np.float32)
    return weights


def save_hf_state(model: Any, path: str, seed: int) -> None:
    """Perturb the HF model's random weights (LayerNorm and biases too, so the cross-check is not trivial) and
    save them as .npz for our worker."""
    import numpy as np
    import torch

    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            scale = 0.2 if "norm" in name.lower() else 0.05
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    np.savez(path, **{name: value.detach().numpy() for name, value in model.state_dict().items()})


def load_hf_state(model: Any, path: str) -> None:
    """The weights save_hf_state wrote, into an HF model of the same config."""
    import numpy as np
    import torch

    with np.load(path) as state:
        model.load_state_dict({name: torch.from_numpy(state[name]) for name in state.files})


def worker_main(sides: Dict[str, Type[Side]]) -> int:
    """A worker process: serve the protocol in the module docstring on stdin/stdout."""
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # frameworks' prints go to the log, never into the protocol
    sys.stdout = sys.stderr

    def say(message: Dict[str, Any]) -> None:
        protocol.write(json.dumps(message) + "\n")

    try:
        spec = json.loads(sys.stdin.readline())
        side = sides[spec["side"]](spec)
        side.set_threads(int(spec["threads"]))
        peak = side.matmul_gflops(int(spec["peak_size"])) if spec["peak_size"] else None
        start = time.perf_counter()
        facts = side.build()
        build_s = time.perf_counter() - start
        start = time.perf_counter()
        facts.update(side.first())
        say({"ready": True, "framework": side.framework, "precision": side.precision(), "matmul_gflops": peak,
             "build_s": build_s,
             "first_s": time.perf_counter() - start, **facts})
        for line in sys.stdin:
            message = json.loads(line)
            if message["cmd"] == "round":
                say({"times": side.run(int(message["steps"])), "rss_mb": rss_mb()})
            elif message["cmd"] == "profile":
                say({"profile": side.profile(int(message["steps"]))})
            elif message["cmd"] == "quit":
                peak_rss_mb = rss_mb()  # before the second sgemm: its matrices are not the model's memory
                end_peak = side.matmul_gflops(int(spec["peak_size"])) if spec["peak_size"] else None
                say({"peak_rss_mb": peak_rss_mb, "matmul_gflops_end": end_peak, **side.final()})
                return 0
        return 0
    except BaseException as err:  # noqa: B902  (the traceback goes to the log, the message to the parent)
        traceback.print_exc()
        sys.stderr.flush()
        say({"error": str(err) if isinstance(err, UserError) else f"{type(err).__name__}: {err}".strip(),
             "user_error": isinstance(err, UserError)})
        return 1


# ---------------------------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------------------------
class Worker:
    """A worker process of `script`; the constructor sends the spec and waits for the ready message."""

    EXIT_WAIT_S = 120

    def __init__(self, script: Path, spec: Dict[str, Any], log_dir: Path):
        self.side = spec["side"]
        self.log_path = log_dir / f"{self.side}.log"
        with open(self.log_path, "w", encoding="utf-8") as log:
            self.proc = subprocess.Popen([sys.executable, str(script), WORKER_FLAG], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, text=True, bufsize=1, cwd=str(ROOT))
        self.ready = self.ask(spec)

    def ask(self, message: Dict[str, Any]) -> Dict[str, Any]:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        reply = json.loads(line) if line.strip() else {"error": f"exited with code {self.proc.wait()}"}
        if "error" in reply:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
            if reply.get("user_error"):  # the config asked for something this side cannot do
                raise UserError(f"{self.side} side: {reply['error']}")
            tail = self.log_path.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-15:]
            raise WorkerError(f"the {self.side} worker failed: {reply['error']}\n  log {self.log_path}:\n    " +
                              "\n    ".join(tail))
        return reply

    def quit(self) -> Dict[str, Any]:
        """Its last reply. A worker that answered but has not exited EXIT_WAIT_S later (a library's teardown hanging
        at exit, seen once in an export worker at batch 32) is killed: its work is done and reported."""
        reply = self.ask({"cmd": "quit"})
        try:
            self.proc.wait(timeout=self.EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            print(f"the {self.side} worker had not exited {self.EXIT_WAIT_S} s after its last answer: killed",
                  file=sys.stderr)
            self.kill()
        return reply

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def run_pair(script: Path, specs: Dict[str, Dict[str, Any]], steps: int, rounds: int, log_dir: Path,
             prepare: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
             progress: Callable[[str], None] = print, profile_steps: int = 0) -> Dict[str, Dict[str, Any]]:
    """`prepare` (given ours' spec and "sides") returns facts for every side's spec (e.g. the exported files); then
    start the workers (torch first: in bench_train it writes the weights ours loads), run one untimed warm-up round
    and `rounds` alternating rounds of `steps` steps, profile `profile_steps` more (if any), stop them; returns per
    side the ready facts, step times per round (the warm-up's apart), the profile and the quit facts."""
    workers: Dict[str, Worker] = {}
    try:
        prepared = prepare({**specs["ours"], "sides": sorted(specs)}) if prepare is not None else {}
        for side in sorted(specs, key=lambda name: not name.startswith("torch")):
            workers[side] = Worker(script, {**specs[side], **prepared}, log_dir)
        rounds_times: Dict[str, List[List[float]]] = {side: [] for side in workers}
        order = sorted(workers)  # "ours" first
        # Untimed: a side's first round after its first step ran slower than its later ones (2026-11/12 JSONs,
        # first / later round medians: PyTorch eager autocast 1.15, our MINDIR 1.12; the rest ~1.0), which moved
        # the median of a run of 2-3 rounds for one side only.
        warmup: Dict[str, List[float]] = {}
        for side in order:
            time.sleep(PAUSE_S)
            warmup[side] = workers[side].ask({"cmd": "round", "steps": steps})["times"]
        progress("  warm-up (untimed): " + ", ".join(f"{side} {statistics.median(warmup[side]) * 1e3:.1f} ms"
                                                     for side in order))
        for index in range(rounds):
            done = []
            for side in order if index % 2 == 0 else order[::-1]:
                time.sleep(PAUSE_S)
                times = workers[side].ask({"cmd": "round", "steps": steps})["times"]
                rounds_times[side].append(times)
                done.append(f"{side} {statistics.median(times) * 1e3:.1f} ms")
            progress(f"  round {index + 1}/{rounds}: " + ", ".join(done))
        profiles = {side: workers[side].ask({"cmd": "profile", "steps": profile_steps})["profile"]
                    for side in order if profile_steps}
        return {side: {"ready": workers[side].ready, "warmup": warmup[side], "rounds": rounds_times[side],
                       "quit": workers[side].quit(),
                       **({"profile": profiles[side]} if profiles.get(side) is not None else {})} for side in order}
    finally:
        for worker in workers.values():
            worker.kill()


def _best_of(*rates: Optional[float]) -> Optional[float]:
    """The highest of the measured sgemm rates (None from a worker asked to measure none)."""
    measured = [rate for rate in rates if rate is not None]
    return max(measured) if measured else None


def summarize(raw: Dict[str, Dict[str, Any]], batch: int, seq: int, flops: float,
              executed: Dict[str, float], unit: str) -> Dict[str, Any]:
    """Per side: stats over all timed steps, against the machine peak in the side's precision = the best rate any
    side of that precision reached in its product, before or after its timed rounds (one measurement alone can catch
    a slow moment of a shared machine: the peak read at a worker's start has been seen 15% below the one read
    minutes later)."""
    peaks = {name: _best_of(side["ready"]["matmul_gflops"], side["quit"].get("matmul_gflops_end"))
             for name, side in raw.items()}
    precisions = {name: side["ready"]["precision"] for name, side in raw.items()}
    machine_peaks = {precision: _best_of(*(peaks[name] for name in raw if precisions[name] == precision))
                     for precision in sorted(set(precisions.values()))}
    sides = {}
    for name, side in raw.items():
        times = [t for round_times in side["rounds"] for t in round_times]
        ready = {k: v for k, v in side["ready"].items() if k not in ("ready", "check")}
        ready.update(matmul_gflops=peaks[name], matmul_gflops_start=side["ready"]["matmul_gflops"])
        sides[name] = {**side_stats(times, batch, seq, flops, executed[name], machine_peaks[precisions[name]]),
                       **ready, "executed_flops_per_" + unit: executed[name],
                       "peak_rss_mb": side["quit"]["peak_rss_mb"],
                       **{k: v for k, v in side["quit"].items() if k != "peak_rss_mb"},
                       "round_median_ms": [statistics.median(r) * 1e3 for r in side["rounds"]],
                       "warmup_ms": [t * 1e3 for t in side.get("warmup", [])],
                       "times_ms": [t * 1e3 for t in times],
                       **({"op_profile": side["profile"]} if "profile" in side else {})}
    ratios = {name: side["median_ms"] / sides["ours"]["median_ms"] for name, side in sides.items() if name != "ours"}
    return {"machine_peak_gflops": machine_peaks.get("float32"), "machine_peak_gflops_by_precision": machine_peaks,
            "sides": sides, "speed_ratio": ratios.get("torch"), "speed_ratios": ratios}


def run_grid(script: Path, args: Any, configs: List[Tuple[str, Dict[str, Any]]], unit: str,
             extra_spec: Dict[str, Any],
             flops_for: Callable[[Dict[str, Any], int, int], Tuple[float, Dict[str, float]]],
             check_for: Callable[[Dict[str, Dict[str, Any]]], Dict[str, Any]],
             prepare: Optional[Callable[[Dict[str, Any]], Dict[str, Any]]] = None,
             compared_sides: Optional[Dict[str, Tuple[str, ...]]] = None
             ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """Fresh workers per (variant, seq_length, batch_size), so each row's peak RSS is its own: ours and the sides
    of each --compare choice (`compared_sides`, default {"torch": ("torch",)}).

    Returns (results, failures): a configuration whose worker fails (e.g. killed for memory at seq 512) becomes a
    failure naming its worker log, kept in a temporary folder, and the sweep goes on with the next configuration.
    """
    import shutil

    results: List[Dict[str, Any]] = []
    failures: List[Dict[str, Any]] = []
    others = [side for choice in args.compare for side in (compared_sides or {"torch": ("torch",)})[choice]]
    tmp = Path(tempfile.mkdtemp(prefix="albert-bench-"))
    try:
        for label, config in configs:
            hf_kwargs, same_weights = hf_config(config) if args.compare else (None, False)
            for seq in args.seq_length:
                for batch in args.batch_size:
                    run_dir = tmp / f"run{len(results) + len(failures)}"
                    run_dir.mkdir()
                    base = {"config": config, "hf_config": hf_kwargs, "batch_size": batch, "seq_length": seq,
                            "threads": args.threads, "peak_size": args.peak_size, "seed": args.seed,
                            "workdir": str(run_dir),
                            "weights": str(run_dir / "hf_weights.npz") if same_weights else "", **extra_spec}
                    specs = {side: {**base, "side": side} for side in ["ours", *others]}
                    print(f"[{label}] batch {batch}, seq {seq}: {args.rounds} round(s) of {args.steps} {unit}(s) "
                          f"per side, {args.threads} thread(s)", flush=True)
                    try:
                        raw = run_pair(script, specs, args.steps, args.rounds, run_dir, prepare,
                                       progress=lambda line: print(line, flush=True), profile_steps=args.profile)
                    except WorkerError as err:
                        print(f"  failed: {err}", flush=True)
                        failures.append({"variant": label, "batch_size": batch, "seq_length": seq, "error": str(err)})
                        continue
                    flops, executed = flops_for(config, batch, seq)
                    results.append({"variant": label, "batch_size": batch, "seq_length": seq, "config": config,
                                    "hf_config": hf_kwargs, "same_weights": same_weights, f"flops_per_{unit}": flops,
                                    **summarize(raw, batch, seq, flops, executed, unit), **check_for(raw)})
                    shutil.rmtree(run_dir, ignore_errors=True)
    finally:  # kept only when a failure names a worker log in it
        if not failures:
            shutil.rmtree(tmp, ignore_errors=True)
    return results, failures


def disagreements(results: List[Dict[str, Any]], diffs: str, scale: Callable[[Dict[str, Any]], float],
                  limit: float, what: str) -> List[Dict[str, Any]]:
    """Failures for the sides whose output differs from ours by more than `limit` x `scale(result)` where they share
    our weights (`diffs`: a result's {side: abs difference} field): such a side computed another network, so its
    time compares nothing. The limits sit far above the precisions' own differences (bfloat16 and int8 included),
    as a tripwire: on 2026-12-06 a wrong bfloat16 feed-forward ran for hours of benchmarks with a first loss of 11.52
    against PyTorch's 12.28, printed and unread."""
    found = []
    for result in results:
        for side, diff in result[diffs].items():
            if result["same_weights"] and not diff <= limit * scale(result):
                found.append({"variant": result["variant"], "batch_size": result["batch_size"],
                              "seq_length": result["seq_length"], "verdict": "not comparable",
                              "error": f"{side}: {what} {diff:.3g} away from ours, more than {limit:g} x "
                                       f"{scale(result):.3g}: the two do not compute the same network"})
    return found


def report_failures(failures: List[Dict[str, Any]]) -> int:
    """Print the configurations that could not be measured (or whose sides disagree: `disagreements`); the exit code
    of the benchmark (1 if any)."""
    for failure in failures:
        print(f"[{failure['variant']} b{failure['batch_size']} s{failure['seq_length']}] "
              f"{failure.get('verdict', 'not measured')}: {failure['error']}", file=sys.stderr)
    return 1 if failures else 0


def environment(raw_results: List[Dict[str, Any]]) -> Dict[str, Any]:
    frameworks = {}
    for result in raw_results:
        for name, side in result["sides"].items():
            frameworks[name] = side["framework"]
    return {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "usable_cpus": len(os.sched_getaffinity(0)), "frameworks": frameworks,
            **provenance()}


def provenance() -> Dict[str, Any]:
    """What a result needs beside its numbers to be reproduced: the commit measured (and whether the tree had
    uncommitted changes) and the CPU's model name with the instruction sets the low-precision paths depend on."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    model, flags = "", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown",
            "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no")),
            "cpu_model": model or platform.processor(), "cpu_flags": [flag for flag in wanted if flag in flags],
            "onednn": onednn_record()}


def onednn_record() -> Dict[str, str]:
    """oneDNN's version and the implementations it picks here for the kernels' bfloat16 and int8 products, whose
    names say the ISA (brg_matmul:avx512_core_bf16, brg_matmul:avx10_1_512_amx, ...), as fields of their own; only
    "kernels" (why they are off) without the compiled kernels. ONEDNN_MAX_CPU_ISA applies as in the measured runs."""
    import re

    from src.model import cpu_kernels

    described = cpu_kernels.onednn()
    if not described:
        return {"kernels": cpu_kernels.status()}
    version = re.match(r"oneDNN (\d+\.\d+\.\d+)", described)
    return {"version": version.group(1) if version else "unknown",
            "bfloat16": cpu_kernels.bf16_implementation() or "emulated (no native bfloat16 dot products)",
            "int8": cpu_kernels.int8_implementation() or "none with exact int32 sums"}


def print_table(results: List[Dict[str, Any]], unit: str) -> None:
    """One row per (variant, batch, seq, side); ratio: that side's ms / ours' ms (> 1: ours is faster)."""
    if not results:
        return
    header = ["variant", "batch", "seq", "side", f"ms/{unit} med", "min", "samples/s", "tokens/s", "TFLOP/s",
              "% peak", "first s", "RSS MB", "ratio"]
    rows = []
    for result in results:
        for name, side in result["sides"].items():
            ratio = result["speed_ratios"].get(name)
            rows.append([result["variant"], str(result["batch_size"]), str(result["seq_length"]), name,
                         f"{side['median_ms']:.1f}", f"{side['min_ms']:.1f}", f"{side['samples_per_s']:.2f}",
                         f"{side['tokens_per_s']:.0f}", f"{side['model_tflops']:.4f}",
                         f"{side['fraction_of_peak'] * 100:.1f}", f"{side['first_s']:.1f}",
                         f"{side['peak_rss_mb']:.0f}", f"{ratio:.3f}" if ratio is not None else ""])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print(" | ".join(h.rjust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for row in rows:
        print(" | ".join(c.rjust(w) for c, w in zip(row, widths)))


def print_profiles(results: List[Dict[str, Any]], top: int = 12) -> None:
    """With --profile: the `top` operation types by time of each side, and what the rest add up to."""
    for result in results:
        for name, side in result["sides"].items():
            if "op_profile" not in side:
                continue
            parts = [row for row in side["op_profile"] if row.get("cpu_time")]
            rows = [row for row in side["op_profile"] if not row.get("cpu_time")]
            total = sum(row["ms_per_step"] for row in rows)
            print(f"\n[{result['variant']} b{result['batch_size']} s{result['seq_length']}] {name}: time per operation "
                  f"type, ms per step (sum {total:.1f} of a {side['median_ms']:.1f} ms median step)")
            for row in rows[:top]:
                print(f"  {row['op'][:40]:40s} {row['ms_per_step']:9.1f}  {100 * row['ms_per_step'] / total:5.1f}%  "
                      f"{row['calls_per_step']:6.0f} calls")
            rest = sum(row["ms_per_step"] for row in rows[top:])
            print(f"  {'(' + str(max(len(rows) - top, 0)) + ' other types)':40s} {rest:9.1f}  "
                  f"{100 * rest / max(total, 1e-9):5.1f}%")
            if parts:
                print("  inside the kernels, CPU time of all threads, ms per step:")
                for row in parts:
                    print(f"    {row['op'][:38]:38s} {row['ms_per_step']:9.1f}         {row['calls_per_step']:6.0f} calls")


def write_json(path: str, report: Dict[str, Any]) -> None:
    if not path:
        return
    from src.common.atomic_files import atomic_path

    with atomic_path(path, ".json") as tmp, open(tmp, "w", encoding="utf-8") as out:  # whole or not at all
        json.dump(report, out, indent=1)


def run_cli_with_workers(main: Callable[[List[str]], Optional[int]], argv: Optional[Sequence[str]] = None) -> int:
    """run_cli, plus a worker failure as its message and exit code 1 (not a traceback of the parent)."""
    from model_utils.errors import run_cli

    def guarded(args: List[str]) -> Optional[int]:
        try:
            return main(args)
        except WorkerError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1

    return run_cli(guarded, argv)
