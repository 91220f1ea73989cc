"""SentencePiece vocabulary training with ALBERT's recipe; the result is checked with HF's AlbertTokenizer."""
import pytest

from model_utils.errors import UserError, run_cli
from src import spm_train
from src.data.tokenization import FullTokenizer


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, assets):
    """About 400 KB of real Wikipedia text from the derived SQuAD corpus."""
    text = (assets / "derived" / "squad_v1.1_dev_contexts_corpus.txt").read_text(encoding="utf-8")
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(text[:400000], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory, corpus):
    prefix = tmp_path_factory.mktemp("spm") / "small"
    assert spm_train.main(["--input_file", str(corpus), "--model_prefix", str(prefix), "--vocab_size", "1500"]) == 0
    return prefix


def test_recipe_ids_and_files(model):
    vocab = (model.parent / "small.vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 1500
    pieces = [line.split("\t")[0] for line in vocab]
    assert pieces[:13] == ["<pad>", "<unk>", "[CLS]", "[SEP]", "[MASK]", "(", ")", '"', "-", ".", "–", "£", "€"]
    assert all(p == p.lower() for p in pieces[13:])  # do_lower_case: the corpus was lowercased
    tokenizer = FullTokenizer(None, True, str(model) + ".model")
    assert (tokenizer.pad_id, tokenizer.cls_id, tokenizer.sep_id, tokenizer.mask_id) == (0, 2, 3, 4)


def test_trained_model_tokenizes_like_hf(model, corpus):
    transformers = pytest.importorskip("transformers")
    path = str(model) + ".model"
    ours = FullTokenizer(None, True, path)
    hf = transformers.AlbertTokenizer(vocab_file=path, do_lower_case=True, keep_accents=False)
    lines = [line for line in corpus.read_text(encoding="utf-8").splitlines() if line.strip()][:300]
    for line in lines:
        assert ours.encode(line) == hf.encode(line, add_special_tokens=False)
    symbols = "Population (2010) of £5 - ok."
    assert ours.encode(symbols) == hf.encode(symbols, add_special_tokens=False)
    assert {"(", ")", "£", "-", "."} <= set(ours.tokenize(symbols))  # user symbols stay pieces of their own


def test_same_corpus_same_model(tmp_path, model, corpus):
    again = tmp_path / "again"
    assert spm_train.main(["--input_file", str(corpus), "--model_prefix", str(again), "--vocab_size", "1500"]) == 0
    assert (tmp_path / "again.model").read_bytes() == (model.parent / "small.model").read_bytes()


def test_existing_model_empty_corpus_or_oversized_vocab_is_refused_writing_nothing(tmp_path, model, corpus):
    args = ["--input_file", str(corpus), "--model_prefix", str(model), "--vocab_size", "1500"]
    assert run_cli(spm_train.main, args) == 2  # exists
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n", encoding="utf-8")
    with pytest.raises(UserError, match="empty corpus"):
        spm_train.main(["--input_file", str(empty), "--model_prefix", str(tmp_path / "e")])
    with pytest.raises(UserError, match="lower --vocab_size"):
        spm_train.main(["--input_file", str(corpus), "--model_prefix", str(tmp_path / "big"), "--vocab_size", "90000"])
    with pytest.raises(UserError, match=r"raise --vocab_size: it must hold every character of the corpus\)$"):
        spm_train.main(["--input_file", str(corpus), "--model_prefix", str(tmp_path / "tiny"), "--vocab_size", "10"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.txt"]
