"""Fine-tune, evaluate and predict with ALBERT on SQuAD v2.0 (unanswerable questions; Google's v2 head).

    python run_squad_v2.py --train_data_file_path data/squad2_train.mindrecord \
        --eval_data_file_path data/squad2_dev.mindrecord --eval_json_path dev-v2.0.json \
        --load_pretrain_checkpoint_path albert_base.ckpt

Data comes from `python -m src.create_squad_data --version_2_with_negative true`; every key of
task_squad_v2_config.yaml is a flag. Outputs: OUTPUT_DIR/checkpoints, metrics.jsonl,
eval/{eval_results,predictions,nbest_predictions,null_odds}.json, predict/*.json.
"""
import sys
from typing import List

from model_utils.errors import run_cli
from src.tasks.registry import TASKS
from src.training.finetune import run


def main(argv: List[str]) -> int:
    return run(TASKS["squad_v2"], argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
