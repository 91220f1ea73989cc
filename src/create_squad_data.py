"""SQuAD v1.1 / v2.0 json -> MindRecord features (doc stride, p_mask, SentencePiece-aware answer alignment).

    python -m src.create_squad_data --input_file train-v2.0.json --output_file data/squad2_train.mindrecord \
        --spm_model_file 30k-clean.model --is_training true --version_2_with_negative true
    python -m src.create_squad_data --input_file dev-v2.0.json --output_file data/squad2_dev.mindrecord \
        --spm_model_file 30k-clean.model --is_training false --version_2_with_negative true

Alignment: the context is split into whitespace words (SQuAD's `doc_tokens`); each word is tokenized alone,
which gives the same pieces as tokenizing the whole context because SentencePiece never lets a piece cross a
space. Every piece is then mapped to the characters of the original context it came from (through the
tokenizer's normalisation: case, accents, "``" quotes, SentencePiece's NFKC), so an answer's character span
selects exactly the pieces that cover it, and a predicted piece span maps back to an exact substring of the
original context.

Each feature is `[CLS] question [SEP] context window [SEP]`, windows `doc_stride` apart. Record schema
(S = max_seq_length, all int32):
    input_ids, input_mask, segment_ids  [S]   segment 0 = [CLS] question [SEP], 1 = context [SEP]
    p_mask                              [S]   1 where the answer cannot be (question, [SEP], padding); 0 for
                                              context tokens and [CLS] (the "no answer" position)
  training (is_training true):
    start_positions, end_positions      []    token positions of the answer; 0 ([CLS]) when the question is
                                              unanswerable or the answer lies outside this window
    is_impossible                       []    1 in those cases
  evaluation:
    unique_ids                          []    1000000000 + feature index; keys the rows of the feature map
Evaluation output also has `<output>.examples.jsonl` (per question: example_index, qas_id, question_text,
context, doc_tokens, answers, is_impossible) and `<output>.features.jsonl` (per feature: unique_id,
example_index, qas_id, doc_span_index, tokens, and lists indexed by feature position: token_to_orig_map
(doc_tokens word index, -1 outside the context), token_to_char_span ([start, end) in `context`, null outside),
token_is_max_context).
"""
import contextlib
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, TextIO

import numpy as np

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.errors import UserError, run_cli
from src.common.progress import progress
from src.common.run_log import log_to
from src.data import schema
from src.data.features import (FIRST_UNIQUE_ID, SquadExample, SquadOptions, example_features, example_row,
                               tokenize_context)
from src.data.input_text import load_json, parse_tool_config, require, tokenizer_from_config
from src.data.mindrecord_io import RecordWriter, check_output_free, jsonl_line
from src.data.tokenization import FullTokenizer, UnknownTokens



def read_squad_examples(path: Path, is_training: bool, version_2_with_negative: bool,
                        stats: Dict[str, int]) -> Iterator[SquadExample]:
    """Examples of a SQuAD json file, article by article: an article's json is let go once its questions are
    read, so memory stays near that of the loaded file. `stats["skipped_examples"]` counts the training answers
    skipped because their text is not at their answer_start (as Google does; real SQuAD train has a handful)."""
    data = require(load_json(path), "data", list, str(path))
    found = 0
    seen: Dict[str, str] = {}  # question id -> where it was first read: predictions are keyed by it
    for a in range(len(data)):
        article, data[a] = data[a], None
        for p, paragraph in enumerate(require(article, "paragraphs", list, f"{path}: data[{a}]")):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            context = require(paragraph, "context", str, where)
            for q, qa in enumerate(require(paragraph, "qas", list, where)):
                example = _read_question(qa, context, f"{where}.qas[{q}]", is_training, version_2_with_negative)
                first = seen.setdefault(str(qa.get("id")) if isinstance(qa, dict) else "", f"{where}.qas[{q}]")
                if first != f"{where}.qas[{q}]":
                    raise UserError(f"{where}.qas[{q}]: question id {qa['id']} is also the id of {first}: ids must "
                                    f"be unique (answers are matched to questions by id)")
                if example is None:
                    stats["skipped_examples"] += 1
                else:
                    found += 1
                    yield example
    if not found:
        skipped = stats["skipped_examples"]
        why = f" left: the answers of all {skipped} are not at their answer_start" if skipped else ""
        raise UserError(f"{path}: no questions{why}")


def _read_question(qa: Any, context: str, where: str, is_training: bool,
                   version_2: bool) -> Optional[SquadExample]:
    qas_id = str(require(qa, "id", (str, int), where))
    question = require(qa, "question", str, where)
    impossible = require(qa, "is_impossible", bool, where) if "is_impossible" in qa else False
    if impossible and not version_2:
        raise UserError(f"{where}: question {qas_id} is_impossible but version_2_with_negative is false")
    # Prediction-only files may leave out the answers; training needs them.
    answers = require(qa, "answers", list, where) if is_training or "answers" in qa else []
    texts = [require(answer, "text", str, f"{where}.answers[{i}]") for i, answer in enumerate(answers)]
    if impossible and answers:
        raise UserError(f"{where}: question {qas_id} is_impossible but has {len(answers)} answer(s): training "
                        f"takes it as unanswerable, the official scoring as answerable; an unanswerable question has "
                        f"answers [] (official v2.0 files keep its candidates under plausible_answers)")
    example = SquadExample(qas_id, question, context, texts, is_impossible=impossible, source=where)
    if not is_training or impossible:
        return example
    if not answers:
        raise UserError(f"{where}: question {qas_id} has no answer (training needs one unless is_impossible)")
    start = require(answers[0], "answer_start", int, f"{where}.answers[0]")
    if not _answer_at(context, texts[0], start):
        return None
    example.answer_text, example.start_char = texts[0], start
    return example


