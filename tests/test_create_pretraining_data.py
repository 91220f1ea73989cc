"""Pretraining data from the real sample corpora: SOP, masking statistics, consistency, determinism, bad input.

Token streams for the consistency checks come from HF's AlbertTokenizer, not from the code under test.
"""
import collections
import errno
import os
import random
import re
import signal
import string
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dataset
from model_utils.errors import UserError, run_cli
from src import create_pretraining_data as cpd
from src.data import schema
from src.data.corpus import read_documents
from src.data.tokenization import FullTokenizer
from tests.pretrain_helpers import ENV, ROOT

SEQ = 128


def make_instances(documents, tokenizer, options, dupe_factor, random_seed):
    """Every instance of `documents`, concatenated in the order the tool writes them."""
    maker = cpd.InstanceMaker(tokenizer, options, random_seed)
    rounds = [arrays for document in documents
              for arrays in maker.document_rounds(document, maker.tokenize_document(document), dupe_factor)]
    return {name: np.concatenate([a[name] for a in rounds]) for name in schema.PRETRAINING.names}


@pytest.fixture(scope="module")
def documents(assets):
    return list(read_documents([assets / "derived" / "squad_v1.1_dev_contexts_corpus.txt"]))[:150]


@pytest.fixture(scope="module")
def instances(documents, tokenizer):
    options = cpd.MaskingOptions(max_seq_length=SEQ, max_predictions_per_seq=40)
    return make_instances(documents, tokenizer, options, dupe_factor=2, random_seed=7)


def _restore(arrays, i):
    """Original ids of instance i: the masked positions get back their masked_lm_ids."""
    ids = arrays["input_ids"][i].copy()
    n = int(arrays["masked_lm_weights"][i].sum())
    ids[arrays["masked_lm_positions"][i][:n]] = arrays["masked_lm_ids"][i][:n]
    return ids[: int(arrays["input_mask"][i].sum())]


