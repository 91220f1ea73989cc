"""Inference latency and throughput of an exported MINDIR sequence classifier and, with --compare, of HF
transformers' AlbertForSequenceClassification on PyTorch eager and of ONNX Runtime, in one run.

    python benchmarks/bench_infer.py [--network albert_base | --albert_config_file F] [--set KEY=VALUE ...]
        [--batch_size 1,32] [--seq_length 128 | --sweep] [--variant KEY=VALUE ...] [--export static|dynamic]
        [--steps 10] [--rounds 3] [--threads N] [--compare torch,onnxruntime,openvino,kernels,bf16,int8] [--profile N]
        [--output results.json]

Ours is what a deployment runs: AlbertForSequenceClassification of the config (random weights) exported with
export.py's export_atomically to MINDIR (one export per batch size, or --export dynamic: one with a dynamic batch
dimension), loaded with ms.load + nn.GraphCell. The exports run in their own short-lived processes, so a serving
worker's peak RSS holds only its loaded model. The sides of --compare:

    torch         HF's model in eval mode under torch.no_grad() (eager attention)
    onnxruntime   ort_hf: HF's model exported by torch.onnx.export (the dynamo exporter), run by ONNX Runtime with
                  ORT_ENABLE_ALL; ort_hf_fused: the same file after onnxruntime.transformers' BERT fusions
                  (optimize_model, model_type bert, opt_level 0); ort_ours: our model exported by export.py as
                  ONNX (fixed shapes, also with --export dynamic: MindSpore's ONNX export has no dynamic dimension),
                  as src/predict.py serves a .onnx file; ort_hf_int8: HF's file through ONNX Runtime's
                  documented recipe, quant_pre_process then quantize_dynamic with its defaults (int8 weights, uint8
                  activations quantized per call; without the pre-processing its weights, behind Transpose nodes, stay
                  float);
                  ort_ours_int8: our ONNX file made int8 as `export.py --quantize int8` makes it
    (src/serving/quantize.py) openvino      the ONNX files compiled by OpenVINO for its CPU plugin (needs `pip install
                  openvino`; nncf too): ov_hf: HF's file with OpenVINO's CPU defaults (on CPUs with AMX or AVX512_BF16
                  that means bfloat16 math: INFERENCE_PRECISION_HINT bf16); ov_hf_f32: the same with the hint f32;
                  ov_ours: our file with the defaults; ov_ours_int8: our file made int8 by NNCF as `export.py --quantize
                  int8 --engine openvino` makes it (src/serving/quantize.py; calibrated on CALIBRATION_BATCHES batches
                  of the benchmark's kind of input: random tokens, as the weights are random), the IR with the defaults;
                  ov_ours_int8_asym: the same with `--int8_activations asymmetric` (NNCF's MIXED preset)
    kernels       ours_kernels: our classifier in-process, not exported, with this package's compiled CPU kernels
                  (model_runtime on CPU, as fine-tuning evaluation runs it), as src/predict.py serves a .ckpt
    bf16          torch_bf16: HF's model under torch.autocast("cpu", bfloat16); ours_kernels_bf16: ours_kernels with
                  the products in bfloat16 (src/predict.py --precision bfloat16); CPUs with AVX512_BF16 or AMX-BF16
    int8          ours_kernels_int8: ours_kernels with the dense products in int8 (src/predict.py --precision int8:
                  weights quantized at load per output channel, inputs per row in each call); CPUs with VNNI or
                  AMX-INT8

With --compare every side uses HF's random weights (perturbed, converted to ours), so all logits must agree; the run
reports each side's max abs difference from ours.

Workers, rounds, threads and the reported numbers are as bench_train.py's (bench_common.py), per call of one batch:
median and min ms/batch, samples/s, tokens/s, TFLOP/s (one forward: FLOP formula in the JSON), peak RSS, the
speed ratio of each other side: its ms / ours ms (> 1: ours is faster). "first s" is the first call (MindSpore
compiles the loaded graph then); build_s is loading the model (MINDIR, ONNX session) or building it (HF eager);
export_s is the export that made the file (for ort_hf_fused: the fusion pass).
"""
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as common  # noqa: E402

CALIBRATION_BATCHES = 4  # ov_ours_int8's calibration: the int8 graph's speed does not depend on its ranges
OPENVINO_INT8 = {"ov_ours_int8": True, "ov_ours_int8_asym": False}  # side: symmetric activations (export's default)


