"""SQuAD features on the real dev files: answer alignment, windows, p_mask, eval maps, v2, bad input."""
import json
import re
import string

import numpy as np
import pytest

from model_utils.errors import UserError, run_cli
from src import create_squad_data as csd
from src.data import schema
from src.data import features as text_features
from src.data.tokenization import FullTokenizer
from tests.finetune_helpers import mindrecord_rows

SQUAD_FILES = ["v1.1/dev-v1.1.part1_bloomsbury.json", "v1.1/dev-v1.1.part2_bloomsbury.json",
               "v2.0/dev-v2.0.subset_Normans_Rhine.json", "v2.0/dev-v2.0.subset_Normans_ComplexityTheory.json"]


def normalize_answer(text):
    """The official SQuAD evaluation normalisation (lowercase, no punctuation/articles/extra spaces)."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split())


def test_every_gold_answer_maps_back_to_its_text(assets, tokenizer, hf):
    """Over all answers of the v1.1 dev set and the v2.0 subsets: the pieces covering the gold characters give
    back the gold text (after SQuAD normalisation) unless the gold answer starts or ends inside a piece."""
    total, exact, inside_piece, other = 0, 0, [], []
    for name in SQUAD_FILES:
        for article in json.loads((assets / "squad" / name).read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"]:
                context = paragraph["context"]
                tokenized = text_features.tokenize_context(tokenizer, context)
                assert tokenized.ids == hf.encode(context, add_special_tokens=False)
                for qa in paragraph["qas"]:
                    for answer in qa["answers"]:
                        start, text = answer["answer_start"], answer["text"]
                        first, last = tokenized.token_span(start, start + len(text))
                        got = context[tokenized.char_spans[first][0]:tokenized.char_spans[last][1]]
                        total += 1
                        if normalize_answer(got) == normalize_answer(text):
                            exact += 1
                        elif text in got and len(got) > len(text):
                            inside_piece.append((text, got))
                        else:
                            other.append((text, got))
    rate = exact / total
    print(f"answer alignment: {exact}/{total} = {rate:.4%}; gold inside a piece: {len(inside_piece)}; "
          f"other: {len(other)}")
    assert total > 36000
    assert rate > 0.997
    assert not other, other[:10]


def _read_examples(path, is_training, v2=False):
    """(examples, skipped answers) of a SQuAD file."""
    stats = {"skipped_examples": 0}
    examples = list(csd.read_squad_examples(path, is_training, v2, stats))
    return examples, stats["skipped_examples"]


def reference_is_max_context(windows, current, position):
    """The former (quadratic) rule, kept as the reference: whether window `current` gives token `position` the most
    context on both sides, the first best window on a tie (BERT's _check_is_max_context)."""
    best, best_score = None, None
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best, best_score = index, score
    return best == current


def reference_owners(windows, num_tokens):
    return [next(i for i in range(len(windows)) if reference_is_max_context(windows, i, position))
            for position in range(num_tokens)]


def test_max_context_windows_equal_the_former_rule_on_real_contexts(assets, tokenizer):
    """Every paragraph of a v1.1 and a v2.0 dev file, under windows and strides that make many overlaps."""
    contexts = 0
    for name in SQUAD_FILES[0], SQUAD_FILES[2]:
        for article in json.loads((assets / "squad" / name).read_text(encoding="utf-8"))["data"]:
            for paragraph in article["paragraphs"][:6]:
                ids = text_features.tokenize_context(tokenizer, paragraph["context"]).ids
                for window, stride in ((64, 16), (37, 5), (128, 128), (20, 1)):
                    windows = text_features.doc_windows(len(ids), window, stride)
                    assert text_features.max_context_windows(windows, len(ids)) == reference_owners(windows, len(ids))
                contexts += 1
    assert contexts > 50


def test_max_context_is_linear_in_the_windows():
    """A 400,000-token context in 300-token windows 100 apart (~4,000 windows): the former rule scored ~4,000
    windows for each of 1.2 million window tokens (minutes); one pass takes about a second."""
    import time

    windows = text_features.doc_windows(400_000, 300, 100)
    started = time.perf_counter()
    owners = text_features.max_context_windows(windows, 400_000)
    assert time.perf_counter() - started < 10
    probe = [0, 150, 151, 199_999, 399_999]  # against the reference rule at a few positions
    assert [owners[p] for p in probe] == [
        next(i for i in range(len(windows)) if reference_is_max_context(windows, i, p)) for p in probe]


def _examples(assets, name, is_training, v2=False):
    return _read_examples(assets / "squad" / name, is_training, v2)


def test_training_features_point_at_the_answer(assets, tokenizer):
    examples, skipped = _examples(assets, "../derived/squad_v1.1_dev_sample_SuperBowl50_5paras.json", True)
    assert skipped == 0 and len(examples) == 117
    options = text_features.SquadOptions(max_seq_length=128, doc_stride=32, max_query_length=24, is_training=True)
    in_window = exact = windows = 0
    for index, example in enumerate(examples):
        features = list(text_features.example_features(example, index, tokenizer, options))
        windows += len(features)
        found = False
        for record, fmap in features:
            start, end = int(record["start_positions"]), int(record["end_positions"])
            if record["is_impossible"]:
                assert start == end == 0
                continue
            found = True
            assert record["p_mask"][start] == 0 and record["p_mask"][end] == 0 and start <= end
            span = fmap["token_to_char_span"]
            text = example.context[span[start][0]:span[end][1]]
            # exact, or the gold answer is part of one piece ("gold" of the piece "golden")
            assert normalize_answer(text) == normalize_answer(example.answer_text) or example.answer_text in text
            exact += normalize_answer(text) == normalize_answer(example.answer_text)
        in_window += found
    assert in_window == len(examples) and exact >= len(examples) - 3
    assert windows > 1.5 * len(examples)  # 128 tokens force several windows on most paragraphs


def test_feature_layout_and_windows(assets, tokenizer):
    examples, _ = _examples(assets, "../derived/squad_v1.1_dev_sample_SuperBowl50_5paras.json", False)
    options = text_features.SquadOptions(max_seq_length=96, doc_stride=40, max_query_length=16, is_training=False)
    example = examples[0]
    context = text_features.tokenize_context(tokenizer, example.context)
    features = list(text_features.example_features(example, 0, tokenizer, options))
    query = tokenizer.encode(example.question_text)[:16]
    for record, fmap in features:
        n = int(record["input_mask"].sum())
        ids = record["input_ids"]
        assert ids[0] == tokenizer.cls_id and list(ids[1:1 + len(query)]) == query
        assert ids[1 + len(query)] == tokenizer.sep_id and ids[n - 1] == tokenizer.sep_id and (ids[n:] == 0).all()
        context_positions = np.flatnonzero(record["p_mask"] == 0)
        assert context_positions[0] == 0  # [CLS] may be predicted (no answer)
        assert list(context_positions[1:]) == list(range(len(query) + 2, n - 1))
        segments = record["segment_ids"]
        assert (segments[:len(query) + 2] == 0).all() and (segments[len(query) + 2:n] == 1).all()
        words = [w for w in fmap["token_to_orig_map"] if w >= 0]
        assert words == sorted(words) and len(fmap["tokens"]) == n
    # every context token is the max-context token of exactly one window
    owners = np.zeros(len(context.ids), int)
    windows = text_features.doc_windows(len(context.ids), 96 - len(query) - 3, 40)
    for index, (start, length) in enumerate(windows):
        for i in range(start, start + length):
            owners[i] += reference_is_max_context(windows, index, i)
    assert (owners == 1).all() and len(windows) == len(features) > 2
    assert windows[-1][0] + windows[-1][1] == len(context.ids)
    assert all(b[0] - a[0] == 40 for a, b in zip(windows, windows[1:]))


def test_v2_impossible_questions(assets, tokenizer):
    examples, _ = _examples(assets, "v2.0/dev-v2.0.subset_Normans_Rhine.json", True, v2=True)
    impossible = [e for e in examples if e.is_impossible]
    assert len(impossible) > 100
    options = text_features.SquadOptions(max_seq_length=384, is_training=True)
    for example in impossible[:50]:
        for record, _ in text_features.example_features(example, 0, tokenizer, options):
            assert record["is_impossible"] == 1 and record["start_positions"] == record["end_positions"] == 0
    with pytest.raises(UserError, match="is_impossible but version_2_with_negative is false"):
        _examples(assets, "v2.0/dev-v2.0.subset_Normans_Rhine.json", True, v2=False)


def _args(spm_path, source, out, *extra):
    return ["--spm_model_file", spm_path, "--input_file", str(source), "--output_file", str(out),
            "--max_seq_length", "128", "--doc_stride", "64", *extra]


def test_eval_output_with_feature_map(tmp_path, assets, spm_path, capsys):
    source = assets / "derived" / "squad_v1.1_dev_sample_SuperBowl50_5paras.json"
    out = tmp_path / "dev.mindrecord"
    assert csd.main(_args(spm_path, source, out, "--is_training", "false")) == 0
    assert "features of 117 questions" in capsys.readouterr().out
    records = mindrecord_rows(out)
    features = [json.loads(line) for line in open(str(out) + ".features.jsonl", encoding="utf-8")]
    examples = [json.loads(line) for line in open(str(out) + ".examples.jsonl", encoding="utf-8")]
    assert set(records[0]) == set(schema.SQUAD_EVAL.names)
    assert len(records) == len(features) > len(examples) == 117
    assert [int(r["unique_ids"]) for r in records] == [f["unique_id"] for f in features]
    assert features[0]["unique_id"] == 1000000000
    tok = FullTokenizer(None, True, spm_path)
    for record, feature in zip(records, features):
        n = int(record["input_mask"].sum())
        assert tok.convert_tokens_to_ids(feature["tokens"]) == list(record["input_ids"][:n])
        example = examples[feature["example_index"]]
        assert example["qas_id"] == feature["qas_id"]
        for position, span in enumerate(feature["token_to_char_span"]):
            word = feature["token_to_orig_map"][position]
            assert (span is None) == (word < 0)
            if span is not None:  # the piece's characters lie inside its whitespace word
                assert example["context"][span[0]:span[1]] in example["doc_tokens"][word]
    meta = json.loads((tmp_path / "dev.mindrecord.meta.json").read_text())
    assert meta["num_records"] == len(records) and meta["stats"]["examples"] == 117


def test_v2_training_output_in_parts_has_impossible_features_and_no_feature_map(tmp_path, assets, spm_path, capsys):
    source = assets / "squad" / "v2.0" / "dev-v2.0.subset_Normans_Rhine.json"
    out = tmp_path / "train.mindrecord"
    args = _args(spm_path, source, out, "--is_training", "true", "--version_2_with_negative", "true",
                 "--partition_number", "2")
    assert csd.main(args) == 0
    assert "warning" not in capsys.readouterr().err
    assert not (tmp_path / "train.mindrecord.features.jsonl").exists()
    meta = json.loads((tmp_path / "train.mindrecord.meta.json").read_text())
    assert meta["files"] == ["train.mindrecord0", "train.mindrecord1"]
    assert meta["columns"] == list(schema.SQUAD_TRAIN.names)
    impossible = meta["stats"]["impossible_features"]
    assert 0 < impossible < meta["num_records"]
    assert sum(int(r["is_impossible"]) for r in mindrecord_rows(tmp_path / "train.mindrecord0")) > 0


def _bad(tmp_path, spm_path, text, match, *extra):
    source = tmp_path / "bad.json"
    source.write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match=match):
        csd.main(_args(spm_path, source, tmp_path / "o.mindrecord", *extra))
    assert not list(tmp_path.glob("o.mindrecord*"))


