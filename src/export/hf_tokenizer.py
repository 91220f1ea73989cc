"""The tokenizer files of an HF transformers model folder, made from our tokenizer so that transformers encodes text
as we do (export.py --file_format HF).

SentencePiece (English ALBERT): `spiece.model` for the slow `AlbertTokenizer` (it needs the sentencepiece package) and
`tokenizer.json` for `AlbertTokenizerFast`, which `AutoTokenizer` picks and which needs nothing beyond transformers.
transformers would otherwise build the fast tokenizer from spiece.model itself, and that conversion treats ALBERT's
user-defined pieces (`"`, `(`, `-`, ...) as words of their own (a quote before a word makes it "▁the" where
SentencePiece gives "the": a quarter of real sentences encode differently) and keeps trailing spaces as a piece; so
tokenizer.json is written here as SentencePiece encodes: ALBERT's preprocessing (whitespace collapsed, `` and '' to ",
accents stripped unless keep_accents, lowercase), SentencePiece's own normalisation (the model's precompiled character
map), its unigram pieces and scores, user-defined pieces with SentencePiece's bonus (they always win), and pieces
ending in a digit and a comma ("▁1990,") ruled out, which Google's tokenizer splits into "▁1990" and ",".

WordPiece (albert_zh's vocab.txt): vocab.txt in our id order and `tokenizer_class` BertTokenizer, which
`BertTokenizer` and `BertTokenizerFast` (AutoTokenizer) read without any extra package.

The SentencePiece model is read with sentencepiece's own protobuf module (the protobuf package MindSpore already
requires): the piece types and the normalisation map are not in SentencePieceProcessor's interface.
"""
import base64
import json
from typing import Any, Dict, List

from model_utils.errors import UserError
from src.data.tokenization import SPIECE_UNDERLINE, FullTokenizer

SPM_FILE = "spiece.model"
# Every file tokenizer_files may write, of either kind (an export with --overwrite replaces only these).
TOKENIZER_FILES = (SPM_FILE, "tokenizer.json", "vocab.txt", "special_tokens_map.json", "tokenizer_config.json")
# SentencePiece piece types and model types (sentencepiece_model.proto)
NORMAL, USER_DEFINED = 1, 4
MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
# Far below any real path through the lattice: a piece ending in a digit and a comma is never taken.
DIGIT_COMMA_PENALTY = 1e4


def tokenizer_files(tokenizer: FullTokenizer, max_length: int) -> Dict[str, bytes]:
    """File name -> content of the tokenizer files for `tokenizer`; `max_length` is the model's longest input
    (transformers truncates to it when asked to)."""
    if tokenizer.kind == "sentencepiece":
        with open(tokenizer.model_file, "rb") as handle:
            model = handle.read()
        files = {SPM_FILE: model, "tokenizer.json": _json(_unigram_tokenizer(tokenizer, model))}
        settings = {"tokenizer_class": "AlbertTokenizer", "do_lower_case": tokenizer.do_lower_case,
                    "remove_space": True, "keep_accents": tokenizer.keep_accents}
    else:
        ordered = [tokenizer.inv_vocab[i] for i in range(tokenizer.vocab_size)]
        files = {"vocab.txt": ("\n".join(ordered) + "\n").encode("utf-8")}
        settings = {"tokenizer_class": "BertTokenizer", "do_lower_case": tokenizer.do_lower_case,
                    "do_basic_tokenize": True, "tokenize_chinese_chars": True, "strip_accents": None}
    specials = special_tokens(tokenizer)
    files["special_tokens_map.json"] = _json(specials)
    files["tokenizer_config.json"] = _json({**settings, **specials, "model_max_length": max_length})
    return files


def special_tokens(tokenizer: FullTokenizer) -> Dict[str, str]:
    """transformers' names of the special tokens; ALBERT's begin and end of a sequence are [CLS] and [SEP]."""
    names = tokenizer.inv_vocab
    tokens = {"unk_token": tokenizer.unk_token, "sep_token": names[tokenizer.sep_id],
              "pad_token": names[tokenizer.pad_id], "cls_token": names[tokenizer.cls_id],
              "mask_token": names[tokenizer.mask_id]}
    if tokenizer.kind == "sentencepiece":
        tokens.update(bos_token=tokens["cls_token"], eos_token=tokens["sep_token"])
    return tokens