def classifier_inputs(config: Dict[str, Any], batch: int, seq: int, seed: int) -> List[Any]:
    """(input_ids, token_type_ids, input_mask) int32 [batch, seq], fixed by `seed`: rows of seq/2..seq real
    tokens (the first full) in two segments."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(seq // 2, seq + 1, batch)
    lengths[0] = seq
    columns = np.arange(seq)
    input_mask = (columns < lengths[:, None]).astype(np.int32)
    token_type_ids = np.minimum((columns >= lengths[:, None] // 2) & (input_mask == 1), config["type_vocab_size"] - 1)
    input_ids = rng.integers(0, config["vocab_size"], (batch, seq)).astype(np.int32)
    return [input_ids, token_type_ids.astype(np.int32), input_mask]


def our_classifier(spec: Dict[str, Any], runtime: Any) -> Any:
    """Our AlbertForSequenceClassification of the spec for `runtime`, in eval mode, with the shared weights."""
    from src.common.checkpoint_io import load_weights
    from src.model.albert import AlbertConfig
    from src.model.task_heads import AlbertForSequenceClassification

    model = AlbertForSequenceClassification(AlbertConfig(**spec["config"]), spec["num_labels"], runtime=runtime)
    model.set_train(False)
    if spec["weights"]:
        load_weights(model, common.hf_state_to_ours(spec["weights"]))
    return model


class Exporter(common.MindSporeSide):
    """The short-lived export process: build the classifier, load the shared weights, write the MINDIR (and, for
    ort_ours, the ONNX file) with export.py's export_atomically."""

    def _export(self, file_format: str, batch: Optional[int]) -> Tuple[str, float]:
        import mindspore as ms
        import numpy as np
        from mindspore import Tensor

        from export import export_atomically, export_runtime

        spec = self.spec
        model = our_classifier(spec, export_runtime(file_format, self.device.target, spec["config"]["compute_type"]))
        if batch is None:
            inputs = [Tensor(shape=[None, spec["seq_length"]], dtype=ms.int32) for _ in range(3)]
        else:
            inputs = [Tensor(np.zeros((batch, spec["seq_length"]), np.int32)) for _ in range(3)]
        start = time.perf_counter()
        written = export_atomically(model, inputs, str(Path(spec["workdir"]) / "classifier"), file_format,
                                    output_names=["logits"])
        suffix = "." + file_format.lower()
        return next(path for path in written if path.endswith(suffix)), time.perf_counter() - start

    def build(self) -> Dict[str, Any]:
        from src.serving.quantize import Calibration, quantize_int8, quantize_openvino

        spec = self.spec
        batch = spec["batch_size"]
        mindir, seconds = self._export("MINDIR", None if spec["export"] == "dynamic" else batch)
        facts = {"mindir": mindir, "export_s": {"ours": seconds}}
        if {"ort_ours", "ov_ours", *OPENVINO_INT8} & set(spec["sides"]):
            facts["onnx"] = {"ort_ours": None}  # the exported file of each side (ov_ours_int8: an OpenVINO IR)
            facts["onnx"]["ort_ours"], facts["export_s"]["ort_ours"] = self._export("ONNX", batch)
            onnx = facts["onnx"]["ort_ours"]
            start = time.perf_counter()
            facts["onnx"]["ort_ours_int8"] = onnx[:-len(".onnx")] + "_int8.onnx"
            quantize_int8(onnx, facts["onnx"]["ort_ours_int8"])
            facts["export_s"]["ort_ours_int8"] = facts["export_s"]["ort_ours"] + time.perf_counter() - start
        batches = [classifier_inputs(spec["config"], batch, spec["seq_length"], spec["seed"] + 1 + index)
                   for index in range(CALIBRATION_BATCHES)]  # random tokens: cheap even when no side needs them
        for side in (side for side in OPENVINO_INT8 if side in spec["sides"]):
            start = time.perf_counter()
            facts["onnx"][side] = f"{onnx[:-len('.onnx')]}_{side}.xml"
            quantize_openvino(onnx, facts["onnx"][side], Calibration(batches, symmetric=OPENVINO_INT8[side]))
            facts["export_s"][side] = facts["export_s"]["ort_ours"] + time.perf_counter() - start
        return facts

    def first(self) -> Dict[str, Any]:
        return {}


