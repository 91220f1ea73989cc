"""Tokenizers for ALBERT: SentencePiece (English ALBERT) and WordPiece `vocab.txt` (albert_zh).

`FullTokenizer(vocab_file, do_lower_case=True, spm_model_file=None)` keeps Google's signature: with
`spm_model_file` it tokenizes with SentencePiece after ALBERT's text preprocessing, otherwise with a BERT-style
basic tokenizer (Chinese characters as words, punctuation split, lowercasing) followed by greedy WordPiece.
Both produce the ids HuggingFace's slow `AlbertTokenizer` / `BertTokenizer` produce on the same vocabulary.

Everything that depends on the kind of vocabulary (special token names, which piece starts a word, how pieces
join back into text) lives here, so the data-creation modules never branch on the tokenizer type.
"""
import codecs
import collections
import hashlib
import json
import os
import re
import string
import unicodedata
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from model_utils.errors import UserError

SPIECE_UNDERLINE = "\u2581"
CONTROL_SYMBOLS = ("[CLS]", "[SEP]", "[MASK]")
# Pieces treated as whole words on their own when grouping pieces for whole-word masking.
_PUNCTUATION_PIECES = frozenset(string.punctuation)
# Lone UTF-16 surrogates (a broken "\ud83d" escape in a json file) cannot be encoded for SentencePiece.
_SURROGATES = re.compile("[\ud800-\udfff]")


def preprocess_text(text: str, lower: bool = False, remove_space: bool = True, keep_accents: bool = False) -> str:
    """ALBERT's normalisation before SentencePiece: collapse whitespace, TeX quotes to '"', NFKD accent stripping;
    lone surrogates become U+FFFD (SentencePiece cannot encode them)."""
    if not text.isascii():
        text = _SURROGATES.sub("\ufffd", text)
    if remove_space:
        text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if not keep_accents and not text.isascii():  # ASCII is unchanged by NFKD: skip the per-character pass
        text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    if lower:
        text = text.lower()
    return text


def _special_splitter(symbols: Sequence[str]) -> "re.Pattern[str]":
    return re.compile("(" + "|".join(re.escape(s) for s in symbols) + ")")


def _split_special(text: str, splitter: "re.Pattern[str]") -> List[str]:
    """Literal special tokens in text ("[MASK]") stay single tokens, as in HF; the parts between are tokenized."""
    return [part for part in splitter.split(text) if part.strip()]


