"""Text -> the features a task head reads, made the same way for the data files (src/create_*.py) and for serving
(`src.predict`): a classifier's sentence (pair), a RACE question with its four options, and a SQuAD question cut into
windows over its context, with the maps from features back to the context's words and characters that answers need.
"""
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from model_utils.errors import UserError
from src.data.input_text import check_max_seq_length, pack_pair, truncate_pair_from_end
from src.data.tokenization import FullTokenizer

_WORD = re.compile(r"\S+")
FIRST_UNIQUE_ID = 1000000000  # SQuAD features are numbered from here (unique_ids)


@dataclass
class InputExample:
    """One labelled text (pair); `label` is None for unlabelled test rows; `source` is "file:line"."""
    guid: str
    text_a: str
    text_b: Optional[str]
    label: Optional[str]
    source: str


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


def example_row(index: int, example: SquadExample) -> Dict[str, Any]:
    """An example as postprocessing reads it from .examples.jsonl."""
    return {"example_index": index, "qas_id": example.qas_id, "question_text": example.question_text,
            "context": example.context, "doc_tokens": _WORD.findall(example.context), "answers": example.answers,
            "is_impossible": example.is_impossible}
