"""GLUE / LCQMC tsv and RACE json -> fine-tuning MindRecord.

    python -m src.create_finetune_data --task_name mrpc --data_dir glue/MRPC --split train \
        --output_file data/mrpc_train.mindrecord --spm_model_file 30k-clean.model --max_seq_length 128
    python -m src.create_finetune_data --task_name race --data_dir RACE --split dev --max_seq_length 512 ...

Tasks and files (`--input_file` reads another file of the same layout, e.g. CoLA's in_domain_train.tsv):
    cola, sst-2, mrpc, qqp, qnli, rte, wnli, sts-b   data_dir/{train,dev,test}.tsv (GLUE layout)
    mnli / mnli-mm                                   train.tsv, dev_matched.tsv / dev_mismatched.tsv, test_*.tsv
    lcqmc                                            data_dir/{train,dev,test}.txt: text_a<TAB>text_b<TAB>label
    race                                             data_dir/{train,dev,test}/{high,middle}/*.txt (json)
Columns are taken by position as in Google's processors (the header line, where the format has one, is checked
so that a file of the wrong task is an error). Test splits of GLUE have no labels: label_ids is 0 there.

Classifier record schema (S = max_seq_length):
    input_ids        int32 [S]    [CLS] text_a [SEP] (text_b [SEP]), padded with the pad id
    input_mask       int32 [S]
    segment_ids      int32 [S]
    label_ids        int32 []     index into the task's label list (meta.json "label_list"); float32 for sts-b
    is_real_example  int32 []     1 here; 0 only for padding rows added by dataset.py for equal eval shards
RACE record schema (4 choices; each row of the [4, S] arrays is [CLS] article [SEP] question+option [SEP]):
    input_ids        int32 [4, S]
    input_mask       int32 [4, S]
    segment_ids      int32 [4, S]
    label_ids        int32 []     0..3 for A..D
    is_real_example  int32 []
Beside the data: `<output>.meta.json` (task, label_list, counts, tokenizer) and `<output>.examples.jsonl`
(guid and source file:line of each record, in write order).
"""
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from model_utils.errors import UserError, run_cli
from src.data_utils import (check_max_seq_length, load_json, pack_pair, parse_tool_config, read_tsv, require,
                            tokenizer_from_config, truncate_pair_from_end)
from src.mindrecord_io import RecordWriter, check_output_free, jsonl_line
from src.progress import progress
from src.run_log import log_to
from src.tokenization import FullTokenizer

COLUMNS = ("input_ids", "input_mask", "segment_ids", "label_ids", "is_real_example")
RACE_CHOICES = 4


@dataclass
class InputExample:
    """One labelled text (pair); `label` is None for unlabelled test rows; `source` is "file:line"."""
    guid: str
    text_a: str
    text_b: Optional[str]
    label: Optional[str]
    source: str


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
    # LCQMC has no header in its original release; a header line, if present, is recognised and skipped.
    TsvTask("lcqmc", {"train": "train.txt", "dev": "dev.txt", "test": "test.txt"}, _BINARY,
            Columns(0, 1, 2, None), Columns(0, 1, 2, None)),
]}
TASK_NAMES = tuple(TSV_TASKS) + ("race",)


def label_list(task_name: str) -> Optional[List[str]]:
    """The task's labels in label-id order (None for the regression task sts-b)."""
    if task_name == "race":
        return ["A", "B", "C", "D"]
    labels = _task(task_name).labels
    return list(labels) if labels is not None else None


def _task(task_name: str) -> TsvTask:
    if task_name not in TSV_TASKS:
        raise UserError(f"unknown task_name {task_name!r}; expected one of {', '.join(TASK_NAMES)}")
    return TSV_TASKS[task_name]


def _check_header(path: Path, line_no: int, fields: List[str], expected: Dict[int, str], task: str) -> None:
    for index, name in expected.items():
        if index >= len(fields) or fields[index].strip() != name:
            found = fields[index] if index < len(fields) else "nothing"
            raise UserError(f"{path} line {line_no}: header column {index + 1} should be '{name}', found "
                            f"'{found}' - is this a {task} file?")


def _is_lcqmc_header(fields: List[str], labels: Sequence[str]) -> bool:
    return len(fields) >= 3 and fields[2].strip() not in labels and not fields[2].strip().lstrip("-").isdigit()


