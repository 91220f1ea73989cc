"""Text corpus -> ALBERT pretraining MindRecord (sentence-order prediction, n-gram whole-word masking), streamed
in bounded memory so that corpora of tens of GB can be prepared on one machine or split across several.

Input: files, globs and folders (comma-separated) of plain text (one sentence per line, a blank line between
documents), one document per line, JSON lines, WikiExtractor output (either format) or Parquet, optionally
gzip/bz2-compressed, the format found from each file's content; see src/data/corpus.py.

    python -m src.create_pretraining_data --input_file wiki_extracted/ --output_file data/pretrain.mindrecord \
        --spm_model_file 30k-clean.model --max_seq_length 512 --max_predictions_per_seq 76 --dupe_factor 10 \
        --num_workers 8

After the run a sanity summary (`corpus: ...`: documents, sentences, their lengths in tokens) is printed and kept in
the meta's `stats`, with a warning line for each way the corpus looks wrong: one document holding most of the text,
over 1% of sentences too long for one instance, markup (`<doc`, `curid=`, `\\u` escapes, JSON keys) in the text.

Per document and per duplication round (`dupe_factor`), sentences are accumulated into chunks of about
`max_seq_length - 3` tokens (with probability `short_seq_prob` a shorter random target is drawn). A chunk of
several sentences is cut at a random sentence boundary into segments A and B; a chunk that is one long sentence
is cut inside it. With probability 0.5 the segments are swapped (`next_sentence_labels` = 1, "wrong order"),
otherwise kept in order (0). Documents with a single sentence carry no order signal and are skipped (counted in
the summary). Masking picks whole words (SentencePiece pieces starting with "▁", WordPiece pieces not starting
with "##") in n-grams of n <= `ngram` words with p(n) proportional to 1/n, up to
min(max_predictions_per_seq, round(len * masked_lm_prob)) tokens; each chosen token becomes [MASK] with p=0.8,
stays itself with p=0.1, becomes a random non-special token with p=0.1.

Streaming: documents are read one at a time, handed to `num_workers` processes in small tasks (at most a few
tasks in flight per worker) and their instances written as soon as they come back, in input order: file,
document, round, pair. There is no global shuffle (Google's tool shuffles everything in memory): training draws
its own permutation of all rows every epoch. Memory therefore depends on the task size and the largest document,
not on the corpus size or `dupe_factor`.

Reproducibility: every (file, document, round) draws from its own RNG seeded by (random_seed, file, document,
round), so the records are identical for any `num_workers`, and `--num_shards N --shard_index K` makes part K of
N (document d of file f belongs to part (f + d) mod N) under `<name>-0000K-of-0000N.mindrecord`: N processes or
machines make disjoint parts of one data set from the same input list, and a folder holding the N parts trains
as their union, the same records as one run with `--num_shards 1`.

Record schema (one MindRecord row per instance; S = max_seq_length, P = max_predictions_per_seq):
    input_ids             int32 [S]   [CLS] A [SEP] B [SEP], padded with the pad id (0)
    input_mask            int32 [S]   1 for real tokens, 0 for padding
    segment_ids           int32 [S]   0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding
    next_sentence_labels  int32 []    0 = A precedes B in the text, 1 = swapped (sentence-order prediction)
    masked_lm_positions   int32 [P]   positions of the predicted tokens, ascending, padded with 0
    masked_lm_ids         int32 [P]   original ids at those positions, padded with 0
    masked_lm_weights     float32 [P] 1.0 for real predictions, 0.0 for padding
Files of `records_per_file` rows each (`<output_file>00000`, ...; default about 256 MB a file) and one
`<output_file>.meta.json` that lists them and records counts, lengths, options and the tokenizer.
"""
import bisect
import collections
import hashlib
import itertools
import multiprocessing
import os
import random
import signal
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Collection, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

if not __package__:  # run as a file (python src/TOOL.py): import from the project root, as `python -m` does
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from model_utils.errors import UserError, run_cli
from src.common.progress import progress
from src.common.run_log import log_to
from src.data import schema
from src.data.corpus import MARKUP, Corpus, Document
from src.data.input_text import (check_max_seq_length, full_disk_reported, parse_tool_config, resolve_input_files,
                                 tokenizer_from_config)
from src.data.mindrecord_io import MAX_RECORDS_PER_FILE, ColumnTable, MindRecordFile, RecordWriter, check_output_free
from src.data.tokenization import FullTokenizer, unknown_tokens_warning

