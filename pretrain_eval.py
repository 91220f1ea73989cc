"""Evaluate a pretraining checkpoint: masked-LM accuracy and loss, sentence-order accuracy and loss.

    python pretrain_eval.py --eval_data_dir data/eval.mindrecord --eval_ckpt output/pretrain/checkpoints/X.ckpt

The network comes from --albert_config_file, else from the albert_config.json that run_pretrain.py wrote beside
the checkpoint, else from albert_network + net_cfg as in run_pretrain.py. Every row is evaluated exactly once;
under `distribute` the ranks split the rows and add up their sums. Prints the metrics and writes them as JSON, and
(enable_tensorboard) as TensorBoard scalars pretrain_eval/<metric> in OUTPUT_DIR/tensorboard at the checkpoint's
step; the log goes to the folder of that JSON.
"""
import json
import os
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np

from model_utils.config import parse_cli
from model_utils.errors import UserError, run_cli

CONFIG_FILE = Path(__file__).resolve().parent / "pretrain_config.yaml"


def metrics_from_sums(sums: np.ndarray) -> Dict[str, float]:
    """The four metrics from the summed (mlm correct, mlm weight, mlm nll, sop correct, sop nll, examples)."""
    mlm_correct, mlm_weight, mlm_nll, sop_correct, sop_nll, examples = (float(v) for v in sums)
    if examples == 0 or mlm_weight == 0:
        raise UserError("the evaluation data has no examples or no masked positions")
    return {"masked_lm_accuracy": mlm_correct / mlm_weight, "masked_lm_loss": mlm_nll / mlm_weight,
            "sentence_order_accuracy": sop_correct / examples, "sentence_order_loss": sop_nll / examples,
            "examples": int(examples), "masked_tokens": int(round(mlm_weight))}


def evaluate(cell, data_dir: str, batch_size: int, rank: int, group_size: int) -> np.ndarray:
    """This rank's metric sums over rows rank, rank + group_size, ... of the data (rank 0 shows the progress)."""
    from src.common.fixed_shape_batches import cell_runner, run_padded
    from src.common.progress import progress
    from src.data.pipelines import count_rows, create_pretraining_dataset

    rows = np.arange(count_rows(data_dir))[rank::group_size]
    sums = np.zeros(6, np.float64)
    if len(rows) == 0:
        return sums
    dataset = create_pretraining_dataset(data_dir, batch_size, drop_remainder=False, indices=rows)
    batches = (list(batch) for batch in dataset.create_tuple_iterator(output_numpy=True, num_epochs=1))
    with progress("eval", len(rows), " rows", enabled=rank == 0) as bar:
        for (batch_sums,), _ in run_padded(cell_runner(cell), batches, batch_size, weights=True, bar=bar):
            sums += batch_sums.astype(np.float64)
    return sums


def main(argv: List[str]) -> int:
    config = parse_cli(CONFIG_FILE, argv, __doc__.splitlines()[0])
    for key in ("eval_data_dir", "eval_ckpt"):
        if not config[key]:
            raise UserError(f"set --{key}")

    from src.common.atomic_files import check_file_output, save_json_atomic
    from src.common.checkpoint_io import load_weights, read_checkpoint_and_digest
    from src.common.run_log import log_to
    from src.data.pipelines import data_paths
    from src.data.schema import PRETRAINING
    from src.devices.device_setup import all_ranks_sum, model_runtime, setup_device
    from src.model.pretraining_heads import AlbertPretrainEvalCell
    from src.data.tokenization import checkpoint_tokenizer
    from src.training.checkpoints import check_data_tokenizer, checkpoint_step
    from src.training.network_config import checked_network, network_note, network_source
    from src.training.summaries import write_metrics

    net, meta, _ = checked_network(config, config.eval_data_dir, PRETRAINING.names, config.eval_ckpt,
                                   config.schema_dir)
    source = network_source(config, config.eval_ckpt)
    output = os.path.abspath(config.eval_output_file or os.path.join(config.output_dir, "pretrain_eval.json"))
    inputs = {"--eval_ckpt": config.eval_ckpt, "the network's config": source if os.path.isfile(source) else ""}
    inputs.update((f"--eval_data_dir's {os.path.basename(path)}", path) for path in data_paths(config.eval_data_dir))
    check_file_output(output, inputs)
    device = setup_device(config.device_target, config.device_id, config.distribute, config.device_num,
                          config.cpu_threads, config.seed)
    weights, digest = read_checkpoint_and_digest(config.eval_ckpt)
    check_data_tokenizer(checkpoint_tokenizer(weights, config.eval_ckpt), meta,
                         f"{config.eval_ckpt} was trained on data made with", config.eval_data_dir)
    cell = AlbertPretrainEvalCell(net, model_runtime(device.target, net.compute_type))
    cell.set_train(False)
    load_weights(cell, weights, name=config.eval_ckpt, network_note=network_note(config, config.eval_ckpt))
    if device.is_main:
        log_to(os.path.dirname(output))
    sums = evaluate(cell, config.eval_data_dir, config.eval_batch_size, device.rank, device.group_size)
    if device.group_size > 1:
        sums = all_ranks_sum(sums).astype(np.float64)
    metrics = metrics_from_sums(sums)
    if device.is_main:
        save_json_atomic({**metrics, "checkpoint": os.path.abspath(config.eval_ckpt), "checkpoint_sha256": digest,
                          "data": os.path.abspath(config.eval_data_dir), "network": source}, output)
        print(json.dumps(metrics, indent=2))
        print(f"wrote {output}")
        write_metrics(config, config.output_dir, "pretrain_eval", metrics, checkpoint_step(config.eval_ckpt))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