class SentencePieceTokenizer:
    """ALBERT's SentencePiece tokenization, including the digit+comma re-split Google applies to pieces."""

    SPECIAL = ("<pad>", "<unk>") + CONTROL_SYMBOLS
    _splitter = _special_splitter(SPECIAL)

    def __init__(self, model_file: str, do_lower_case: bool = True, keep_accents: bool = False):
        import sentencepiece as spm  # deferred: WordPiece users need not have it

        if not Path(model_file).is_file():
            raise UserError(f"SentencePiece model not found: {model_file}")
        self.sp_model = spm.SentencePieceProcessor()
        try:
            self.sp_model.Load(str(model_file))
        except (OSError, RuntimeError) as err:
            raise UserError(f"{model_file}: not a SentencePiece model ({err})") from err
        self.do_lower_case = do_lower_case
        self.keep_accents = keep_accents
        self.vocab = {self.sp_model.IdToPiece(i): i for i in range(self.sp_model.GetPieceSize())}
        self.inv_vocab = {i: piece for piece, i in self.vocab.items()}
        printable = "".join(chr(i) for i in range(33, 127))  # kept as it is unless the model folds case
        self._keeps_ascii = self.sp_model.Normalize(printable) == SPIECE_UNDERLINE + printable

    def _encode_pieces(self, text: str) -> List[str]:
        pieces: List[str] = []
        for piece in self.sp_model.EncodeAsPieces(text):
            # "▁1990," is re-encoded as "▁1990" + "," so that numbers with commas tokenize consistently.
            if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                sub = self.sp_model.EncodeAsPieces(piece[:-1].replace(SPIECE_UNDERLINE, ""))
                if piece[0] != SPIECE_UNDERLINE and sub[0][0] == SPIECE_UNDERLINE:
                    sub = sub[1:] if len(sub[0]) == 1 else [sub[0][1:]] + sub[1:]
                pieces.extend(sub + [piece[-1]])
            else:
                pieces.append(piece)
        return pieces

    def tokenize(self, text: str) -> List[str]:
        tokens: List[str] = []
        for part in _split_special(text, self._splitter):
            if part in self.SPECIAL:
                tokens.append(part)
            else:
                tokens.extend(self._encode_pieces(
                    preprocess_text(part, lower=self.do_lower_case, keep_accents=self.keep_accents)))
        return tokens

    def tokenize_with_texts(self, text: str) -> List[Tuple[str, str]]:
        """(piece, the normalised text it stands for)."""
        return [(piece, self.piece_text(piece)) for piece in self.tokenize(text)]

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        return [self.sp_model.PieceToId(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        return [self.sp_model.IdToPiece(int(i)) for i in ids]

    @staticmethod
    def is_word_start(token: str) -> bool:
        return token.startswith(SPIECE_UNDERLINE) or token.startswith("<") or token in _PUNCTUATION_PIECES

    @staticmethod
    def piece_text(token: str) -> str:
        """The text a piece stands for, without word-boundary markers (for character alignment)."""
        return token.replace(SPIECE_UNDERLINE, "")

    @staticmethod
    def detokenize(tokens: Sequence[str]) -> str:
        return "".join(tokens).replace(SPIECE_UNDERLINE, " ").strip()

    def normalize_text(self, text: str) -> str:
        """The text as the tokenizer sees it, for comparing detokenized pieces with original strings: ALBERT's
        preprocessing, then SentencePiece's own normaliser (NFKC, control characters dropped)."""
        text = preprocess_text(text, lower=self.do_lower_case, keep_accents=self.keep_accents)
        if self._keeps_ascii and text.isascii() and text.isprintable():  # the common case, kept fast
            return " ".join(text.split())  # NFKD may have made spaces ("¸" is " " and a combining cedilla)
        return self.sp_model.Normalize(text).replace(SPIECE_UNDERLINE, " ").strip()

    def normalize_with_offsets(self, text: str) -> Tuple[str, List[Tuple[int, int]]]:
        """normalize_text without spaces, with the [start, end) in `text` behind each character: the
        preprocessing per character, then SentencePiece's normaliser, whose offsets follow what it drops or
        composes (Hangul jamo into syllables)."""
        chars: List[str] = []
        origin: List[Tuple[int, int]] = []
        for unit, start, end in self.split_units(text):
            norm = preprocess_text(unit, lower=self.do_lower_case, remove_space=False, keep_accents=self.keep_accents)
            chars.append(norm)
            origin += [(start, end)] * len(norm)
        if not origin:
            return "", []
        normalized, offsets = self.sp_model.Normalize("".join(chars), with_offsets=True)
        kept, spans = [], []
        for i, char in enumerate(normalized):  # char i comes from the input characters offsets[i]..offsets[i + 1]
            if char != SPIECE_UNDERLINE:
                first = min(offsets[i], len(origin) - 1)
                last = min(max(offsets[i + 1] - 1, first), len(origin) - 1)
                kept.append(char)
                spans.append((origin[first][0], origin[last][1]))
        return "".join(kept), spans

    @staticmethod
    def split_units(word: str) -> List[Tuple[str, int, int]]:
        """(text, start, end) units of a word: a TeX quote pair is one unit (it becomes one '"')."""
        units, index = [], 0
        while index < len(word):
            if word[index:index + 2] in ("``", "''"):
                units.append(('"', index, index + 2))
                index += 2
            else:
                units.append((word[index], index, index + 1))
                index += 1
        return units


def load_vocab(vocab_file: str) -> Dict[str, int]:
    """A WordPiece vocab.txt: one token per line, id = line number. A byte-order mark (Windows editors write one)
    is not part of the first token (was: "\ufeff[PAD]", so [PAD] could be drawn as a random replacement token), and
    empty lines at the end of the file are no tokens (was: "duplicate token ''")."""
    if not Path(vocab_file).is_file():
        raise UserError(f"vocab file not found: {vocab_file}")
    vocab: Dict[str, int] = collections.OrderedDict()
    try:
        with open(vocab_file, encoding="utf-8-sig") as handle:
            lines = handle.read().split("\n")
    except UnicodeDecodeError as err:
        raise UserError(f"{vocab_file}: not a WordPiece vocab.txt (not UTF-8 text at byte {err.start}); a "
                        f"SentencePiece .model goes to --spm_model_file") from None
    while lines and not lines[-1]:
        lines.pop()
    for index, line in enumerate(lines):
        token = line.strip()
        if token in vocab:
            raise UserError(f"{vocab_file} line {index + 1}: duplicate token {token!r}")
        vocab[token] = index
    if not vocab:
        raise UserError(f"{vocab_file}: empty vocabulary")
    return vocab


def _is_whitespace(char: str) -> bool:
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def _is_punctuation(char: str) -> bool:
    cp = ord(char)
    # All non-letter/number ASCII counts as punctuation (e.g. "$", "^"), as in BERT.
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp: int) -> bool:
    """CJK Unified Ideographs blocks (not Japanese kana or Korean hangul, which have spaces)."""
    return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
            or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F or 0x2B820 <= cp <= 0x2CEAF
            or 0xF900 <= cp <= 0xFAFF or 0x2F800 <= cp <= 0x2FA1F)


