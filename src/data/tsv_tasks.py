"""The GLUE / LCQMC tasks as tsv files: each task's files, labels in label-id order and where each split keeps its
fields (Google's processors, by column position; the header, where a format has one, is checked). The data creator
reads files with it; serving and the HF export take the label names from it."""
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from model_utils.config import spelled_choice
from model_utils.errors import UserError


@dataclass(frozen=True)
class Columns:
    """Where a split keeps its fields: column positions (negative = from the end) and header names to check."""
    text_a: int
    text_b: Optional[int]
    label: Optional[int]
    header: Optional[Dict[int, str]]  # None: the file has no header line


@dataclass(frozen=True)
class TsvTask:
    name: str
    files: Dict[str, str]
    labels: Optional[Tuple[str, ...]]  # None: regression
    train_dev: Columns
    test: Columns

    def columns(self, split: str) -> Columns:
        return self.test if split == "test" else self.train_dev


_GLUE_FILES = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
_BINARY = ("0", "1")
_ENTAILMENT = ("entailment", "not_entailment")
_INDEX_S1_S2 = Columns(1, 2, -1, {1: "sentence1", 2: "sentence2"})

TSV_TASKS: Dict[str, TsvTask] = {task.name: task for task in [
    TsvTask("cola", _GLUE_FILES, _BINARY, Columns(3, None, 1, None), Columns(1, None, None, {1: "sentence"})),
    TsvTask("sst-2", _GLUE_FILES, _BINARY, Columns(0, None, 1, {0: "sentence"}),
            Columns(1, None, None, {1: "sentence"})),
    TsvTask("mrpc", _GLUE_FILES, _BINARY, Columns(3, 4, 0, {3: "#1 String", 4: "#2 String"}),
            Columns(3, 4, None, {3: "#1 String", 4: "#2 String"})),
    TsvTask("qqp", _GLUE_FILES, _BINARY, Columns(3, 4, 5, {3: "question1", 4: "question2"}),
            Columns(1, 2, None, {1: "question1", 2: "question2"})),
    TsvTask("mnli", {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"},
            ("contradiction", "entailment", "neutral"), Columns(8, 9, -1, {8: "sentence1", 9: "sentence2"}),
            Columns(8, 9, None, {8: "sentence1", 9: "sentence2"})),
    TsvTask("mnli-mm", {"train": "train.tsv", "dev": "dev_mismatched.tsv", "test": "test_mismatched.tsv"},
            ("contradiction", "entailment", "neutral"), Columns(8, 9, -1, {8: "sentence1", 9: "sentence2"}),
            Columns(8, 9, None, {8: "sentence1", 9: "sentence2"})),
    TsvTask("qnli", _GLUE_FILES, _ENTAILMENT, Columns(1, 2, -1, {1: "question", 2: "sentence"}),
            Columns(1, 2, None, {1: "question", 2: "sentence"})),
    TsvTask("rte", _GLUE_FILES, _ENTAILMENT, _INDEX_S1_S2, Columns(1, 2, None, {1: "sentence1", 2: "sentence2"})),
    TsvTask("wnli", _GLUE_FILES, _BINARY, _INDEX_S1_S2, Columns(1, 2, None, {1: "sentence1", 2: "sentence2"})),
    TsvTask("sts-b", _GLUE_FILES, None, Columns(7, 8, -1, {7: "sentence1", 8: "sentence2"}),
            Columns(7, 8, None, {7: "sentence1", 8: "sentence2"})),
    # GLUE's diagnostic set (AX.tsv: index, sentence1, sentence2): a test split only, predicted by an MNLI model.
    TsvTask("ax", {"test": "AX.tsv"}, ("contradiction", "entailment", "neutral"), _INDEX_S1_S2,
            Columns(1, 2, None, {1: "sentence1", 2: "sentence2"})),
    # LCQMC has no header in its original release; a header line, if present, is recognised and skipped.
    TsvTask("lcqmc", {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}, _BINARY,
            Columns(0, 1, 2, None), Columns(0, 1, 2, None)),
]}
TASK_NAMES = tuple(TSV_TASKS) + ("race",)


def label_list(task_name: str) -> Optional[List[str]]:
    """The task's labels in label-id order (None for the regression task sts-b)."""
    if spelled_choice(task_name, TASK_NAMES) == "race":
        return ["A", "B", "C", "D"]
    labels = task_named(task_name).labels
    return list(labels) if labels is not None else None


def task_named(task_name: str) -> TsvTask:
    """The task `task_name` spells in any case, or GLUE's and HF's way (MRPC, sst2), as the yamls' choices take it."""
    name = spelled_choice(task_name, TASK_NAMES)
    if name not in TSV_TASKS:
        raise UserError(f"unknown task_name {task_name!r}; expected one of {', '.join(TASK_NAMES)}")
    return TSV_TASKS[name]
