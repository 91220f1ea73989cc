"""Property-based fuzzing of src/data/tokenization.py and of the SQuAD context alignment built on it
(src.data.features.tokenize_context), with the real ALBERT SentencePiece model and the albert_zh WordPiece
vocabulary, on arbitrary unicode text (see tests/fuzz_helpers.py for the tricky characters mixed in)."""
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from src.data import features as text_features
from src.data.tokenization import BasicTokenizer, FullTokenizer, preprocess_text
from tests.fuzz_helpers import TEXT, fuzz


@pytest.fixture(scope="module")
def zh(assets):
    return FullTokenizer(str(assets / "tokenizer" / "albert_zh_vocab.txt"), do_lower_case=True)


@pytest.fixture(scope="module")
def tokenizers(tokenizer, zh):
    return {"sentencepiece": tokenizer, "wordpiece": zh}


def _bert_drops_space(text: str) -> bool:
    """Whether `text` has a character that Python's str.split (and so SQuAD's doc_tokens) treats as whitespace but
    BERT's basic tokenizer deletes as a control character ("\\x0c", "\\x85"): there the WordPiece pieces of the
    whole text and of its words differ ("0\\x0c0" is "00" for BERT)."""
    return any(char.isspace() and not BasicTokenizer()._clean(char).isspace() for char in text)


@fuzz(500)
@given(text=TEXT)
@example(text="\ud83d")  # a lone surrogate: SentencePiece could not encode it (RuntimeError)
@example(text="\ue000")  # private use: BERT deletes every C* category, not only Cc/Cf
def test_tokenize_ids_in_range_and_round_trip(tokenizers, text):
    for tokenizer in tokenizers.values():
        tokens = tokenizer.tokenize(text)
        assert all(isinstance(token, str) and token for token in tokens)
        ids = tokenizer.convert_tokens_to_ids(tokens)
        assert ids == tokenizer.encode(text)
        assert all(0 <= i < tokenizer.vocab_size for i in ids)
        back = tokenizer.convert_ids_to_tokens(ids)
        assert tokenizer.convert_tokens_to_ids(back) == ids
        # A known token comes back as itself; an unknown one (SentencePiece keeps unknown characters as pieces)
        # as the unknown token.
        unknown = "<unk>" if tokenizer.kind == "sentencepiece" else "[UNK]"
        assert back == [token if token in tokenizer.vocab else unknown for token in tokens]
        assert isinstance(tokenizer.detokenize(tokens), str)


@fuzz(400)
@given(text=TEXT)
def test_pieces_never_cross_whitespace(tokenizers, text):
    """What create_squad_data relies on: tokenizing word by word gives the pieces of the whole text."""
    for kind, tokenizer in tokenizers.items():
        if kind == "wordpiece" and _bert_drops_space(text):
            continue
        assert [p for word in text.split() for p in tokenizer.tokenize(word)] == tokenizer.tokenize(text)


@pytest.fixture(scope="module")
def hf_bert(zh):
    transformers = pytest.importorskip("transformers")
    return transformers.BertTokenizer(vocab_file=zh.model_file, do_lower_case=True)


@fuzz(150)
@given(text=TEXT.filter(lambda t: "Σ" not in t and not any("\ud800" <= c <= "\udfff" for c in t)))
@example(text="\ue000")
def test_ids_equal_huggingface(tokenizer, zh, hf, hf_bert, text):
    """The package's contract: the ids of HF's slow AlbertTokenizer / BertTokenizer. Excluded: lone surrogates
    (HF fails on them) and capital sigma (HF lowercases character by character, so a final "Σ" becomes "σ"; Google's
    tokenizers, like this package, lowercase whole words and give "ς")."""
    assert tokenizer.encode(text) == hf.encode(text, add_special_tokens=False)
    assert zh.encode(text) == hf_bert.encode(text, add_special_tokens=False)


@fuzz(300)
@given(text=TEXT, lower=st.booleans(), keep_accents=st.booleans())
def test_normalisation_offsets(tokenizers, text, lower, keep_accents):
    assert isinstance(preprocess_text(text, lower=lower, keep_accents=keep_accents), str)
    for tokenizer in tokenizers.values():
        normalized, origin = tokenizer.normalize_with_offsets(text)
        assert len(normalized) == len(origin)
        assert all(0 <= start < end <= len(text) for start, end in origin)
        assert [start for start, _ in origin] == sorted(start for start, _ in origin)


