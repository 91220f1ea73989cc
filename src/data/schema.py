"""The MindRecord records of every task, defined once: each column's name, dtype and shape. The data creators write
them (`RecordSchema.mindrecord`), the pipelines read them, the task registry names which columns training, evaluation
and the exported head take, and export.py and `src.predict` give the head its inputs in their dtypes.

Shapes are symbolic until a writer knows its sizes: `seq` (max_seq_length), `predictions` (max_predictions_per_seq)
and `choices` (RACE's 4 options); a column without dims is one number per record.
"""
from dataclasses import dataclass
from typing import Dict, Tuple

RACE_CHOICES = 4


@dataclass(frozen=True)
class Column:
    name: str
    dtype: str  # "int32" or "float32"
    dims: Tuple[str, ...] = ()  # symbolic shape: "seq", "predictions", "choices"


@dataclass(frozen=True)
class RecordSchema:
    kind: str
    columns: Tuple[Column, ...]

    @property
    def names(self) -> Tuple[str, ...]:
        return tuple(column.name for column in self.columns)

    @property
    def float_names(self) -> Tuple[str, ...]:
        return tuple(column.name for column in self.columns if column.dtype == "float32")

    def dtype(self, name: str) -> str:
        return next(column.dtype for column in self.columns if column.name == name)

    def without(self, *names: str) -> Tuple[str, ...]:
        """The column names less `names` (what training reads of a record that also serves evaluation)."""
        return tuple(name for name in self.names if name not in names)

    def mindrecord(self, **sizes: int) -> Dict[str, Dict[str, object]]:
        """The schema MindRecord's writer takes, with the symbolic dims replaced by `sizes` (seq=128, ...)."""
        sizes = {"choices": RACE_CHOICES, **sizes}
        return {column.name: {"type": column.dtype, **({"shape": [sizes[d] for d in column.dims]} if column.dims
                                                        else {})}
                for column in self.columns}


def _tokens(*dims: str) -> Tuple[Column, ...]:
    """input_ids, input_mask and segment_ids over `dims`: the three columns every record starts with."""
    return tuple(Column(name, "int32", dims) for name in ("input_ids", "input_mask", "segment_ids"))


PRETRAINING = RecordSchema("pretraining", _tokens("seq") + (
    Column("next_sentence_labels", "int32"),
    Column("masked_lm_positions", "int32", ("predictions",)),
    Column("masked_lm_ids", "int32", ("predictions",)),
    Column("masked_lm_weights", "float32", ("predictions",))))
CLASSIFIER = RecordSchema("classifier", _tokens("seq") + (
    Column("label_ids", "int32"), Column("is_real_example", "int32")))
REGRESSION = RecordSchema("regression", _tokens("seq") + (
    Column("label_ids", "float32"), Column("is_real_example", "int32")))
RACE = RecordSchema("race", _tokens("choices", "seq") + (
    Column("label_ids", "int32"), Column("is_real_example", "int32")))
SQUAD_TRAIN = RecordSchema("squad train", _tokens("seq") + (
    Column("p_mask", "int32", ("seq",)), Column("start_positions", "int32"), Column("end_positions", "int32"),
    Column("is_impossible", "int32")))
SQUAD_EVAL = RecordSchema("squad eval", _tokens("seq") + (
    Column("p_mask", "int32", ("seq",)), Column("unique_ids", "int32")))

# What a task head takes, in its argument order (the exported model's inputs, all int32).
HEAD_INPUTS = ("input_ids", "segment_ids", "input_mask")
SQUAD_HEAD_INPUTS = HEAD_INPUTS + ("p_mask",)
RECORDS = (PRETRAINING, CLASSIFIER, REGRESSION, RACE, SQUAD_TRAIN, SQUAD_EVAL)


def column_dtype(name: str) -> str:
    """The dtype of column `name` (the same in every record that has it): an exported head's input dtypes."""
    return next(record.dtype(name) for record in RECORDS if name in record.names)
