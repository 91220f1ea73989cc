"""SQuAD metrics against an independent implementation of the official scripts' rules: HF transformers'
`squad_metrics` (its port of the official v2.0 evaluation), on real BERT-base predictions for a real SQuAD v2.0
dev split and on the complete v1.1 dev set."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from src.tasks.squad_metrics import evaluate_v1, evaluate_v2, questions

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def v2(assets):
    folder = assets / "squad" / "v2.0" / "cs224n_bert_base"
    return {name: folder / f"{name}.json" for name in ("dev-v2.0.cs224n_split", "predictions", "null_odds")}


def hf_reference_v2(dataset, predictions, na_probs, threshold):
    """The v2.0 result assembled from HF's port of the official functions."""
    metrics = pytest.importorskip("transformers.data.metrics.squad_metrics")
    exact, f1, has_answer = {}, {}, {}
    for qa in questions(dataset):
        golds = [a["text"] for a in qa["answers"] if metrics.normalize_answer(a["text"])] or [""]
        has_answer[qa["id"]] = bool(qa["answers"])
        exact[qa["id"]] = max(metrics.compute_exact(g, predictions[qa["id"]]) for g in golds)
        f1[qa["id"]] = max(metrics.compute_f1(g, predictions[qa["id"]]) for g in golds)
    probs = na_probs if na_probs is not None else {k: 0.0 for k in predictions}
    exact_t = metrics.apply_no_ans_threshold(exact, probs, has_answer, threshold)
    f1_t = metrics.apply_no_ans_threshold(f1, probs, has_answer, threshold)
    result = metrics.make_eval_dict(exact_t, f1_t)
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [k for k, v in has_answer.items() if v == wanted]
        metrics.merge_eval(result, metrics.make_eval_dict(exact_t, f1_t, qid_list=qids), name)
    if na_probs is not None:
        metrics.find_all_best_thresh(result, predictions, exact, f1, na_probs, has_answer)
    return dict(result)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "src.squad_postprocess", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("threshold", [1.0, 0.0, -2.5])
def test_v2_real_predictions_match_the_reference(v2, threshold):
    dataset = json.loads(v2["dev-v2.0.cs224n_split"].read_text())["data"]
    predictions = json.loads(v2["predictions"].read_text())
    na_probs = json.loads(v2["null_odds"].read_text())
    expected = hf_reference_v2(dataset, predictions, na_probs, threshold)
    result = cli("--version", "2.0", "--data_file", v2["dev-v2.0.cs224n_split"], "--pred_file", v2["predictions"],
                 "--na_prob_file", v2["null_odds"], "--na_prob_thresh", threshold)
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)
    assert list(ours) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
                          "NoAns_f1", "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
    assert ours == pytest.approx(expected, rel=1e-12)
    assert ours["total"] == 6078 and ours["HasAns_total"] + ours["NoAns_total"] == 6078


def test_v2_without_null_odds_and_with_missing_predictions(v2, tmp_path):
    dataset = json.loads(v2["dev-v2.0.cs224n_split"].read_text())["data"]
    predictions = json.loads(v2["predictions"].read_text())
    assert evaluate_v2(dataset, predictions) == pytest.approx(hf_reference_v2(dataset, predictions, None, 1.0))
    assert "best_exact" not in evaluate_v2(dataset, predictions)
    # the command line without null odds (was: a TypeError traceback once the threshold had no default)
    scored = cli("--version", "2.0", "--data_file", v2["dev-v2.0.cs224n_split"], "--pred_file", v2["predictions"])
    assert scored.returncode == 0, scored.stderr
    assert json.loads(scored.stdout) == pytest.approx(hf_reference_v2(dataset, predictions, None, 1.0))
    partial = dict(list(predictions.items())[:100])
    (tmp_path / "partial.json").write_text(json.dumps(partial))
    result = cli("--version", "2.0", "--data_file", v2["dev-v2.0.cs224n_split"], "--pred_file",
                 tmp_path / "partial.json")
    assert result.returncode == 2 and "5978 of 6078 questions have no prediction" in result.stderr


def test_v1_gold_answers_score_100_and_perturbed_ones_match_the_reference(assets, tmp_path):
    metrics = pytest.importorskip("transformers.data.metrics.squad_metrics")
    data_file = assets / "squad" / "v1.1" / "dev-v1.1.part1_bloomsbury.json"
    dataset = json.loads(data_file.read_text())["data"]
    qas = questions(dataset)
    gold = {qa["id"]: qa["answers"][0]["text"] for qa in qas}
    assert evaluate_v1(dataset, gold) == {"exact_match": 100.0, "f1": 100.0}
    rng = random.Random(0)
    predicted = {}
    for qa in qas:  # drop or add words so that EM and F1 differ
        words = qa["answers"][-1]["text"].split()
        if rng.random() < 0.3 and len(words) > 1:
            words = words[1:]
        if rng.random() < 0.3:
            words = words + ["extra"]
        predicted[qa["id"]] = " ".join(words)
    # for non-empty answers, HF's v2 port and the v1.1 rules agree
    em = sum(max(metrics.compute_exact(a["text"], predicted[qa["id"]]) for a in qa["answers"]) for qa in qas)
    f1 = sum(max(metrics.compute_f1(a["text"], predicted[qa["id"]]) for a in qa["answers"]) for qa in qas)
    (tmp_path / "pred.json").write_text(json.dumps(predicted))
    result = cli("--version", "1.1", "--data_file", data_file, "--pred_file", tmp_path / "pred.json")
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)
    assert list(ours) == ["exact_match", "f1"]
    assert ours["exact_match"] == pytest.approx(100 * em / len(qas))
    assert ours["f1"] == pytest.approx(100 * f1 / len(qas))
    assert 40 < ours["exact_match"] < ours["f1"] < 100


