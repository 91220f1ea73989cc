"""Pretraining train-step speed of this package (MindSpore GRAPH mode) and, with --compare torch, of HF transformers
on PyTorch eager doing the same work, in one run.

    python benchmarks/bench_train.py [--network albert_base | --albert_config_file F] [--set KEY=VALUE ...]
        [--batch_size 8[,16]] [--seq_length 128[,256,512] | --sweep] [--variant share_type=none ...]
        [--compute_type float32|bfloat16] [--steps 5] [--rounds 3] [--threads N]
        [--compare torch,torch_bf16,torch_compile,torch_compile_bf16]
        [--profile N] [--output results.json]

One step is everything a pretraining step does. Ours: AlbertTrainOneStepCell around AlbertNetworkWithLoss (forward,
masked-LM + sentence-order loss, backward, dynamic loss scaling with its overflow check, clipping to global norm
1.0, AdamWeightDecay with the pretrain_config.yaml settings). HF: AlbertForPreTraining (attn_implementation
"eager") with labels (-100 outside the masked positions) and sentence_order_label, backward,
clip_grad_norm_(1.0), torch.optim.AdamW (same lr schedule, no decay on LayerNorm/bias), zero_grad. Both get the
same random batch (fixed seed; --max_predictions_per_seq masked positions per row) and, where HF can express our
config, the same random weights (HF's, perturbed and converted), so their first losses must agree.

--compute_type bfloat16 runs our step as `net_cfg.compute_type: bfloat16` trains on CPU: the compiled kernels'
products in bfloat16 with float32 accumulation, everything else float32 (needs AVX512_BF16 or AMX-BF16).
--compare torch_bf16 runs HF's step under torch.autocast("cpu", dtype=torch.bfloat16) (PyTorch's bfloat16 training
recipe: float32 weights, optimizer and gradients, products in bfloat16), beside or instead of --compare torch.
--compare torch_compile / torch_compile_bf16 run the same steps with the model under torch.compile (inductor, which
fuses the element-wise work around the products), float32 / under the same autocast: PyTorch's best on a CPU is the
faster of eager and compiled.

Each side runs in its own worker process (bench_common.py): it builds its model once, measures its framework's
fp32 sgemm (--peak_size^3) at the same thread count, runs the first step (MindSpore: graph compilation), then
one untimed warm-up round and the timed rounds of --steps steps alternate between the sides (first rounds ran
slower for some sides); each worker measures its sgemm again before it exits.
Every (variant, seq_length, batch_size) gets fresh workers, so peak RSS (VmHWM of each worker) is that
configuration's.

Reported per side: median and min ms/step over all timed steps, samples/s and tokens/s (batch x seq_length,
padding included), model TFLOP/s and its fraction of the machine's fp32 matmul peak (the best sgemm rate any
worker reached, at its start or its end; a bfloat16 side against the best bfloat16 product rate: ours the kernels'
bfloat16 product, PyTorch's torch.mm on bfloat16 tensors), first-step (compile) seconds, build seconds, peak RSS;
and the speed ratio of each other side, its ms / ours ms (> 1: ours is faster).

FLOPs (analytic matmul FLOPs, one formula for both sides): training step = 3 x forward (backward = 2 x forward);
forward = B*S*[2*E*H + L*(8*H^2 + 4*H*I + 4*S*H)] + B*[2*H^2 + 4*H + P*(2*H*E + 2*E*V)], L = num_hidden_layers x
inner_group_num, P = masked positions per row (the MLM head runs on those only, as ours does). HF's head runs on all
S positions: its `executed_tflops` uses P = S.

--sweep measures seq_length 128, 256 and 512 (times every --batch_size); --variant KEY=VALUE[,KEY=VALUE] adds the
config with those changes (e.g. --variant share_type=none --variant embedding_size=256) to the same run.
--profile N shows where the time goes: after the timed rounds each side profiles N more steps (MindSpore's profiler:
host kernel time per operator type; torch.profiler: self CPU time per aten operator), printed and in the JSON
(`op_profile`).
"""
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as common  # noqa: E402
from model_utils.errors import UserError  # noqa: E402

PRETRAIN_YAML = ROOT / "pretrain_config.yaml"
NO_DECAY_PARTS = ("LayerNorm", "layer_norm", "bias")  # as src.training.optimization, for HF's parameter names


