"""Pretraining corpora read as a stream of documents, in bounded memory and linear time, whatever the corpus size.

Formats (`input_format`); `auto` decides per file by its content, never by its name:
    text           one sentence per line, a blank line between documents (Google's BERT/ALBERT format)
    lines          one document per line (plain text dumps), split into sentences
    jsonl          one JSON object per line holding a whole document under `text_key` (data set dumps, brightmart's
                   nlp_chinese_corpus, WikiExtractor --json)
    wikiextractor  WikiExtractor's default output: `<doc id=... url=... title=...>` ... `</doc>` blocks
    parquet        HF datasets' storage format, the document under the column `text_key` (needs pyarrow)
`auto` looks at the first non-blank line after decompression: `{` is JSON lines, `<doc ` WikiExtractor, anything
else text; a Parquet file is known by its magic bytes. `lines` is never guessed (it looks like text): say it. A
declared format that the content contradicts stops with one line naming the file and line.
Compression (gzip, bzip2) is recognised by a file's first bytes, not by its name.

`text_key` may name several fields, comma-separated: the first one a record has holds its text (`text,content`
reads both Wikipedia dumps and news2016zh-style records).

Wikipedia: the same article gives the same document in WikiExtractor's two formats and in HF's wikipedia files.
    - The title is not training text: a document's first line is dropped when it equals the title (the `<doc>`
      header's `title`, a record's `title` field), as WikiExtractor writes it in the `<doc>` format and older
      extractors (nlp_chinese_corpus' wiki_zh) in JSON.
    - HTML entities that WikiExtractor writes (`&amp;`, `&lt;`, ...) are decoded in `<doc>` files and in records
      whose `url` field holds `curid=` (Wikipedia's page links), so `AT&amp;T` trains as `AT&T`.
    - Paragraphs (lines) are split into sentences by the rule below, in every format but `text`.

Sentence rule (`split_sentences`): every line is a paragraph; a paragraph is cut after 。！？｡ (optionally followed by
closing quotes or brackets), and after . ! ? … when whitespace and then a character that is not lowercase follow,
except after an initial ("J.") or a known abbreviation ("Dr.", "e.g.", "U.S."). A rule rather than a library: the
fast candidates (regex splitters) all cut at the same places, and the model-based ones (pysbd, NLTK's punkt, which
also needs a separate data download) cost more time than SentencePiece tokenization itself; for sentence-order
prediction a boundary that is occasionally off by a clause does no harm. Linear in the text's length.

Bounds on hostile input: a line (after decompression) longer than MAX_LINE_BYTES stops the run with one line
naming it, so a file without newlines or a decompression bomb cannot exhaust memory; so does a Parquet value, measured
in Arrow before it becomes a string, a batch decoding at most PARQUET_BATCH_BYTES (a dictionary value that every row
repeats counted on every row); a document longer than MAX_DOCUMENT_CHARS is cut into pieces of at most that size
(counted and warned about, no text lost).

Duplicates: a document (piece) whose text repeats an earlier one's word for word is counted and warned about, with
an example (the same corpus twice in the input: a copied file, both WikiExtractor formats of one dump); it is kept.
Only an 8-byte digest of each is held (DigestSet), for the first MAX_HASHED_DOCUMENTS distinct documents of the part
(later ones are checked against those).

Every document carries its file index, its index within the file, its piece number and its first line: they seed
its random choices (so any split of the work gives the same records) and name the place of an error.
"""
import bz2
import collections
import gzip
import hashlib
import html
import itertools
import json
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from model_utils import json_input
from model_utils.errors import UserError, utf16_hint

FORMATS = ("auto", "text", "lines", "jsonl", "wikiextractor", "parquet")
MAX_LINE_BYTES = 16 << 20
MAX_DOCUMENT_CHARS = 16 << 20
PARQUET_MAGIC = b"PAR1"
PARQUET_BATCH_ROWS = 256
PARQUET_BATCH_BYTES = 32 << 20
DEFAULT_TEXT_KEY = "text,content"
MAX_HASHED_DOCUMENTS = 1 << 24  # 128 MB of digests; English Wikipedia has about 7 million articles
MERGED_DIGESTS = 1 << 16  # digests held in a set before they join the sorted array