def test_v1_missing_prediction_scores_zero_with_the_official_message(assets, tmp_path):
    data_file = assets / "squad" / "v1.1" / "dev-v1.1.part2_bloomsbury.json"
    qas = questions(json.loads(data_file.read_text())["data"])
    predicted = {qa["id"]: qa["answers"][0]["text"] for qa in qas[1:]}
    (tmp_path / "pred.json").write_text(json.dumps(predicted))
    result = cli("--version", "1.1", "--data_file", data_file, "--pred_file", tmp_path / "pred.json")
    ours = json.loads(result.stdout)
    assert ours["exact_match"] == pytest.approx(100.0 * (len(qas) - 1) / len(qas))
    assert f"Unanswered question {qas[0]['id']} will receive score 0." in result.stderr


def test_hand_checked_edge_cases():
    data = [{"paragraphs": [{"qas": [
        {"id": "a", "answers": [{"text": "The Cat!"}, {"text": "a black cat"}]},
        {"id": "b", "answers": [{"text": "x y z"}]},
        {"id": "c", "answers": []}]}]}]
    # a: "cat" vs golds "cat" / "black cat": EM 1; b: "x y" vs "x y z": P 1, R 2/3, F1 0.8; c: no answer, "" right
    v2_result = evaluate_v2(data, {"a": "cat", "b": "x y", "c": ""})
    assert v2_result["exact"] == pytest.approx(200 / 3) and v2_result["f1"] == pytest.approx(280 / 3)
    assert v2_result["NoAns_exact"] == 100.0 and v2_result["HasAns_f1"] == pytest.approx(90.0)
    # v1.1: an empty prediction scores 0 even against an empty-after-normalisation gold answer
    v1_result = evaluate_v1([{"paragraphs": [{"qas": [{"id": "q", "answers": [{"text": "the"}]}]}]}], {"q": ""})
    assert v1_result == {"exact_match": 100.0, "f1": 0.0}


def test_bad_inputs_are_clear_errors(v2, tmp_path, assets):
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"not-a-real-id": "x"}))
    result = cli("--version", "2.0", "--data_file", v2["dev-v2.0.cs224n_split"], "--pred_file", other)
    assert result.returncode == 2 and "predictions for another data set" in result.stderr
    (tmp_path / "empty.json").write_text("{}")
    result = cli("--version", "1.1", "--data_file", v2["dev-v2.0.cs224n_split"], "--pred_file", tmp_path / "empty.json")
    assert result.returncode == 2 and "no predictions" in result.stderr
    result = cli("--version", "1.1", "--data_file", tmp_path / "missing.json", "--pred_file", other)
    assert result.returncode == 2 and "data file not found" in result.stderr


def test_v2_data_scored_as_v1_names_its_first_unanswerable_question(assets, tmp_path):
    """was: a traceback (ValueError: max() arg is an empty sequence) after the version warning, exit 1."""
    data_file = assets / "squad" / "v2.0" / "dev-v2.0.subset_Normans_Rhine.json"
    dataset = json.loads(data_file.read_text())["data"]
    first = next(qa for qa in questions(dataset) if qa.get("is_impossible"))  # the official marking, in file order
    predicted = {qa["id"]: "x" for qa in questions(dataset)}
    (tmp_path / "pred.json").write_text(json.dumps(predicted))
    result = cli("--version", "1.1", "--data_file", data_file, "--pred_file", tmp_path / "pred.json")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [result.stderr.strip()]
    assert f"question {first['id']} has no gold answers" in result.stderr
    assert "score this file with --version 2.0" in result.stderr


@pytest.mark.parametrize("flags, message", [
    (["--version", "2.0", "--na_prob_file", "NULL"], "--na_prob_file needs --na_prob_thresh: the run's "
                                                     "null_score_diff_threshold (0.0 by default)"),
    (["--version", "2.0", "--na_prob_thresh", "0"], "--na_prob_thresh goes with --na_prob_file"),
    (["--version", "1.1", "--na_prob_thresh", "0"], "--na_prob_thresh is for --version 2.0"),
])
def test_null_odds_threshold_is_explicit(v2, flags, message):
    """was: --na_prob_thresh defaulted to 1.0 (the official script's, for probabilities) while null_odds.json holds
    null scores thresholded at the run's null_score_diff_threshold (0.0), and a threshold without null odds or with
    v1.1 was ignored."""
    flags = [str(v2["null_odds"]) if flag == "NULL" else flag for flag in flags]
    result = cli("--data_file", v2["dev-v2.0.cs224n_split"], "--pred_file", v2["predictions"], *flags)
    assert result.returncode == 2 and result.stdout == "", result.stderr
    assert result.stderr.startswith("error: ") and message in result.stderr

