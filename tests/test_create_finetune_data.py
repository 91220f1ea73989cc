"""GLUE, LCQMC and RACE conversion on the real files; records checked against HF's AlbertTokenizer encodings."""
import json
import re

import numpy as np
import pytest

from model_utils.errors import UserError, run_cli
from src import create_finetune_data as cfd
from src.data import tsv_tasks
from src.data import features as text_features
from tests.finetune_helpers import mindrecord_rows

SEQ = 128
GLUE_DUMMY = {  # task -> (folder under glue/hf_dummy, file per split)
    "cola": ("cola/CoLA", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}),
    "sst-2": ("sst2/SST-2", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}),
    "mrpc": ("mrpc/MRPC", {"train": "train", "test": "test"}),
    "qqp": ("qqp/QQP", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}),
    "mnli": ("mnli/MNLI", {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"}),
    "mnli-mm": ("mnli/MNLI", {"dev": "dev_mismatched.tsv", "test": "test_mismatched.tsv"}),
    "qnli": ("qnli/QNLI", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}),
    "rte": ("rte/RTE", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}),
    "wnli": ("wnli/WNLI", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}),
    "sts-b": ("stsb/SST-B", {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}),
}
HEADERLESS = {("cola", "train"), ("cola", "dev")}


def _rows(path):
    """Independent reading: non-empty lines split on tabs, BOM removed."""
    lines = path.read_text(encoding="utf-8-sig").split("\n")
    return [line.rstrip("\r").split("\t") for line in lines if line.strip()]


def _cases():
    return [(task, split) for task, (_, files) in GLUE_DUMMY.items() for split in files]


@pytest.mark.parametrize("task,split", _cases())
def test_every_glue_task_reads_real_rows(assets, task, split):
    folder, files = GLUE_DUMMY[task]
    path = assets / "glue" / "hf_dummy" / folder / files[split]
    examples = list(cfd.read_tsv_examples(task, path, split))
    rows = _rows(path)
    data_rows = rows if (task, split) in HEADERLESS else rows[1:]
    assert len(examples) == len(data_rows) >= 1
    labels = tsv_tasks.label_list(task)
    for example, row in zip(examples, data_rows):
        assert example.text_a in row and (example.text_b is None or example.text_b in row)
        if split == "test":
            assert example.label is None
        elif labels is None:
            assert float(example.label) == float(row[-1])
        else:
            assert example.label in labels and example.label in row


def test_cola_full_release(assets):
    folder = assets / "glue" / "CoLA"
    for name, split in [("in_domain_train.tsv", "train"), ("in_domain_dev.tsv", "dev"),
                        ("out_of_domain_dev.tsv", "dev")]:
        examples = list(cfd.read_tsv_examples("cola", folder / name, split))
        rows = _rows(folder / name)
        assert len(examples) == len(rows)
        assert [e.label for e in examples] == [r[1] for r in rows]
        assert [e.text_a for e in examples] == [r[3] for r in rows]
    assert len(list(cfd.read_tsv_examples("cola", folder / "in_domain_train.tsv", "train"))) == 8551


def test_mrpc_full_with_bom(assets):
    folder = assets / "glue" / "MRPC"
    assert (folder / "train.tsv").read_bytes().startswith(b"\xef\xbb\xbf")
    sizes = {}
    for split in ("train", "dev", "test"):
        examples = list(cfd.read_tsv_examples("mrpc", folder / f"{split}.tsv", split))
        rows = _rows(folder / f"{split}.tsv")[1:]
        assert [(e.text_a, e.text_b) for e in examples] == [(r[3], r[4]) for r in rows]
        sizes[split] = len(examples)
    assert sizes == {"train": 3668, "dev": 408, "test": 1725}


def _args(spm_path, out, *extra):
    return ["--spm_model_file", spm_path, "--output_file", str(out), "--max_seq_length", str(SEQ), *extra]