def _json(values: Any) -> bytes:
    return (json.dumps(values, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _read_model(tokenizer: FullTokenizer, model: bytes):
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(model)
    kind = MODEL_TYPES.get(proto.trainer_spec.model_type, "unknown")
    if kind != "unigram":
        raise UserError(f"{tokenizer.model_file}: a SentencePiece {kind} model; the HF export writes unigram models "
                        f"(ALBERT's, and src.spm_train's default)")
    return proto


def _unigram_tokenizer(tokenizer: FullTokenizer, model: bytes) -> Dict[str, Any]:
    """tokenizer.json (the `tokenizers` library's format) of a SentencePiece unigram model with ALBERT's
    preprocessing, encoding as FullTokenizer does."""
    proto = _read_model(tokenizer, model)
    prepend = "always" if proto.normalizer_spec.add_dummy_prefix else "never"
    metaspace = {"type": "Metaspace", "replacement": SPIECE_UNDERLINE, "prepend_scheme": prepend,
                 "split": proto.trainer_spec.split_by_whitespace}
    return {"version": "1.0", "truncation": None, "padding": None,
            "added_tokens": _added_tokens(tokenizer),
            "normalizer": {"type": "Sequence", "normalizers": _normalizers(tokenizer, proto)},
            "pre_tokenizer": metaspace, "post_processor": _cls_sep_template(tokenizer), "decoder": metaspace,
            "model": {"type": "Unigram", "unk_id": tokenizer.vocab[tokenizer.unk_token],
                      "vocab": _scored_pieces(proto), "byte_fallback": False}}


def _normalizers(tokenizer: FullTokenizer, proto) -> List[Dict[str, Any]]:
    """ALBERT's preprocessing (src.data.tokenization.preprocess_text), then SentencePiece's normaliser."""
    steps = [{"type": "Strip", "strip_left": True, "strip_right": True},
             {"type": "Replace", "pattern": {"Regex": r"\s+"}, "content": " "},
             {"type": "Replace", "pattern": {"String": "``"}, "content": '"'},
             {"type": "Replace", "pattern": {"String": "''"}, "content": '"'}]
    if not tokenizer.keep_accents:
        steps += [{"type": "NFKD"}, {"type": "StripAccents"}]
    if tokenizer.do_lower_case:
        steps.append({"type": "Lowercase"})
    charsmap = proto.normalizer_spec.precompiled_charsmap
    if charsmap:
        steps.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode("ascii")})
    if proto.normalizer_spec.remove_extra_whitespaces:
        steps += [{"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
                  {"type": "Strip", "strip_left": True, "strip_right": True}]
    return steps


def _scored_pieces(proto) -> List[List[Any]]:
    """[piece, score] in id order, scored as SentencePiece's lattice sees them: a user-defined piece gets
    length x the best normal score - 0.1 (SentencePiece's bonus that makes it always win)."""
    best = max(piece.score for piece in proto.pieces if piece.type == NORMAL)
    scored = []
    for piece in proto.pieces:
        score = piece.score
        if piece.type == USER_DEFINED:
            score = len(piece.piece) * best - 0.1
        elif len(piece.piece) > 1 and piece.piece[-1] == "," and piece.piece[-2].isdigit():
            score -= DIGIT_COMMA_PENALTY
        scored.append([piece.piece, score])
    return scored


def _added_tokens(tokenizer: FullTokenizer) -> List[Dict[str, Any]]:
    """The special tokens, matched in the raw text before anything else (as FullTokenizer keeps them whole);
    [MASK] takes the space before it, as transformers' AlbertTokenizer does."""
    tokens = sorted({tokenizer.vocab[name] for name in special_tokens(tokenizer).values()})
    return [{"id": i, "content": tokenizer.inv_vocab[i], "single_word": False, "lstrip": i == tokenizer.mask_id,
             "rstrip": False, "normalized": False, "special": True} for i in tokens]


def _cls_sep_template(tokenizer: FullTokenizer) -> Dict[str, Any]:
    """[CLS] A [SEP] and [CLS] A [SEP] B [SEP], segment ids 0 then 1 (as the data tools pack sequences)."""
    cls, sep = tokenizer.inv_vocab[tokenizer.cls_id], tokenizer.inv_vocab[tokenizer.sep_id]

    def special(name: str, segment: int) -> Dict[str, Any]:
        return {"SpecialToken": {"id": name, "type_id": segment}}

    def sequence(name: str, segment: int) -> Dict[str, Any]:
        return {"Sequence": {"id": name, "type_id": segment}}

    return {"type": "TemplateProcessing",
            "single": [special(cls, 0), sequence("A", 0), special(sep, 0)],
            "pair": [special(cls, 0), sequence("A", 0), special(sep, 0), sequence("B", 1), special(sep, 1)],
            "special_tokens": {name: {"id": name, "ids": [tokenizer.vocab[name]], "tokens": [name]}
                               for name in (cls, sep)}}