_CJK_END = "。！？｡"
_CLOSERS = "\"'”’)]」』）》】"
_SENTENCE_END = re.compile(rf"(?:[{_CJK_END}]+|[.!?…]+)[{re.escape(_CLOSERS)}]*")
_NON_SPACE = re.compile(r"\S")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc no nos fig figs vol vols inc ltd co corp mt gen col lt sgt rev approx cf "
    "al ed eds jan feb mar apr jun jul aug sep sept oct nov dec".split())
_DOC_HEADER = re.compile(r'<doc\s[^>]*>\s*$')
# Text that is markup, not language: WikiExtractor's <doc> lines and links, JSON escapes and keys.
MARKUP = re.compile(r'<doc\b|</doc>|curid=|\\u[0-9a-fA-F]{4}|"\w+":\s*["{\[\d]')
_DOC_ATTRIBUTE = re.compile(r'(\w+)="([^"]*)"')
_DOC_END = "</doc>"
WIKIEXTRACTOR_HINT = ("WikiExtractor output is read with --input_format wikiextractor, each file starting with its "
                      "first <doc ...> header")


@dataclass
class Document:
    """Sentences of one document (or of one piece of a document longer than the cap) and where it starts."""
    file_index: int
    doc_index: int
    path: str
    first_line: int
    sentences: List[str]
    piece: int = 0
    unit: str = "line"  # "row" for Parquet

    @property
    def where(self) -> str:
        return f"{self.path} {self.unit} {self.first_line}"


@dataclass
class ReadCounts:
    """What reading found beside the documents, for the summary and its warnings (main process only)."""
    formats: collections.Counter = field(default_factory=collections.Counter)
    empty_documents: int = 0  # a record or row without text
    cut_documents: int = 0  # longer than MAX_DOCUMENT_CHARS, cut into pieces
    json_like_lines: Dict[str, Tuple[int, int]] = field(default_factory=dict)  # text file -> (count, first line)
    unterminated: List[str] = field(default_factory=list)  # `<doc>` blocks cut short by the end of the file
    duplicates: int = 0  # documents whose text repeats an earlier one's
    duplicate_example: str = ""  # the first of them: where, and its first sentence
    unhashed: int = 0  # documents past MAX_HASHED_DOCUMENTS, not checked for duplicates

    def warnings(self) -> List[str]:
        found = []
        if self.cut_documents:
            found.append(f"{self.cut_documents} document(s) longer than {MAX_DOCUMENT_CHARS:,} characters were cut "
                         f"into pieces of at most that size (missing blank lines between documents?)")
        if self.json_like_lines:  # one line for the corpus, however many files
            path, (_, line) = next(iter(self.json_like_lines.items()))
            count = sum(count for count, _ in self.json_like_lines.values())
            found.append(f"{count} line(s) in {len(self.json_like_lines)} text file(s) look like JSON objects "
                         f"(first: {path} line {line}); if the files are JSON lines, use --input_format jsonl")
        if self.unterminated:
            found.append(f"{len(self.unterminated)} <doc> block(s) without </doc> at the end of their file (file cut "
                         f"short?; first: {self.unterminated[0]}); their text was kept")
        if self.duplicates:
            unchecked = f"; {self.unhashed} documents after the first {MAX_HASHED_DOCUMENTS:,} distinct ones were " \
                f"checked against those only" if self.unhashed else ""
            found.append(f"{self.duplicates} document(s) repeat an earlier document word for word (first: "
                         f"{self.duplicate_example}): the same corpus twice in the input (a copied file, both "
                         f"WikiExtractor formats of one dump)?; they were kept{unchecked}")
        return found

    def as_dict(self) -> Dict[str, object]:
        return {"formats": dict(self.formats), "documents_empty": self.empty_documents,
                "documents_cut": self.cut_documents, "documents_duplicate": self.duplicates}