def pretraining_batch(config: Dict[str, Any], batch: int, seq: int, predictions: int, seed: int) -> Dict[str, Any]:
    """The 7 pretraining columns, random but fixed by `seed`: rows of seq/2..seq real tokens (the first full),
    two segments, `predictions` distinct masked positions inside each row's real tokens, all weights 1."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(seq // 2, seq + 1, batch)
    lengths[0] = seq
    columns = np.arange(seq)
    input_mask = (columns < lengths[:, None]).astype(np.int32)
    segment_ids = ((columns >= lengths[:, None] // 2) & (input_mask == 1)).astype(np.int32)
    segment_ids = np.minimum(segment_ids, config["type_vocab_size"] - 1)
    positions = np.stack([np.sort(rng.choice(np.arange(1, n), predictions, replace=False)) for n in lengths])
    return {"input_ids": rng.integers(0, config["vocab_size"], (batch, seq)).astype(np.int32),
            "input_mask": input_mask, "segment_ids": segment_ids,
            "next_sentence_labels": rng.integers(0, 2, (batch, 1)).astype(np.int32),
            "masked_lm_positions": positions.astype(np.int32),
            "masked_lm_ids": rng.integers(0, config["vocab_size"], positions.shape).astype(np.int32),
            "masked_lm_weights": np.ones(positions.shape, np.float32)}


def masked_positions(limit: int, seq: int) -> int:
    """Masked positions per row: --max_predictions_per_seq, at most seq/2 - 1 (they lie inside the real tokens)."""
    return min(limit, seq // 2 - 1)


def _batch(spec: Dict[str, Any]) -> Dict[str, Any]:
    seq = spec["seq_length"]
    masked = masked_positions(spec["train"]["predictions"], seq)
    return pretraining_batch(spec["config"], spec["batch_size"], seq, masked, spec["seed"])


class OursTrain(common.MindSporeSide):
    """AlbertTrainOneStepCell(AlbertNetworkWithLoss) with AdamWeightDecay, loss scaling on, clip_norm 1.0."""

    def precision(self) -> str:
        return "bfloat16" if self.spec["config"]["compute_type"] == "bfloat16" else "float32"

    def build(self) -> Dict[str, Any]:
        from mindspore import Tensor

        from src.model.pretraining_heads import AlbertNetworkWithLoss

        from src.common.checkpoint_io import load_weights
        from src.devices.device_setup import kernels_status, model_runtime
        from src.model.albert import AlbertConfig
        from src.training.optimization import build_optimizer
        from src.training.train_step import AlbertTrainOneStepCell

        train = self.spec["train"]
        config = AlbertConfig(**self.spec["config"])
        runtime = model_runtime(self.device.target, config.compute_type)  # the training path users get
        net = AlbertNetworkWithLoss(config, is_training=True, runtime=runtime)
        if self.spec["weights"]:
            load_weights(net, common.hf_state_to_ours(self.spec["weights"]))
        optimizer = build_optimizer("AdamWeightDecay", net.trainable_params(), train["adam"], train["total_steps"])
        self.cell = AlbertTrainOneStepCell(net, optimizer, loss_scale=train["loss_scale"],
                                           scale_factor=train["scale_factor"], scale_window=train["scale_window"],
                                           clip_norm=train["clip_norm"], use_kernels=runtime.kernels)
        self.cell.set_train(True)
        self.inputs = [Tensor(column) for column in _batch(self.spec).values()]
        self.overflows = 0
        return {"parameters": sum(p.size for p in net.trainable_params()),
                "masked_positions": int(self.inputs[4].shape[1]), "kernels": kernels_status(self.device.target)}

    def _call(self) -> float:
        loss, overflow = self.cell(*self.inputs)[:2]
        self.overflows += int(overflow.asnumpy())
        return float(loss.asnumpy())

    def first(self) -> Dict[str, Any]:
        return {"first_loss": self._call()}

    def step(self) -> None:
        self._call()

    def final(self) -> Dict[str, Any]:
        return {"skipped_updates": self.overflows}  # loss-scale overflows: the optimizer did not run


class TorchTrain(common.TorchSide):
    """HF AlbertForPreTraining (eager attention) + AdamW + clip_grad_norm_(1.0); *_bf16: forward and loss under
    torch.autocast("cpu", bfloat16); torch_compile*: the model wrapped in torch.compile (inductor, its default mode;
    the first step compiles forward and backward)."""

    def precision(self) -> str:
        return "bfloat16" if self.spec["side"].endswith("_bf16") else "float32"

    def build(self) -> Dict[str, Any]:
        import torch
        from transformers import AlbertConfig, AlbertForPreTraining

        train = self.spec["train"]
        self.model = AlbertForPreTraining(AlbertConfig(attn_implementation="eager", **self.spec["hf_config"]))
        if self.spec["weights"] and Path(self.spec["weights"]).is_file():  # the other torch side wrote them
            common.load_hf_state(self.model, self.spec["weights"])
        elif self.spec["weights"]:
            common.save_hf_state(self.model, self.spec["weights"], self.spec["seed"])
        self.model.train()
        named = list(self.model.named_parameters())
        decay = [p for n, p in named if not any(part in n for part in NO_DECAY_PARTS)]
        no_decay = [p for n, p in named if any(part in n for part in NO_DECAY_PARTS)]
        adam = train["adam"]
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": adam["weight_decay"]},
                                            {"params": no_decay, "weight_decay": 0.0}],
                                           lr=adam["learning_rate"], eps=adam.get("eps", 1e-6))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, _lr_factor(adam, train["total_steps"]))
        columns = _batch(self.spec)
        labels = torch.full(columns["input_ids"].shape, -100, dtype=torch.long)
        positions = torch.from_numpy(columns["masked_lm_positions"]).long()
        labels.scatter_(1, positions, torch.from_numpy(columns["masked_lm_ids"]).long())
        self.inputs = {"input_ids": torch.from_numpy(columns["input_ids"]).long(),
                       "attention_mask": torch.from_numpy(columns["input_mask"]).long(),
                       "token_type_ids": torch.from_numpy(columns["segment_ids"]).long(), "labels": labels,
                       "sentence_order_label": torch.from_numpy(columns["next_sentence_labels"]).long().reshape(-1)}
        self.forward = torch.compile(self.model) if self.spec["side"].startswith("torch_compile") else self.model
        return {"parameters": sum(p.numel() for p in self.model.parameters())}

    def _call(self) -> float:
        import torch

        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.precision() == "bfloat16"):
            loss = self.forward(**self.inputs).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    def first(self) -> Dict[str, Any]:
        return {"first_loss": self._call()}

    def step(self) -> None:
        self._call()


def _lr_factor(adam: Dict[str, Any], total_steps: int):
    """src.training.optimization.PolynomialWarmupSchedule as a LambdaLR factor (lr / peak)."""
    peak, end = float(adam["learning_rate"]), float(adam["end_learning_rate"])
    warmup, power = int(adam["warmup_steps"]), float(adam["power"])
    decay = int(adam.get("decay_steps", 0) or 0)
    decay = decay if decay > 0 else total_steps

    def factor(step: int) -> float:
        if step < warmup:
            return step / max(warmup, 1)
        return ((peak - end) * (1 - min(step, decay) / decay) ** power + end) / peak
    return factor


SIDES = {"ours": OursTrain, "torch": TorchTrain, "torch_bf16": TorchTrain, "torch_compile": TorchTrain,
         "torch_compile_bf16": TorchTrain}
COMPARE = {"torch": "HF transformers on PyTorch eager, float32",
           "torch_bf16": "HF transformers on PyTorch eager under torch.autocast(cpu, bfloat16)",
           "torch_compile": "HF transformers under torch.compile (inductor), float32",
           "torch_compile_bf16": "HF transformers under torch.compile (inductor) and torch.autocast(cpu, bfloat16)"}


def train_settings(args: Any) -> Dict[str, Any]:
    """The optimizer and loss-scale settings of pretrain_config.yaml (clip_norm fixed at 1.0)."""
    from model_utils.config import load_yaml_documents

    values = load_yaml_documents(PRETRAIN_YAML)[0]
    return {"adam": values["optimizer_cfg"]["AdamWeightDecay"], "loss_scale": float(values["loss_scale_value"]),
            "scale_factor": float(values["scale_factor"]), "scale_window": int(values["scale_window"]),
            "clip_norm": 1.0, "total_steps": 1 + args.rounds * args.steps, "predictions": args.max_predictions_per_seq}


def train_flops(predictions: int):
    def flops_for(config: Dict[str, Any], batch: int, seq: int) -> Tuple[float, Dict[str, float]]:
        h, e, v = config["hidden_size"], config["embedding_size"], config["vocab_size"]

        def step(positions: int) -> float:
            return 3 * common.albert_forward_flops(config, batch, seq, 4 * h + positions * (2 * h * e + 2 * e * v))
        masked = masked_positions(predictions, seq)
        return step(masked), {"ours": step(masked), **{side: step(seq) for side in COMPARE}}
    return flops_for


# The largest relative difference of a side's first loss from ours where they share weights: measured at most 5e-5
# in bfloat16 (ALBERT-base, 2026-11-28 to 12-06), 3e-7 in float32; the wrong feed-forward of that day made 6%.
FIRST_LOSS_LIMIT = 0.01


def first_loss_check(raw: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Each side's loss before any update: equal to ours (to float32 rounding, or bfloat16's where either side
    computes in it) when they share weights."""
    losses = {side: data["ready"]["first_loss"] for side, data in raw.items()}
    diffs = {side: abs(losses["ours"] - loss) for side, loss in losses.items() if side != "ours"}
    return {"first_loss": losses, "first_loss_abs_diff": diffs.get("torch"), "first_loss_abs_diff_by_side": diffs}


