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
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from model_utils.errors import UserError, run_cli
from src.data_utils import check_max_seq_length, load_json, parse_tool_config, require, tokenizer_from_config
from src.mindrecord_io import RecordWriter, check_output_free, jsonl_line
from src.progress import progress
from src.run_log import log_to
from src.tokenization import FullTokenizer

TRAIN_COLUMNS = ("input_ids", "input_mask", "segment_ids", "p_mask", "start_positions", "end_positions",
                 "is_impossible")
EVAL_COLUMNS = ("input_ids", "input_mask", "segment_ids", "p_mask", "unique_ids")
FIRST_UNIQUE_ID = 1000000000
_WORD = re.compile(r"\S+")


@dataclass
class SquadExample:
    """One question on one paragraph; `start_char`/`answer_text` is the answer used for training."""
    qas_id: str
    question_text: str
    context: str
    answers: List[str]
    answer_text: Optional[str] = None
    start_char: Optional[int] = None
    is_impossible: bool = False
    source: str = ""


@dataclass
class TokenizedContext:
    """The context's pieces with, for each piece, its ids, doc_tokens word and [start, end) characters."""
    doc_tokens: List[str]
    tokens: List[str] = field(default_factory=list)
    ids: List[int] = field(default_factory=list)
    word_index: List[int] = field(default_factory=list)
    char_spans: List[Tuple[int, int]] = field(default_factory=list)

    def token_span(self, start_char: int, end_char: int) -> Optional[Tuple[int, int]]:
        """First and last piece overlapping the characters [start_char, end_char)."""
        covering = [i for i, (s, e) in enumerate(self.char_spans) if s < end_char and e > start_char]
        return (covering[0], covering[-1]) if covering else None


def read_squad_examples(path: Path, is_training: bool, version_2_with_negative: bool,
                        stats: Dict[str, int]) -> Iterator[SquadExample]:
    """Examples of a SQuAD json file, article by article: an article's json is let go once its questions are
    read, so memory stays near that of the loaded file. `stats["skipped_examples"]` counts the training answers
    skipped because their text is not at their answer_start (as Google does; real SQuAD train has a handful)."""
    data = require(load_json(path), "data", list, str(path))
    found = 0
    for a in range(len(data)):
        article, data[a] = data[a], None
        for p, paragraph in enumerate(require(article, "paragraphs", list, f"{path}: data[{a}]")):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            context = require(paragraph, "context", str, where)
            for q, qa in enumerate(require(paragraph, "qas", list, where)):
                example = _read_question(qa, context, f"{where}.qas[{q}]", is_training, version_2_with_negative)
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
    impossible = bool(qa.get("is_impossible", False))
    if impossible and not version_2:
        raise UserError(f"{where}: question {qas_id} is_impossible but version_2_with_negative is false")
    # Prediction-only files may leave out the answers; training needs them.
    answers = require(qa, "answers", list, where) if is_training or "answers" in qa else []
    texts = [require(answer, "text", str, f"{where}.answers[{i}]") for i, answer in enumerate(answers)]
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


def _align_word(texts: Sequence[str], normalized: str, origin: List[Tuple[int, int]], word_start: int,
                word_end: int) -> List[Tuple[int, int]]:
    """Character span of each piece of one word, from the texts the pieces stand for; a piece that cannot be
    matched gets the rest of the word."""
    spans: List[Tuple[int, int]] = []
    position = 0
    for text in texts:
        if not text:  # a bare word-boundary piece ("▁" before a user symbol) covers no characters
            at = word_start + origin[position][0] if position < len(origin) else word_end
            spans.append((at, at))
            continue
        end = position + len(text) if normalized.startswith(text, position) else len(normalized)
        if position < len(origin) and end > position:
            spans.append((word_start + origin[position][0], word_start + origin[end - 1][1]))
        else:  # nothing left to match: an empty span at the word's end
            spans.append((word_end, word_end))
        position = end
    return spans