def _check_alignment(tokenizer, context, tokenized):
    """Invariants of tokenize_context's pieces, words and character spans."""
    words = list(text_features._WORD.finditer(context))
    assert tokenized.doc_tokens == context.split()
    n = len(tokenized.tokens)
    assert len(tokenized.ids) == len(tokenized.word_index) == len(tokenized.char_spans) == n
    assert tokenized.word_index == sorted(tokenized.word_index)
    starts = [start for start, _ in tokenized.char_spans]
    assert starts == sorted(starts)
    covered, last_end = set(), 0
    for piece, word, (start, end) in zip(tokenized.tokens, tokenized.word_index, tokenized.char_spans):
        assert words[word].start() <= start <= end <= words[word].end()
        if tokenizer.piece_text(piece):  # every piece with text covers some characters, in order
            assert start < end and end >= last_end, (piece, start, end)
            last_end = end
            covered.update(range(start, end))
    if tokenizer.kind == "sentencepiece":  # every character the tokenizer keeps lies in some piece
        kept = {i for i, char in enumerate(context) if not char.isspace() and tokenizer.normalize_text(char)}
        assert kept <= covered, sorted(kept - covered)


@fuzz(500)
@given(context=TEXT)
@example(context="\x1b0:")  # SentencePiece drops the control character: ":" had an empty span
@example(context="a[MASK]b")  # a literal special token: "b" had an empty span
@example(context="\u1112\u1161\u11ab0")  # SentencePiece composes the Hangul jamo: "0" had an empty span
@example(context="ΑΣ ")  # a final sigma lowercases to "ς" in the word, "σ" alone
@example(context="½𠀀0")  # WordPiece: two unknown pieces in a row: the first took the whole word
@example(context="0ꀀ0`0:0")
def test_context_alignment(tokenizers, context):
    for kind, tokenizer in tokenizers.items():
        tokenized = text_features.tokenize_context(tokenizer, context)
        if not (kind == "wordpiece" and _bert_drops_space(context)):
            assert tokenized.ids == tokenizer.encode(context)
        _check_alignment(tokenizer, context, tokenized)


@fuzz(400)
@given(context=TEXT, data=st.data())
def test_answer_spans_map_to_pieces_and_back(tokenizers, context, data):
    """An answer made of whole words selects the pieces that cover it, and their characters are the answer (up to
    characters no piece keeps at its ends); any character range gives the first and last overlapping piece."""
    words = list(text_features._WORD.finditer(context))
    for tokenizer in tokenizers.values():
        tokenized = text_features.tokenize_context(tokenizer, context)
        start = data.draw(st.integers(0, len(context)))
        end = data.draw(st.integers(start, len(context)))
        overlapping = [i for i, (s, e) in enumerate(tokenized.char_spans) if s < end and e > start]
        span = tokenized.token_span(start, end)
        assert span == ((overlapping[0], overlapping[-1]) if overlapping else None)
        if not words:
            continue
        first = data.draw(st.integers(0, len(words) - 1))
        last = data.draw(st.integers(first, len(words) - 1))
        answer_start, answer_end = words[first].start(), words[last].end()
        span = tokenized.token_span(answer_start, answer_end)
        if span is None:  # only when no piece of these words covers any character
            assert not any(e > s for (s, e), word in zip(tokenized.char_spans, tokenized.word_index)
                           if first <= word <= last)
            continue
        got = context[tokenized.char_spans[span[0]][0]:tokenized.char_spans[span[1]][1]]
        assert got in context[answer_start:answer_end]
        assert tokenizer.normalize_text(got) == tokenizer.normalize_text(context[answer_start:answer_end])


@fuzz(10)
@given(text=TEXT.filter(bool), repeat=st.integers(200, 2000))
def test_long_inputs(tokenizers, text, repeat):
    context = " ".join([text] * repeat)[:40000]
    for tokenizer in tokenizers.values():
        tokenized = text_features.tokenize_context(tokenizer, context)
        assert all(0 <= i < tokenizer.vocab_size for i in tokenized.ids)
        assert all(0 <= s <= e <= len(context) for s, e in tokenized.char_spans)