def test_mrpc_dev_records_equal_hf_pair_encoding(tmp_path, assets, spm_path, hf, capsys):
    out = tmp_path / "mrpc_dev.mindrecord"
    args = _args(spm_path, out, "--task_name", "mrpc", "--data_dir", str(assets / "glue" / "MRPC"), "--split", "dev")
    assert cfd.main(args) == 0
    assert "wrote 408 mrpc dev records" in capsys.readouterr().out
    records = mindrecord_rows(out)
    rows = _rows(assets / "glue" / "MRPC" / "dev.tsv")[1:]
    assert len(records) == len(rows) == 408
    for record, row in zip(records, rows):
        want = hf(row[3], row[4], truncation="longest_first", max_length=SEQ, padding="max_length")
        np.testing.assert_array_equal(record["input_ids"], want["input_ids"])
        np.testing.assert_array_equal(record["segment_ids"], want["token_type_ids"])
        np.testing.assert_array_equal(record["input_mask"], want["attention_mask"])
        assert record["label_ids"] == int(row[0]) and record["is_real_example"] == 1
        assert record["label_ids"].dtype == np.int32
    meta = json.loads((tmp_path / "mrpc_dev.mindrecord.meta.json").read_text())
    assert meta["label_list"] == ["0", "1"] and meta["num_records"] == 408 and meta["max_seq_length"] == SEQ
    sources = [json.loads(line) for line in open(str(out) + ".examples.jsonl")]
    assert sources[0]["source"].endswith("dev.tsv:2") and len(sources) == 408


def test_stsb_is_regression(tmp_path, assets, spm_path):
    out = tmp_path / "stsb.mindrecord"
    data_dir = assets / "glue" / "hf_dummy" / "stsb" / "SST-B"
    assert cfd.main(_args(spm_path, out, "--task_name", "sts-b", "--data_dir", str(data_dir), "--split", "train")) == 0
    labels = [float(r["label_ids"]) for r in mindrecord_rows(out)]
    assert labels == pytest.approx([5.0, 3.8, 3.8])
    assert mindrecord_rows(out)[0]["label_ids"].dtype == np.float32


def test_task_names_as_google_and_hf_write_them(tmp_path, assets, spm_path):
    """`--task_name STSB` (Google's run_classifier lowercases it; HF writes stsb) was refused; the meta records
    the name of this package, which the runs compare."""
    out = tmp_path / "stsb.mindrecord"
    data_dir = assets / "glue" / "hf_dummy" / "stsb" / "SST-B"
    assert cfd.main(_args(spm_path, out, "--task_name", "STSB", "--data_dir", str(data_dir), "--split", "train")) == 0
    assert json.loads((tmp_path / "stsb.mindrecord.meta.json").read_text())["task_name"] == "sts-b"
    assert tsv_tasks.task_named("MRPC").name == "mrpc" and tsv_tasks.label_list("SST2") == ["0", "1"]


def test_race_reads_all_real_files(assets):
    root = assets / "race" / "RACE"
    files = [p for split in ("train", "dev", "test") for p in cfd.race_files(root, split)]
    assert len(files) == 15
    for path in files:
        raw = json.loads(path.read_text(encoding="utf-8"))
        examples = cfd.read_race_examples(path)
        assert len(examples) == len(raw["answers"]) >= 1
        assert [e.label for e in examples] == raw["answers"]
        assert all(e.article == raw["article"] and len(e.choices) == 4 for e in examples)


def test_race_records(tmp_path, assets, spm_path, hf):
    out = tmp_path / "race_dev.mindrecord"
    seq, qa = 256, 64
    args = ["--spm_model_file", spm_path, "--output_file", str(out), "--task_name", "race", "--data_dir",
            str(assets / "race" / "RACE"), "--split", "dev", "--max_seq_length", str(seq), "--max_qa_length", str(qa)]
    assert cfd.main(args) == 0
    records = mindrecord_rows(out)
    examples = [e for p in cfd.race_files(assets / "race" / "RACE", "dev") for e in cfd.read_race_examples(p)]
    assert len(records) == len(examples)
    assert records[0]["input_ids"].shape == (4, seq)
    for record, example in zip(records, examples):
        assert int(record["label_ids"]) == "ABCD".index(example.label)
        article = hf.encode(example.article, add_special_tokens=False)
        for choice in range(4):
            option = example.choices[choice]
            text = example.question.replace("_", option) if "_" in example.question else \
                f"{example.question} {option}"
            qa_ids = hf.encode(text, add_special_tokens=False)[-qa:]
            want = [2] + article[: seq - 3 - len(qa_ids)] + [3] + qa_ids + [3]
            got = record["input_ids"][choice]
            np.testing.assert_array_equal(got[: len(want)], want)
            assert (got[len(want):] == 0).all()
            assert record["segment_ids"][choice].sum() == len(qa_ids) + 1


def test_race_blank_filling():
    example = text_features.RaceExample("g", "art", "The boy went to _ yesterday.", ["a", "b", "c", "d"], "A", "x")
    assert example.question_with("school") == "The boy went to school yesterday."
    assert text_features.RaceExample("g", "a", "Why?", [], "A", "x").question_with("Because.") == "Why? Because."