class DigestSet:
    """64-bit digests in about 8 bytes each (a Python set of ints takes about 70): a sorted array, and a set of the
    newest that joins it when it holds MERGED_DIGESTS or a sixteenth of the array (the array's sort then merges two
    sorted runs, so the merges cost linear time in all)."""

    def __init__(self) -> None:
        self.merged = np.empty(0, np.uint64)
        self.recent: set = set()

    def __len__(self) -> int:
        return len(self.merged) + len(self.recent)

    def __contains__(self, digest: int) -> bool:
        value = np.uint64(digest)
        at = int(np.searchsorted(self.merged, value))
        return digest in self.recent or (at < len(self.merged) and self.merged[at] == value)

    def add(self, digest: int) -> None:
        """Add a digest that is not there yet."""
        self.recent.add(digest)
        if len(self.recent) >= max(MERGED_DIGESTS, len(self.merged) >> 4):
            newest = np.sort(np.fromiter(self.recent, np.uint64, len(self.recent)))
            self.merged = np.sort(np.concatenate([self.merged, newest]), kind="stable")
            self.recent.clear()


def check_format(input_format: str) -> None:
    if input_format not in FORMATS:
        raise UserError(f"input_format must be one of {', '.join(FORMATS)}, got {input_format!r}")


def sniff_format(first_line: str) -> str:
    """The format a text file's first non-blank line announces (`auto`)."""
    start = first_line.lstrip()
    if start.startswith("{"):
        return "jsonl"
    if start.startswith("<doc ") or start.startswith("<doc\t"):
        return "wikiextractor"
    return "text"


_WHAT = {"jsonl": "starts with a JSON object (JSON lines)", "wikiextractor": "starts with a WikiExtractor <doc> header",
         "parquet": "is a Parquet file", "text": "starts with plain text"}


def resolve_format(path: Path, declared: str, detected: str, line: int) -> str:
    """`detected` under `auto`; `declared` when the content agrees with it (text and lines look alike)."""
    if declared == "auto" or declared == detected or (declared == "lines" and detected == "text"):
        return detected if declared == "auto" else declared
    place = f"{path} line {line}" if detected != "parquet" else str(path)
    raise UserError(f"{place}: the file {_WHAT[detected]} but --input_format is {declared}; use --input_format auto "
                    f"(or {detected if detected != 'text' else 'text or lines'})")


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


def is_parquet(path: Path) -> bool:
    with open(path, "rb") as handle:
        return handle.read(4) == PARQUET_MAGIC


def _key_list(text_key: str) -> List[str]:
    keys = [key.strip() for key in str(text_key).split(",") if key.strip()]
    if not keys:
        raise UserError("text_key is empty: name the field holding a document's text, e.g. --text_key text")
    return keys


def _keys_phrase(keys: Sequence[str]) -> str:
    return " or ".join(repr(key) for key in keys)


def _without_title(text: str, title: Optional[str]) -> str:
    """`text` less its first line when that line is the title (the title rule in the module docstring)."""
    if not title:
        return text
    stripped = text.lstrip()
    first, _, rest = stripped.partition("\n")
    return rest if first.strip() == title.strip() else text


def _is_wikipedia_record(record: Dict[str, object]) -> bool:
    return "curid=" in str(record.get("url") or "")