FILE_BYTES = 256 << 20  # default size of an output file
MAX_TASK_BYTES = 32 << 20  # of text per task (one output file): bounds a worker's memory at low dupe_factor


@dataclass(frozen=True)
class MaskingOptions:
    max_seq_length: int = 512
    max_predictions_per_seq: int = 20
    masked_lm_prob: float = 0.15
    short_seq_prob: float = 0.1
    ngram: int = 3

    def check(self) -> None:
        check_max_seq_length(self.max_seq_length)
        if not 0.0 < self.masked_lm_prob < 1.0:
            raise UserError(f"masked_lm_prob must be in (0, 1), got {self.masked_lm_prob}")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise UserError(f"short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
        if self.max_predictions_per_seq < 1:
            raise UserError(f"max_predictions_per_seq must be >= 1, got {self.max_predictions_per_seq}")
        if self.ngram < 1:
            raise UserError(f"ngram must be >= 1, got {self.ngram}")


class InstanceMaker:
    """Turns tokenized documents into padded instance arrays; holds the tokenizer-derived lookup tables."""

    def __init__(self, tokenizer: FullTokenizer, options: MaskingOptions, random_seed: int):
        self.tokenizer = tokenizer
        self.options = options
        self.random_seed = random_seed
        inv = tokenizer.inv_vocab
        self.word_start = np.array([tokenizer.is_word_start(inv[i]) for i in range(tokenizer.vocab_size)])
        self.replacement_ids = [i for i in range(tokenizer.vocab_size) if i not in tokenizer.special_ids]
        weights = 1.0 / np.arange(1, options.ngram + 1)
        self.ngram_cumulative = [np.cumsum(weights[:n]).tolist() for n in range(1, options.ngram + 1)]

    def tokenize_document(self, document: Document) -> List[List[int]]:
        ids = (self.tokenizer.encode(sentence) for sentence in document.sentences)
        return [sentence for sentence in ids if sentence]

    def document_rng(self, document: Document, round_index: int) -> random.Random:
        # A str seed is hashed with SHA-512 by `random`, independent of PYTHONHASHSEED and of the process.
        piece = f".{document.piece}" if document.piece else ""
        return random.Random(f"{self.random_seed}/{document.file_index}/{document.doc_index}{piece}/{round_index}")

    def segment_pairs(self, sentences: List[List[int]],
                      rng: random.Random) -> Iterator[Tuple[List[int], List[int], int]]:
        """(A, B, label) pairs of one document for one round; label 1 means A and B were swapped."""
        max_tokens = self.options.max_seq_length - 3
        target = rng.randint(2, max_tokens) if rng.random() < self.options.short_seq_prob else max_tokens
        chunk: List[List[int]] = []
        length = 0
        for index, sentence in enumerate(sentences):
            chunk.append(sentence)
            length += len(sentence)
            if index + 1 < len(sentences) and length < target:
                continue
            pair = self._split_chunk(chunk, rng)
            chunk, length = [], 0
            if pair is None:
                continue
            first, second = pair
            swapped = rng.random() < 0.5
            if swapped:
                first, second = second, first
            truncate_pair_randomly(first, second, max_tokens, rng)
            yield first, second, int(swapped)

    @staticmethod
    def _split_chunk(chunk: List[List[int]], rng: random.Random) -> Optional[Tuple[List[int], List[int]]]:
        if len(chunk) >= 2:
            cut = rng.randint(1, len(chunk) - 1)
            return [t for s in chunk[:cut] for t in s], [t for s in chunk[cut:] for t in s]
        only = chunk[0]
        if len(only) < 2:
            return None
        cut = rng.randint(1, len(only) - 1)
        return only[:cut], only[cut:]

    def word_groups(self, tokens: Sequence[int]) -> Tuple[List[int], List[int], List[int]]:
        """Whole words of `tokens` as (starts, ends, segments): word i covers positions [starts[i], ends[i]) in
        segment segments[i] (1 = A, 2 = B). [CLS] and [SEP] belong to no word."""
        ids = np.asarray(tokens)
        special = (ids == self.tokenizer.cls_id) | (ids == self.tokenizer.sep_id)
        after_special = np.concatenate(([True], special[:-1]))
        begins = ~special & (self.word_start[ids] | after_special)
        starts = np.flatnonzero(begins)
        boundaries = np.append(np.flatnonzero(begins | special), len(ids))
        ends = boundaries[np.searchsorted(boundaries, starts, side="right")]
        segments = np.cumsum(special)[starts]
        return starts.tolist(), ends.tolist(), segments.tolist()

    def _draw_n(self, rng: random.Random, longest: int) -> int:
        """n in 1..longest with p(n) proportional to 1/n."""
        cumulative = self.ngram_cumulative[longest - 1]
        return min(bisect.bisect_right(cumulative, rng.random() * cumulative[-1]) + 1, longest)

    def choose_spans(self, tokens: Sequence[int], rng: random.Random) -> List[Tuple[int, int]]:
        """N-gram whole-word spans [start, end) to mask, within one segment, at most the prediction budget.

        Words are visited in random order (a Fisher-Yates shuffle drawn only as far as needed); from each an
        n-gram of n words is drawn and shortened while it would exceed the budget; spans that overlap an
        earlier one are skipped.
        """
        budget = min(self.options.max_predictions_per_seq,
                     max(1, int(round(len(tokens) * self.options.masked_lm_prob))))
        starts, ends, segments = self.word_groups(tokens)
        count = len(starts)
        order = list(range(count))
        covered = bytearray(len(tokens))
        spans: List[Tuple[int, int]] = []
        used = 0
        for i in range(count):
            if used >= budget:
                break
            j = i + rng.randrange(count - i)
            order[i], order[j] = order[j], order[i]
            first = order[i]
            longest = 1
            while (longest < self.options.ngram and first + longest < count
                   and segments[first + longest] == segments[first]):
                longest += 1
            n = self._draw_n(rng, longest)
            while n > 1 and used + ends[first + n - 1] - starts[first] > budget:
                n -= 1
            begin, end = starts[first], ends[first + n - 1]
            if used + end - begin > budget or any(covered[begin:end]):
                continue
            covered[begin:end] = b"\x01" * (end - begin)
            spans.append((begin, end))
            used += end - begin
        return spans

    def mask(self, tokens: List[int], rng: random.Random) -> Tuple[List[int], List[int], List[int]]:
        """(masked input ids, predicted positions ascending, original ids at those positions)."""
        positions = [p for begin, end in sorted(self.choose_spans(tokens, rng)) for p in range(begin, end)]
        masked = list(tokens)
        for position in positions:
            draw = rng.random()
            if draw < 0.8:
                masked[position] = self.tokenizer.mask_id
            elif draw >= 0.9:
                masked[position] = self.replacement_ids[rng.randrange(len(self.replacement_ids))]
        return masked, positions, [tokens[p] for p in positions]

    def document_rounds(self, document: Document, sentences: List[List[int]],
                        dupe_factor: int) -> Iterator[Dict[str, np.ndarray]]:
        """The instances of one tokenized document, one round at a time as stacked arrays (a long document's rows
        as Python lists take ~50 KB each at seq 512: only one round's are alive at once)."""
        if len(sentences) < 2:
            return
        cls, sep = self.tokenizer.cls_id, self.tokenizer.sep_id
        for round_index in range(dupe_factor):
            rng = self.document_rng(document, round_index)
            rows = []
            for first, second, label in self.segment_pairs(sentences, rng):
                tokens = [cls, *first, sep, *second, sep]
                masked, positions, originals = self.mask(tokens, rng)
                rows.append((masked, [0] * (len(first) + 2) + [1] * (len(second) + 1), label, positions, originals))
            yield self.stack(rows)

    def stack(self, rows: Sequence[Tuple[List[int], List[int], int, List[int], List[int]]]) -> Dict[str, np.ndarray]:
        sizes = {"seq": self.options.max_seq_length, "predictions": self.options.max_predictions_per_seq}
        arrays = {column.name: np.zeros((len(rows), *(sizes[dim] for dim in column.dims)), column.dtype)
                  for column in schema.PRETRAINING.columns}
        arrays["input_ids"][:] = self.tokenizer.pad_id
        for i, (ids, segments, label, positions, originals) in enumerate(rows):
            arrays["input_ids"][i, :len(ids)] = ids
            arrays["input_mask"][i, :len(ids)] = 1
            arrays["segment_ids"][i, :len(segments)] = segments
            arrays["next_sentence_labels"][i] = label
            arrays["masked_lm_positions"][i, :len(positions)] = positions
            arrays["masked_lm_ids"][i, :len(originals)] = originals
            arrays["masked_lm_weights"][i, :len(positions)] = 1.0
        return arrays


def truncate_pair_randomly(first: List[int], second: List[int], max_tokens: int, rng: random.Random) -> None:
    """Shorten the longer segment from a random end, one token at a time, until the pair fits (keeps both ends of
    the text in play). The draws only count what to cut where; each list is cut once, so the cost is linear."""
    lengths, front = [len(first), len(second)], [0, 0]
    while lengths[0] + lengths[1] > max_tokens:
        longer = 0 if lengths[0] > lengths[1] else 1
        if rng.random() < 0.5:
            front[longer] += 1
        lengths[longer] -= 1
    for tokens, cut, kept in ((first, front[0], lengths[0]), (second, front[1], lengths[1])):
        tokens[:] = tokens[cut:cut + kept]


# Worker processes build their InstanceMaker once, from the arguments given to the pool initializer.
_WORKER_MAKER: Optional[InstanceMaker] = None


def _init_worker(tokenizer: FullTokenizer, options: MaskingOptions, random_seed: int) -> None:
    global _WORKER_MAKER
    _WORKER_MAKER = InstanceMaker(tokenizer, options, random_seed)


def _init_pool_worker(tokenizer: FullTokenizer, options: MaskingOptions, random_seed: int) -> None:
    """A forked worker: `_init_worker`, without the parent's signal handlers (they would make each worker print a
    traceback when the parent is stopped): Ctrl-C, which reaches the whole process group, is ignored and SIGTERM
    has its default; the parent ends the pool itself."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    _init_worker(tokenizer, options, random_seed)


def _write_task(args: Tuple[List[Document], int, Path]) -> "Summary":
    """A worker's job: the instances of some consecutive documents, written as one MindRecord file at `path`."""
    documents, dupe_factor, path = args
    summary = Summary(_WORKER_MAKER.options.max_seq_length - 3, unknown_id(_WORKER_MAKER.tokenizer))
    output = MindRecordFile(path, mindrecord_schema(_WORKER_MAKER.options), "albert pretraining")
    for document in documents:
        sentences = _WORKER_MAKER.tokenize_document(document)
        summary.add_document(document, sentences)
        for arrays in _WORKER_MAKER.document_rounds(document, sentences, dupe_factor):
            summary.add_rows(arrays)
            output.write(ColumnTable(arrays))
    output.commit()
    return summary


def _pool_context():
    """fork starts workers fastest, but forking a process that has loaded MindSpore (and its threads) is slow
    and unsafe, so such a process (e.g. one that also trains) spawns fresh workers instead."""
    fork = sys.platform.startswith("linux") and "mindspore" not in sys.modules
    return multiprocessing.get_context("fork" if fork else "spawn")


def task_bytes(options: MaskingOptions, dupe_factor: int, records_per_file: int) -> int:
    """UTF-8 bytes of text per task (one output file each) expected to give `records_per_file` records.

    A token is about 4 bytes of UTF-8 text (English SentencePiece pieces; a Chinese character is 3 bytes and one
    WordPiece token), and each round turns a document's tokens into rows of up to max_seq_length - 3 tokens.
    """
    return int(min(MAX_TASK_BYTES, max(1, records_per_file / rows_per_byte(options, dupe_factor))))


def rows_per_byte(options: MaskingOptions, dupe_factor: int) -> float:
    """Records expected per UTF-8 byte of text (see task_bytes)."""
    return dupe_factor / (4.0 * (options.max_seq_length - 3))


def document_tasks(documents: Iterable[Document], size: int) -> Iterator[List[Document]]:
    """Consecutive documents grouped into tasks of about `size` bytes of text (a longer document is a task alone).
    The grouping depends only on the input, so output files are the same for any number of workers."""
    task, length = [], 0
    for document in documents:
        task.append(document)
        length += sum(len(sentence.encode("utf-8")) for sentence in document.sentences)
        if length >= size:
            yield task
            task, length = [], 0
    if task:
        yield task


def write_tasks(tasks: Iterable[List[Document]], out: RecordWriter, tokenizer: FullTokenizer,
                options: MaskingOptions, dupe_factor: int, random_seed: int, num_workers: int) -> Iterator["Summary"]:
    """Write each task's file (task t -> `<output_file>` + t as 5 digits) and yield the tasks' summaries in order.

    With several workers at most num_workers + 1 tasks are in flight, so memory stays bounded however many tasks
    there are. A worker that dies (e.g. killed for memory) stops the run instead of leaving it waiting.
    """
    jobs = ((task, dupe_factor, out.numbered_path(index)) for index, task in enumerate(tasks))
    if num_workers <= 1:
        _init_worker(tokenizer, options, random_seed)
        for job in jobs:
            summary = _write_task(job)
            out.adopt(job[2], summary.instances)
            yield summary
        return
    pool = ProcessPoolExecutor(num_workers, _pool_context(), _init_pool_worker, (tokenizer, options, random_seed))
    try:
        pending: collections.deque = collections.deque()
        for job in itertools.chain(jobs, [None]):
            if job is not None:
                pending.append((job[2], pool.submit(_write_task, job)))
            while pending and (job is None or len(pending) > num_workers):
                path, future = pending.popleft()
                try:
                    summary = future.result()
                except BrokenProcessPool:
                    raise UserError("a worker process died (killed by the system for lack of memory?); nothing was "
                                    "written; run again with fewer --num_workers") from None
                out.adopt(path, summary.instances)
                yield summary
    finally:  # after an error (bad input found while reading, Ctrl-C) queued tasks are dropped, not waited for
        pool.shutdown(wait=True, cancel_futures=True)


MOST_OF_THE_TEXT = 0.5  # a document holding more than this share of the tokens is suspicious
LONG_SENTENCES = 0.01  # as is more than this share of sentences that do not fit in one instance


class Summary:
    """Counts for the summary, its sanity checks and the meta file, gathered as instances are made (picklable, so
    workers return theirs and the main process merges them). `long_tokens`: a longer sentence cannot fit in one
    instance with [CLS] and two [SEP] (max_seq_length - 3); `unknown_id`: the vocabulary's id for what it does not
    know."""

    def __init__(self, long_tokens: int, unknown_id: int):
        self.long_tokens, self.unknown_id = long_tokens, unknown_id
        self.unknown = 0
        self.documents = self.documents_used = self.tokens = self.instances = 0
        self.masked = self.real = self.swapped = 0
        self.sentences = self.max_sentences = self.long_sentences = self.markup_sentences = 0
        self.largest = (0, "")  # (tokens, where) of the document with the most tokens
        self.first = ""  # where the first document starts
        self.markup_example = ""
        self._used = False  # whether the current document made an instance yet

    def add_document(self, document: Document, sentences: List[List[int]]) -> None:
        tokens = sum(len(sentence) for sentence in sentences)
        self.first = self.first or document.where
        self.documents += 1
        self.tokens += tokens
        self.sentences += len(sentences)
        self.max_sentences = max(self.max_sentences, len(sentences))
        self.long_sentences += sum(len(sentence) > self.long_tokens for sentence in sentences)
        self.unknown += sum(token == self.unknown_id for sentence in sentences for token in sentence)
        self.largest = max(self.largest, (tokens, document.where))
        if MARKUP.search("\n".join(document.sentences)):
            marked = [sentence for sentence in document.sentences if MARKUP.search(sentence)]
            self.markup_sentences += len(marked)
            self.markup_example = self.markup_example or f"{document.where}: {marked[0][:80]!r}"
        self._used = False

    def add_rows(self, arrays: Dict[str, np.ndarray]) -> None:
        rows = len(arrays["input_ids"])
        self.documents_used += int(rows > 0 and not self._used)
        self._used = self._used or rows > 0
        self.instances += rows
        self.masked += int(arrays["masked_lm_weights"].sum())
        self.real += int(arrays["input_mask"].sum())
        self.swapped += int(arrays["next_sentence_labels"].sum())

    def merge(self, other: "Summary") -> None:
        self.first = self.first or other.first
        self.markup_example = self.markup_example or other.markup_example
        for name in ("documents", "documents_used", "tokens", "instances", "masked", "real", "swapped", "sentences",
                     "long_sentences", "markup_sentences", "unknown"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.max_sentences = max(self.max_sentences, other.max_sentences)
        self.largest = max(self.largest, other.largest)

    def check(self, corpus: Corpus, part: str) -> None:
        if not self.documents:
            raise UserError(f"empty corpus{part}: no text in {', '.join(map(str, corpus.paths))}")
        if not self.instances:
            raise UserError(f"no document{part} can make a sentence pair (each needs at least two non-empty "
                            f"sentences), e.g. {self.first}")

    def warnings(self, formats: Collection[str]) -> List[str]:
        """One line for each way the corpus looks wrong (the data is written all the same); the advice on
        documents and sentences is for plain text files, when the corpus has any (`formats`: those read)."""
        found = []
        text = "text" in formats
        share = self.largest[0] / max(self.tokens, 1)
        if share > MOST_OF_THE_TEXT:
            found.append(f"one document ({self.largest[1]}) holds {share:.0%} of the text" + (
                ": blank lines between documents missing? (text: a blank line ends a document; one document per "
                "line: --input_format lines)" if text else ""))
        long_share = self.long_sentences / max(self.sentences, 1)
        if long_share > LONG_SENTENCES:
            found.append(f"{long_share:.1%} of sentences are longer than {self.long_tokens} tokens (max_seq_length "
                         f"- 3) and get cut" + (": paragraphs read as sentences? (text takes one sentence per line; "
                                                "lines, jsonl and wikiextractor split paragraphs into sentences)"
                                                if text else ""))
        unknown = unknown_tokens_warning(self.unknown, self.tokens)
        if unknown:
            found.append(unknown)
        if self.markup_sentences:
            found.append(f"{self.markup_sentences} sentence(s) hold markup (<doc, curid=, \\u escapes, JSON keys), "
                         f"e.g. {self.markup_example}: is --input_format right for the files?")
        return found

    def as_dict(self) -> Dict[str, object]:
        return {"documents": self.documents, "documents_used": self.documents_used,
                "documents_skipped": self.documents - self.documents_used, "sentences": self.sentences,
                "sentences_per_document_mean": round(self.sentences / max(self.documents, 1), 2),
                "sentences_per_document_max": self.max_sentences,
                "sentence_tokens_mean": round(self.tokens / max(self.sentences, 1), 2),
                "sentences_too_long": self.long_sentences,
                "sentences_too_long_fraction": round(self.long_sentences / max(self.sentences, 1), 4),
                "largest_document_fraction": round(self.largest[0] / max(self.tokens, 1), 4),
                "markup_sentences": self.markup_sentences, "tokens": self.tokens,
                "unknown_tokens_fraction": round(self.unknown / max(self.tokens, 1), 4),
                "instances": self.instances, "masked_tokens": self.masked,
                "masked_fraction": round(self.masked / max(self.real, 1), 4),
                "sop_swapped_fraction": round(self.swapped / max(self.instances, 1), 4)}


def unknown_id(tokenizer: FullTokenizer) -> int:
    return tokenizer.vocab.get(tokenizer.unk_token, -1)


def mindrecord_schema(options: MaskingOptions) -> Dict[str, Dict[str, object]]:
    return schema.PRETRAINING.mindrecord(seq=options.max_seq_length, predictions=options.max_predictions_per_seq)


def row_bytes(options: MaskingOptions) -> int:
    """Bytes of one record's values (every column is 4 bytes an element)."""
    return 4 * (3 * options.max_seq_length + 1 + 3 * options.max_predictions_per_seq)


def part_output_file(output_file: str, shard_index: int, num_shards: int) -> Path:
    """`DIR/wiki.mindrecord` for one part; `DIR/wiki-00001-of-00004.mindrecord` for part 1 of 4."""
    path = Path(output_file)
    if num_shards == 1:
        return path
    tag = f"-{shard_index:05d}-of-{num_shards:05d}"
    stem, dot, suffix = path.name.rpartition(".mindrecord")
    return path.with_name(f"{stem}{tag}{dot}{suffix}" if dot else path.name + tag)


def check_sharding(num_shards: int, shard_index: int) -> None:
    if num_shards < 1:
        raise UserError(f"num_shards must be >= 1, got {num_shards}")
    if not 0 <= shard_index < num_shards:
        raise UserError(f"shard_index must be in [0, num_shards), got shard_index={shard_index} with "
                        f"num_shards={num_shards}")


def inputs_digest(paths: Sequence[Path]) -> str:
    """Identifies the input list, so that parts made from different lists are not mixed up."""
    return hashlib.sha256("\n".join(p.name for p in paths).encode("utf-8")).hexdigest()[:16]


def create_pretraining_data(config) -> Dict[str, object]:
    """The whole tool: read, tokenize, make instances, write files and meta, all streamed; returns the summary."""
    started = time.time()
    options = MaskingOptions(config.max_seq_length, config.max_predictions_per_seq, config.masked_lm_prob,
                             config.short_seq_prob, config.ngram)
    options.check()
    if config.dupe_factor < 1:
        raise UserError(f"dupe_factor must be >= 1, got {config.dupe_factor}")
    check_sharding(config.num_shards, config.shard_index)
    output_file = part_output_file(config.output_file, config.shard_index, config.num_shards)
    check_output_free(output_file, 1, config.overwrite)
    paths = resolve_input_files(config.input_file)
    corpus = Corpus(paths, config.input_format, config.text_key, config.shard_index, config.num_shards)
    tokenizer = tokenizer_from_config(config)
    per_file = config.records_per_file or max(1, min(FILE_BYTES // row_bytes(options), MAX_RECORDS_PER_FILE))
    part = f" (part {config.shard_index} of {config.num_shards})" if config.num_shards > 1 else ""
    summary = Summary(options.max_seq_length - 3, unknown_id(tokenizer))
    tasks = document_tasks(corpus.documents(), task_bytes(options, config.dupe_factor, per_file))
    needed = corpus.total_bytes * rows_per_byte(options, config.dupe_factor) * row_bytes(options)
    with full_disk_reported(output_file, int(needed)), \
            RecordWriter(output_file, mindrecord_schema(options), "albert pretraining",
                         overwrite=config.overwrite) as out:
        with progress("input", corpus.total_bytes, "B", enabled=config.progress, unit_scale=True) as bar:
            for done in write_tasks(tasks, out, tokenizer, options, config.dupe_factor, config.random_seed,
                                    config.num_workers):
                summary.merge(done)
                bar.update(corpus.bytes_read - bar.n)
        summary.check(corpus, part)
        stats = dict(summary.as_dict(), **corpus.counts.as_dict(), input_files=len(paths),
                     input_bytes=corpus.total_bytes, warnings=summary.warnings(corpus.counts.formats) + corpus.counts.warnings())
        meta = {"kind": "pretraining", "columns": list(schema.PRETRAINING.names),
                "max_seq_length": options.max_seq_length,
                "max_predictions_per_seq": options.max_predictions_per_seq, "tokenizer": tokenizer.describe(),
                "options": {"masked_lm_prob": options.masked_lm_prob, "short_seq_prob": options.short_seq_prob,
                            "ngram": options.ngram, "dupe_factor": config.dupe_factor,
                            "random_seed": config.random_seed},
                "input": {"files": len(paths), "digest": inputs_digest(paths), "format": config.input_format,
                          "formats": dict(corpus.counts.formats), "text_key": config.text_key},
                "part": {"index": config.shard_index, "count": config.num_shards,
                         "of": Path(config.output_file).name},
                "order": "input order (file, document, round, pair); training shuffles the rows itself",
                "stats": stats}
        meta = out.publish(meta)
    stats["seconds"] = round(time.time() - started, 2)
    stats["output_files"] = meta["files"]
    return stats


def corpus_report(stats: Dict[str, object]) -> str:
    """The sanity summary: what the corpus was read as, in a few numbers a person can judge at a glance."""
    formats = ", ".join(f"{count} {kind}" for kind, count in sorted(stats["formats"].items()))
    return (f"corpus: {stats['input_files']} file(s) ({formats}); {stats['documents']} documents "
            f"({stats['documents_skipped']} skipped: fewer than two sentences; {stats['documents_empty']} without "
            f"text; {stats['documents_cut']} cut: too long); {stats['sentences']} sentences, "
            f"{stats['sentences_per_document_mean']} per document (max {stats['sentences_per_document_max']}), "
            f"{stats['sentence_tokens_mean']} tokens each on average, {stats['sentences_too_long_fraction']:.2%} "
            f"longer than max_seq_length - 3; largest document {stats['largest_document_fraction']:.1%} of the text")


def report(stats: Dict[str, object]) -> None:
    """The summary line, the sanity summary and one line per warning (on stderr)."""
    print("summary: " + ", ".join(f"{key}={value}" for key, value in stats.items()
                                  if key not in ("warnings", "formats")))
    print(corpus_report(stats))
    for warning in stats["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)


def main(argv: List[str]) -> int:
    config = parse_tool_config(argv, "pretraining", __doc__.splitlines()[0])
    stats = create_pretraining_data(config)
    log_to(os.path.dirname(os.path.abspath(config.output_file)))
    report(stats)
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