def test_malformed_squad_files_are_refused_by_location_and_misplaced_answers_skipped(tmp_path, spm_path):
    qa = {"id": "q1", "question": "Who?", "answers": [{"text": "Bob", "answer_start": 0}]}
    doc = {"data": [{"title": "t", "paragraphs": [{"context": "Bob went home.", "qas": [qa]}]}]}
    _bad(tmp_path, spm_path, '{"data": [\n{"paragraphs": ]}', r"bad\.json line 2: malformed json")
    _bad(tmp_path, spm_path, json.dumps({"version": "1.1"}), "missing field 'data'")
    _bad(tmp_path, spm_path, json.dumps({"data": [{"paragraphs": [{"qas": []}]}]}),
         r"data\[0\]\.paragraphs\[0\]: missing field 'context'")
    broken = json.loads(json.dumps(doc))
    del broken["data"][0]["paragraphs"][0]["qas"][0]["question"]
    _bad(tmp_path, spm_path, json.dumps(broken), r"qas\[0\]: missing field 'question'")
    broken = json.loads(json.dumps(doc))
    broken["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []
    _bad(tmp_path, spm_path, json.dumps(broken), "q1 has no answer")
    broken["data"][0]["paragraphs"][0]["qas"][0]["answers"] = [{"text": "Bob", "answer_start": "0"}]
    _bad(tmp_path, spm_path, json.dumps(broken), "'answer_start' should be int")
    _bad(tmp_path, spm_path, json.dumps({"data": []}), "no questions")
    _bad(tmp_path, spm_path, json.dumps(doc), "max_query_length", "--max_query_length", "200")
    # A misplaced answer is skipped in training (counted), as in Google's reader.
    broken["data"][0]["paragraphs"][0]["qas"].append(dict(qa, id="q2", answers=[{"text": "Bob", "answer_start": 4}]))
    broken["data"][0]["paragraphs"][0]["qas"][0]["answers"] = qa["answers"]
    (tmp_path / "skip.json").write_text(json.dumps(broken), encoding="utf-8")
    examples, skipped = _read_examples(tmp_path / "skip.json", True, False)
    assert len(examples) == 1 and skipped == 1


def test_any_existing_output_file_blocks_the_run_unless_overwrite(tmp_path, spm_path):
    source = tmp_path / "s.json"
    source.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Bob went home.", "qas": [
        {"id": "q", "question": "Who went home?", "answers": [{"text": "Bob", "answer_start": 0}]}]}]}]}))
    out = tmp_path / "o.mindrecord"
    args = _args(spm_path, source, out, "--is_training", "false")
    assert csd.main(args) == 0
    (tmp_path / "o.mindrecord.db").unlink()  # any one existing output file blocks the run
    assert run_cli(csd.main, args) == 2
    assert csd.main(args + ["--overwrite", "true"]) == 0