class BasicTokenizer:
    """Whitespace, punctuation and CJK-character splitting with optional lowercasing and accent stripping."""

    def __init__(self, do_lower_case: bool = True):
        self.do_lower_case = do_lower_case

    def _clean(self, text: str) -> str:
        out = []
        for char in text:
            if ord(char) in (0, 0xFFFD) or _is_control(char):
                continue
            elif _is_whitespace(char):
                out.append(" ")
            elif _is_chinese_char(ord(char)):
                out.append(f" {char} ")
            else:
                out.append(char)
        return "".join(out)

    def _split_punctuation(self, word: str) -> List[str]:
        parts: List[str] = []
        start_new = True
        for char in word:
            if _is_punctuation(char):
                parts.append(char)
                start_new = True
            else:
                if start_new:
                    parts.append("")
                    start_new = False
                parts[-1] += char
        return parts

    def tokenize(self, text: str) -> List[str]:
        text = unicodedata.normalize("NFC", self._clean(text))
        tokens: List[str] = []
        for word in text.split():
            if self.do_lower_case:
                word = "".join(c for c in unicodedata.normalize("NFD", word.lower()) if unicodedata.category(c) != "Mn")
            tokens.extend(self._split_punctuation(word))
        return [t for t in tokens if t]


class WordpieceTokenizer:
    """Greedy longest-match-first WordPiece; words longer than `max_chars` or without a split become [UNK]."""

    def __init__(self, vocab: Dict[str, int], unk_token: str = "[UNK]", max_chars: int = 100):
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_chars = max_chars

    def tokenize_word(self, word: str) -> List[str]:
        if len(word) > self.max_chars:
            return [self.unk_token]
        pieces: List[str] = []
        start = 0
        while start < len(word):
            end = len(word)
            while end > start:
                piece = word[start:end] if start == 0 else "##" + word[start:end]
                if piece in self.vocab:
                    break
                end -= 1
            if end == start:
                return [self.unk_token]
            pieces.append(piece)
            start = end
        return pieces


