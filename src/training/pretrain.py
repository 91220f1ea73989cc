"""The pretraining driver of run_pretrain.py, in the shape of fine-tuning's (src/training/finetune.py): parse the
yaml into flags, check the data against the network before any time is spent, set up the device, then the shared
training loop (src/training/train_loop.py: step plan, resume, loss scaling, accumulation, checkpoints,
metrics.jsonl, data parallel) on the masked-LM + sentence-order network.

The modules that import MindSpore are imported inside `run`, so that `--help` and the input checks answer without
MindSpore's import (seconds).
"""
from pathlib import Path
from typing import Sequence

from model_utils.config import parse_cli
from model_utils.errors import UserError
from src.data.schema import PRETRAINING

CONFIG_FILE = Path(__file__).resolve().parents[2] / "pretrain_config.yaml"
CHECKPOINT_PREFIX = "albert_pretrain"


def run(argv: Sequence[str], description: str) -> int:
    """Pretrain as the flags say; returns the exit code."""
    config = parse_cli(CONFIG_FILE, argv, description)
    if not config.data_dir:
        raise UserError("set --data_dir to the pretraining MindRecord (see src.create_pretraining_data)")
    if config.load_weights_only and not config.load_checkpoint_path:
        raise UserError("load_weights_only is true but --load_checkpoint_path is not set: whose weights?")

    from src.data.pipelines import create_pretraining_dataset
    from src.devices.device_setup import kernels_status, start_device
    from src.model.pretraining_heads import AlbertNetworkWithLoss
    from src.training.network_config import checked_network, network_source
    from src.training.settings import pretrain_settings
    from src.training.train_loop import fit

    settings = pretrain_settings(config, CHECKPOINT_PREFIX)
    net, _, seq_shape = checked_network(config, config.data_dir, PRETRAINING.names, config.load_checkpoint_path,
                                        config.schema_dir)
    device, log = start_device(config)
    log(f"device: {device.target} ({device.group_size} worker(s)); "
        f"network: {network_source(config, config.load_checkpoint_path)}; "
        f"kernels: {kernels_status(device.target, net.compute_type)}")

    def make_dataset(rows):
        return create_pretraining_dataset(config.data_dir, config.batch_size, indices=rows)

    def make_network(runtime):
        return AlbertNetworkWithLoss(net, is_training=True, return_parts=True, runtime=runtime)

    fit(settings, make_network, net, device, seq_shape[-1], make_dataset, log)
    return 0
