"""Fine-tune, evaluate and predict with ALBERT on RACE multiple-choice reading comprehension.

    python run_race.py --train_data_file_path data/race_train.mindrecord \
        --eval_data_file_path data/race_dev.mindrecord --load_pretrain_checkpoint_path albert_base.ckpt

Data comes from `python -m src.create_finetune_data --task_name race`; every key of task_race_config.yaml is a flag.
Outputs: OUTPUT_DIR/checkpoints, metrics.jsonl, eval/eval_results.json + eval/predictions.tsv (A-D and the
probability of each choice), predict/predictions.tsv.
"""
import sys
from pathlib import Path
from typing import List

from model_utils.errors import UserError, run_cli
from src.finetune import FinetuneTask, classification_report, run

RACE_TRAIN_COLUMNS = ("input_ids", "input_mask", "segment_ids", "label_ids")


def dataset(config, data, batch_size: int, is_training: bool, indices):
    from src.dataset import create_race_dataset

    return create_race_dataset(data, batch_size, is_training, indices=indices)


def build_model(config, net, is_training: bool):
    from src.finetune_eval_model import AlbertForMultipleChoice

    return AlbertForMultipleChoice(net, config.classifier_dropout_prob, is_training)


def build_loss(config, model):
    from src.albert_for_finetune import AlbertClassifierWithLoss

    return AlbertClassifierWithLoss(model)


def check_choices(config, meta: dict, shape, path: str) -> None:
    """Rows are [choices, seq]: num_class must equal the data's number of choices."""
    if len(shape) != 2:
        raise UserError(f"{path}: rows of shape {list(shape)} are not RACE data ([choices, seq]); create it with "
                        f"src.create_finetune_data --task_name race")
    if shape[0] != config.num_class:
        raise UserError(f"{path}: {shape[0]} choices per question but num_class is {config.num_class}")


def check_eval_data(config, data_file: str, action: str) -> None:
    from src.dataset import check_schema

    check_choices(config, {}, check_schema(data_file, "", RACE_TRAIN_COLUMNS), data_file)
    if config.assessment_method not in ("accuracy", "macro_f1", "mcc"):
        raise UserError(f"assessment_method {config.assessment_method} does not fit RACE; use accuracy")


TASK = FinetuneTask(
    name="race", config_file=Path(__file__).resolve().parent / "task_race_config.yaml",
    description=__doc__.splitlines()[0], train_columns=RACE_TRAIN_COLUMNS,
    eval_columns=RACE_TRAIN_COLUMNS + ("is_real_example",),
    head_inputs=("input_ids", "segment_ids", "input_mask"), dataset=dataset, build_model=build_model,
    build_loss=build_loss, report=classification_report, check_data=check_choices,
    check_eval_inputs=check_eval_data)


def main(argv: List[str]) -> int:
    return run(TASK, argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