class WordPieceVocabTokenizer:
    """albert_zh / BERT tokenization from a vocab.txt."""

    SPECIAL = ("[PAD]", "[UNK]") + CONTROL_SYMBOLS
    _splitter = _special_splitter(SPECIAL)

    def __init__(self, vocab_file: str, do_lower_case: bool = True):
        self.vocab = load_vocab(vocab_file)
        missing = [t for t in ("[UNK]",) + CONTROL_SYMBOLS if t not in self.vocab]
        if missing:
            pieces = sum("\t" in token for token in self.vocab) > len(self.vocab) // 2  # Google's 30k-clean.vocab
            raise UserError(f"{vocab_file}: vocabulary lacks the special tokens {missing}" + (
                "; it is a SentencePiece model's pieces file (piece<TAB>score lines): pass the .model beside it as "
                "--spm_model_file" if pieces else ""))
        self.inv_vocab = {i: token for token, i in self.vocab.items()}
        self.do_lower_case = do_lower_case
        self.basic = BasicTokenizer(do_lower_case)
        self.wordpiece = WordpieceTokenizer(self.vocab)

    def tokenize(self, text: str) -> List[str]:
        return [token for token, _ in self.tokenize_with_texts(text)]

    def tokenize_with_texts(self, text: str) -> List[Tuple[str, str]]:
        """(token, the normalised text it stands for): an [UNK] stands for a whole basic-tokenizer word."""
        tokens: List[Tuple[str, str]] = []
        for part in _split_special(text, self._splitter):
            if part in self.SPECIAL:
                tokens.append((part, part))
                continue
            for word in self.basic.tokenize(part):
                tokens += [(piece, word if piece == self.wordpiece.unk_token else self.piece_text(piece))
                           for piece in self.wordpiece.tokenize_word(word)]
        return tokens

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        unk = self.vocab["[UNK]"]
        return [self.vocab.get(token, unk) for token in tokens]

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        return [self.inv_vocab[int(i)] for i in ids]

    @staticmethod
    def is_word_start(token: str) -> bool:
        return not token.startswith("##")

    @staticmethod
    def piece_text(token: str) -> str:
        return token[2:] if token.startswith("##") else token

    @staticmethod
    def detokenize(tokens: Sequence[str]) -> str:
        return " ".join(tokens).replace(" ##", "").replace("##", "").strip()

    def normalize_text(self, text: str) -> str:
        return " ".join(self.basic.tokenize(text))

    def normalize_with_offsets(self, text: str) -> Tuple[str, List[Tuple[int, int]]]:
        """normalize_text without spaces, character by character, with the [start, end) in `text` of each."""
        chars: List[str] = []
        origin: List[Tuple[int, int]] = []
        for index, char in enumerate(text):
            norm = "".join(self.basic.tokenize(char))
            chars.append(norm)
            origin += [(index, index + 1)] * len(norm)
        return "".join(chars), origin


def _check_pieces_file(vocab_file: str, impl: "SentencePieceTokenizer", spm_model_file: str) -> None:
    """With a SentencePiece model, Google's scripts also pass its pieces file (`30k-clean.vocab`: piece<TAB>score
    per line), which adds nothing; any other vocabulary beside it (albert_zh's vocab.txt) was silently ignored,
    and the data made with the SentencePiece model instead."""
    try:
        with open(vocab_file, encoding="utf-8") as handle:
            pieces = [line.rstrip("\n").split("\t")[0] for line in handle]
    except FileNotFoundError:
        raise UserError(f"vocab file not found: {vocab_file}") from None
    except UnicodeDecodeError:
        pieces = []
    if pieces != [impl.inv_vocab[i] for i in range(len(impl.inv_vocab))]:
        raise UserError(f"--vocab_file {vocab_file} is not the pieces file of --spm_model_file {spm_model_file}: "
                        f"pass one vocabulary (--spm_model_file for English ALBERT, --vocab_file alone for a "
                        f"WordPiece vocab.txt such as albert_zh's)")