def hf_model(spec: Dict[str, Any]):
    """HF's AlbertForSequenceClassification of the spec (eager attention, eval mode), with the shared weights."""
    from transformers import AlbertConfig, AlbertForSequenceClassification

    model = AlbertForSequenceClassification(AlbertConfig(
        attn_implementation="eager", num_labels=spec["num_labels"], **spec["hf_config"]))
    if spec["weights"]:
        common.load_hf_state(model, spec["weights"])
    return model.eval()


def hf_inputs(spec: Dict[str, Any]) -> Dict[str, Any]:
    """The benchmark batch as HF's forward takes it (int64 tensors by keyword)."""
    import torch

    ids, types, mask = (torch.from_numpy(c).long() for c in classifier_inputs(
        spec["config"], spec["batch_size"], spec["seq_length"], spec["seed"]))
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


class HfExporter(common.TorchSide):
    """The short-lived process before the others: HF's random weights, perturbed and saved for every side, and for
    --compare onnxruntime HF's model exported by torch.onnx.export, plain and with ORT's BERT fusions."""

    def build(self) -> Dict[str, Any]:
        from onnxruntime.quantization import quantize_dynamic
        from onnxruntime.quantization.shape_inference import quant_pre_process
        from transformers import AlbertConfig, AlbertForSequenceClassification

        spec = self.spec
        if spec["weights"]:
            common.save_hf_state(AlbertForSequenceClassification(AlbertConfig(
                attn_implementation="eager", num_labels=spec["num_labels"], **spec["hf_config"])),
                spec["weights"], spec["seed"])
        if not any(side.startswith(("ort_hf", "ov_hf")) for side in spec["sides"]):
            return {}
        plain, fused, int8 = (str(Path(spec["workdir"]) / name) for name in ("hf.onnx", "hf_fused.onnx",
                                                                             "hf_int8.onnx"))
        start = time.perf_counter()
        self._export(plain)
        exported = time.perf_counter()
        self._fuse(plain, fused)
        fused_at = time.perf_counter()
        prepared = str(Path(spec["workdir"]) / "hf_prepared.onnx")
        quant_pre_process(plain, prepared)  # ONNX Runtime's documented recipe: pre-process, then quantize_dynamic
        quantize_dynamic(prepared, int8)  # with its defaults (int8 weights)
        return {"onnx": {"ort_hf": plain, "ort_hf_fused": fused, "ort_hf_int8": int8},
                "export_s": {"ort_hf": exported - start, "ort_hf_fused": fused_at - exported,
                             "ort_hf_int8": exported - start + time.perf_counter() - fused_at}}

    def _export(self, path: str) -> None:
        import torch

        inputs = hf_inputs(self.spec)
        batch = torch.export.Dim("batch", min=1)
        dynamic = {name: {0: batch} for name in inputs} if self.spec["export"] == "dynamic" else None
        with torch.no_grad():
            torch.onnx.export(hf_model(self.spec), (), path, kwargs=inputs, dynamic_shapes=dynamic,
                              input_names=list(inputs), output_names=["logits"], dynamo=True, verbose=False)

    def _fuse(self, plain: str, fused: str) -> None:
        from onnxruntime.transformers.optimizer import optimize_model

        # opt_level 0: the Python fusions only, ORT_ENABLE_ALL comes with the session as for the other files (its
        # default, 1, also saves ORT's basic optimizations, which with ALBERT's shared weights ORT 1.32 cannot load).
        config = self.spec["hf_config"]
        model = optimize_model(plain, model_type="bert", num_heads=config["num_attention_heads"],
                               hidden_size=config["hidden_size"], opt_level=0)
        model.save_model_to_file(fused)

    def first(self) -> Dict[str, Any]:
        return {}


class OursInfer(common.MindSporeSide):
    """ms.load + nn.GraphCell of the exported MINDIR."""

    def build(self) -> Dict[str, Any]:
        import mindspore as ms
        from mindspore import nn

        self.cell = nn.GraphCell(ms.load(self.spec["mindir"]))
        self.inputs = self._inputs()
        return {"export": self.spec["export"], "export_s": self.spec["export_s"]["ours"]}

    def _inputs(self) -> List[Any]:
        from mindspore import Tensor

        return [Tensor(column) for column in classifier_inputs(
            self.spec["config"], self.spec["batch_size"], self.spec["seq_length"], self.spec["seed"])]

    def first(self) -> Dict[str, Any]:
        return {"check": self.cell(*self.inputs).asnumpy().tolist()}

    def step(self) -> None:
        self.cell(*self.inputs).asnumpy()


