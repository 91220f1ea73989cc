"""Fine-tune, evaluate and predict with ALBERT on SQuAD v1.1 extractive question answering.

    python run_squad_v1.py --train_data_file_path data/squad1_train.mindrecord \
        --eval_data_file_path data/squad1_dev.mindrecord --eval_json_path dev-v1.1.json \
        --load_pretrain_checkpoint_path albert_base.ckpt

Data comes from `python -m src.create_squad_data` (evaluation data with --is_training false, which also writes the
feature maps the answers are recovered with); every key of task_squad_v1_config.yaml is a flag. Outputs:
OUTPUT_DIR/checkpoints, metrics.jsonl, eval/{eval_results,predictions,nbest_predictions}.json, predict/*.json.
"""
import sys
from typing import List

from model_utils.errors import run_cli
from src.tasks.registry import TASKS
from src.training.finetune import run


def main(argv: List[str]) -> int:
    return run(TASKS["squad_v1"], argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
