"""The ModelZoo layout's `dataset.py`: the MindDataset pipelines of every task live in `src/data/pipelines.py`; this
file re-exports what scripts written against ModelZoo's layout import from here."""
from src.data.pipelines import (CLASSIFIER_EVAL_COLUMNS, CLASSIFIER_TRAIN_COLUMNS, PRETRAIN_COLUMNS, SQUAD_EVAL_COLUMNS,
                                SQUAD_TRAIN_COLUMNS, check_data_meta, check_schema, count_rows,
                                create_classification_dataset, create_pretraining_dataset, create_race_dataset,
                                create_squad_dataset, load_data_meta, read_column, resolve_mindrecord_files)

__all__ = ["CLASSIFIER_EVAL_COLUMNS", "CLASSIFIER_TRAIN_COLUMNS", "PRETRAIN_COLUMNS", "SQUAD_EVAL_COLUMNS",
           "SQUAD_TRAIN_COLUMNS", "check_data_meta", "check_schema", "count_rows", "create_classification_dataset",
           "create_pretraining_dataset", "create_race_dataset", "create_squad_dataset", "load_data_meta",
           "read_column", "resolve_mindrecord_files"]