class KernelsInfer(OursInfer):
    """Our classifier built in this process as `src.predict` serves a .ckpt (serving_runtime: on CPU the compiled
    kernels), no export; ours_kernels_bf16 / ours_kernels_int8: the dense products in bfloat16 / int8, the weights
    converted once at load, as `--precision bfloat16` / `int8` serve it."""

    def precision(self) -> str:
        return {"ours_kernels_bf16": "bfloat16", "ours_kernels_int8": "int8"}.get(self.spec["side"], "float32")

    def build(self) -> Dict[str, Any]:
        from src.devices.device_setup import serving_runtime
        from src.model import cpu_kernels

        precision = self.precision()
        runtime = serving_runtime(self.device.target, "bfloat16" if precision == "bfloat16" else "float32", precision)
        self.cell = our_classifier(self.spec, runtime)
        cpu_kernels.convert_weights(self.cell)
        self.inputs = self._inputs()
        return {"kernels": runtime.kernels}


class TorchInfer(common.TorchSide):
    """HF AlbertForSequenceClassification (eager attention), eval mode, torch.no_grad(); torch_bf16: under
    torch.autocast("cpu", bfloat16), PyTorch's own bfloat16 inference."""

    def precision(self) -> str:
        return "bfloat16" if self.spec["side"] == "torch_bf16" else "float32"

    def build(self) -> Dict[str, Any]:
        self.model = hf_model(self.spec)
        self.inputs = hf_inputs(self.spec)
        return {}

    def _call(self) -> Any:
        import torch

        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision() == "bfloat16"):
            return self.model(**self.inputs).logits.float()

    def first(self) -> Dict[str, Any]:
        return {"check": self._call().numpy().tolist()}

    def step(self) -> None:
        self._call()


class OrtInfer(common.OrtSide):
    """An ONNX file of the export step (which one: the side's name) in an ONNX Runtime session: ours as src.predict
    serves them (SLOW_FUSIONS left out), HF's with ONNX Runtime's defaults."""

    def disabled_optimizers(self) -> Tuple[str, ...]:
        from src.serving.engines import SLOW_FUSIONS

        return SLOW_FUSIONS if self.spec["side"].startswith("ort_ours") else ()

    def build(self) -> Dict[str, Any]:
        import numpy as np

        side = self.spec["side"]
        self.onnx_path = self.spec["onnx"][side]
        self.ort = self.open_session(self.onnx_path)
        ids, types, mask = classifier_inputs(self.spec["config"], self.spec["batch_size"], self.spec["seq_length"],
                                             self.spec["seed"])
        columns = {"input_ids": ids, "token_type_ids": types, "input_mask": mask, "attention_mask": mask}
        self.feed = {item.name: columns[item.name].astype(np.int64 if item.type == "tensor(int64)" else np.int32)
                     for item in self.ort.get_inputs()}
        return {"export_s": self.spec["export_s"][side]}

    def first(self) -> Dict[str, Any]:
        return {"check": self.ort.run(None, self.feed)[0].tolist()}


