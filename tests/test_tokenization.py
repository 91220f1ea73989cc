"""FullTokenizer against independent references: HF's slow AlbertTokenizer / BertTokenizer and known ids."""
import hashlib
import json
from pathlib import Path

import pytest

from model_utils.errors import UserError
from src.data.tokenization import FullTokenizer, preprocess_text, same_ids

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def zh_vocab(assets):
    return str(assets / "tokenizer" / "albert_zh_vocab.txt")


@pytest.fixture(scope="module")
def ours(spm_path):
    return FullTokenizer(None, do_lower_case=True, spm_model_file=spm_path)


@pytest.fixture(scope="module")
def hf_albert(spm_path):
    return transformers.AlbertTokenizer(vocab_file=spm_path, do_lower_case=True, keep_accents=False)


@pytest.fixture(scope="module")
def ours_zh(zh_vocab):
    return FullTokenizer(zh_vocab, do_lower_case=True)


@pytest.fixture(scope="module")
def hf_bert(zh_vocab):
    return transformers.BertTokenizer(vocab_file=zh_vocab, do_lower_case=True)


def _assert_same_ids(ours, hf, texts):
    mismatches = []
    for text in texts:
        got = ours.convert_tokens_to_ids(ours.tokenize(text))
        want = hf.encode(text, add_special_tokens=False)
        if got != want:
            mismatches.append((text[:80], ours.tokenize(text)[:20], hf.tokenize(text)[:20]))
    assert not mismatches, f"{len(mismatches)} of {len(texts)} texts differ, first: {mismatches[:3]}"


def _squad_texts(path):
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)["data"]
    texts = []
    for article in data:
        for paragraph in article["paragraphs"]:
            texts.append(paragraph["context"])
            texts.extend(qa["question"] for qa in paragraph["qas"])
    return texts


def test_known_ids(ours):
    assert ours.encode("This is a test") == [48, 25, 21, 1289]
    assert ours.encode("hello world") == [10975, 126]
    text = "ALBERT: A Lite BERT for Self-supervised Learning of Language Representations"
    ids = [ours.cls_id] + ours.encode(text) + [ours.sep_id]
    assert ids == [2, 2953, 45, 21, 13, 10601, 11502, 26, 1119, 8, 8542, 3762, 69, 2477, 16, 816, 18667, 3]
    assert (ours.pad_id, ours.cls_id, ours.sep_id, ours.mask_id) == (0, 2, 3, 4)


def test_preprocessing_rules(ours, hf_albert):
    tricky = ["Café  naïve\tRÉSUMÉ", "``quoted'' text", "1,000,000 and 23,4. 1990, 2000,", "x [MASK] y[SEP]z",
              "  leading and trailing  ", "ᴵᴺᵀ ﬁne ½", "<unk> and <pad>"]
    _assert_same_ids(ours, hf_albert, tricky)
    assert preprocess_text("Café  x", lower=True) == "cafe x"
    assert preprocess_text("Café", keep_accents=True) == "Café"


@pytest.mark.parametrize("name", ["bert_sample_text.txt", "albert_zh_news_zh_1.txt"])
def test_spm_ids_equal_hf_on_pretraining_samples(ours, hf_albert, assets, name):
    lines = (assets / "pretrain" / name).read_text(encoding="utf-8").splitlines()
    _assert_same_ids(ours, hf_albert, [line for line in lines if line.strip()])


def test_spm_ids_equal_hf_on_squad_v2_subset(ours, hf_albert, assets):
    texts = _squad_texts(assets / "squad" / "v2.0" / "dev-v2.0.subset_Normans_Rhine.json")
    assert len(texts) > 500
    _assert_same_ids(ours, hf_albert, texts)


@pytest.mark.parametrize("half", ["part1", "part2"])
def test_spm_ids_equal_hf_on_squad_v11_dev(ours, hf_albert, assets, half):
    texts = _squad_texts(assets / "squad" / "v1.1" / f"dev-v1.1.{half}_bloomsbury.json")
    _assert_same_ids(ours, hf_albert, texts)


def test_wordpiece_ids_equal_hf_bert_on_chinese_news(ours_zh, hf_bert, assets):
    lines = (assets / "pretrain" / "albert_zh_news_zh_1.txt").read_text(encoding="utf-8").splitlines()
    lines = [line for line in lines if line.strip()]
    assert len(lines) > 50
    _assert_same_ids(ours_zh, hf_bert, lines + ["Hello WORLD naïve [MASK] x[SEP]y", "ＡＢＣ１２３，。"])


