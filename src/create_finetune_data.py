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
import math
import os
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.errors import UserError, run_cli
from src.common.progress import progress
from src.common.run_log import log_to
from src.data import schema
from src.data.features import InputExample, RaceExample, classifier_feature, race_feature
from src.data.input_text import (check_max_seq_length, load_json, parse_tool_config, read_tsv, require,
                                 tokenizer_from_config)
from src.data.mindrecord_io import RecordWriter, check_output_free, jsonl_line
from src.data.tokenization import FullTokenizer, UnknownTokens
from src.data.tsv_tasks import TsvTask, label_list, task_named



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
    task = _task_split(task_name, split)
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
            finite = math.isfinite(float(label))
        except ValueError:
            finite = False
        if not finite:
            raise UserError(f"{path} line {line_no}: score {label!r} is not a finite number")
    elif label not in task.labels:
        raise UserError(f"{path} line {line_no}: unknown label {label!r} for {task.name} "
                        f"(expected one of {', '.join(task.labels)})")
    return label


# ----------------------------------------------------------------------------------------------- RACE
RACE_SPLITS = ("train", "dev", "test")
RACE_LEVELS = ("high", "middle")


def race_files(data_dir: Path, split: str) -> List[Path]:
    """RACE's official layout: <data_dir>/<split>/{high,middle}/*.txt (data_dir may also be the split folder)."""
    root = data_dir / split if (data_dir / split).is_dir() else data_dir
    if root == data_dir and data_dir.name in RACE_SPLITS and data_dir.name != split:
        raise UserError(f"{data_dir} is RACE's {data_dir.name} split but --split is {split}: pass the folder holding "
                        f"{split}/ (or {split}/ itself), or --split {data_dir.name}")
    files = sorted(p for level in RACE_LEVELS for p in (root / level).glob("*.txt"))
    if not files:
        raise UserError(f"no RACE files of split {split} in {root}/high or {root}/middle (expected "
                        f"{data_dir}/{split}/high/*.txt and {data_dir}/{split}/middle/*.txt)")
    return files


def race_level_warning(files: Sequence[Path]) -> Optional[str]:
    """RACE has a high and a middle level; a split with files of one only (a partial download or copy) looks
    complete otherwise. A warning, not an error: one level alone may be what the user wants."""
    found = {path.parent.name for path in files}
    missing = [level for level in RACE_LEVELS if level not in found]
    if not files or not missing:
        return None
    root = files[0].parent.parent
    return (f"no RACE files in {root / missing[0]} (RACE has levels {' and '.join(RACE_LEVELS)}): the data holds the "
            f"{found.pop()} level only; a partial download?")


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
        if not isinstance(choices, list) or len(choices) != schema.RACE_CHOICES or not all(isinstance(c, str)
                                                                                    for c in choices):
            raise UserError(f"{at}: expected {schema.RACE_CHOICES} option strings")
        if answer not in ("A", "B", "C", "D"):
            raise UserError(f"{at}: unknown answer {answer!r} (expected A, B, C or D)")
        examples.append(RaceExample(f"{level}-{path.name}-{index}", article, question, choices, answer, at))
    return examples


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
    return Path(config.data_dir) / _task_split(config.task_name, config.split).files[config.split]


def _task_split(task_name: str, split: str) -> TsvTask:
    """The task, which must have `split` (GLUE's diagnostic set ax has a test split only)."""
    task = task_named(task_name)
    if split not in task.files:
        raise UserError(f"{task.name} has no {split} split (only {', '.join(task.files)})"
                        + ("; it is GLUE's diagnostic set: predict it with an MNLI model" if task.name == "ax" else ""))
    return task


def create_finetune_data(config) -> Dict[str, object]:
    """Convert one split of one task, streamed (records and the .examples.jsonl rows are written as they are
    made); returns the meta written beside the data."""
    check_max_seq_length(config.max_seq_length)
    check_output_free(config.output_file, config.partition_number, config.overwrite)
    tokenizer = tokenizer_from_config(config)
    if config.task_name == "race":
        if config.max_qa_length < 1:
            raise UserError(f"max_qa_length must be >= 1, got {config.max_qa_length}")
        if not config.data_dir or config.input_file:
            raise UserError("RACE is read from --data_dir, the RACE folder (holding train/dev/test)"
                            + (", not --input_file: drop it" if config.input_file else ": set it"))
        files = race_files(Path(config.data_dir), config.split)
        for path in files:  # every file checked before the long part starts
            read_race_examples(path)
        layout = schema.RACE
        records = _race_records(files, tokenizer, config)
        inputs = [str(p) for p in files]
        warnings = [race_level_warning(files)]
    else:
        path = _input_path(config)
        labels = label_list(config.task_name)
        label_map = {label: i for i, label in enumerate(labels)} if labels is not None else None
        layout = schema.CLASSIFIER if labels is not None else schema.REGRESSION
        records = ((classifier_feature(e, tokenizer, label_map, config.max_seq_length), e)
                   for e in read_tsv_examples(config.task_name, path, config.split))
        inputs = [str(path)]
        warnings = []
    meta = {"kind": "race" if config.task_name == "race" else "classifier", "task_name": config.task_name,
            "split": config.split, "label_list": label_list(config.task_name), "columns": list(layout.names),
            "max_seq_length": config.max_seq_length, "tokenizer": tokenizer.describe(), "inputs": inputs}
    unknown = UnknownTokens(tokenizer)
    with RecordWriter(config.output_file, layout.mindrecord(seq=config.max_seq_length),
                      f"albert {config.task_name} {config.split}",
                      config.partition_number, config.overwrite, [".examples.jsonl"]) as out:
        with open(out.sidecar(".examples.jsonl"), "w", encoding="utf-8") as sources, \
                progress("examples", None, " examples") as bar:
            for record, example in records:
                out.write((record,))
                unknown.add_record(record["input_ids"], record["input_mask"])
                sources.write(jsonl_line({"guid": example.guid, "source": example.source}))
                bar.update(1)
        meta["unknown_tokens_fraction"] = round(unknown.fraction, 4)
        meta["warnings"] = [warning for warning in (*warnings, unknown.warning()) if warning]
        return out.publish(meta)


def main(argv: List[str]) -> int:
    config = parse_tool_config(argv, "finetune", __doc__.splitlines()[0])
    meta = create_finetune_data(config)
    log_to(os.path.dirname(os.path.abspath(config.output_file)))
    print(f"wrote {meta['num_records']} {config.task_name} {config.split} records to "
          f"{', '.join(meta['files'])} in {Path(config.output_file).parent}")
    for warning in meta["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