def test_lcqmc_with_and_without_header(tmp_path, assets):
    zh_vocab = str(assets / "tokenizer" / "albert_zh_vocab.txt")
    body = "喜欢打篮球的男生喜欢什么样的女生\t爱打篮球的男生喜欢什么样的女生\t1\n我手机丢了，我想换个手机\t我想买个新手机，求推荐\t1\n大家觉得她好看吗\t大家觉得跑男好看吗？\t0\n"
    for name, text in [("train.txt", body), ("header.txt", "text_a\ttext_b\tlabel\n" + body)]:
        (tmp_path / name).write_text(text, encoding="utf-8")
        out = tmp_path / f"{name}.mindrecord"
        args = ["--task_name", "lcqmc", "--data_dir", str(tmp_path), "--input_file", str(tmp_path / name),
                "--vocab_file", zh_vocab, "--output_file", str(out), "--max_seq_length", "32"]
        assert cfd.main(args) == 0
        records = mindrecord_rows(out)
        assert [int(r["label_ids"]) for r in records] == [1, 1, 0]
        assert records[0]["input_ids"][1] != 0 and records[0]["segment_ids"].sum() > 0


def _bad(tmp_path, spm_path, task, text, match, name="train.tsv", split="train"):
    (tmp_path / name).write_text(text, encoding="utf-8")
    out = tmp_path / "bad.mindrecord"
    with pytest.raises(UserError, match=match):
        cfd.main(_args(spm_path, out, "--task_name", task, "--data_dir", str(tmp_path), "--split", split,
                       "--input_file", str(tmp_path / name)))
    assert not list(tmp_path.glob("bad.mindrecord*"))


def test_bad_tsv_input(tmp_path, spm_path):
    header = "index\tsentence1\tsentence2\tlabel\n"
    _bad(tmp_path, spm_path, "rte", header + "0\ta\tb\tentailment\n1\tonly two\n", r"train\.tsv line 3: expected")
    _bad(tmp_path, spm_path, "rte", header + "0\ta\tb\tmaybe\n", r"train\.tsv line 2: unknown label 'maybe'")
    _bad(tmp_path, spm_path, "mnli", header + "0\ta\tb\tentailment\n", r"line 1: header column 9")
    _bad(tmp_path, spm_path, "sts-b", "i\tg\tf\ty\to\ts1\ts2\tsentence1\tsentence2\tscore\n"
         "0\tg\tf\ty\to\ts\ts\ta\tb\thigh\n", r"line 2: score 'high' is not a finite number")
    for score in ("nan", "inf"):  # float() takes them; MindRecord's writer then aborted the process (exit 134)
        _bad(tmp_path, spm_path, "sts-b", "i\tg\tf\ty\to\ts1\ts2\tsentence1\tsentence2\tscore\n"
             f"0\tg\tf\ty\to\ts\ts\ta\tb\t{score}\n", rf"line 2: score '{score}' is not a finite number")
    _bad(tmp_path, spm_path, "rte", header, r"no examples")
    # past the decoder's first chunk: its offset (byte 515 of some chunk) was given as the file's
    rows = "".join(f"{i}\ta\tb\tentailment\n" for i in range(3000))
    (tmp_path / "latin1.tsv").write_bytes((header + rows).encode() + "0\tcaf\xe9\tb\tentailment\n".encode("latin-1"))
    with pytest.raises(UserError, match=r"latin1\.tsv line 3002: not UTF-8 text \(invalid continuation byte at byte "
                                        r"5 of the line\)"):
        list(cfd.read_tsv_examples("rte", tmp_path / "latin1.tsv", "train"))
    with pytest.raises(UserError, match="not found"):
        list(cfd.read_tsv_examples("rte", tmp_path / "missing.tsv", "train"))