def read_tsv_examples(task_name: str, path: Path, split: str) -> Iterator[InputExample]:
    """Examples of one GLUE/LCQMC file, read as they are needed (MNLI train has 393k); malformed rows and unknown
    labels are errors naming file and line."""
    task = _task(task_name)
    columns = task.columns(split)
    labelled = columns.label is not None
    needed = 1 + max(i if i >= 0 else -i - 1 for i in (columns.text_a, columns.text_b, columns.label)
                     if i is not None)
    count = 0
    for row_index, (line_no, fields) in enumerate(read_tsv(path)):
        if row_index == 0 and columns.header is not None:
            _check_header(path, line_no, fields, columns.header, task_name)
            continue
        if row_index == 0 and task_name == "lcqmc" and _is_lcqmc_header(fields, task.labels):
            continue
        if len(fields) < needed:
            raise UserError(f"{path} line {line_no}: expected at least {needed} tab-separated fields, "
                            f"found {len(fields)}")
        label = _check_label(task, fields[columns.label].strip(), path, line_no) if labelled else None
        text_b = fields[columns.text_b] if columns.text_b is not None else None
        yield InputExample(f"{split}-{count}", fields[columns.text_a], text_b, label, f"{path}:{line_no}")
        count += 1
    if not count:
        raise UserError(f"{path}: no examples")


def _check_label(task: TsvTask, label: str, path: Path, line_no: int) -> str:
    if task.labels is None:
        try:
            float(label)
        except ValueError:
            raise UserError(f"{path} line {line_no}: score {label!r} is not a number") from None
    elif label not in task.labels:
        raise UserError(f"{path} line {line_no}: unknown label {label!r} for {task.name} "
                        f"(expected one of {', '.join(task.labels)})")
    return label


def classifier_feature(example: InputExample, tokenizer: FullTokenizer, label_map: Optional[Dict[str, int]],
                       max_seq_length: int) -> Dict[str, np.ndarray]:
    """One record: pair truncated from the end of the longer text, packed and padded."""
    ids_a = tokenizer.encode(example.text_a)
    ids_b = tokenizer.encode(example.text_b) if example.text_b is not None else None
    if ids_b is None:
        ids_a = ids_a[:max_seq_length - 2]
    else:
        truncate_pair_from_end(ids_a, ids_b, max_seq_length - 3)
    input_ids, input_mask, segment_ids = pack_pair(tokenizer, ids_a, ids_b, max_seq_length)
    if label_map is None:  # regression
        label = np.float32(example.label if example.label is not None else 0.0)
    else:
        label = np.int32(label_map[example.label] if example.label is not None else 0)
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids, "label_ids": label,
            "is_real_example": np.int32(1)}


def classifier_schema(max_seq_length: int, regression: bool) -> Dict[str, Dict[str, object]]:
    seq = {"type": "int32", "shape": [max_seq_length]}
    return {"input_ids": seq, "input_mask": seq, "segment_ids": seq,
            "label_ids": {"type": "float32" if regression else "int32"}, "is_real_example": {"type": "int32"}}


# ----------------------------------------------------------------------------------------------- RACE
def race_files(data_dir: Path, split: str) -> List[Path]:
    """RACE's official layout: <data_dir>/<split>/{high,middle}/*.txt (data_dir may also be the split folder)."""
    root = data_dir / split if (data_dir / split).is_dir() else data_dir
    files = sorted(p for level in ("high", "middle") for p in (root / level).glob("*.txt"))
    if not files:
        raise UserError(f"no RACE files of split {split} in {root}/high or {root}/middle (expected "
                        f"{data_dir}/{split}/high/*.txt and {data_dir}/{split}/middle/*.txt)")
    return files


@dataclass
class RaceExample:
    guid: str
    article: str
    question: str
    choices: List[str]
    label: str
    source: str

    def question_with(self, option: str) -> str:
        """Fill the "_" blank with the option, or append the option to the question."""
        return self.question.replace("_", option) if "_" in self.question else f"{self.question} {option}"


def read_race_examples(path: Path) -> List[RaceExample]:
    """One RACE file (an article with several questions) -> one example per question, fields checked."""
    item = load_json(path)
    where = str(path)
    article = require(item, "article", str, where)
    questions = require(item, "questions", list, where)
    options = require(item, "options", list, where)
    answers = require(item, "answers", list, where)
    if not (len(questions) == len(options) == len(answers)) or not questions:
        raise UserError(f"{where}: questions, options and answers must be non-empty lists of equal length "
                        f"(got {len(questions)}, {len(options)}, {len(answers)})")
    level = path.parent.name
    examples = []
    for index, (question, choices, answer) in enumerate(zip(questions, options, answers)):
        at = f"{where}: question {index}"
        if not isinstance(question, str):
            raise UserError(f"{at}: question should be a string")
        if not isinstance(choices, list) or len(choices) != RACE_CHOICES or not all(isinstance(c, str)
                                                                                    for c in choices):
            raise UserError(f"{at}: expected {RACE_CHOICES} option strings")
        if answer not in ("A", "B", "C", "D"):
            raise UserError(f"{at}: unknown answer {answer!r} (expected A, B, C or D)")
        examples.append(RaceExample(f"{level}-{path.name}-{index}", article, question, choices, answer, at))
    return examples