def test_wordpiece_alignment_on_chinese_text(assets):
    """albert_zh: Chinese characters, full-width letters and accents map back to the exact answer text."""
    transformers = pytest.importorskip("transformers")
    vocab = str(assets / "tokenizer" / "albert_zh_vocab.txt")
    tokenizer = FullTokenizer(vocab, do_lower_case=True)
    context = "《城市的自觉》作者姚远，1981年出生于南京，Café ＡＢＣ公司 unaffable。"
    tokenized = text_features.tokenize_context(tokenizer, context)
    assert tokenized.ids == transformers.BertTokenizer(vocab).encode(context, add_special_tokens=False)
    for answer in ["姚远", "1981年", "南京", "Café", "ＡＢＣ公司", "unaffable"]:
        start = context.index(answer)
        first, last = tokenized.token_span(start, start + len(answer))
        assert context[tokenized.char_spans[first][0]:tokenized.char_spans[last][1]] == answer


def test_prediction_file_without_answers(tmp_path):
    source = tmp_path / "test.json"
    source.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Bob went home.", "qas": [
        {"id": "q", "question": "Who went home?"}]}]}]}), encoding="utf-8")
    examples, _ = _read_examples(source, is_training=False)
    assert examples[0].answers == []
    with pytest.raises(UserError, match="missing field 'answers'"):
        _read_examples(source, is_training=True)


