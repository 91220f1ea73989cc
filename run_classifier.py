"""Fine-tune, evaluate and predict with ALBERT on GLUE / LCQMC classification or STS-B regression.

    python run_classifier.py --train_data_file_path data/mrpc_train.mindrecord \
        --eval_data_file_path data/mrpc_dev.mindrecord --load_pretrain_checkpoint_path albert_base.ckpt \
        --num_class 2 --assessment_method f1

Data comes from `python -m src.create_finetune_data`; every key of task_classifier_config.yaml is a flag. Outputs:
OUTPUT_DIR/checkpoints, metrics.jsonl, eval/eval_results.json + eval/predictions.tsv, predict/predictions.tsv.
"""
import sys
from typing import List

from model_utils.errors import run_cli
from src.tasks.registry import TASKS
from src.training.finetune import run


def main(argv: List[str]) -> int:
    return run(TASKS["classifier"], argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