class Corpus:
    """The documents of several input files, in order, read lazily; `bytes_read` follows the raw files (the
    compressed size for compressed files) for a progress bar; `counts` gathers what reading found."""

    def __init__(self, paths: Sequence[Path], input_format: str = "auto", text_key: str = DEFAULT_TEXT_KEY,
                 shard_index: int = 0, num_shards: int = 1):
        check_format(input_format)
        self.paths = [Path(p) for p in paths]
        self.shard_index, self.num_shards = shard_index, num_shards
        self.input_format = input_format
        self.text_keys = _key_list(text_key)
        self.total_bytes = sum(os.path.getsize(p) for p in self.paths)
        self.counts = ReadCounts()
        self._seen = DigestSet()
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
        """Documents of all files in order; empty documents vanish (counted), duplicates are counted."""
        for file_index, path in enumerate(self.paths):
            for document in self._file_documents(path, file_index):
                self._count_duplicate(document)
                yield document
            self._finished_bytes += os.path.getsize(path)

    def _file_documents(self, path: Path, file_index: int) -> Iterator[Document]:
        readers = {"text": self._text_documents, "lines": self._lines_documents, "jsonl": self._jsonl_documents,
                   "wikiextractor": self._wikiextractor_documents}
        if is_parquet(path):
            self.counts.formats[resolve_format(path, self.input_format, "parquet", 1)] += 1
            yield from self._parquet_documents(path, file_index)
            return
        lines = self.numbered_lines(path)
        first = next(((n, line) for n, line in lines if line.strip()), None)
        if first is None:
            self.counts.formats["empty"] += 1
            return
        kind = resolve_format(path, self.input_format, sniff_format(first[1]), first[0])
        self.counts.formats[kind] += 1
        yield from readers[kind](path, file_index, itertools.chain([first], lines))

    def _count_duplicate(self, document: Document) -> None:
        """Count `document` when its text repeats an earlier one's (see the module docstring)."""
        text = "\n".join(document.sentences).encode("utf-8", "surrogatepass")
        digest = int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")
        if digest in self._seen:
            self.counts.duplicates += 1
            self.counts.duplicate_example = self.counts.duplicate_example or \
                f"{document.where}: {document.sentences[0][:60]!r}"
        elif len(self._seen) < MAX_HASHED_DOCUMENTS:
            self._seen.add(digest)
        else:
            self.counts.unhashed += 1

    def numbered_lines(self, path: Path) -> Iterator[Tuple[int, str]]:
        """(line number, text) of a plain or compressed UTF-8 file, with a one-line error naming file and line
        for undecodable text, a line over MAX_LINE_BYTES or damaged compression."""
        stream, self._raw = open_binary(path)
        line_no = 0
        try:
            with self._raw, stream:
                while True:
                    data = stream.readline(MAX_LINE_BYTES + 1)
                    if not data:
                        break
                    line_no += 1
                    if len(data) > MAX_LINE_BYTES and not data.endswith(b"\n"):
                        raise UserError(f"{path} line {line_no}: longer than {MAX_LINE_BYTES >> 20} MB without a "
                                        f"line break (not a text corpus, or a damaged file)")
                    if line_no == 1 and data.startswith(b"\xef\xbb\xbf"):
                        data = data[3:]
                    try:
                        text = data.decode("utf-8")
                    except UnicodeDecodeError as err:
                        raise UserError(f"{path} line {line_no}: not UTF-8 text ({err.reason} at byte {err.start} "
                                        f"of the line){utf16_hint(data)}") from None
                    if text.count("\x00") * 4 > len(text):  # Latin UTF-16 without its byte-order mark: half NULs
                        raise UserError(f"{path} line {line_no}: NUL characters in the text{utf16_hint(data)}")
                    yield line_no, text
        except (EOFError, OSError, zlib.error) as err:
            raise UserError(f"{path} line {line_no + 1}: damaged or truncated compressed data ({err})") from None
        finally:
            self._raw = None

    def _check_text_line(self, path: Path, line_no: int, text: str, kind: str) -> None:
        """A WikiExtractor line in a text file is an error; JSON-object lines are counted (a mix may be real)."""
        if text.startswith("<") and (_DOC_HEADER.match(text) or text == _DOC_END):
            shown = _DOC_END if text == _DOC_END else "<doc ...>"
            raise UserError(f"{path} line {line_no}: a WikiExtractor {shown} line in a file read as {kind} (its first "
                            f"line is no <doc ...> header): {WIKIEXTRACTOR_HINT}")
        if text.startswith("{") and text.endswith("}"):
            try:
                looks_json = isinstance(json_input.loads(text), dict)
            except (json.JSONDecodeError, RecursionError):
                looks_json = False
            if looks_json:
                count, first = self.counts.json_like_lines.get(str(path), (0, line_no))
                self.counts.json_like_lines[str(path)] = (count + 1, first)

    def _text_documents(self, path: Path, file_index: int, lines: Iterator[Tuple[int, str]]) -> Iterator[Document]:
        """Runs of non-blank lines, one sentence per line."""
        document = _Pieces(self, file_index, 0, path)
        for line_no, line in lines:
            for text in line.splitlines() or [""]:
                text = text.strip()
                if text:
                    self._check_text_line(path, line_no, text, "text")
                    yield from document.add(line_no, [text])
                elif document.started:
                    yield from document.finish()
                    document = _Pieces(self, file_index, document.doc_index + 1, path)
        yield from document.finish()

    def _lines_documents(self, path: Path, file_index: int, lines: Iterator[Tuple[int, str]]) -> Iterator[Document]:
        """One document per non-blank line; its index counts the non-blank lines before it (as in JSON lines)."""
        doc_index = -1
        for line_no, line in lines:
            text = line.strip()
            if not text:
                continue
            doc_index += 1
            if self.owns(file_index, doc_index):
                self._check_text_line(path, line_no, text, "lines")
                yield from self._record(file_index, doc_index, path, line_no, text)

    def _record(self, file_index: int, doc_index: int, path: Path, line_no: int, text: str,
                title: Optional[str] = None, unit: str = "line") -> Iterator[Document]:
        """One record's text (a JSON line, a line, a Parquet row) as a document, less its title line."""
        sentences = split_sentences(_without_title(text, title))
        if sentences:
            yield Document(file_index, doc_index, str(path), line_no, sentences, unit=unit)
        else:
            self.counts.empty_documents += 1

    def _jsonl_documents(self, path: Path, file_index: int, lines: Iterator[Tuple[int, str]]) -> Iterator[Document]:
        """One object per line, its text field split into sentences; a document's index counts the non-blank
        lines before it, so that a part can skip the others' lines without parsing them."""
        doc_index = -1
        for line_no, line in lines:
            if not line.strip():
                continue
            doc_index += 1
            if not self.owns(file_index, doc_index):
                continue
            record = self._json_record(path, line_no, line)
            text = self._record_text(record, f"{path} line {line_no}")
            if text is None:
                self.counts.empty_documents += 1
                continue
            title = record.get("title") if isinstance(record.get("title"), str) else None
            if _is_wikipedia_record(record):
                text, title = html.unescape(text), html.unescape(title or "")
            yield from self._record(file_index, doc_index, path, line_no, text, title)

    @staticmethod
    def _json_record(path: Path, line_no: int, line: str) -> Dict[str, object]:
        try:
            record = json_input.loads(line.rstrip("\r\n"))
        except json.JSONDecodeError as err:
            hint = (f" (a WikiExtractor <doc> line: {WIKIEXTRACTOR_HINT})"
                    if line.lstrip().startswith(("<doc", _DOC_END)) else "")
            raise UserError(f"{path} line {line_no}: malformed json ({err.msg} at column {err.colno}){hint}") from None
        except RecursionError:
            raise UserError(f"{path} line {line_no}: json nested too deeply") from None
        if not isinstance(record, dict):
            raise UserError(f"{path} line {line_no}: expected a JSON object, got {type(record).__name__}")
        return record

    def _record_text(self, record: Dict[str, object], where: str) -> Optional[str]:
        """The first of the text keys a record has (None for a null value), checked for type."""
        key = next((key for key in self.text_keys if key in record), None)
        if key is None:
            raise UserError(f"{where}: no {_keys_phrase(self.text_keys)} field (keys: {', '.join(map(str, record))}); "
                            f"set --text_key to the field holding the document text")
        text = record[key]
        if text is not None and not isinstance(text, str):
            raise UserError(f"{where}: field {key!r} should be a string, got {type(text).__name__}")
        return text

    def _wikiextractor_documents(self, path: Path, file_index: int,
                                 lines: Iterator[Tuple[int, str]]) -> Iterator[Document]:
        """`<doc ...>` blocks; the title line dropped, entities decoded, paragraphs split into sentences."""
        doc_index = -1
        for line_no, line in lines:
            text = line.strip()
            if not text:
                continue
            if not _DOC_HEADER.match(text):
                raise UserError(f"{path} line {line_no}: text outside a <doc ...> block in a WikiExtractor file "
                                f"(expected a <doc ...> header)")
            doc_index += 1
            title = html.unescape(dict(_DOC_ATTRIBUTE.findall(text)).get("title", "")).strip()
            document = _Pieces(self, file_index, doc_index, path)
            for found in self._doc_body(path, line_no, title, lines):
                yield from document.add(*found)
            self.counts.empty_documents += not document.started
            yield from document.finish()

    def _doc_body(self, path: Path, start: int, title: str,
                  lines: Iterator[Tuple[int, str]]) -> Iterator[Tuple[int, List[str]]]:
        """(line, sentences) of one `<doc>` block's paragraphs, up to its `</doc>`."""
        title_seen = False
        for line_no, line in lines:
            text = line.strip()
            if text == _DOC_END:
                return
            if _DOC_HEADER.match(text):
                raise UserError(f"{path} line {line_no}: <doc> header inside the <doc> block of line {start} "
                                f"(missing </doc>)")
            if not text:
                continue
            text = html.unescape(text)
            if not title_seen:
                title_seen = True
                if text == title:
                    continue
            yield line_no, split_sentences(text)
        self.counts.unterminated.append(f"{path} line {start}")

    def _parquet_documents(self, path: Path, file_index: int) -> Iterator[Document]:
        """Rows of a Parquet file, streamed; the text column is the first of the text keys it has."""
        key, rows = _parquet_rows(path, self.text_keys)
        for row, record in rows:
            if not self.owns(file_index, row):
                continue
            text = record[key]
            if text is None:
                self.counts.empty_documents += 1
                continue
            title = record.get("title") if key != "title" else None
            if _is_wikipedia_record(record):
                text, title = html.unescape(text), html.unescape(title or "")
            yield from self._record(file_index, row, path, row + 1, text, title, unit="row")