def test_text_the_vocabulary_does_not_know_is_warned_about(tmp_path, assets, spm_path, capsys):
    """A Chinese SQuAD-style file (CMRC's layout) through the English 30k pieces: mostly <unk>, without a word."""
    context = (assets / "pretrain" / "albert_zh_news_zh_1.txt").read_text(encoding="utf-8").splitlines()[2]
    answer = context[3:8]
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": "q1", "question": "他在哪里任教？", "answers": [{"text": answer, "answer_start": 3}]}]}]}]}
    source = tmp_path / "zh.json"
    source.write_text(json.dumps(squad, ensure_ascii=False), encoding="utf-8")
    assert csd.main(_args(spm_path, source, tmp_path / "en.mindrecord", "--is_training", "true")) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "unknown to the vocabulary" in line]
    assert len(warned) == 1 and re.match(r"warning: [2-9]\d% of the tokens are unknown to the vocabulary", warned[0])
    meta = json.loads((tmp_path / "en.mindrecord.meta.json").read_text())
    assert meta["stats"]["unknown_tokens_fraction"] > 0.2
    zh_vocab = ["--vocab_file", str(assets / "tokenizer" / "albert_zh_vocab.txt")]
    args = _args(spm_path, source, tmp_path / "zh.mindrecord", "--is_training", "true")
    args[:2] = zh_vocab
    assert csd.main(args) == 0
    assert "unknown to the vocabulary" not in capsys.readouterr().err


