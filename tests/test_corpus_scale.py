"""Corpus-scale pretraining data: input formats, the sentence rule, and parts made by separate runs.

Expected sentences are written by hand; record equality is checked between runs that must agree by design (the
same sentences through text, gzip, bzip2 and JSON lines; the union of parts against one unsharded run), the
records read back through MindSpore's own MindDataset.
"""
import bz2
import collections
import gzip
import json
import shutil
from pathlib import Path

import pytest

import dataset
from model_utils.errors import UserError
from src import create_pretraining_data as cpd
from src.data.corpus import read_documents, split_sentences
from tests.pretrain_helpers import ok, pretrain, pretraining_records, run


def test_sentence_rule_on_english_text():
    text = ('Dr. Smith joined the U.S. Army in 1990. He served for 20 years! Did he retire? Yes... then he '
            'taught. J. R. R. Tolkien wrote "The Hobbit." It sold well (in Britain.) Later editions followed.\n'
            'A new paragraph starts here. e.g. lowercase after a period does not end a sentence.')
    assert split_sentences(text) == [
        "Dr. Smith joined the U.S. Army in 1990.", "He served for 20 years!", "Did he retire?",
        "Yes... then he taught.", 'J. R. R. Tolkien wrote "The Hobbit."', "It sold well (in Britain.)",
        "Later editions followed.", "A new paragraph starts here. e.g. lowercase after a period does not end a "
        "sentence."]


def test_sentence_rule_on_chinese_text():
    text = "今天天气很好。我们去公园吧！你去吗？他说：“我不去。”然后走了｡最后一句没有句号\n第二段。"
    assert split_sentences(text) == ["今天天气很好。", "我们去公园吧！", "你去吗？", "他说：“我不去。”", "然后走了｡",
                                     "最后一句没有句号", "第二段。"]


def _sentences(documents: int, per_document: int):
    """Generated documents whose sentences the rule cannot cut differently from one sentence per line."""
    words = ["river", "castle", "engine", "orchard", "library", "harbour", "valley", "market"]
    return [[f"Sentence {s} of document {d} describes the {words[(d + s) % 8]} and the {words[(d * s) % 8]} nearby."
             for s in range(per_document)] for d in range(documents)]


def _text_corpus(documents) -> str:
    return "\n\n".join("\n".join(sentences) for sentences in documents) + "\n"


def _jsonl_corpus(documents) -> str:
    return "".join(json.dumps({"id": i, "text": " ".join(s)}) + "\n" for i, s in enumerate(documents))


def _create(spm_path, inputs, output, *extra):
    argv = ["--input_file", str(inputs), "--output_file", str(output), "--spm_model_file", spm_path,
            "--max_seq_length", "64", "--max_predictions_per_seq", "10", "--dupe_factor", "2", "--progress", "false",
            *extra]
    assert cpd.main(argv) == 0
    return output


def test_compressed_and_json_lines_corpora_give_the_records_of_plain_text(tmp_path, spm_path):
    documents = _sentences(12, 9)
    plain = tmp_path / "corpus.txt"
    plain.write_text(_text_corpus(documents), encoding="utf-8")
    (tmp_path / "corpus.txt.gz").write_bytes(gzip.compress(plain.read_bytes()))
    (tmp_path / "corpus.bz2").write_bytes(bz2.compress(plain.read_bytes()))  # compression found by content
    (tmp_path / "corpus.jsonl").write_text(_jsonl_corpus(documents), encoding="utf-8")
    (tmp_path / "corpus.json.gz").write_bytes(gzip.compress(_jsonl_corpus(documents).encode("utf-8")))
    assert [d.sentences for d in read_documents([tmp_path / "corpus.jsonl"])] == documents
    expected = pretraining_records(_create(spm_path, plain, tmp_path / "out" / "plain.mindrecord"))
    assert len(expected) > 50
    for name in ("corpus.txt.gz", "corpus.bz2", "corpus.jsonl", "corpus.json.gz"):
        got = pretraining_records(_create(spm_path, tmp_path / name, tmp_path / "out" / f"{name}.mindrecord"))
        assert got == expected, name


def test_json_lines_with_another_text_field_and_forced_format(tmp_path, spm_path):
    corpus = tmp_path / "dump.txt"  # a .txt name: --input_format jsonl says what it is
    corpus.write_text("\n".join(json.dumps({"title": "t", "body": "第一句。第二句！第三句？"}) for _ in range(3)) + "\n",
                      encoding="utf-8")
    documents = list(read_documents([corpus], "jsonl", "body"))
    assert [d.sentences for d in documents] == [["第一句。", "第二句！", "第三句？"]] * 3
    assert [(d.doc_index, d.first_line) for d in documents] == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(UserError, match=r"dump\.txt line 1: no 'text' or 'content' field \(keys: title, body\)"):
        _create(spm_path, corpus, tmp_path / "a.mindrecord", "--input_format", "jsonl")
    assert not (tmp_path / "a.mindrecord.meta.json").exists()


@pytest.fixture(scope="module")
def parts(tmp_path_factory, assets, spm_path):
    """One unsharded run and the same data made as 3 parts (one of them with 2 workers) in one folder."""
    root = tmp_path_factory.mktemp("parts")
    inputs = f"{assets}/pretrain/bert_sample_text.txt,{assets}/derived/squad_v1.1_dev_contexts_corpus.txt"
    whole = _create(spm_path, inputs, root / "whole" / "wiki.mindrecord", "--dupe_factor", "1")
    for index, workers in ((0, "1"), (1, "2"), (2, "1")):
        _create(spm_path, inputs, root / "parts" / "wiki.mindrecord", "--dupe_factor", "1", "--num_shards", "3",
                "--shard_index", str(index), "--num_workers", workers, "--records_per_file", "300")
    return {"whole": whole, "folder": root / "parts"}


