"""Pretrain ALBERT (masked LM + sentence-order prediction) on MindRecord data from src.create_pretraining_data.

    python run_pretrain.py --data_dir data/pretrain.mindrecord --albert_network albert_tiny --train_steps 1000

Every key of pretrain_config.yaml is a flag (`python run_pretrain.py --help`). A run writes into `output_dir`:
pretrain.log-style progress on stdout, metrics.jsonl (one row per log line; plot it with
`python -m src.plot_metrics OUTPUT_DIR/metrics.jsonl`), albert_config.json (the network, for pretrain_eval.py and
fine-tuning) and checkpoints. Started again with the same settings, it resumes from its newest checkpoint.
"""
import sys
from typing import List

from model_utils.errors import run_cli
from src.training.pretrain import run


def main(argv: List[str]) -> int:
    return run(argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(run_cli(main))
