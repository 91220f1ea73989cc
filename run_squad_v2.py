"""Fine-tune, evaluate and predict with ALBERT on SQuAD v2.0 (unanswerable questions; Google's v2 head).

    python run_squad_v2.py --train_data_file_path data/squad2_train.mindrecord \
        --eval_data_file_path data/squad2_dev.mindrecord --eval_json_path dev-v2.0.json \
        --load_pretrain_checkpoint_path albert_base.ckpt

Data comes from `python -m src.create_squad_data --version_2_with_negative true`; every key of
task_squad_v2_config.yaml is a flag. Outputs: OUTPUT_DIR/checkpoints, metrics.jsonl,
eval/{eval_results,predictions,nbest_predictions,null_odds}.json, predict/*.json.
"""
import sys
from pathlib import Path
from typing import List

from model_utils.errors import run_cli
from run_squad_v1 import SQUAD_EVAL_COLUMNS, SQUAD_HEAD_INPUTS, SQUAD_TRAIN_COLUMNS, dataset
from src.finetune import FinetuneTask, check_squad_eval_inputs, run, squad_report


def build_model(config, net, is_training: bool):
    from src.finetune_eval_model import AlbertForSquadV2

    return AlbertForSquadV2(net, config.classifier_dropout_prob, is_training, config.start_n_top, config.end_n_top)


def build_loss(config, model):
    from src.albert_for_finetune import AlbertSquadV2WithLoss

    return AlbertSquadV2WithLoss(model)


TASK = FinetuneTask(
    name="squad_v2", config_file=Path(__file__).resolve().parent / "task_squad_v2_config.yaml",
    description=__doc__.splitlines()[0], train_columns=SQUAD_TRAIN_COLUMNS, eval_columns=SQUAD_EVAL_COLUMNS,
    head_inputs=SQUAD_HEAD_INPUTS, dataset=dataset, build_model=build_model, build_loss=build_loss,
    report=squad_report, check_eval_inputs=check_squad_eval_inputs)


def main(argv: List[str]) -> int:
    return run(TASK, argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