def _answer_at(context: str, text: str, start: int) -> bool:
    """Whether `text` is a non-empty answer at character `start` of `context` (a negative start, which Python
    would count from the end, is not)."""
    return bool(text) and start >= 0 and context[start:start + len(text)] == text


def _layout(options: SquadOptions) -> schema.RecordSchema:
    return schema.SQUAD_TRAIN if options.is_training else schema.SQUAD_EVAL


def _features(examples: Iterable[SquadExample], tokenizer: FullTokenizer, options: SquadOptions,
              stats: Dict[str, int], sidecars: Dict[str, TextIO],
              unknown: UnknownTokens) -> Iterator[Dict[str, np.ndarray]]:
    """Records of all examples; evaluation data also gets its examples and feature maps written to the sidecars
    as they are made (and training data its counts); every record's tokens are counted in `unknown`."""
    cached_context, cached = None, None
    for example_index, example in enumerate(examples):
        stats["examples"] += 1
        stats["impossible_examples"] += int(example.is_impossible)
        stats["answered_examples"] += int(bool(example.answers))
        if not options.is_training:
            sidecars[".examples.jsonl"].write(jsonl_line(example_row(example_index, example)))
        if example.context is not cached_context:  # consecutive questions share their paragraph
            cached_context, cached = example.context, tokenize_context(tokenizer, example.context)
        for record, feature_map in example_features(example, example_index, tokenizer, options, cached):
            unique_id = FIRST_UNIQUE_ID + stats["features"]
            stats["features"] += 1
            unknown.add_record(record["input_ids"], record["input_mask"])
            if options.is_training:
                stats["impossible_features"] += int(record["is_impossible"])
            else:
                record["unique_ids"] = np.int32(unique_id)
                sidecars[".features.jsonl"].write(jsonl_line(dict(unique_id=unique_id, **feature_map)))
            yield record


def _counted(examples: Iterable[SquadExample], bar) -> Iterator[SquadExample]:
    for example in examples:
        yield example
        bar.update(1)


def _version_warning(config, stats: Dict[str, int]) -> Optional[str]:
    """Labelled SQuAD v2.0 data without one unanswerable question is most likely a v1.1 file given the v2 flag: a
    v2.0 model trained on it never learns to answer "no answer", and its evaluation never asks it to. (A file to
    predict on, without answers, says nothing either way.)"""
    if config.version_2_with_negative and stats["answered_examples"] and not stats["impossible_examples"]:
        return (f"no question of {config.input_file} is unanswerable (is_impossible), though "
                f"--version_2_with_negative is true: is it a SQuAD v1.1 file? (v1.1: --version_2_with_negative false)")
    return None


def create_squad_data(config) -> Dict[str, Any]:
    """Convert one SQuAD file, streamed; returns the meta written beside the data."""
    options = SquadOptions(config.max_seq_length, config.doc_stride, config.max_query_length, config.is_training)
    options.check()
    suffixes = [] if options.is_training else [".examples.jsonl", ".features.jsonl"]
    check_output_free(config.output_file, config.partition_number, config.overwrite)
    tokenizer = tokenizer_from_config(config)
    stats = {"examples": 0, "skipped_examples": 0, "answered_examples": 0, "impossible_examples": 0, "features": 0,
             "impossible_features": 0}
    examples = read_squad_examples(Path(config.input_file), options.is_training, config.version_2_with_negative,
                                   stats)
    meta = {"kind": "squad", "version_2_with_negative": config.version_2_with_negative,
            "is_training": options.is_training, "columns": list(_layout(options).names),
            "max_seq_length": options.max_seq_length, "doc_stride": options.doc_stride,
            "max_query_length": options.max_query_length, "tokenizer": tokenizer.describe(),
            "input": str(config.input_file), "stats": stats}
    with RecordWriter(config.output_file, _layout(options).mindrecord(seq=options.max_seq_length), "albert squad",
                      config.partition_number, config.overwrite, suffixes) as out, contextlib.ExitStack() as stack:
        sidecars = {suffix: stack.enter_context(open(out.sidecar(suffix), "w", encoding="utf-8"))
                    for suffix in suffixes}
        unknown = UnknownTokens(tokenizer)
        with progress("questions", None, " questions") as bar:
            out.write(_features(_counted(examples, bar), tokenizer, options, stats, sidecars, unknown))
        stack.close()
        stats["unknown_tokens_fraction"] = round(unknown.fraction, 4)
        meta["warnings"] = [warning for warning in (unknown.warning(), _version_warning(config, stats)) if warning]
        return out.publish(meta)


def main(argv: List[str]) -> int:
    config = parse_tool_config(argv, "squad", __doc__.splitlines()[0])
    meta = create_squad_data(config)
    log_to(os.path.dirname(os.path.abspath(config.output_file)))
    stats = meta["stats"]
    skipped = f" ({stats['skipped_examples']} answers skipped: text not at answer_start)" if config.is_training else ""
    print(f"wrote {meta['num_records']} features of {stats['examples']} questions to "
          f"{', '.join(meta['files'])}{skipped}")
    for warning in meta["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