def test_a_v1_file_made_into_v2_data_is_warned_about(tmp_path, assets, spm_path, capsys):
    """SQuAD v1.1 data with --version_2_with_negative true made v2.0 data without one unanswerable question,
    silently: a model trained on it never answers "no answer"."""
    source = assets / "derived" / "squad_v1.1_dev_sample_SuperBowl50_5paras.json"
    args = _args(spm_path, source, tmp_path / "v2.mindrecord", "--is_training", "false",
                 "--version_2_with_negative", "true")
    assert csd.main(args) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warned == [f"warning: no question of {source} is unanswerable (is_impossible), though "
                      f"--version_2_with_negative is true: is it a SQuAD v1.1 file? (v1.1: --version_2_with_negative "
                      f"false)"]
    assert json.loads((tmp_path / "v2.mindrecord.meta.json").read_text())["stats"]["impossible_examples"] == 0
    unlabelled = json.loads(source.read_text(encoding="utf-8"))  # a v2 file to predict on: no answers at all
    for article in unlabelled["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                del qa["answers"]
    (tmp_path / "predict.json").write_text(json.dumps(unlabelled), encoding="utf-8")
    assert csd.main(_args(spm_path, tmp_path / "predict.json", tmp_path / "p.mindrecord", "--is_training", "false",
                          "--version_2_with_negative", "true")) == 0
    assert "warning" not in capsys.readouterr().err


def test_impossible_question_with_answers_is_refused(tmp_path, spm_path, assets):
    """was: accepted; training took it as unanswerable and the official v2.0 scoring as answerable."""
    for name in ("dev-v2.0.subset_Normans_Rhine.json", "dev-v2.0.subset_Normans_ComplexityTheory.json",
                 "cs224n_bert_base/dev-v2.0.cs224n_split.json"):  # real files: answers [], plausible_answers
        for is_training in (True, False):
            examples, _ = _read_examples(assets / "squad" / "v2.0" / name, is_training, True)
            assert any(e.is_impossible for e in examples)
    qa = {"id": "q9", "question": "Who?", "is_impossible": True, "answers": [{"text": "Bob", "answer_start": 0}]}
    doc = {"version": "v2.0", "data": [{"paragraphs": [{"context": "Bob went home.", "qas": [qa]}]}]}
    for is_training in ("true", "false"):
        _bad(tmp_path, spm_path, json.dumps(doc),
             r"bad\.json: data\[0\]\.paragraphs\[0\]\.qas\[0\]: question q9 is_impossible but has 1 answer\(s\)",
             "--version_2_with_negative", "true", "--is_training", is_training)
