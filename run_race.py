"""Fine-tune, evaluate and predict with ALBERT on RACE multiple-choice reading comprehension.

    python run_race.py --train_data_file_path data/race_train.mindrecord \
        --eval_data_file_path data/race_dev.mindrecord --load_pretrain_checkpoint_path albert_base.ckpt

Data comes from `python -m src.create_finetune_data --task_name race`; every key of task_race_config.yaml is a flag.
Outputs: OUTPUT_DIR/checkpoints, metrics.jsonl, eval/eval_results.json + eval/predictions.tsv (A-D and the
probability of each choice), predict/predictions.tsv.
"""
import sys
from typing import List

from model_utils.errors import run_cli
from src.tasks.registry import TASKS
from src.training.finetune import run


def main(argv: List[str]) -> int:
    return run(TASKS["race"], argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