def test_the_union_of_parts_holds_the_records_of_one_run(parts):
    folder = parts["folder"]
    whole, union = pretraining_records(parts["whole"]), pretraining_records(folder)
    assert len(whole) > 1000
    assert collections.Counter(union) == collections.Counter(whole)
    by_part = [set(pretraining_records(folder / f"wiki-{k:05d}-of-00003.mindrecord")) for k in range(3)]
    assert all(len(p) > len(whole) / 6 for p in by_part)  # every part got a fair share
    assert not (by_part[0] & by_part[1] or by_part[1] & by_part[2] or by_part[0] & by_part[2])
    meta = dataset.load_data_meta(folder)
    assert meta["num_records"] == len(whole) == dataset.count_rows(folder)
    assert len(meta["data_sets"]) == 3 and meta["max_seq_length"] == 64


def test_training_on_the_folder_of_parts_reads_their_union(parts, tmp_path):
    done = ok(run(pretrain({"train": parts["folder"]}, tmp_path, "--train_steps", "1", "--batch_size", "8")))
    assert f"plan: {len(pretraining_records(parts['whole']))} rows;" in done.stdout


def _copy_parts(parts, tmp_path: Path, edit=None, drop=()) -> Path:
    """The folder of parts copied, with `edit(meta)` applied to part 2's meta and the parts in `drop` left out."""
    folder = tmp_path / "copy"
    shutil.copytree(parts["folder"], folder)
    for index in drop:
        for path in folder.glob(f"wiki-{index:05d}-of-00003.*"):
            path.unlink()
    if edit:
        meta_file = folder / "wiki-00002-of-00003.mindrecord.meta.json"
        meta = json.loads(meta_file.read_text())
        edit(meta)
        meta_file.write_text(json.dumps(meta))
    return folder


def test_mixed_missing_or_duplicate_parts_are_refused(parts, tmp_path):
    first, third = "wiki-00000-of-00003.mindrecord.meta.json", "wiki-00002-of-00003.mindrecord.meta.json"
    cases = [
        (dict(drop=[1]), r"part 1 of 3 of wiki\.mindrecord is missing \(found parts \[0, 2\]\)"),
        (dict(edit=lambda m: m["options"].update(masked_lm_prob=0.2)),
         rf"{first} and .*{third} were made with different settings \(options\.masked_lm_prob 0\.15 vs 0\.2\)"),
        (dict(edit=lambda m: m["tokenizer"].update(model_sha256="0" * 16)),
         rf"{first} and .*{third} were made with different settings \(tokenizer"),
        (dict(edit=lambda m: m["options"].update(random_seed=7)),
         r"are parts of wiki\.mindrecord made differently \(random_seed 12345 vs 7\)"),
        (dict(edit=lambda m: m["part"].update(index=1)), r"are both part 1 of wiki\.mindrecord"),
    ]
    for kwargs, message in cases:
        folder = _copy_parts(parts, tmp_path, **kwargs)
        for reader in (dataset.resolve_mindrecord_files, dataset.load_data_meta):
            with pytest.raises(UserError, match=message):
                reader(folder)
        shutil.rmtree(folder)


def test_no_file_holds_more_than_the_record_cap(tmp_path, monkeypatch, assets, spm_path):
    """MindRecord builds a file's index in memory when the file closes, so files are capped (65,536 records; 40
    here): partitions fill round-robin, then the next group of files opens. Every record is read back once, in the
    order of the input (was: partitions read one after the other, so evaluation outputs and predictions.tsv rows
    followed the files, not the examples), also for data whose .meta.json predates partition_number."""
    import mindspore.dataset as ds
    from src import create_finetune_data as cfd
    from src.data import mindrecord_io, pipelines
    monkeypatch.setattr(mindrecord_io, "MAX_RECORDS_PER_FILE", 40)
    lines = (assets / "glue" / "MRPC" / "train.tsv").read_text(encoding="utf-8-sig").splitlines(keepends=True)
    (tmp_path / "mrpc.tsv").write_text("".join(lines[:151]), encoding="utf-8")
    labels = [int(line.split("\t")[0]) for line in lines[1:151]]
    for partitions, names in ((1, ["", "1", "2", "3"]), (2, ["0", "1", "2", "3"])):
        output = tmp_path / f"p{partitions}" / "mrpc.mindrecord"
        assert cfd.main(["--task_name", "mrpc", "--input_file", str(tmp_path / "mrpc.tsv"), "--spm_model_file",
                         spm_path, "--output_file", str(output), "--partition_number", str(partitions)]) == 0
        meta = dataset.load_data_meta(output)
        assert meta["files"] == [f"mrpc.mindrecord{suffix}" for suffix in names]
        counts = [ds.MindDataset([str(output.parent / name)]).get_dataset_size() for name in meta["files"]]
        assert max(counts) == 40 and sum(counts) == meta["num_records"] == 150
        assert pipelines.read_column_as_made(output, "label_ids").tolist() == labels
        assert meta["partition_number"] == partitions and pipelines.creation_order(output)[1]
        earlier = {key: value for key, value in meta.items() if key != "partition_number"}
        mindrecord_io.meta_path(output).write_text(json.dumps(earlier), encoding="utf-8")
        assert pipelines.read_column_as_made(output, "label_ids").tolist() == labels
        files = dataset.resolve_mindrecord_files(output)  # named in another order: still the data set's order
        assert pipelines.creation_order(files[::-1])[0].tolist() == pipelines.creation_order(output)[0].tolist()
        assert sorted(dataset.read_column(output, "label_ids").tolist()) == sorted(labels)  # file order