class FullTokenizer:
    """Google's entry point: SentencePiece when `spm_model_file` is given, else WordPiece from `vocab_file`.

    Attributes used by the data creators: `vocab` (token -> id), `vocab_size`, `pad_id`, `cls_id`, `sep_id`,
    `mask_id`, `special_ids` (ids never chosen as random replacement tokens), and `kind` ("sentencepiece" or
    "wordpiece") for the data sidecar files; `unk_token`, `do_lower_case` and `keep_accents` for the tokenizer files of
    an HF export (src/export/hf_tokenizer.py).
    """

    def __init__(self, vocab_file: Optional[str] = None, do_lower_case: bool = True,
                 spm_model_file: Optional[str] = None, keep_accents: bool = False):
        if spm_model_file:
            self.impl = SentencePieceTokenizer(spm_model_file, do_lower_case, keep_accents)
            if vocab_file:
                _check_pieces_file(vocab_file, self.impl, spm_model_file)
            self.kind = "sentencepiece"
            self.model_file = str(spm_model_file)
            pad_token = "<pad>"
            self.unk_token = self.impl.sp_model.IdToPiece(self.impl.sp_model.unk_id())
        elif vocab_file:
            self.impl = WordPieceVocabTokenizer(vocab_file, do_lower_case)
            self.kind = "wordpiece"
            self.model_file = str(vocab_file)
            pad_token = "[PAD]"
            self.unk_token = "[UNK]"
        else:
            raise UserError("a tokenizer needs spm_model_file (SentencePiece) or vocab_file (WordPiece vocab.txt)")
        self.do_lower_case = do_lower_case
        self.keep_accents = keep_accents
        self.vocab: Dict[str, int] = self.impl.vocab
        self.inv_vocab: Dict[int, str] = self.impl.inv_vocab
        self.vocab_size = len(self.vocab)
        missing = [t for t in CONTROL_SYMBOLS if t not in self.vocab]
        if missing:
            raise UserError(f"{self.model_file}: vocabulary lacks the control symbols {missing}")
        self.cls_id, self.sep_id, self.mask_id = (self.vocab[t] for t in CONTROL_SYMBOLS)
        self.pad_id = self.vocab.get(pad_token, 0)
        self.special_ids = frozenset(i for t, i in self.vocab.items()
                                     if t in CONTROL_SYMBOLS or t in ("<pad>", "<unk>", "[PAD]", "[UNK]"))

    def tokenize(self, text: str) -> List[str]:
        return self.impl.tokenize(text)

    def tokenize_with_texts(self, text: str) -> List[Tuple[str, str]]:
        """(token, the text it stands for, normalised as in `normalize_with_offsets`), e.g. ("▁new", "new");
        an unknown token stands for the text it replaced, so that its characters can be found."""
        return self.impl.tokenize_with_texts(text)

    def convert_tokens_to_ids(self, tokens: Iterable[str]) -> List[int]:
        return self.impl.convert_tokens_to_ids(tokens)

    def convert_ids_to_tokens(self, ids: Iterable[int]) -> List[str]:
        return self.impl.convert_ids_to_tokens(ids)

    def encode(self, text: str) -> List[int]:
        """Ids of `text` without special tokens."""
        return self.impl.convert_tokens_to_ids(self.impl.tokenize(text))

    def is_word_start(self, token: str) -> bool:
        """True when `token` begins a new word (whole-word masking groups the others with their predecessor)."""
        return self.impl.is_word_start(token)

    def piece_text(self, token: str) -> str:
        return self.impl.piece_text(token)

    def detokenize(self, tokens: Sequence[str]) -> str:
        """Readable text of a token span, e.g. a predicted answer ("▁new", "▁york" -> "new york")."""
        return self.impl.detokenize(tokens)

    def normalize_text(self, text: str) -> str:
        """`text` normalised as the tokenizer normalises it (case, accents, spacing)."""
        return self.impl.normalize_text(text)

    def normalize_with_offsets(self, word: str) -> Tuple[str, List[Tuple[int, int]]]:
        """`word` normalised as the tokenizer normalises it, with the [start, end) of the original characters
        behind each normalised character; lets answer spans be mapped between pieces and original text.
        Literal special tokens ("[MASK]") stay as they are, as `tokenize` keeps them."""
        parts = self.impl._splitter.split(word)
        if len(parts) == 1:
            return self._normalize_part(word)
        chars: List[str] = []
        origin: List[Tuple[int, int]] = []
        offset = 0
        for index, part in enumerate(parts):
            if index % 2:  # re.split with one group: the odd parts are the special tokens
                norm, spans = part, [(i, i + 1) for i in range(len(part))]
            else:
                norm, spans = self._normalize_part(part)
            chars.append(norm)
            origin += [(offset + start, offset + end) for start, end in spans]
            offset += len(part)
        return "".join(chars), origin

    def _normalize_part(self, text: str) -> Tuple[str, List[Tuple[int, int]]]:
        """normalize_with_offsets of text without special tokens."""
        normalized = self.normalize_text(text).replace(" ", "")
        if text.isascii() and len(normalized) == len(text) and "``" not in text and "''" not in text:
            return normalized, [(i, i + 1) for i in range(len(text))]  # one-to-one: the common case, kept fast
        by_char, origin = self.impl.normalize_with_offsets(text)
        # Context-dependent lowercasing (a final sigma becomes "ς") changes characters, not their number.
        return (normalized if len(normalized) == len(by_char) else by_char), origin

    def describe(self) -> Dict[str, object]:
        """What a data sidecar records so that readers can check the data matches a model config (and that parts
        of one data set made on different machines used the same vocabulary: the file's digest, of a vocab.txt as
        load_vocab reads it, so that a copy saved on Windows is the same vocabulary)."""
        with open(self.model_file, "rb") as handle:
            content = handle.read()
        raw = hashlib.sha256(content).hexdigest()[:16]
        if self.kind == "wordpiece":  # the same tokens as an editor saves them: BOM, CRs and empty last lines left out
            content = content.removeprefix(codecs.BOM_UTF8).replace(b"\r\n", b"\n")
            while content.endswith(b"\n\n"):
                content = content[:-1]
        digest = hashlib.sha256(content).hexdigest()[:16]
        described = {"kind": self.kind, "model_file": self.model_file, "model_sha256": digest,
                     "vocab_size": self.vocab_size, "do_lower_case": self.do_lower_case, "pad_id": self.pad_id,
                     "cls_id": self.cls_id, "sep_id": self.sep_id, "mask_id": self.mask_id}
        if raw != digest:  # what earlier versions recorded for this file
            described["file_sha256"] = raw
        return described


