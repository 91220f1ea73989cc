"""Pretrain ALBERT (masked LM + sentence-order prediction) on MindRecord data from src.create_pretraining_data.

    python run_pretrain.py --data_dir data/pretrain.mindrecord --albert_network albert_tiny --train_steps 1000

Every key of pretrain_config.yaml is a flag (`python run_pretrain.py --help`). A run writes into `output_dir`:
pretrain.log-style progress on stdout, metrics.jsonl (one row per log line; plot it with
`python -m src.plot_metrics OUTPUT_DIR/metrics.jsonl`), albert_config.json (the network, for pretrain_eval.py and
fine-tuning) and checkpoints. Started again with the same settings, it resumes from its newest checkpoint.
"""
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

    from src.albert_for_pre_training import AlbertNetworkWithLoss
    from src.dataset import check_schema, create_pretraining_dataset
    from src.device_setup import kernels_status, setup_device
    from src.run_config import check_data_fits, config_beside, data_meta, network_config
    from src.settings import pretrain_settings
    from src.train_loop import fit

    settings = pretrain_settings(config, CHECKPOINT_PREFIX)
    seq_shape = check_schema(config.data_dir, config.schema_dir)
    meta = data_meta(config.data_dir)
    net = network_config(config, meta.get("tokenizer", {}).get("vocab_size"), config_beside(config.load_checkpoint_path))
    check_data_fits(meta, net, seq_shape, config.data_dir)
    device = setup_device(config.device_target, config.device_id, config.distribute, config.device_num,
                          config.cpu_threads, config.seed)

    def log(message: str) -> None:
        if device.is_main:
            print(message, flush=True)

    log(f"device: {device.target} ({device.group_size} worker(s)); "
        f"network: {config.albert_config_file or config_beside(config.load_checkpoint_path) or config.albert_network}; "
        f"kernels: {kernels_status(device.target)}")

    def make_dataset(rows):
        return create_pretraining_dataset(config.data_dir, config.batch_size, indices=rows)

    def make_network(runtime):
        return AlbertNetworkWithLoss(net, is_training=True, return_parts=True, runtime=runtime)

    fit(settings, make_network, net, device, seq_shape[-1], make_dataset, log)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