class OpenVinoInfer(common.Side):
    """An ONNX file of the export step (ov_hf, ov_hf_f32: HF's; ov_ours: ours) or our NNCF int8 IR (OPENVINO_INT8)
    compiled by OpenVINO for its CPU plugin with INFERENCE_NUM_THREADS threads and, for ov_hf_f32,
    INFERENCE_PRECISION_HINT f32 (else OpenVINO's default, bf16 where the CPU has AMX or AVX512_BF16: for the int8
    IR, the precision of the parts left float)."""

    ONNX = {"ov_hf": "ort_hf", "ov_hf_f32": "ort_hf", "ov_ours": "ort_ours", **{side: side for side in OPENVINO_INT8}}

    def set_threads(self, threads: int) -> None:
        import openvino

        self.core = openvino.Core()
        self.properties = {"INFERENCE_NUM_THREADS": threads} if threads > 0 else {}
        if self.spec["side"] == "ov_hf_f32":
            self.properties["INFERENCE_PRECISION_HINT"] = "f32"
        self.framework = f"openvino {openvino.__version__} (CPU plugin, precision hint {self._hint()})"

    def _hint(self) -> str:
        """The precision hint this side compiles with: its own, or the CPU plugin's default (e.g. bf16 on AMX)."""
        hint = self.properties.get("INFERENCE_PRECISION_HINT") or self.core.get_property(
            "CPU", "INFERENCE_PRECISION_HINT")
        return hint if isinstance(hint, str) else hint.get_type_name()

    def precision(self) -> str:
        return "bfloat16" if self._hint() in ("bf16", "bfloat16") else "float32"

    def matmul_gflops(self, size: int) -> float:
        """OpenVINO's rate for a size^3 MatMul model in this side's precision hint."""
        import numpy as np
        import openvino.opset13 as ops
        from openvino import Model

        a, b = (ops.parameter([size, size], np.float32, name=name) for name in "ab")
        compiled = self.core.compile_model(Model([ops.matmul(a, b, False, False)], [a, b]), "CPU", self.properties)
        rng = np.random.default_rng(0)
        feed = [rng.standard_normal((size, size), dtype=np.float32) for _ in range(2)]
        request = compiled.create_infer_request()
        return common._best_rate(lambda: request.infer(feed), 2.0 * size ** 3)

    def build(self) -> Dict[str, Any]:
        import numpy as np

        side = self.spec["side"]
        onnx_side = self.ONNX[side]
        self.compiled = self.core.compile_model(self.spec["onnx"][onnx_side], "CPU", self.properties)
        self.request = self.compiled.create_infer_request()
        ids, types, mask = classifier_inputs(self.spec["config"], self.spec["batch_size"], self.spec["seq_length"],
                                             self.spec["seed"])
        columns = {"input_ids": ids, "token_type_ids": types, "input_mask": mask, "attention_mask": mask}
        self.feed = {port.get_any_name(): columns[port.get_any_name()].astype(
            np.int64 if port.get_element_type().get_type_name() == "i64" else np.int32)
            for port in self.compiled.inputs}
        return {"export_s": self.spec["export_s"][onnx_side]}

    def first(self) -> Dict[str, Any]:
        return {"check": self.request.infer(self.feed)[0].tolist()}

    def step(self) -> None:
        self.request.infer(self.feed)


SIDES = {"ours": OursInfer, "torch": TorchInfer, "ort_hf": OrtInfer, "ort_hf_fused": OrtInfer, "ort_ours": OrtInfer,
         "ort_hf_int8": OrtInfer, "ort_ours_int8": OrtInfer, "ours_kernels": KernelsInfer,
         "ours_kernels_bf16": KernelsInfer, "ours_kernels_int8": KernelsInfer, "torch_bf16": TorchInfer,
         "ov_hf": OpenVinoInfer, "ov_hf_f32": OpenVinoInfer,
         "ov_ours": OpenVinoInfer, **{side: OpenVinoInfer for side in OPENVINO_INT8}, "export": Exporter,
         "hf_export": HfExporter}
COMPARED_SIDES = {"torch": ("torch",), "onnxruntime": ("ort_hf", "ort_hf_fused", "ort_ours", "ort_hf_int8",
                                                       "ort_ours_int8"),
                  "openvino": ("ov_hf", "ov_hf_f32", "ov_ours", *OPENVINO_INT8), "kernels": ("ours_kernels",),
                  "bf16": ("torch_bf16", "ours_kernels_bf16"), "int8": ("ours_kernels_int8",)}


def export_worker(spec: Dict[str, Any], side: str) -> Dict[str, Any]:
    """Run an export side in its own worker process; its ready facts."""
    worker = common.Worker(Path(__file__).resolve(), {**spec, "side": side, "peak_size": 0}, Path(spec["workdir"]))
    try:
        facts = worker.ready
        worker.quit()
    finally:
        worker.kill()
    return {key: value for key, value in facts.items() if key in ("mindir", "onnx", "export_s")}


