"""Fine-tune, evaluate and predict with ALBERT on GLUE / LCQMC classification or STS-B regression.

    python run_classifier.py --train_data_file_path data/mrpc_train.mindrecord \
        --eval_data_file_path data/mrpc_dev.mindrecord --load_pretrain_checkpoint_path albert_base.ckpt \
        --num_class 2 --assessment_method f1

Data comes from `python -m src.create_finetune_data`; every key of task_classifier_config.yaml is a flag. Outputs:
OUTPUT_DIR/checkpoints, metrics.jsonl, eval/eval_results.json + eval/predictions.tsv, predict/predictions.tsv.
"""
import sys
from pathlib import Path
from typing import List

from model_utils.errors import UserError, run_cli
from src.finetune import FinetuneTask, check_assessment_method, classification_report, run

CLASSIFIER_TRAIN_COLUMNS = ("input_ids", "input_mask", "segment_ids", "label_ids")


def dataset(config, data, batch_size: int, is_training: bool, indices):
    from src.dataset import create_classification_dataset

    return create_classification_dataset(data, batch_size, is_training, regression=config.num_class == 1,
                                         indices=indices)


def build_model(config, net, is_training: bool):
    from src.finetune_eval_model import AlbertForSequenceClassification

    return AlbertForSequenceClassification(net, config.num_class, config.classifier_dropout_prob, is_training)


def build_loss(config, model):
    from src.albert_for_finetune import AlbertClassifierWithLoss

    return AlbertClassifierWithLoss(model, regression=config.num_class == 1)


def check_labels(config, meta: dict, shape, path: str) -> None:
    """num_class must equal the data's label count (1 for the regression task sts-b)."""
    if "task_name" not in meta:
        return
    labels = meta.get("label_list")
    count = len(labels) if labels else 1
    if count != config.num_class:
        raise UserError(f"{path}: task {meta['task_name']} has {count} label(s) ({labels or 'regression'}) but num_class "
                        f"is {config.num_class}")


def check_eval_data(config, data_file: str, action: str) -> None:
    from src.dataset import load_data_meta

    check_labels(config, load_data_meta(data_file), (), data_file)
    if action == "eval":
        check_assessment_method(config)


TASK = FinetuneTask(
    name="classifier", config_file=Path(__file__).resolve().parent / "task_classifier_config.yaml",
    description=__doc__.splitlines()[0], train_columns=CLASSIFIER_TRAIN_COLUMNS,
    eval_columns=CLASSIFIER_TRAIN_COLUMNS + ("is_real_example",),
    head_inputs=("input_ids", "segment_ids", "input_mask"), dataset=dataset, build_model=build_model,
    build_loss=build_loss, report=classification_report, check_data=check_labels, check_eval_inputs=check_eval_data)


def main(argv: List[str]) -> int:
    return run(TASK, argv)


if __name__ == "__main__":
    sys.exit(run_cli(main))
