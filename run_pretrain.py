"""Pretrain ALBERT (masked LM + sentence-order prediction) on MindRecord data from src.create_pretraining_data.

    python run_pretrain.py --data_dir data/pretrain.mindrecord --albert_network albert_tiny --train_steps 1000

Every key of pretrain_config.yaml is a flag (`python run_pretrain.py --help`). A run writes into `output_dir`:
pretrain.log-style progress on stdout, metrics.jsonl (one row per log line; plot it with
`python -m src.plot_metrics OUTPUT_DIR/metrics.jsonl`), albert_config.json (the network, for pretrain_eval.py and
fine-tuning) and checkpoints. Started again with the same settings, it resumes from its newest checkpoint.
"""
import os
import sys
from pathlib import Path
from typing import List

from model_utils.config import parse_cli
from model_utils.errors import UserError, run_cli

CONFIG_FILE = Path(__file__).resolve().parent / "pretrain_config.yaml"
CHECKPOINT_PREFIX = "albert_pretrain"


def main(argv: List[str]) -> int:
    config = parse_cli(CONFIG_FILE, argv, __doc__.splitlines()[0])
    if not config.data_dir:
        raise UserError("set --data_dir to the pretraining MindRecord (see src.create_pretraining_data)")

    from dataset import check_schema, count_rows, create_pretraining_dataset
    from src import cpu_kernels
    from src.albert_for_pre_training import AlbertNetworkWithLoss
    from src.training import (StepPlan, build_train_cell, check_data_fits, check_same_start, data_meta,
                              make_callbacks, network_config, remove_stale_temporaries, resume_or_init, setup_device,
                              train, weights_digest)

    seq_shape = check_schema(config.data_dir, config.schema_dir)
    meta = data_meta(config.data_dir)
    net = network_config(config, meta.get("tokenizer", {}).get("vocab_size"))
    check_data_fits(meta, net, seq_shape, config.data_dir)
    device = setup_device(config.device_target, config.device_id, config.distribute, config.device_num,
                          config.cpu_threads, config.seed)

    def log(message: str) -> None:
        if device.is_main:
            print(message, flush=True)

    log(f"device: {device.target} ({device.group_size} worker(s)); "
        f"network: {config.albert_config_file or config.albert_network}; kernels: {cpu_kernels.status()}")
    plan = StepPlan.create(count_rows(config.data_dir), config.batch_size, config.train_steps, config.epoch_size,
                           device.group_size, device.rank, config.accumulation_steps, config.do_shuffle, config.seed)
    log(f"plan: {plan.describe()}")

    output_dir = os.path.abspath(config.output_dir)
    save_dir = os.path.abspath(config.save_checkpoint_path or os.path.join(output_dir, "checkpoints"))
    network = AlbertNetworkWithLoss(net, is_training=True, return_parts=True)
    optimizer, cell = build_train_cell(config, network, plan.total_steps)
    progress = resume_or_init(cell, network, plan, config.load_checkpoint_path,
                              save_dir if config.enable_save_ckpt else "", CHECKPOINT_PREFIX, log)
    check_same_start(progress, device, save_dir if config.enable_save_ckpt else "")
    if device.is_main:  # only now: a run that could not start leaves nothing behind
        os.makedirs(output_dir, exist_ok=True)
        net.to_json_file(os.path.join(output_dir, "albert_config.json"))
        if config.enable_save_ckpt:
            os.makedirs(save_dir, exist_ok=True)
            remove_stale_temporaries(save_dir)
            net.to_json_file(os.path.join(save_dir, "albert_config.json"))
    if progress.micro_step >= plan.total_micro_steps:
        log(f"nothing to do: the checkpoint already completed all {plan.total_steps} steps")
        return 0

    checkpoints = (save_dir, CHECKPOINT_PREFIX, config.save_checkpoint_steps, config.save_checkpoint_num)
    callbacks = make_callbacks(cell, optimizer, plan, progress, device, seq_shape[-1], output_dir, config.log_steps, log,
                               checkpoints if config.enable_save_ckpt else None, ("mlm_loss", "sop_loss"))

    def make_dataset(rows):
        return create_pretraining_dataset(config.data_dir, config.batch_size, indices=rows)

    train(make_dataset, plan, progress, callbacks, device, config.enable_data_sink, config.data_sink_steps, log)
    print(f"rank {device.rank}: final weights sha256 {weights_digest(cell)}", flush=True)
    log(f"done: {plan.total_steps} steps; outputs in {output_dir}"
        + (f", checkpoints in {save_dir}" if config.enable_save_ckpt else ""))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