def test_a_vocab_saved_by_a_windows_editor_means_the_same_ids(ours_zh, zh_vocab, hf_bert, tmp_path):
    """albert_zh's vocab.txt with a byte-order mark, CRLF line ends and empty lines at the end: the same tokens, ids
    (HF's BertTokenizer on the plain file as the reference), special ids and recorded digest (was: a first token
    "\ufeff[PAD]", [PAD] among the random replacement tokens, "duplicate token ''", and another digest, so data and
    checkpoints of the same vocabulary refused each other)."""
    plain = Path(zh_vocab).read_bytes()
    assert not plain.startswith(b"\xef\xbb\xbf") and b"\r" not in plain
    saved = tmp_path / "vocab.txt"
    saved.write_bytes(b"\xef\xbb\xbf" + plain.replace(b"\n", b"\r\n") + b"\r\n\r\n")
    windows = FullTokenizer(str(saved), do_lower_case=True)
    assert windows.vocab == ours_zh.vocab and windows.special_ids == ours_zh.special_ids
    assert windows.pad_id == ours_zh.pad_id == hf_bert.pad_token_id == 0
    lines = ["南京老城80后 Hello WORLD naïve", "ＡＢＣ１２３，。"]
    assert [windows.convert_tokens_to_ids(windows.tokenize(line)) for line in lines] == \
        [hf_bert.convert_tokens_to_ids(hf_bert.tokenize(line)) for line in lines]
    described, plain_described = windows.describe(), ours_zh.describe()
    assert described["model_sha256"] == plain_described["model_sha256"]
    assert plain_described["model_sha256"] == hashlib.sha256(plain).hexdigest()[:16]  # as recorded before
    earlier = {"model_sha256": hashlib.sha256(saved.read_bytes()).hexdigest()[:16], "do_lower_case": True}
    assert same_ids(earlier, described) and same_ids(described, earlier)  # data or checkpoints of earlier versions
    assert not same_ids(earlier, {**described, "do_lower_case": False})


def test_wordpiece_chinese_characters_are_words(ours_zh):
    tokens = ours_zh.tokenize("南京老城80后")
    assert tokens == ["南", "京", "老", "城", "80", "后"]
    assert all(ours_zh.is_word_start(t) for t in tokens)


def test_ids_round_trip_and_detokenize(ours, ours_zh):
    tokens = ours.tokenize("The Denver Broncos won Super Bowl 50.")
    assert ours.convert_ids_to_tokens(ours.convert_tokens_to_ids(tokens)) == tokens
    assert ours.detokenize(tokens) == "the denver broncos won super bowl 50."
    zh_tokens = ours_zh.tokenize("unaffable 南京")
    assert ours_zh.convert_ids_to_tokens(ours_zh.convert_tokens_to_ids(zh_tokens)) == zh_tokens
    assert ours_zh.detokenize(ours_zh.tokenize("unaffable")) == "unaffable"


def test_word_starts(ours):
    tokens = ours.tokenize("Unbelievably, it worked.")
    starts = [ours.is_word_start(t) for t in tokens]
    assert starts[0] and not all(starts)  # "unbelievably" splits into several pieces, only the first starts a word


def test_missing_files_are_user_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        FullTokenizer(None, spm_model_file=str(tmp_path / "none.model"))
    with pytest.raises(UserError, match="not found"):
        FullTokenizer(str(tmp_path / "vocab.txt"))
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(UserError, match="bad.model"):
        FullTokenizer(None, spm_model_file=str(bad))
    vocab = tmp_path / "v.txt"
    vocab.write_text("[PAD]\n[UNK]\nhello\n", encoding="utf-8")
    with pytest.raises(UserError, match="CLS"):
        FullTokenizer(str(vocab))


def test_googles_pieces_file_beside_the_sentencepiece_model_is_accepted(spm_path, hf_albert, assets):
    """Google's run scripts pass `--vocab_file 30k-clean.vocab --spm_model_file 30k-clean.model`: the same ids as
    HF's tokenizer on the model alone; any other vocabulary beside the model is refused (was: silently ignored)."""
    pieces = str(assets / "tokenizer" / "albert_30k-clean.vocab")
    both = FullTokenizer(pieces, do_lower_case=True, spm_model_file=spm_path)
    lines = (assets / "pretrain" / "bert_sample_text.txt").read_text(encoding="utf-8").splitlines()[:50]
    _assert_same_ids(both, hf_albert, [line for line in lines if line.strip()])
    with pytest.raises(UserError, match="is not the pieces file of --spm_model_file"):
        FullTokenizer(str(assets / "tokenizer" / "albert_zh_vocab.txt"), do_lower_case=True, spm_model_file=spm_path)