def tokenize_context(tokenizer: FullTokenizer, context: str) -> TokenizedContext:
    """Whitespace words -> pieces with their word index and original character spans."""
    result = TokenizedContext(doc_tokens=[])
    for word_index, match in enumerate(_WORD.finditer(context)):
        word = match.group()
        result.doc_tokens.append(word)
        tokens = tokenizer.tokenize_with_texts(word)
        if not tokens:
            continue
        pieces = [piece for piece, _ in tokens]
        normalized, origin = tokenizer.normalize_with_offsets(word)
        result.char_spans += _align_word([text for _, text in tokens], normalized, origin, match.start(),
                                         match.end())
        result.tokens += pieces
        result.ids += tokenizer.convert_tokens_to_ids(pieces)
        result.word_index += [word_index] * len(pieces)
    return result


def doc_windows(num_tokens: int, window: int, stride: int) -> List[Tuple[int, int]]:
    """(start, length) of overlapping windows over the context tokens, `stride` apart, the last one ending at
    the end of the context."""
    windows: List[Tuple[int, int]] = []
    start = 0
    while True:
        length = min(num_tokens - start, window)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, stride)


def max_context_windows(windows: Sequence[Tuple[int, int]], num_tokens: int) -> List[int]:
    """For each context token, the window that gives it the most context on both sides (BERT's rule: the smaller
    of left and right context, plus a small bonus for longer windows; the first such window on a tie). One pass
    over the windows' tokens, linear in the size of the features: scoring every window anew for each token of
    each window was quadratic in the number of windows (minutes for a long context, far worse with a small
    doc_stride)."""
    best = [-1] * num_tokens
    best_score = [-1.0] * num_tokens  # every real score is > 0
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        for position in range(start, start + length):
            score = min(position - start, end - position) + 0.01 * length
            if score > best_score[position]:
                best[position], best_score[position] = index, score
    return best


@dataclass
class SquadOptions:
    max_seq_length: int = 384
    doc_stride: int = 128
    max_query_length: int = 64
    is_training: bool = True

    def check(self) -> None:
        check_max_seq_length(self.max_seq_length)
        if self.doc_stride < 1 or self.max_query_length < 1:
            raise UserError("doc_stride and max_query_length must be >= 1")
        if self.max_query_length > self.max_seq_length - 4:
            raise UserError(f"max_query_length {self.max_query_length} leaves no room for context in "
                            f"max_seq_length {self.max_seq_length}")