def race_feature(example: RaceExample, tokenizer: FullTokenizer, max_seq_length: int, max_qa_length: int,
                 article_ids: Optional[List[int]] = None) -> Dict[str, np.ndarray]:
    """[4, S] arrays: [CLS] article [SEP] question+option [SEP]; the QA part keeps its last max_qa_length tokens
    (the option is at the end), then the article is cut from its end to fit."""
    article_ids = article_ids if article_ids is not None else tokenizer.encode(example.article)
    rows = []
    max_qa_length = min(max_qa_length, max_seq_length - 4)  # leave room for at least one article token
    for option in example.choices:
        qa_ids = tokenizer.encode(example.question_with(option))[-max_qa_length:]
        context = article_ids[:max(0, max_seq_length - 3 - len(qa_ids))]
        rows.append(pack_pair(tokenizer, context, qa_ids, max_seq_length))
    input_ids, input_mask, segment_ids = (np.stack(parts) for parts in zip(*rows))
    return {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids,
            "label_ids": np.int32(ord(example.label) - ord("A")), "is_real_example": np.int32(1)}


def race_schema(max_seq_length: int) -> Dict[str, Dict[str, object]]:
    grid = {"type": "int32", "shape": [RACE_CHOICES, max_seq_length]}
    return {"input_ids": grid, "input_mask": grid, "segment_ids": grid, "label_ids": {"type": "int32"},
            "is_real_example": {"type": "int32"}}


def _race_records(files: Sequence[Path], tokenizer: FullTokenizer,
                  config) -> Iterator[Tuple[Dict[str, np.ndarray], RaceExample]]:
    for path in files:
        examples = read_race_examples(path)
        article_ids = tokenizer.encode(examples[0].article)
        for example in examples:
            yield race_feature(example, tokenizer, config.max_seq_length, config.max_qa_length, article_ids), example


def _input_path(config) -> Path:
    if config.input_file:
        return Path(config.input_file)
    if not config.data_dir:
        raise UserError("set --data_dir (folder of the task's files) or --input_file")
    return Path(config.data_dir) / _task(config.task_name).files[config.split]


def create_finetune_data(config) -> Dict[str, object]:
    """Convert one split of one task, streamed (records and the .examples.jsonl rows are written as they are
    made); returns the meta written beside the data."""
    check_max_seq_length(config.max_seq_length)
    check_output_free(config.output_file, config.partition_number, config.overwrite)
    tokenizer = tokenizer_from_config(config)
    if config.task_name == "race":
        if config.max_qa_length < 1:
            raise UserError(f"max_qa_length must be >= 1, got {config.max_qa_length}")
        if not config.data_dir:
            raise UserError("set --data_dir to the RACE folder (holding train/dev/test)")
        files = race_files(Path(config.data_dir), config.split)
        for path in files:  # every file checked before the long part starts
            read_race_examples(path)
        schema = race_schema(config.max_seq_length)
        records = _race_records(files, tokenizer, config)
        inputs = [str(p) for p in files]
    else:
        path = _input_path(config)
        labels = label_list(config.task_name)
        label_map = {label: i for i, label in enumerate(labels)} if labels is not None else None
        schema = classifier_schema(config.max_seq_length, labels is None)
        records = ((classifier_feature(e, tokenizer, label_map, config.max_seq_length), e)
                   for e in read_tsv_examples(config.task_name, path, config.split))
        inputs = [str(path)]
    meta = {"kind": "race" if config.task_name == "race" else "classifier", "task_name": config.task_name,
            "split": config.split, "label_list": label_list(config.task_name), "columns": list(COLUMNS),
            "max_seq_length": config.max_seq_length, "tokenizer": tokenizer.describe(), "inputs": inputs}
    with RecordWriter(config.output_file, schema, f"albert {config.task_name} {config.split}",
                      config.partition_number, config.overwrite, [".examples.jsonl"]) as out:
        with open(out.sidecar(".examples.jsonl"), "w", encoding="utf-8") as sources, \
                progress("examples", None, " examples") as bar:
            for record, example in records:
                out.write((record,))
                sources.write(jsonl_line({"guid": example.guid, "source": example.source}))
                bar.update(1)
        return out.publish(meta)


def main(argv: List[str]) -> int:
    config = parse_tool_config(argv, "finetune", __doc__.splitlines()[0])
    meta = create_finetune_data(config)
    log_to(os.path.dirname(os.path.abspath(config.output_file)))
    print(f"wrote {meta['num_records']} {config.task_name} {config.split} records to "
          f"{', '.join(meta['files'])} in {Path(config.output_file).parent}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
