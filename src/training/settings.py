"""`TrainSettings`: what a training run needs, built from either yaml (pretrain_config.yaml or a task yaml), which
name the same things differently (`batch_size` / `train_batch_size`, `epoch_size` / `epoch_num`,
`save_checkpoint_path` / `save_finetune_checkpoint_path`, ...). The settings remember the user's flag names, so
that every message of the shared training code names a flag the user actually has (`settings.flag("batch_size")`).

The keys both yamls share under one name (optimizer, optimizer_cfg, enable_lossscale, loss_scale_value,
scale_factor, scale_window, clip_norm, accumulation_steps, log_steps, save_checkpoint_steps, save_checkpoint_num,
enable_data_sink, data_sink_steps, seed) are read from the Config itself.
"""
import os
from dataclasses import dataclass, field
from typing import Dict, Sequence, Tuple

from model_utils.config import Config

PRETRAIN_FLAGS = {"data": "data_dir", "batch_size": "batch_size", "epochs": "epoch_size", "shuffle": "do_shuffle",
                  "save_dir": "save_checkpoint_path", "init_checkpoint": "load_checkpoint_path",
                  "init_only": "load_weights_only"}
FINETUNE_FLAGS = {"data": "train_data_file_path", "batch_size": "train_batch_size", "epochs": "epoch_num",
                  "shuffle": "train_data_shuffle", "save_dir": "save_finetune_checkpoint_path",
                  "init_checkpoint": "load_pretrain_checkpoint_path"}


@dataclass(frozen=True)
class TrainSettings:
    """One training run, in the shared code's terms (see the module docstring)."""

    config: Config  # the parsed yaml: optimizer, loss scaling and the other keys both yamls share
    data: str
    batch_size: int
    epochs: int
    shuffle: bool
    output_dir: str  # absolute
    save_dir: str  # absolute; "" = no checkpoints (pretraining with enable_save_ckpt false)
    checkpoint_prefix: str
    init_checkpoint: str  # where the weights start from (a train checkpoint there is resumed, unless init_only)
    init_only: bool = False  # the initial checkpoint gives weights only, never progress (always so in fine-tuning)
    allow_missing: Tuple[str, ...] = ()  # parameter names that may be absent from init_checkpoint (a new head)
    part_names: Tuple[str, ...] = ()  # the loss parts the network returns after the total, for the log
    flags: Dict[str, str] = field(default_factory=dict)

    def flag(self, name: str) -> str:
        """The user's flag for the setting `name` (the shared keys are called the same in both yamls)."""
        return self.flags.get(name, name)


def pretrain_settings(config: Config, checkpoint_prefix: str) -> TrainSettings:
    """run_pretrain.py: pretrain_config.yaml's names."""
    output_dir = os.path.abspath(config.output_dir)
    save_dir = os.path.abspath(config.save_checkpoint_path or os.path.join(output_dir, "checkpoints"))
    return TrainSettings(config=config, data=config.data_dir, batch_size=config.batch_size, epochs=config.epoch_size,
                         shuffle=config.do_shuffle, output_dir=output_dir,
                         save_dir=save_dir if config.enable_save_ckpt else "", checkpoint_prefix=checkpoint_prefix,
                         init_checkpoint=config.load_checkpoint_path, init_only=config.load_weights_only,
                         part_names=("mlm_loss", "sop_loss"), flags=PRETRAIN_FLAGS)


def finetune_settings(config: Config, checkpoint_prefix: str, allow_missing: Sequence[str] = ("",)) -> TrainSettings:
    """run_classifier.py, run_race.py, run_squad_v1.py, run_squad_v2.py: the task yamls' names. The pretrained
    checkpoint gives weights only; the task head is new."""
    output_dir = os.path.abspath(config.output_dir)
    save_dir = os.path.abspath(config.save_finetune_checkpoint_path or os.path.join(output_dir, "checkpoints"))
    return TrainSettings(config=config, data=config.train_data_file_path, batch_size=config.train_batch_size,
                         epochs=config.epoch_num, shuffle=config.train_data_shuffle, output_dir=output_dir,
                         save_dir=save_dir, checkpoint_prefix=checkpoint_prefix,
                         init_checkpoint=config.load_pretrain_checkpoint_path, init_only=True,
                         allow_missing=tuple(allow_missing), flags=FINETUNE_FLAGS)
