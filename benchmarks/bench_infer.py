"""Inference latency and throughput of an exported MINDIR sequence classifier and, with --compare torch, of HF
transformers' AlbertForSequenceClassification on PyTorch eager, in one run.

    python benchmarks/bench_infer.py [--network albert_base | --albert_config_file F] [--set KEY=VALUE ...]
        [--batch_size 1,32] [--seq_length 128 | --sweep] [--variant KEY=VALUE ...] [--export static|dynamic]
        [--steps 10] [--rounds 3] [--threads N] [--compare torch] [--profile N] [--output results.json]

Ours is what a deployment runs: AlbertForSequenceClassification of the config (random weights) exported with
export.py's export_atomically to MINDIR (one export per batch size, or --export dynamic: one with a dynamic batch
dimension), loaded with ms.load + nn.GraphCell. The export runs in its own short-lived process, so the serving
worker's peak RSS holds only the loaded MINDIR. HF's model runs in eval mode under torch.no_grad(). With --compare
torch both use HF's random weights (perturbed, converted to ours), so their logits must agree; the run reports the
max abs difference.

Workers, rounds, threads and the reported numbers are as bench_train.py's (bench_common.py), per call of one batch:
median and min ms/batch, samples/s, tokens/s, TFLOP/s (one forward: FLOP formula in the JSON), peak RSS, the
speed ratio torch ms / ours ms (> 1: ours is faster). "first s" is the first call (MindSpore compiles the loaded
graph then); build_s is loading the MINDIR (ours; export_s is the export process) or building the model (HF).
"""
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as common  # noqa: E402


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


class Exporter(common.MindSporeSide):
    """The short-lived export process: build the classifier, load the shared weights, write the MINDIR."""

    def build(self) -> Dict[str, Any]:
        import mindspore as ms
        import numpy as np
        from mindspore import Tensor

        from export import export_atomically
        from src.albert_model import AlbertConfig
        from src.finetune_eval_model import AlbertForSequenceClassification
        from src.utils import load_weights

        spec = self.spec
        model = AlbertForSequenceClassification(AlbertConfig(**spec["config"]), spec["num_labels"])
        model.set_train(False)
        if spec["weights"]:
            load_weights(model, common.hf_state_to_ours(spec["weights"]))
        if spec["export"] == "dynamic":
            inputs = [Tensor(shape=[None, spec["seq_length"]], dtype=ms.int32) for _ in range(3)]
        else:
            inputs = [Tensor(np.zeros((spec["batch_size"], spec["seq_length"]), np.int32)) for _ in range(3)]
        written = export_atomically(model, inputs, str(Path(spec["workdir"]) / "classifier"), "MINDIR")
        return {"mindir": next(path for path in written if path.endswith(".mindir"))}

    def first(self) -> Dict[str, Any]:
        return {}


class OursInfer(common.MindSporeSide):
    """ms.load + nn.GraphCell of the exported MINDIR."""

    def build(self) -> Dict[str, Any]:
        import mindspore as ms
        from mindspore import Tensor, nn

        self.cell = nn.GraphCell(ms.load(self.spec["mindir"]))
        self.inputs = [Tensor(column) for column in classifier_inputs(
            self.spec["config"], self.spec["batch_size"], self.spec["seq_length"], self.spec["seed"])]
        return {"export": self.spec["export"], "export_s": self.spec["export_s"]}

    def first(self) -> Dict[str, Any]:
        return {"check": self.cell(*self.inputs).asnumpy().tolist()}

    def step(self) -> None:
        self.cell(*self.inputs).asnumpy()


class TorchInfer(common.TorchSide):
    """HF AlbertForSequenceClassification (eager attention), eval mode, torch.no_grad()."""

    def build(self) -> Dict[str, Any]:
        import torch
        from transformers import AlbertConfig, AlbertForSequenceClassification

        self.model = AlbertForSequenceClassification(AlbertConfig(
            attn_implementation="eager", num_labels=self.spec["num_labels"], **self.spec["hf_config"]))
        if self.spec["weights"]:
            common.save_hf_state(self.model, self.spec["weights"], self.spec["seed"])
        self.model.eval()
        ids, types, mask = (torch.from_numpy(c).long() for c in classifier_inputs(
            self.spec["config"], self.spec["batch_size"], self.spec["seq_length"], self.spec["seed"]))
        self.inputs = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
        return {}

    def _call(self) -> Any:
        import torch

        with torch.no_grad():
            return self.model(**self.inputs).logits

    def first(self) -> Dict[str, Any]:
        return {"check": self._call().numpy().tolist()}

    def step(self) -> None:
        self._call()


SIDES = {"ours": OursInfer, "torch": TorchInfer, "export": Exporter}


def export_first(spec: Dict[str, Any]) -> Dict[str, Any]:
    """Run the export in its own worker process (after the torch worker wrote the weights) and hand the MINDIR to
    the serving worker."""
    start = time.perf_counter()
    worker = common.Worker(Path(__file__).resolve(), {**spec, "side": "export", "peak_size": 0},
                           Path(spec["workdir"]))
    try:
        mindir = worker.ready["mindir"]
        worker.quit()
    finally:
        worker.kill()
    return {"mindir": mindir, "export_s": time.perf_counter() - start}


def infer_flops(num_labels: int):
    def flops_for(config: Dict[str, Any], batch: int, seq: int) -> Tuple[float, Dict[str, float]]:
        flops = common.albert_forward_flops(config, batch, seq, 2 * config["hidden_size"] * num_labels)
        return flops, {"ours": flops, "torch": flops}
    return flops_for


def logits_check(raw: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Max abs difference of both sides' logits on the benchmark batch (meaningful when they share weights)."""
    import numpy as np

    ours = np.asarray(raw["ours"]["ready"]["check"])
    if "torch" not in raw:
        return {"logits_max_abs": float(np.abs(ours).max()), "logits_max_abs_diff": None}
    torch = np.asarray(raw["torch"]["ready"]["check"])
    return {"logits_max_abs": float(np.abs(ours).max()), "logits_max_abs_diff": float(np.abs(ours - torch).max())}


def main(argv: List[str]) -> int:
    if argv[:1] == [common.WORKER_FLAG]:
        return common.worker_main(SIDES)
    parser = common.make_parser(__doc__, batch_default="1,32", steps_default=10, rounds_default=3)
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
                                        infer_flops(args.num_labels), logits_check, before_ours=export_first)
    print()
    common.print_table(results, "batch")
    common.print_profiles(results)
    for result in results:
        if result["logits_max_abs_diff"] is not None:
            print(f"[{result['variant']} b{result['batch_size']} s{result['seq_length']}] logits max abs diff "
                  f"{result['logits_max_abs_diff']:.3g} (max |logit| {result['logits_max_abs']:.3g}, "
                  f"{'same' if result['same_weights'] else 'different'} weights)")
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