def _find_all(haystack: bytes, needle: bytes):
    out, start = [], haystack.find(needle)
    while start >= 0:
        if start % 4 == 0:
            out.append(start // 4)
        start = haystack.find(needle, start + 1)
    return out


def test_documents_split_at_blank_lines(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b.\nc d.\n\n\n e f. \n\ng.\n", encoding="utf-8")
    docs = list(read_documents([corpus]))
    assert [d.sentences for d in docs] == [["a b.", "c d."], ["e f."], ["g."]]
    assert [d.first_line for d in docs] == [1, 5, 7]


def test_segments_are_text_in_order_and_sop_balanced(instances, documents, spm_path):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AlbertTokenizer(vocab_file=spm_path, do_lower_case=True, keep_accents=False)
    streams = [np.array([t for s in d.sentences for t in hf.encode(s, add_special_tokens=False)], np.int32).tobytes()
               for d in documents]
    arrays = instances
    labels = arrays["next_sentence_labels"]
    assert len(labels) > 500
    assert abs(labels.mean() - 0.5) < 0.05  # binomial sd at n>500 is < 0.023
    checked = 0
    for i in range(0, len(labels), 3):
        ids = _restore(arrays, i)
        seps = np.flatnonzero(ids == 3)
        assert ids[0] == 2 and len(seps) == 2 and seps[1] == len(ids) - 1
        first, second = ids[1:seps[0]], ids[seps[0] + 1:seps[1]]
        segs = arrays["segment_ids"][i][: len(ids)]
        assert (segs[: seps[0] + 1] == 0).all() and (segs[seps[0] + 1:] == 1).all()
        # Both segments are contiguous text of one document, A before B unless the label says swapped.
        found = False
        for stream in streams:
            starts_a = _find_all(stream, first.astype(np.int32).tobytes())
            starts_b = _find_all(stream, second.astype(np.int32).tobytes())
            if labels[i] == 0:
                found = any(a + len(first) <= b for a in starts_a for b in starts_b)
            else:
                found = any(b + len(second) <= a for a in starts_a for b in starts_b)
            if found:
                break
        assert found, f"instance {i} (label {labels[i]}) is not two ordered pieces of one document"
        checked += 1
    assert checked > 150


def test_masking_rate_and_80_10_10(instances, tokenizer):
    arrays = instances
    lengths = arrays["input_mask"].sum(1)
    predicted = arrays["masked_lm_weights"].sum(1)
    budget = np.maximum(1, np.round(lengths * 0.15))
    assert (predicted <= budget).all()
    rate = predicted.sum() / lengths.sum()
    assert abs(rate - 0.15) < 0.01, rate
    n = predicted.astype(int)
    rows = np.repeat(np.arange(len(n)), n)
    cols = np.concatenate([np.arange(k) for k in n])
    positions = arrays["masked_lm_positions"][rows, cols]
    originals = arrays["masked_lm_ids"][rows, cols]
    shown = arrays["input_ids"][rows, positions]
    # Every prediction points at a real, non-special token; positions ascend and are unique.
    assert (positions > 0).all() and (positions < lengths[rows]).all()
    assert not np.isin(originals, [0, 2, 3, 4]).any()  # <unk> (1) is real text and may be masked
    for i in range(len(n)):
        p = arrays["masked_lm_positions"][i][: n[i]]
        assert (np.diff(p) > 0).all()
        assert (arrays["masked_lm_positions"][i][n[i]:] == 0).all()
        assert (arrays["masked_lm_ids"][i][n[i]:] == 0).all()
    is_mask = shown == tokenizer.mask_id
    is_same = shown == originals
    is_random = ~is_mask & ~is_same
    total = len(shown)
    assert abs(is_mask.mean() - 0.8) < 0.02, is_mask.mean()
    assert abs(is_same.mean() - 0.1) < 0.015
    assert abs(is_random.mean() - 0.1) < 0.015
    assert total > 5000
    # Unmasked positions are never [MASK].
    unmasked = arrays["input_ids"].copy()
    unmasked[rows, positions] = -1
    assert not (unmasked == tokenizer.mask_id).any()


@pytest.mark.parametrize("masked_lm_prob,tolerance", [(0.02, 0.015), (0.15, 0.03)])
def test_ngram_lengths_follow_inverse_n(documents, tokenizer, masked_lm_prob, tolerance):
    """n is drawn with p(n) = (1/n) / (1 + 1/2 + 1/3). Spans overlapping earlier ones are skipped, which favours
    short n-grams a little as more of the text is covered: measured at a low masking rate the shares are
    those of the draw; at the usual 15% they stay within 3 points of it."""
    options = cpd.MaskingOptions(max_seq_length=512, max_predictions_per_seq=10 ** 6,
                                 masked_lm_prob=masked_lm_prob, ngram=3)
    maker = cpd.InstanceMaker(tokenizer, options, 0)
    rng = random.Random(0)
    counts = collections.Counter()
    for doc in documents:
        sentences = maker.tokenize_document(doc)
        half = len(sentences) // 2
        first, second = [t for s in sentences[:half] for t in s], [t for s in sentences[half:] for t in s]
        tokens = [tokenizer.cls_id, *first, tokenizer.sep_id, *second, tokenizer.sep_id]
        word_starts = set(maker.word_groups(tokens)[0])
        # Word starts as an independent check sees them: "▁" pieces, punctuation, and pieces after [CLS]/[SEP].
        pieces = tokenizer.convert_ids_to_tokens(tokens)
        for position, piece in enumerate(pieces[1:], start=1):
            if piece not in ("[CLS]", "[SEP]"):
                expected = piece.startswith("▁") or piece in string.punctuation or \
                    pieces[position - 1] in ("[CLS]", "[SEP]") or piece.startswith("<")
                assert (position in word_starts) == expected, (position, piece)
        for begin, end in maker.choose_spans(tokens, rng):
            assert begin in word_starts and (end in word_starts or pieces[end] in ("[SEP]",))
            assert tokenizer.sep_id not in tokens[begin:end]  # one n-gram never crosses segments
            counts[sum(1 for p in range(begin, end) if p in word_starts)] += 1
    total = sum(counts.values())
    expected = {1: 6 / 11, 2: 3 / 11, 3: 2 / 11}
    assert set(counts) <= {1, 2, 3} and total > 3000
    for n, p in expected.items():  # binomial sd < 0.01 at this count
        assert abs(counts[n] / total - p) < tolerance, (n, counts[n] / total, p)
    print("n-gram shares:", {n: round(counts[n] / total, 4) for n in sorted(counts)}, "of", total)


def _config_args(spm_path, inputs, output, *extra):
    return ["--input_file", inputs, "--output_file", str(output), "--spm_model_file", spm_path,
            "--max_seq_length", str(SEQ), "--dupe_factor", "2", "--progress", "false", *extra]


def _read_records(data):
    """Rows in the data set's file order (MindDataset without shuffle is ordered)."""
    import mindspore.dataset as ds
    files = dataset.resolve_mindrecord_files(data)
    return list(ds.MindDataset(files, shuffle=False).create_dict_iterator(output_numpy=True))


def _row_key(row):
    return b"".join(np.asarray(row[name]).tobytes() for name in schema.PRETRAINING.names)


def test_same_records_for_any_worker_count_and_file_size(tmp_path, spm_path, assets, capsys):
    import mindspore.dataset as ds

    inputs = f"{assets}/pretrain/bert_sample_text.txt,{assets}/derived/squad_v1.1_dev_contexts_corpus.txt"
    one, two, small = tmp_path / "one.mindrecord", tmp_path / "two.mindrecord", tmp_path / "small.mindrecord"
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    assert cpd.main(_config_args(spm_path, inputs, one, "--dupe_factor", "1", "--num_workers", "1")) == 0
    assert "summary: documents=" in capsys.readouterr().out
    # the pool workers' signal settings stay theirs (was: one worker's run in-process ignored Ctrl-C from then on)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert cpd.main(_config_args(spm_path, inputs, two, "--dupe_factor", "1", "--num_workers", "2")) == 0
    rows_one, rows_two = _read_records(one), _read_records(two)
    assert len(rows_one) == len(rows_two) > 1000
    assert [_row_key(r) for r in rows_one] == [_row_key(r) for r in rows_two]
    # Files of about 400 records (cut between documents) instead of one: the same records in the same order.
    assert cpd.main(_config_args(spm_path, inputs, small, "--dupe_factor", "1", "--num_workers", "2",
                                 "--records_per_file", "400")) == 0
    assert [_row_key(r) for r in _read_records(small)] == [_row_key(r) for r in rows_one]
    files = dataset.load_data_meta(small)["files"]
    assert files == [f"small.mindrecord{i:05d}" for i in range(len(files))]
    sizes = [ds.MindDataset([str(tmp_path / name)]).get_dataset_size() for name in files]  # each file alone
    assert sum(sizes) == len(rows_one) and abs(len(files) - len(rows_one) / 400) <= 2
    assert max(sizes) < 2 * 400, sizes  # a document here makes at most ~70 records
    names = {p.name for p in tmp_path.iterdir()}
    assert {"one.mindrecord00000", "one.mindrecord00000.db", "one.mindrecord.meta.json"} <= names
    assert not [n for n in names if "tmp" in n]


def test_seed_changes_records(documents, tokenizer):
    options = cpd.MaskingOptions(max_seq_length=SEQ)
    first = make_instances(documents[:20], tokenizer, options, 1, random_seed=1)
    again = make_instances(documents[:20], tokenizer, options, 1, random_seed=1)
    other = make_instances(documents[:20], tokenizer, options, 1, random_seed=2)
    np.testing.assert_array_equal(first["input_ids"], again["input_ids"])
    assert not np.array_equal(first["masked_lm_positions"], other["masked_lm_positions"])


def test_chinese_wordpiece_corpus(tmp_path, assets):
    out = tmp_path / "zh.mindrecord"
    args = ["--input_file", str(assets / "pretrain" / "albert_zh_news_zh_1.txt"), "--output_file", str(out),
            "--vocab_file", str(assets / "tokenizer" / "albert_zh_vocab.txt"), "--max_seq_length", "128",
            "--dupe_factor", "1", "--progress", "false"]
    assert cpd.main(args) == 0
    rows = _read_records(out)
    assert len(rows) > 20
    vocab = FullTokenizer(str(assets / "tokenizer" / "albert_zh_vocab.txt"))
    assert all(r["input_ids"][0] == vocab.cls_id for r in rows)


def _write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_bad_corpora_and_options_are_user_errors_that_write_nothing(tmp_path, spm_path):
    out = tmp_path / "o.mindrecord"
    empty = _write(tmp_path / "empty.txt", "\n\n  \n")
    with pytest.raises(UserError, match="empty corpus"):
        cpd.main(_config_args(spm_path, empty, out))
    short = _write(tmp_path / "short.txt", "\n\nOnly one sentence here.\n")
    with pytest.raises(UserError, match=r"short\.txt line 3"):
        cpd.main(_config_args(spm_path, short, out))
    with pytest.raises(UserError, match="nothing matches"):
        cpd.main(_config_args(spm_path, str(tmp_path / "missing*.txt"), out))
    with pytest.raises(UserError, match="masked_lm_prob"):
        cpd.main(_config_args(spm_path, short, out, "--masked_lm_prob", "1.5"))
    assert not any(tmp_path.glob("o.mindrecord*"))
    assert run_cli(cpd.main, _config_args(spm_path, short, out, "--dupe_factr", "2")) == 2


def test_existing_output_and_interrupted_write(tmp_path, spm_path, assets, monkeypatch):
    corpus = str(assets / "pretrain" / "bert_sample_text.txt")
    out = tmp_path / "o.mindrecord"
    assert cpd.main(_config_args(spm_path, corpus, out)) == 0
    written = tmp_path / "o.mindrecord00000"
    before = written.read_bytes()
    with pytest.raises(UserError, match="already exists.*--overwrite"):
        cpd.main(_config_args(spm_path, corpus, out))
    assert written.read_bytes() == before

    from mindspore import mindrecord

    def fail(self, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mindrecord.FileWriter, "commit", fail)
    with pytest.raises(KeyboardInterrupt):
        cpd.main(_config_args(spm_path, corpus, tmp_path / "new.mindrecord"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o.mindrecord.meta.json", "o.mindrecord00000",
                                                          "o.mindrecord00000.db"]
    monkeypatch.undo()
    assert cpd.main(_config_args(spm_path, corpus, out, "--overwrite", "true", "--random_seed", "3")) == 0
    assert len(_read_records(out)) > 0


NO_SPACE = (r"no space left on the disk for {output}: [\d.]+ [kM]B free in {folder}, the data needs about \d+ kB and "
            r"MindRecord's writer stops with less than 10 MB free; free some space or choose another output_file")


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs (a full disk) needs root")
def test_a_full_disk_is_one_line_and_leaves_the_disk_as_it_was(tmp_path, spm_path, assets):
    """A 5 MB disk: MindRecord's writer refuses to write with less than 10 MB free, a RuntimeError with its C++
    call stack that ended the run in a traceback. Now one line naming the output, the space free and the space
    needed; the folder the run created and its staged files are gone, the disk's other files untouched."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(disk)], check=True)
    try:
        (disk / "mine.txt").write_text("kept")
        output = disk / "data" / "pt.mindrecord"
        done = subprocess.run([sys.executable, "-m", "src.create_pretraining_data",
                               *_config_args(spm_path, str(assets / "pretrain" / "bert_sample_text.txt"), output)],
                              cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
        lines = [line for line in done.stderr.splitlines() if line.strip() and not line.startswith("[WARNING]")]
        assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
        assert re.fullmatch("error: " + NO_SPACE.format(output=re.escape(str(output)), folder=re.escape(str(disk))),
                            lines[0]), lines[0]
        assert [p.name for p in disk.iterdir()] == ["mine.txt"]
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_no_space_from_a_write_of_ours_is_the_same_line(tmp_path, spm_path, assets, monkeypatch):
    """ENOSPC raised by a write (an OSError, here from the writer's commit) reads the same, nothing left behind."""
    from mindspore import mindrecord

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "o.mindrecord00000"))

    monkeypatch.setattr(mindrecord.FileWriter, "commit", full)
    output = tmp_path / "out" / "o.mindrecord"
    with pytest.raises(UserError) as err:
        cpd.main(_config_args(spm_path, str(assets / "pretrain" / "bert_sample_text.txt"), output))
    assert re.fullmatch(NO_SPACE.format(output=re.escape(str(output)), folder=re.escape(str(tmp_path))), str(err.value))
    assert list(tmp_path.iterdir()) == []


def test_a_folder_of_input_skips_the_files_the_tools_write_there_logs_included(tmp_path):
    """The docs' layout keeps data/corpus.txt beside data/logs/: the second run over the folder read the first's
    logs/create_pretraining_data.log as corpus text."""
    from src.data.input_text import resolve_input_files

    (tmp_path / "corpus.txt").write_text("One sentence. Two sentences.\n")
    for name in ("logs/create_pretraining_data.log", "train.mindrecord00000", "train.mindrecord00000.db",
                 "train.mindrecord.meta.json", ".albert-run.lock"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("written by the tools")
    (tmp_path / "notes" / "logs.txt").parent.mkdir()
    (tmp_path / "notes" / "logs.txt").write_text("the user's text")
    assert resolve_input_files(str(tmp_path)) == [tmp_path / "corpus.txt", tmp_path / "notes" / "logs.txt"]


def test_text_the_vocabulary_does_not_know_is_warned_about(tmp_path, assets, spm_path, capsys):
    """Chinese news through the English 30k vocabulary made data of which 44% of the tokens are <unk>, silently."""
    chinese = assets / "pretrain" / "albert_zh_news_zh_1.txt"
    assert cpd.main(_config_args(spm_path, str(chinese), tmp_path / "zh.mindrecord", "--dupe_factor", "1")) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "unknown to the vocabulary" in line]
    assert len(warned) == 1 and re.match(r"warning: [4-9]\d% of the tokens are unknown to the vocabulary", warned[0])
    english = assets / "pretrain" / "bert_sample_text.txt"
    assert cpd.main(_config_args(spm_path, str(english), tmp_path / "en.mindrecord", "--dupe_factor", "1")) == 0
    assert "unknown to the vocabulary" not in capsys.readouterr().err