def example_features(example: SquadExample, example_index: int, tokenizer: FullTokenizer, options: SquadOptions,
                     context: Optional[TokenizedContext] = None) -> Iterator[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """(record, feature map) per window of one example; `context` may be passed to reuse a tokenized paragraph."""
    context = context or tokenize_context(tokenizer, example.context)
    query = tokenizer.encode(example.question_text)[:options.max_query_length]
    answer = None
    if options.is_training and not example.is_impossible:
        answer = context.token_span(example.start_char, example.start_char + len(example.answer_text))
    windows = doc_windows(len(context.ids), options.max_seq_length - len(query) - 3, options.doc_stride)
    owner = max_context_windows(windows, len(context.ids))
    for window_index, (start, length) in enumerate(windows):
        offset = len(query) + 2  # feature position of the first context token
        ids = [tokenizer.cls_id, *query, tokenizer.sep_id, *context.ids[start:start + length], tokenizer.sep_id]
        seq = options.max_seq_length
        record = {"input_ids": np.full(seq, tokenizer.pad_id, np.int32), "input_mask": np.zeros(seq, np.int32),
                  "segment_ids": np.zeros(seq, np.int32), "p_mask": np.ones(seq, np.int32)}
        record["input_ids"][:len(ids)] = ids
        record["input_mask"][:len(ids)] = 1
        record["segment_ids"][offset:len(ids)] = 1
        record["p_mask"][0] = 0
        record["p_mask"][offset:offset + length] = 0
        if options.is_training:
            inside = answer is not None and start <= answer[0] and answer[1] < start + length
            first, last = (answer[0] - start + offset, answer[1] - start + offset) if inside else (0, 0)
            record.update(start_positions=np.int32(first), end_positions=np.int32(last),
                          is_impossible=np.int32(not inside))
        feature_map = {
            "example_index": example_index, "qas_id": example.qas_id, "doc_span_index": window_index,
            "tokens": tokenizer.convert_ids_to_tokens(ids),
            "token_to_orig_map": [-1] * offset + [context.word_index[start + i] for i in range(length)] + [-1],
            "token_to_char_span": [None] * offset + [list(context.char_spans[start + i]) for i in range(length)]
            + [None],
            "token_is_max_context": [False] * offset + [owner[start + i] == window_index for i in range(length)]
            + [False],
        }
        yield record, feature_map


def squad_schema(options: SquadOptions) -> Dict[str, Dict[str, object]]:
    seq = {"type": "int32", "shape": [options.max_seq_length]}
    columns = TRAIN_COLUMNS if options.is_training else EVAL_COLUMNS
    return {name: seq if name in ("input_ids", "input_mask", "segment_ids", "p_mask") else {"type": "int32"}
            for name in columns}


def _features(examples: Iterable[SquadExample], tokenizer: FullTokenizer, options: SquadOptions,
              stats: Dict[str, int], sidecars: Dict[str, TextIO]) -> Iterator[Dict[str, np.ndarray]]:
    """Records of all examples; evaluation data also gets its examples and feature maps written to the sidecars
    as they are made (and training data its counts)."""
    cached_context, cached = None, None
    for example_index, example in enumerate(examples):
        stats["examples"] += 1
        if not options.is_training:
            sidecars[".examples.jsonl"].write(jsonl_line(example_row(example_index, example)))
        if example.context is not cached_context:  # consecutive questions share their paragraph
            cached_context, cached = example.context, tokenize_context(tokenizer, example.context)
        for record, feature_map in example_features(example, example_index, tokenizer, options, cached):
            unique_id = FIRST_UNIQUE_ID + stats["features"]
            stats["features"] += 1
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


def example_row(index: int, example: SquadExample) -> Dict[str, Any]:
    """An example as postprocessing reads it from .examples.jsonl."""
    return {"example_index": index, "qas_id": example.qas_id, "question_text": example.question_text,
            "context": example.context, "doc_tokens": _WORD.findall(example.context), "answers": example.answers,
            "is_impossible": example.is_impossible}


def create_squad_data(config) -> Dict[str, Any]:
    """Convert one SQuAD file, streamed; returns the meta written beside the data."""
    options = SquadOptions(config.max_seq_length, config.doc_stride, config.max_query_length, config.is_training)
    options.check()
    suffixes = [] if options.is_training else [".examples.jsonl", ".features.jsonl"]
    check_output_free(config.output_file, config.partition_number, config.overwrite)
    tokenizer = tokenizer_from_config(config)
    stats = {"examples": 0, "skipped_examples": 0, "features": 0, "impossible_features": 0}
    examples = read_squad_examples(Path(config.input_file), options.is_training, config.version_2_with_negative,
                                   stats)
    meta = {"kind": "squad", "version_2_with_negative": config.version_2_with_negative,
            "is_training": options.is_training, "columns": list(squad_schema(options)),
            "max_seq_length": options.max_seq_length, "doc_stride": options.doc_stride,
            "max_query_length": options.max_query_length, "tokenizer": tokenizer.describe(),
            "input": str(config.input_file), "stats": stats}
    with RecordWriter(config.output_file, squad_schema(options), "albert squad", config.partition_number,
                      config.overwrite, suffixes) as out, contextlib.ExitStack() as stack:
        sidecars = {suffix: stack.enter_context(open(out.sidecar(suffix), "w", encoding="utf-8"))
                    for suffix in suffixes}
        with progress("questions", None, " questions") as bar:
            out.write(_features(_counted(examples, bar), tokenizer, options, stats, sidecars))
        stack.close()
        return out.publish(meta)


def main(argv: List[str]) -> int:
    config = parse_tool_config(argv, "squad", __doc__.splitlines()[0])
    meta = create_squad_data(config)
    log_to(os.path.dirname(os.path.abspath(config.output_file)))
    stats = meta["stats"]
    skipped = f" ({stats['skipped_examples']} answers skipped: text not at answer_start)" if config.is_training else ""
    print(f"wrote {meta['num_records']} features of {stats['examples']} questions to "
          f"{', '.join(meta['files'])}{skipped}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
