"""Fine-tune, evaluate and predict with ALBERT on SQuAD v1.1 extractive question answering.

    python run_squad_v1.py --train_data_file_path data/squad1_train.mindrecord \
        --eval_data_file_path data/squad1_dev.mindrecord --eval_json_path dev-v1.1.json \
        --load_pretrain_checkpoint_path albert_base.ckpt

Data comes from `python -m src.create_squad_data` (evaluation data with --is_training false, which also writes the
feature maps the answers are recovered with); every key of task_squad_v1_config.yaml is a flag. Outputs:
OUTPUT_DIR/checkpoints, metrics.jsonl, eval/{eval_results,predictions,nbest_predictions}.json, predict/*.json.
"""
import sys
from pathlib import Path
from typing import List

from model_utils.errors import run_cli
from src.finetune import FinetuneTask, check_squad_eval_inputs, run, squad_report

SQUAD_TRAIN_COLUMNS = ("input_ids", "input_mask", "segment_ids", "p_mask", "start_positions", "end_positions",
                       "is_impossible")
SQUAD_EVAL_COLUMNS = ("input_ids", "input_mask", "segment_ids", "p_mask", "unique_ids")
SQUAD_HEAD_INPUTS = ("input_ids", "segment_ids", "input_mask", "p_mask")


def dataset(config, data, batch_size: int, is_training: bool, indices):
    from src.dataset import create_squad_dataset

    return create_squad_dataset(data, batch_size, is_training, indices=indices)


def build_model(config, net, is_training: bool):
    from src.finetune_eval_model import AlbertForQuestionAnswering

    return AlbertForQuestionAnswering(net, is_training)


def build_loss(config, model):
    from src.albert_for_finetune import AlbertSquadWithLoss

    return AlbertSquadWithLoss(model)


TASK = FinetuneTask(
    name="squad_v1", config_file=Path(__file__).resolve().parent / "task_squad_v1_config.yaml",
    description=__doc__.splitlines()[0], train_columns=SQUAD_TRAIN_COLUMNS, eval_columns=SQUAD_EVAL_COLUMNS,
    head_inputs=SQUAD_HEAD_INPUTS, dataset=dataset, build_model=build_model, build_loss=build_loss,
    report=squad_report, check_eval_inputs=check_squad_eval_inputs)


def main(argv: List[str]) -> int:
    return run(TASK, argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
