"""Pretraining corpora read as a stream of documents, in bounded memory, whatever the corpus size.

Formats (`input_format`; `auto` decides per file by its name, ignoring a trailing .gz/.bz2):
    text    one sentence per line, a blank line between documents (Google's BERT/ALBERT format)
    jsonl   one JSON object per line holding a whole document under `text_key` (names ending in .jsonl,
            .ndjson or .json), as Wikipedia extractors and data set dumps write them
Compression is recognised by a file's first bytes (gzip, bzip2), not by its name.

A jsonl document is split into sentences by `split_sentences`: every line of the text is a paragraph, and a
paragraph is cut after 。！？｡ (optionally followed by closing quotes or brackets), and after . ! ? … when
whitespace and then a character that is not lowercase follow, except after an initial ("J.") or a known
abbreviation ("Dr.", "e.g.", "U.S."). A rule rather than a library: the fast candidates (regex splitters) all
cut at the same places, and the model-based ones (pysbd, NLTK's punkt, which also needs a separate data
download) cost more time than SentencePiece tokenization itself; for sentence-order prediction a boundary that
is occasionally off by a clause does no harm.

Every document carries its file index, its index within the file and its first line: they seed its random
choices (so any split of the work gives the same records) and name the place of an error.
"""
import bz2
import gzip
import json
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, List, Optional, Sequence, Tuple

from model_utils.errors import UserError

FORMATS = ("auto", "text", "jsonl")
JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")

_CJK_END = "。！？｡"
_CLOSERS = "\"'”’)]」』）》】"
_SENTENCE_END = re.compile(rf"(?:[{_CJK_END}]+|[.!?…]+)[{re.escape(_CLOSERS)}]*")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc no nos fig figs vol vols inc ltd co corp mt gen col lt sgt rev approx cf "
    "al ed eds jan feb mar apr jun jul aug sep sept oct nov dec".split())


@dataclass
class Document:
    """Sentences of one document and where it starts (for error messages and the RNG key)."""
    file_index: int
    doc_index: int
    path: str
    first_line: int
    sentences: List[str]


def file_format(path: Path, input_format: str) -> str:
    """The format `path` is read in: `input_format` unless it is auto, then by the name."""
    if input_format not in FORMATS:
        raise UserError(f"input_format must be one of {', '.join(FORMATS)}, got {input_format!r}")
    if input_format != "auto":
        return input_format
    name = path.name.lower()
    for suffix in (".gz", ".bz2"):
        name = name[:-len(suffix)] if name.endswith(suffix) else name
    return "jsonl" if name.endswith(JSONL_SUFFIXES) else "text"


def open_binary(path: Path) -> Tuple[BinaryIO, BinaryIO]:
    """(stream of decompressed bytes, the raw file whose position measures progress)."""
    raw = open(path, "rb")
    magic = raw.read(3)
    raw.seek(0)
    if magic[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw, mode="rb"), raw
    if magic == b"BZh":
        return bz2.BZ2File(raw, mode="rb"), raw
    return raw, raw