def main(argv: List[str]) -> int:
    if argv[:1] == [common.WORKER_FLAG]:
        return common.worker_main(SIDES)
    parser = common.make_parser(__doc__, batch_default="8", steps_default=5, rounds_default=3, compare=COMPARE)
    parser.add_argument("--max_predictions_per_seq", type=int, default=20, help="masked positions per row")
    parser.add_argument("--compute_type", choices=("float32", "bfloat16"), default=None,
                        help="our step's net_cfg.compute_type (default: the network's, float32)")
    args = parser.parse_args(argv)
    common.check_common(args)
    if args.max_predictions_per_seq < 1 or min(args.seq_length) < 4:
        raise UserError(f"need --max_predictions_per_seq >= 1 and --seq_length >= 4, got {args.max_predictions_per_seq}"
                        f" and {min(args.seq_length)}")
    configs = [(label, {**config, "compute_type": args.compute_type or config["compute_type"]})
               for label, config in common.resolve_configs(args)]
    settings = train_settings(args)
    results, failures = common.run_grid(Path(__file__).resolve(), args, configs, "step", {"train": settings},
                                        train_flops(args.max_predictions_per_seq), first_loss_check,
                                        compared_sides={side: (side,) for side in COMPARE})
    print()
    common.print_table(results, "step")
    common.print_profiles(results)
    for result in results:
        if result["first_loss_abs_diff_by_side"]:
            losses = ", ".join(f"{side} {loss:.6f}" for side, loss in result["first_loss"].items())
            print(f"[{result['variant']} b{result['batch_size']} s{result['seq_length']}] first loss: {losses} "
                  f"({'same' if result['same_weights'] else 'different'} weights)")
    failures += common.disagreements(results, "first_loss_abs_diff_by_side",
                                     lambda result: abs(result["first_loss"]["ours"]), FIRST_LOSS_LIMIT, "first loss")
    report = {"benchmark": "train", "unit": "step",
              "flop_formula": "training step = 3 x forward; " + common.FORWARD_FORMULA.format(
                  head="4*H + P*(2*H*E + 2*E*V)", head_text="SOP head 4*H per sequence; MLM head 2*H*E + 2*E*V per "
                  "predicted position, P = masked positions per row for model_tflops of both sides; executed_tflops "
                  "uses P = S for HF, whose MLM head runs on every position"),
              "settings": {"network": args.albert_config_file or args.network, "set": args.overrides,
                           "variants": args.variant, "batch_size": args.batch_size, "seq_length": args.seq_length,
                           "compute_type": args.compute_type, "steps": args.steps, "rounds": args.rounds,
                           "threads": args.threads,
                           "compare": args.compare, "peak_size": args.peak_size, "profile": args.profile,
                           "seed": args.seed,
                           "max_predictions_per_seq": args.max_predictions_per_seq, "train": settings},
              "environment": common.environment(results), "results": results, "failures": failures}
    common.write_json(args.output, report)
    return common.report_failures(failures)


if __name__ == "__main__":
    sys.exit(common.run_cli_with_workers(main))