def _parquet_rows(path: Path, text_keys: Sequence[str]) -> Tuple[str, Iterator[Tuple[int, Dict[str, object]]]]:
    """The text column's name and the file's rows as (row index, {column: value}), in bounded memory: a
    dictionary-typed column (pandas' categoricals) is read like a string column."""
    parquet = _pyarrow_parquet()
    try:
        handle = parquet.ParquetFile(path)
    except Exception as err:  # pyarrow's own error types; the message says what is wrong
        raise UserError(f"{path}: not a readable Parquet file ({err})") from None
    schema = handle.schema_arrow
    key = next((key for key in text_keys if key in schema.names), None)
    if key is None:
        raise UserError(f"{path}: no {_keys_phrase(text_keys)} column (columns: {', '.join(schema.names)}); set "
                        f"--text_key to the column holding the document text")
    if not _holds_strings(schema.field(key).type):
        raise UserError(f"{path}: column {key!r} should hold strings, holds {schema.field(key).type}")
    columns = [key] + [name for name in ("title", "url")
                       if name in schema.names and name != key and _holds_strings(schema.field(name).type)]
    return key, _rows_of(path, handle, columns)


def _holds_strings(kind: object) -> bool:
    import pyarrow.types as types

    if types.is_dictionary(kind):
        kind = kind.value_type
    return types.is_string(kind) or types.is_large_string(kind)