class Corpus:
    """The documents of several input files, in order, read lazily; `bytes_read` follows the raw files (the
    compressed size for compressed files) for a progress bar."""

    def __init__(self, paths: Sequence[Path], input_format: str = "auto", text_key: str = "text",
                 shard_index: int = 0, num_shards: int = 1):
        self.paths = [Path(p) for p in paths]
        self.shard_index, self.num_shards = shard_index, num_shards
        self.formats = [file_format(p, input_format) for p in self.paths]
        self.text_key = text_key
        self.total_bytes = sum(os.path.getsize(p) for p in self.paths)
        self._finished_bytes = 0
        self._raw: Optional[BinaryIO] = None

    def owns(self, file_index: int, doc_index: int) -> bool:
        """Whether document `doc_index` of file `file_index` belongs to this part of the data set."""
        return (file_index + doc_index) % self.num_shards == self.shard_index

    @property
    def bytes_read(self) -> int:
        current = self._raw.tell() if self._raw is not None and not self._raw.closed else 0
        return self._finished_bytes + current

    def documents(self) -> Iterator[Document]:
        """Documents of all files in order; empty documents vanish."""
        for file_index, (path, kind) in enumerate(zip(self.paths, self.formats)):
            if kind == "jsonl":
                yield from self._jsonl_documents(path, file_index)
            else:
                yield from self._text_documents(path, file_index)
            self._finished_bytes += os.path.getsize(path)

    def numbered_lines(self, path: Path) -> Iterator[Tuple[int, str]]:
        """(line number, text) of a plain or compressed UTF-8 file, with a one-line error naming file and line
        for undecodable text or damaged compression."""
        stream, self._raw = open_binary(path)
        line_no = 0
        try:
            with self._raw, stream:
                for line_no, data in enumerate(stream, start=1):
                    if line_no == 1 and data.startswith(b"\xef\xbb\xbf"):
                        data = data[3:]
                    try:
                        yield line_no, data.decode("utf-8")
                    except UnicodeDecodeError as err:
                        raise UserError(f"{path} line {line_no}: not UTF-8 text ({err.reason} at byte {err.start} "
                                        f"of the line)") from None
        except (EOFError, OSError, zlib.error) as err:
            raise UserError(f"{path} line {line_no + 1}: damaged or truncated compressed data ({err})") from None
        finally:
            self._raw = None

    def _text_documents(self, path: Path, file_index: int) -> Iterator[Document]:
        """Runs of non-blank lines, one sentence per line."""
        doc_index, sentences, first = 0, [], 0
        for line_no, line in self.numbered_lines(path):
            for piece in line.splitlines() or [""]:
                piece = piece.strip()
                if piece:
                    if not sentences:
                        first = line_no
                    sentences.append(piece)
                elif sentences:
                    if self.owns(file_index, doc_index):
                        yield Document(file_index, doc_index, str(path), first, sentences)
                    doc_index, sentences = doc_index + 1, []
        if sentences and self.owns(file_index, doc_index):
            yield Document(file_index, doc_index, str(path), first, sentences)

    def _jsonl_documents(self, path: Path, file_index: int) -> Iterator[Document]:
        """One object per line, its `text_key` field split into sentences; a document's index counts the
        non-blank lines before it, so that a part can skip the others' lines without parsing them."""
        doc_index, key = -1, self.text_key
        for line_no, line in self.numbered_lines(path):
            if not line.strip():
                continue
            doc_index += 1
            if not self.owns(file_index, doc_index):
                continue
            try:
                record = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as err:
                raise UserError(f"{path} line {line_no}: malformed json ({err.msg} at column {err.colno})") from None
            if not isinstance(record, dict) or key not in record:
                found = f"keys: {', '.join(map(str, record))}" if isinstance(record, dict) else type(record).__name__
                raise UserError(f"{path} line {line_no}: no {key!r} field ({found}); set --text_key to the field "
                                f"holding the document text")
            text = record[key]
            if not isinstance(text, str):
                raise UserError(f"{path} line {line_no}: field {key!r} should be a string, got "
                                f"{type(text).__name__}")
            sentences = split_sentences(text)
            if sentences:
                yield Document(file_index, doc_index, str(path), line_no, sentences)


def read_documents(paths: Sequence[Path], input_format: str = "auto", text_key: str = "text") -> Iterator[Document]:
    """Documents of all files in order (see Corpus)."""
    return Corpus(paths, input_format, text_key).documents()


def split_sentences(text: str) -> List[str]:
    """Sentences of a document's text by the rule in the module docstring."""
    sentences: List[str] = []
    for paragraph in text.splitlines():
        start = 0
        for match in _SENTENCE_END.finditer(paragraph):
            end = match.end()
            if _is_boundary(paragraph, match.start(), end):
                piece = paragraph[start:end].strip()
                if piece:
                    sentences.append(piece)
                start = end
        piece = paragraph[start:].strip()
        if piece:
            sentences.append(piece)
    return sentences


def _is_boundary(text: str, begin: int, end: int) -> bool:
    """Whether the terminal punctuation text[begin:end] ends a sentence."""
    if text[begin] in _CJK_END:
        return True
    if end == len(text):
        return True
    if not text[end].isspace():
        return False
    following = text[end:].lstrip()
    if following and following[0].islower():
        return False
    if text[begin] != ".":
        return True
    word = text[:begin].rsplit(None, 1)[-1] if text[:begin].strip() else ""
    word = word.lstrip(_CLOSERS + "(“‘[")
    return not (len(word) == 1 and word.isalpha() or "." in word or word.lower() in _ABBREVIATIONS)