def same_ids(trained: Dict[str, object], given: Dict[str, object]) -> bool:
    """Whether two tokenizer records (a data set's .meta.json `tokenizer`, `describe()`, a checkpoint's
    run_tokenizer) turn text into the same ids: the same vocabulary file contents and casing. A record without the
    file's digest (data or checkpoints of earlier versions, converted weights) cannot be compared and passes; a
    vocab.txt saved with CRLF or a BOM matches by its normalised digest or, against records of earlier versions,
    by its file's (file_sha256)."""
    if not trained.get("model_sha256") or not given.get("model_sha256"):
        return True
    def digests(record: Dict[str, object]) -> set:
        return {record.get(key) for key in ("model_sha256", "file_sha256")} - {None}

    same_casing = trained.get("do_lower_case", given.get("do_lower_case")) == \
        given.get("do_lower_case", trained.get("do_lower_case"))
    return bool(digests(trained) & digests(given)) and same_casing


def checkpoint_tokenizer(values: Dict[str, object], source: str) -> Dict[str, object]:
    """The tokenizer record a train checkpoint (or an ONNX export of one) `source` carries (run_tokenizer: that of
    its data; {} for converted weights and checkpoints of earlier versions)."""
    return checkpoint_record(values, "run_tokenizer", "tokenizer", source)


def checkpoint_record(values: Dict[str, object], key: str, what: str, source: str) -> Dict[str, object]:
    """The JSON object a train checkpoint (or an export of one) `source` records under `key` ({} when it has none:
    converted weights, checkpoints of earlier versions); a damaged one is one line naming `what` it records."""
    recorded = values.get(key)
    if recorded is None:
        return {}
    try:
        record = json.loads(str(recorded))
    except ValueError:
        record = None
    if not isinstance(record, dict):
        raise UserError(f"{source}: its {what} record ({key}) is damaged: not a JSON object")
    return record


def tokenizer_record(record: Dict[str, object]) -> str:
    """A tokenizer record as messages name it: the vocabulary's file name, digest and casing."""
    name = os.path.basename(str(record.get("model_file") or "another vocabulary"))
    return f"{name} (sha256 {record.get('model_sha256')}, do_lower_case {record.get('do_lower_case')})"


class UnknownTokens:
    """Tokens of the records that the vocabulary does not know, counted as the data tools write them: text of
    another language than the vocabulary's (Chinese through the English 30k pieces: ~44% `<unk>`) makes data that
    trains nothing useful, without any error."""

    def __init__(self, tokenizer: FullTokenizer):
        self.unknown_id = tokenizer.vocab.get(tokenizer.unk_token, -1)
        self.control_ids = [tokenizer.cls_id, tokenizer.sep_id]
        self.unknown = self.tokens = 0

    def add_record(self, input_ids, input_mask) -> None:
        """One record's (or RACE row's) ids: the real tokens are those under the mask, less [CLS] and [SEP]."""
        ids = np.asarray(input_ids)[np.asarray(input_mask) != 0]
        self.tokens += int(np.isin(ids, self.control_ids, invert=True).sum())
        self.unknown += int((ids == self.unknown_id).sum())

    @property
    def fraction(self) -> float:
        return self.unknown / max(self.tokens, 1)

    def warning(self) -> Optional[str]:
        return unknown_tokens_warning(self.unknown, self.tokens)


UNKNOWN_TOKENS = 0.05  # more than this share of tokens the vocabulary does not know is warned about


def unknown_tokens_warning(unknown: int, tokens: int) -> Optional[str]:
    share = unknown / max(tokens, 1)
    if share <= UNKNOWN_TOKENS:
        return None
    return (f"{share:.0%} of the tokens are unknown to the vocabulary: is it the text's language? (a vocabulary "
            f"of one's own: src.spm_train; Chinese: albert_zh's --vocab_file)")