def _rows_of(path: Path, handle: object, columns: Sequence[str]) -> Iterator[Tuple[int, Dict[str, object]]]:
    """Rows read a row group at a time in batches of at most PARQUET_BATCH_BYTES (by the file's own sizes), each
    value's length checked against MAX_LINE_BYTES in Arrow, before it becomes a Python string, row by row."""
    row = -1
    for group in range(handle.metadata.num_row_groups):
        rows = _batch_rows(handle.metadata.row_group(group), columns)
        for batch in handle.iter_batches(batch_size=rows, row_groups=[group], columns=columns):
            values = [batch.column(name) for name in columns]
            lengths = [_byte_lengths(array) for array in values]
            for index in range(batch.num_rows):
                row += 1
                if any((length[index] or 0) > MAX_LINE_BYTES for length in lengths):
                    raise UserError(f"{path} row {row + 1}: text longer than {MAX_LINE_BYTES >> 20} MB")
                yield row, {name: array[index].as_py() for name, array in zip(columns, values)}


def _batch_rows(group: object, columns: Sequence[str]) -> int:
    """Rows per batch (at most PARQUET_BATCH_ROWS) such that decoding a batch of the row group `group` makes at
    most PARQUET_BATCH_BYTES. A plain column decodes to about its size; a dictionary-encoded one to as much as
    its dictionary per row, which the whole column chunk bounds: the 1.2 MB value that every row of a 557-byte
    file repeated made 750 MB of strings a batch of 256 rows."""
    chunks = [group.column(i) for i in range(group.num_columns) if group.column(i).path_in_schema in columns]
    row_bytes = sum(chunk.total_uncompressed_size / (1 if chunk.has_dictionary_page else max(group.num_rows, 1))
                    for chunk in chunks)
    return int(max(1, min(PARQUET_BATCH_ROWS, PARQUET_BATCH_BYTES // max(row_bytes, 1))))


def _byte_lengths(array: object) -> List[Optional[int]]:
    """UTF-8 bytes of each value of a string column, computed in Arrow (a dictionary's values are measured once)."""
    import pyarrow.compute as compute

    if hasattr(array, "dictionary"):
        return compute.binary_length(array.dictionary).take(array.indices).to_pylist()
    return compute.binary_length(array).to_pylist()


class _Pieces:
    """One document's sentences gathered as they are read, handed on in pieces of at most MAX_DOCUMENT_CHARS
    characters, so that no document is ever held whole; only the corpus' own part is yielded."""

    def __init__(self, corpus: Corpus, file_index: int, doc_index: int, path: Path):
        self.corpus, self.file_index, self.doc_index, self.path = corpus, file_index, doc_index, path
        self.piece, self.sentences, self.size, self.first = 0, [], 0, 0

    @property
    def started(self) -> bool:
        return bool(self.sentences) or self.piece > 0

    def add(self, line_no: int, sentences: List[str]) -> Iterator[Document]:
        if not sentences:
            return
        if not self.sentences:
            self.first = line_no
        self.sentences.extend(sentences)
        self.size += sum(len(sentence) for sentence in sentences)
        if self.size >= MAX_DOCUMENT_CHARS:
            self.corpus.counts.cut_documents += self.piece == 0
            yield from self._emit()

    def finish(self) -> Iterator[Document]:
        if self.sentences:
            yield from self._emit()

    def _emit(self) -> Iterator[Document]:
        if self.corpus.owns(self.file_index, self.doc_index):
            yield Document(self.file_index, self.doc_index, str(self.path), self.first, self.sentences, self.piece)
        self.piece, self.sentences, self.size = self.piece + 1, [], 0


def _pyarrow_parquet():
    try:
        import pyarrow.parquet as parquet
    except ImportError as err:
        raise UserError(f"reading Parquet files needs pyarrow, which is not installed ({err}): pip install "
                        f"'pyarrow>=14,<23'") from None
    return parquet


def read_documents(paths: Sequence[Path], input_format: str = "auto",
                   text_key: str = DEFAULT_TEXT_KEY) -> Iterator[Document]:
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
    """Whether the terminal punctuation text[begin:end] ends a sentence. Looks only at the whitespace after it and
    the word before it, so that splitting stays linear in the paragraph's length."""
    if text[begin] in _CJK_END:
        return True
    if end == len(text):
        return True
    if not text[end].isspace():
        return False
    following = _NON_SPACE.search(text, end)
    if following and text[following.start()].islower():
        return False
    if text[begin] != ".":
        return True
    word = _word_before(text, begin).lstrip(_CLOSERS + "(“‘[")
    return not (len(word) == 1 and word.isalpha() or "." in word or word.lower() in _ABBREVIATIONS)


def _word_before(text: str, end: int) -> str:
    """The last whitespace-separated word of text[:end] ('' if there is none)."""
    stop = end
    while stop > 0 and text[stop - 1].isspace():
        stop -= 1
    start = stop
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    return text[start:stop]