def test_bad_race_input(tmp_path, spm_path):
    level = tmp_path / "train" / "high"
    level.mkdir(parents=True)
    good = {"article": "A.", "questions": ["Q?"], "options": [["a", "b", "c", "d"]], "answers": ["B"]}
    cases = [('{"article": "A.",\n "questions": [}', r"1\.txt line 2: malformed json"),
             (json.dumps({k: v for k, v in good.items() if k != "options"}), "missing field 'options'"),
             (json.dumps(dict(good, answers=["E"])), "question 0: unknown answer 'E'"),
             (json.dumps(dict(good, options=[["a", "b"]])), "question 0: expected 4 option strings"),
             (json.dumps(dict(good, answers=["A", "B"])), "equal length")]
    for text, match in cases:
        (level / "1.txt").write_text(text, encoding="utf-8")
        with pytest.raises(UserError, match=match):
            cfd.main(_args(spm_path, tmp_path / "r.mindrecord", "--task_name", "race", "--data_dir", str(tmp_path)))
    assert not list(tmp_path.glob("r.mindrecord*"))
    with pytest.raises(UserError, match="no RACE files"):
        cfd.race_files(tmp_path, "dev")
    with pytest.raises(UserError, match=r"^RACE is read from --data_dir, the RACE folder \(holding train/dev/test\), "
                                        r"not --input_file: drop it$"):  # was ignored
        cfd.main(_args(spm_path, tmp_path / "r.mindrecord", "--task_name", "race", "--data_dir", str(tmp_path),
                       "--input_file", str(level / "1.txt")))
    # the train folder itself with --split dev was read as the dev split
    with pytest.raises(UserError, match=rf"^{tmp_path / 'train'} is RACE's train split but --split is dev"):
        cfd.race_files(tmp_path / "train", "dev")


def test_existing_output_is_kept(tmp_path, assets, spm_path):
    out = tmp_path / "o.mindrecord"
    data_dir = assets / "glue" / "hf_dummy" / "wnli" / "WNLI"
    args = _args(spm_path, out, "--task_name", "wnli", "--data_dir", str(data_dir))
    assert cfd.main(args) == 0
    before = out.read_bytes()
    assert run_cli(cfd.main, args) == 2
    assert out.read_bytes() == before
    assert cfd.main(args + ["--overwrite", "true"]) == 0
    assert run_cli(cfd.main, args + ["--task_name", "glue"]) == 2  # not a choice


def test_text_the_vocabulary_does_not_know_is_warned_about(tmp_path, assets, spm_path, capsys):
    """LCQMC (Chinese) through the English 30k pieces made records mostly of <unk>, without a word: the same
    warning as create_pretraining_data's, and the share in the meta; the Chinese vocabulary gets none."""
    lines = [line for line in (assets / "pretrain" / "albert_zh_news_zh_1.txt").read_text(encoding="utf-8")
             .splitlines() if len(line) > 10][:6]
    (tmp_path / "train.txt").write_text("".join(f"{a}\t{b}\t1\n" for a, b in zip(lines[::2], lines[1::2])),
                                        encoding="utf-8")
    common = ["--task_name", "lcqmc", "--input_file", str(tmp_path / "train.txt"), "--max_seq_length", "64"]
    english = ["--spm_model_file", spm_path, "--output_file", str(tmp_path / "en.mindrecord")]
    assert cfd.main(common + english) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "unknown to the vocabulary" in line]
    assert len(warned) == 1 and re.match(r"warning: [2-9]\d% of the tokens are unknown to the vocabulary", warned[0])
    assert json.loads((tmp_path / "en.mindrecord.meta.json").read_text())["unknown_tokens_fraction"] > 0.2
    chinese = ["--vocab_file", str(assets / "tokenizer" / "albert_zh_vocab.txt"),
               "--output_file", str(tmp_path / "zh.mindrecord")]
    assert cfd.main(common + chinese) == 0
    assert "unknown to the vocabulary" not in capsys.readouterr().err
    assert json.loads((tmp_path / "zh.mindrecord.meta.json").read_text())["unknown_tokens_fraction"] < 0.05


def test_race_with_one_level_warns_naming_the_missing_folder(tmp_path, assets, spm_path, capsys):
    """was: a data_dir with only dev/high (a partial download) made data silently; RACE has high and middle."""
    import shutil
    shutil.copytree(assets / "race" / "RACE" / "dev" / "high", tmp_path / "RACE" / "dev" / "high")
    argv = ["--task_name", "race", "--data_dir", str(tmp_path / "RACE"), "--split", "dev", "--max_seq_length", "64"]
    assert cfd.main(_args(spm_path, tmp_path / "one.mindrecord", *argv)) == 0
    expected = f"warning: no RACE files in {tmp_path / 'RACE' / 'dev' / 'middle'} (RACE has levels high and middle)"
    assert expected in capsys.readouterr().err
    assert any("middle" in w for w in json.loads((tmp_path / "one.mindrecord.meta.json").read_text())["warnings"])
    argv[3] = str(assets / "race" / "RACE")  # both levels: no such warning
    assert cfd.main(_args(spm_path, tmp_path / "both.mindrecord", *argv)) == 0
    assert "no RACE files" not in capsys.readouterr().err