def export_first(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Before any serving worker starts: HF's weights (and ONNX files), then our exports, each in its own
    process; the files and export times for every side's spec."""
    facts: Dict[str, Any] = {"onnx": {}, "export_s": {}}
    steps = (["hf_export"] if len(spec["sides"]) > 1 else []) + ["export"]
    for side in steps:
        done = export_worker({**spec, **facts}, side)
        for key in ("onnx", "export_s"):
            facts[key].update(done.pop(key, {}))
        facts.update(done)
    return facts


def infer_flops(num_labels: int):
    def flops_for(config: Dict[str, Any], batch: int, seq: int) -> Tuple[float, Dict[str, float]]:
        flops = common.albert_forward_flops(config, batch, seq, 2 * config["hidden_size"] * num_labels)
        return flops, {side: flops for side in SIDES}
    return flops_for


# The largest max abs difference of a side's logits from ours where they share weights, as a share of our largest
# |logit|: measured up to 3% in bfloat16 and 28% in int8 (ALBERT-base's random weights, 2026-12-06); the wrong
# bfloat16 feed-forward of that day made 145%.
LOGITS_LIMIT = 0.5


def logits_check(raw: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Max abs difference of each other side's logits from ours on the benchmark batch (meaningful when they share
    weights); logits_max_abs_diff is the largest of them."""
    import numpy as np

    ours = np.asarray(raw["ours"]["ready"]["check"])
    diffs = {side: float(np.abs(ours - np.asarray(data["ready"]["check"])).max())
             for side, data in raw.items() if side != "ours"}
    return {"logits_max_abs": float(np.abs(ours).max()), "logits_max_abs_diff": max(diffs.values(), default=None),
            "logits_max_abs_diff_by_side": diffs}


def main(argv: List[str]) -> int:
    if argv[:1] == [common.WORKER_FLAG]:
        return common.worker_main(SIDES)
    parser = common.make_parser(__doc__, batch_default="1,32", steps_default=10, rounds_default=3,
                                compare={"torch": "HF transformers on PyTorch eager",
                                         "onnxruntime": "ONNX Runtime on HF's and our ONNX exports",
                                         "openvino": "OpenVINO's CPU plugin on HF's and our ONNX exports and on "
                                                     "our NNCF int8 IRs (ov_ours_int8, ov_ours_int8_asym)",
                                         "kernels": "our network in-process with the compiled CPU kernels",
                                         "bf16": "PyTorch's bfloat16 autocast and our kernels' bfloat16 products",
                                         "int8": "our kernels' int8 products (src.predict --precision int8)"})
    parser.add_argument("--export", choices=("static", "dynamic"), default="static",
                        help="static: one MINDIR per batch size; dynamic: a MINDIR with a dynamic batch dimension")
    parser.add_argument("--num_labels", type=int, default=2)
    args = parser.parse_args(argv)
    common.check_common(args)
    if args.num_labels < 1:
        raise common.UserError(f"--num_labels must be >= 1, got {args.num_labels}")
    configs = common.resolve_configs(args)
    results, failures = common.run_grid(Path(__file__).resolve(), args, configs, "batch",
                                        {"export": args.export, "num_labels": args.num_labels},
                                        infer_flops(args.num_labels), logits_check, prepare=export_first,
                                        compared_sides=COMPARED_SIDES)
    print()
    common.print_table(results, "batch")
    common.print_profiles(results)
    for result in results:
        for side, diff in result["logits_max_abs_diff_by_side"].items():
            print(f"[{result['variant']} b{result['batch_size']} s{result['seq_length']}] {side} logits max abs diff "
                  f"from ours {diff:.3g} (max |logit| {result['logits_max_abs']:.3g}, "
                  f"{'same' if result['same_weights'] else 'different'} weights)")
    failures += common.disagreements(results, "logits_max_abs_diff_by_side", lambda result: result["logits_max_abs"],
                                     LOGITS_LIMIT, "logits")
    report = {"benchmark": "infer", "unit": "batch",
              "flop_formula": "one forward; " + common.FORWARD_FORMULA.format(
                  head="2*H*C", head_text="classifier 2*H*C per sequence, C = num_labels"),
              "settings": {"network": args.albert_config_file or args.network, "set": args.overrides,
                           "variants": args.variant, "batch_size": args.batch_size, "seq_length": args.seq_length,
                           "steps": args.steps, "rounds": args.rounds, "threads": args.threads,
                           "compare": args.compare, "peak_size": args.peak_size, "profile": args.profile,
                           "seed": args.seed,
                           "export": args.export, "num_labels": args.num_labels},
              "environment": common.environment(results), "results": results, "failures": failures}
    common.write_json(args.output, report)
    return common.report_failures(failures)


if __name__ == "__main__":
    sys.exit(common.run_cli_with_workers(main))
