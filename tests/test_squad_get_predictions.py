"""SQuAD answers from per-feature model outputs, on evaluation data made from the real dev sets: gold positions
give back the gold answers (scored by the official-equivalent metrics), v2 beam spans are always valid, null odds
and threshold, errors, and the written files are accepted by the scorer's CLI."""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from model_utils.errors import UserError
from src import create_squad_data as csd
from src.tasks import squad_answers as sgp
from src.tasks.squad_metrics import evaluate_v1, evaluate_v2, exact_score, questions
from tests.test_create_squad_data import _args

V1_HALVES = ["v1.1/dev-v1.1.part1_bloomsbury.json", "v1.1/dev-v1.1.part2_bloomsbury.json"]
V2_SUBSETS = ["v2.0/dev-v2.0.subset_Normans_Rhine.json", "v2.0/dev-v2.0.subset_Normans_ComplexityTheory.json"]
SAMPLE = "../derived/squad_v1.1_dev_sample_SuperBowl50_5paras.json"
SEQ = 128  # with max_query_length 32 and doc_stride 64: most paragraphs get several windows
HIGH, LOW = 10.0, 1.0


@pytest.fixture(scope="module")
def make_eval_data(assets, spm_path, tmp_path_factory):
    """name -> (dev json path, data_file); evaluation data is created once per module, on first use."""
    folder = tmp_path_factory.mktemp("squad_eval")
    made = {}

    def make(name: str, v2: bool = False, *extra: str):
        source = (assets / "squad" / name).resolve()
        if name not in made:
            out = folder / f"{len(made)}_{source.stem}" / "eval.mindrecord"
            args = _args(spm_path, source, out, "--max_query_length", "32", "--is_training", "false",
                         "--version_2_with_negative", str(v2).lower(), *extra)
            assert csd.main(args) == 0
            made[name] = str(out)
        return source, made[name]
    return make


def _dataset(path: Path):
    return json.loads(path.read_text(encoding="utf-8"))["data"]


def _gold_chars(dataset) -> dict:
    """qas_id -> (first, last) character of the first gold answer; absent for unanswerable questions."""
    gold = {}
    for article in dataset:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                if qa["answers"]:
                    answer = qa["answers"][0]
                    gold[qa["id"]] = (answer["answer_start"], answer["answer_start"] + len(answer["text"]) - 1)
    return gold


def _token_covering(feature, char: int, last: bool):
    """First (or last) piece whose character span covers `char`; None when the window does not hold it."""
    covering = [i for i, span in enumerate(feature["token_to_char_span"]) if span and span[0] <= char < span[1]]
    return (covering[-1] if last else covering[0]) if covering else None


def _gold_tokens(feature, gold: dict):
    chars = gold.get(feature["qas_id"])
    if chars is None:
        return None
    start, end = _token_covering(feature, chars[0], False), _token_covering(feature, chars[1], True)
    return (start, end) if start is not None and end is not None else None


def _gold_v1_results(features, gold, seed=0):
    """Noise logits in [-LOW, LOW] with HIGH at the gold start and end pieces of every window holding both."""
    rng = np.random.default_rng(seed)
    results = {}
    for uid, feature in features.items():
        start_logits, end_logits = rng.uniform(-LOW, LOW, SEQ), rng.uniform(-LOW, LOW, SEQ)
        span = _gold_tokens(feature, gold)
        if span:
            start_logits[span[0]], end_logits[span[1]] = HIGH, HIGH
        results[uid] = (start_logits.astype(np.float32), end_logits.astype(np.float32))
    return results


def _misses(dataset, predictions):
    """(qas_id, gold answers, prediction) of questions whose prediction matches no gold answer."""
    return [(qa["id"], [a["text"] for a in qa["answers"]], predictions[qa["id"]]) for qa in questions(dataset)
            if not max(exact_score(a["text"], predictions[qa["id"]]) for a in qa["answers"] or [{"text": ""}])]


@pytest.mark.parametrize("name", V1_HALVES)
def test_v1_gold_positions_give_gold_answers(make_eval_data, name):
    source, data_file = make_eval_data(name)
    dataset = _dataset(source)
    examples, features = sgp.load_squad_eval_maps(data_file)
    assert len(examples) == len(questions(dataset)) and len(features) > 2 * len(examples)
    predictions, nbest = sgp.predictions_v1(examples, features, _gold_v1_results(features, _gold_chars(dataset)))
    assert set(predictions) == set(nbest) == {qa["id"] for qa in questions(dataset)}
    for example in examples:
        entries = nbest[example["qas_id"]]
        assert predictions[example["qas_id"]] == entries[0]["text"] and entries[0]["text"] in example["context"]
        assert all(entry["text"] in example["context"] for entry in entries)
        assert len({entry["text"] for entry in entries}) == len(entries) <= 20
        assert abs(sum(entry["probability"] for entry in entries) - 1) < 1e-6
    score = evaluate_v1(dataset, predictions)
    explained = _explain_misses(dataset, examples, features, predictions, max_answer_length=30)
    print(f"{name}: {score}; misses: {json.dumps(explained, ensure_ascii=False, indent=1)}")
    assert not explained["unexplained"], explained["unexplained"]
    assert score["exact_match"] >= 99, (score, explained)


class _JoiningTokenizer:
    """HF's postprocessing asks its tokenizer only to join the pieces of a span back into text."""

    @staticmethod
    def convert_tokens_to_string(tokens):
        return " ".join(tokens)


def _context_pieces(example, features):
    """(character spans of the example's context pieces in order, the text each adds, the spans that begin inside
    an earlier one: several pieces of one character, as "1", "⁄", "2" of "½")."""
    spans = sorted({tuple(span) for f in features for word, span in zip(f["token_to_orig_map"], f["token_to_char_span"])
                    if word != -1 and span is not None})
    texts, overlapping, covered = [], set(), 0
    for a, b in spans:
        texts.append(example["context"][max(a, covered):b].strip())
        if a < covered:
            overlapping.add((a, b))
        covered = max(covered, b)
    return spans, texts, overlapping


def _by_example(features):
    grouped = {}
    for feature in features.values():
        grouped.setdefault(feature["example_index"], []).append(feature)
    return grouped


def _hf_inputs(examples, features):
    """Our feature maps in the shape of HF's SquadExample / SquadFeatures: each context piece of an example is one
    HF document token (the context text it adds), so HF's answer for a span is its pieces' texts joined by spaces
    (ours is the context's characters from the first piece to the last: equal up to whitespace)."""
    from types import SimpleNamespace

    hf_examples, hf_features, grouped = [], [], _by_example(features)
    for example in examples:
        mine = grouped[example["example_index"]]
        spans, doc_tokens, _ = _context_pieces(example, mine)
        doc_index = {span: i for i, span in enumerate(spans)}
        hf_examples.append(SimpleNamespace(qas_id=example["qas_id"], doc_tokens=doc_tokens))
        for f in mine:
            in_context = {t: doc_index[tuple(span)] for t, (word, span)
                          in enumerate(zip(f["token_to_orig_map"], f["token_to_char_span"]))
                          if word != -1 and span is not None}
            hf_features.append(SimpleNamespace(
                example_index=len(hf_examples) - 1, unique_id=f["unique_id"],
                tokens=[doc_tokens[in_context[t]] if t in in_context else token for t, token in enumerate(f["tokens"])],
                token_to_orig_map=in_context, token_is_max_context=dict(enumerate(f["token_is_max_context"]))))
    return hf_examples, hf_features


def _random_v1_results(examples, features, rng):
    """Normal logits (sd 2) per window; -10 where a span may not begin or end for this comparison: bare word
    boundaries (a span of only those has no text: we skip it, HF keeps an empty answer, a documented difference)
    and, as starts, pieces inside a character an earlier piece began (HF's answer would lack that character)."""
    results, grouped = {}, _by_example(features)
    for uid, feature in features.items():
        example = examples[feature["example_index"]]
        _, _, overlapping = _context_pieces(example, grouped[feature["example_index"]])
        spans = feature["token_to_char_span"] + [None] * (SEQ - len(feature["tokens"]))
        bare = np.array([span is not None and not example["context"][span[0]:span[1]].strip() for span in spans])
        inside = np.array([span is not None and tuple(span) in overlapping for span in spans])
        start = np.where(bare | inside, -10.0, rng.normal(0, 2, SEQ)).astype(np.float32)
        end = np.where(bare, -10.0, rng.normal(0, 2, SEQ)).astype(np.float32)
        results[uid] = (start, end)
    return results


def test_v1_nbest_ranking_and_probabilities_equal_hf(make_eval_data, tmp_path):
    """Random logits on the windows of real dev questions: answers, n-best order, logits and probabilities equal
    HF transformers' compute_predictions_logits (an independent port of Google's write_predictions) given the same
    features (see _random_v1_results for the two kinds of piece kept out of spans' ends)."""
    from transformers.data.metrics.squad_metrics import compute_predictions_logits
    from transformers.data.processors.squad import SquadResult

    source, data_file = make_eval_data(V1_HALVES[0])
    examples, features = sgp.load_squad_eval_maps(data_file)
    examples = examples[:400]
    features = {uid: f for uid, f in features.items() if f["example_index"] < len(examples)}
    results = _random_v1_results(examples, features, np.random.default_rng(11))
    predictions, nbest = sgp.predictions_v1(examples, features, results, n_best_size=20, max_answer_length=30)

    hf_examples, hf_features = _hf_inputs(examples, features)
    hf_results = [SquadResult(uid, start.tolist(), end.tolist()) for uid, (start, end) in results.items()]
    hf_predictions = compute_predictions_logits(
        hf_examples, hf_features, hf_results, n_best_size=20, max_answer_length=30, do_lower_case=False,
        output_prediction_file=None, output_nbest_file=str(tmp_path / "nbest.json"), output_null_log_odds_file=None,
        verbose_logging=False, version_2_with_negative=False, null_score_diff_threshold=0.0,
        tokenizer=_JoiningTokenizer())
    hf_nbest = json.loads((tmp_path / "nbest.json").read_text())

    def squeeze(text):
        return "".join(text.split())

    assert list(predictions) == list(hf_predictions) == [e["qas_id"] for e in examples]
    for qid, entries in nbest.items():
        assert squeeze(predictions[qid]) == squeeze(hf_predictions[qid]), qid
        theirs = hf_nbest[qid]
        assert [squeeze(e["text"]) for e in entries] == [squeeze(e["text"]) for e in theirs], qid
        assert [(e["start_logit"], e["end_logit"]) for e in entries] == \
            [(e["start_logit"], e["end_logit"]) for e in theirs], qid
        np.testing.assert_allclose([e["probability"] for e in entries], [e["probability"] for e in theirs],
                                   rtol=0, atol=1e-12, err_msg=qid)
    # The comparison covered real choices: questions of several windows, mostly full 20-entry lists.
    windows = _by_example(features)
    assert sum(len(windows[e["example_index"]]) > 1 for e in examples) > 100
    assert sum(len(entries) == 20 for entries in nbest.values()) > 0.9 * len(examples)


def _explain_misses(dataset, examples, features, predictions, max_answer_length):
    """Questions whose prediction matches no gold answer, by cause: the first gold answer starts or ends inside
    a piece (the prediction is then the whole pieces, e.g. gold "gold" in "golden"), it is longer than
    max_answer_length pieces (never a valid span), or unexplained."""
    gold = _gold_chars(dataset)
    own = {}
    for feature in features.values():
        own.setdefault(feature["qas_id"], []).append(feature)
    contexts = {example["qas_id"]: example["context"] for example in examples}
    causes = {"inside a piece": [], "longer than max_answer_length": [], "unexplained": []}
    for qas_id, golds, prediction in _misses(dataset, predictions):
        spans = [(f, _gold_tokens(f, gold)) for f in own[qas_id]]
        lengths = [end - start + 1 for _, (start, end) in [s for s in spans if s[1]]]
        covered = [contexts[qas_id][f["token_to_char_span"][a][0]:f["token_to_char_span"][b][1]].strip()
                   for f, (a, b) in [s for s in spans if s[1]]]
        if not golds:
            cause = "unexplained"
        elif not lengths or min(lengths) > max_answer_length:
            cause = "longer than max_answer_length"
        elif prediction in covered and golds[0] in prediction and len(prediction) > len(golds[0]):
            cause = "inside a piece"
        else:
            cause = "unexplained"
        causes[cause].append([qas_id, golds[0], prediction])
    return causes


def _context_range(feature):
    """Positions of the context pieces, from the tokens alone: between the first [SEP] and the final [SEP]."""
    return feature["tokens"].index("[SEP]") + 1, len(feature["tokens"]) - 2


def _valid_by_tokens(feature, start: int, end: int, max_answer_length: int) -> bool:
    first, last = _context_range(feature)
    return (first <= start <= end <= last and end - start + 1 <= max_answer_length
            and feature["token_is_max_context"][start])


def _random_beams(features, rng, k1=5, k2=5):
    """Beam outputs mixing valid spans with starts in the question or padding, reversed and too long spans."""
    results = {}
    for uid, feature in features.items():
        first, last = _context_range(feature)
        starts = rng.integers(0, SEQ, k1)
        starts[:3] = rng.integers(first, last + 1, 3)  # most beams start in the context
        ends = np.repeat(starts, k2) + rng.integers(-3, 16, k1 * k2)
        ends[rng.random(k1 * k2) < 0.1] = rng.integers(0, SEQ)
        results[uid] = {"start_top_log_probs": np.sort(np.log(rng.random(k1)))[::-1].astype(np.float32),
                        "start_top_index": starts.astype(np.int32),
                        "end_top_log_probs": np.log(rng.random(k1 * k2)).astype(np.float32),
                        "end_top_index": np.clip(ends, 0, SEQ - 1).astype(np.int32),
                        "cls_logits": np.float32(rng.normal())}
    return results


def _valid_beams(example, example_features, results, max_answer_length):
    """(score, text, start log prob, end log prob) of every valid beam of one example with a non-empty text."""
    beams = []
    for feature in example_features:
        result = results[feature["unique_id"]]
        k2 = len(result["end_top_index"]) // len(result["start_top_index"])
        for flat, end in enumerate(result["end_top_index"]):
            start = int(result["start_top_index"][flat // k2])
            if _valid_by_tokens(feature, start, int(end), max_answer_length):
                spans = feature["token_to_char_span"]
                text = example["context"][spans[start][0]:spans[end][1]].strip()
                start_lp = float(result["start_top_log_probs"][flat // k2])
                end_lp = float(result["end_top_log_probs"][flat])
                if text:
                    beams.append((start_lp + end_lp, text, start_lp, end_lp))
    return beams


@pytest.mark.parametrize("name", V2_SUBSETS)
def test_v2_beam_spans_are_valid(make_eval_data, name):
    _, data_file = make_eval_data(name, True)
    examples, features = sgp.load_squad_eval_maps(data_file)
    results = _random_beams(features, np.random.default_rng(1))
    max_len = 10
    predictions, nbest, null_odds = sgp.predictions_v2(examples, features, results, n_best_size=8,
                                                       max_answer_length=max_len)
    by_example = {}
    for feature in features.values():
        by_example.setdefault(feature["example_index"], []).append(feature)
    answerable = 0
    for example in examples:
        qas_id, own = example["qas_id"], by_example[example["example_index"]]
        assert null_odds[qas_id] == pytest.approx(min(float(results[f["unique_id"]]["cls_logits"]) for f in own))
        beams = _valid_beams(example, own, results, max_len)
        entries = nbest[qas_id]
        assert 1 <= len(entries) <= 8 and abs(sum(e["probability"] for e in entries) - 1) < 1e-6
        if not beams:
            assert [e["text"] for e in entries] == [""] and predictions[qas_id] == ""
            continue
        answerable += 1
        best = max(beams, key=lambda beam: beam[0])
        assert entries[0]["text"] == best[1]
        for entry in entries:  # each entry is a valid beam: same text and log probabilities
            assert any(text == entry["text"] and start == pytest.approx(entry["start_log_prob"])
                       and end == pytest.approx(entry["end_log_prob"]) for _, text, start, end in beams), entry
        assert predictions[qas_id] == ("" if null_odds[qas_id] > 0 else best[1])
    assert answerable > 0.8 * len(examples)
    always, _, _ = sgp.predictions_v2(examples, features, results, max_answer_length=max_len,
                                      null_score_diff_threshold=1e9)
    assert all(always[e["qas_id"]] == nbest[e["qas_id"]][0]["text"] for e in examples)
    assert sum(1 for text in always.values() if text) == answerable
    never, _, _ = sgp.predictions_v2(examples, features, results, max_answer_length=max_len,
                                     null_score_diff_threshold=-1e9)
    assert set(never.values()) == {""}


@pytest.mark.parametrize("name", V2_SUBSETS)
def test_v2_gold_beams_give_gold_answers(make_eval_data, name, tmp_path):
    source, data_file = make_eval_data(name, True)
    dataset = _dataset(source)
    gold = _gold_chars(dataset)
    examples, features = sgp.load_squad_eval_maps(data_file)
    results = _random_beams(features, np.random.default_rng(2))
    for uid, feature in features.items():  # beams lower than the gold one, cls low only where the answer is
        result = results[uid]
        result["start_top_log_probs"] -= 3
        result["end_top_log_probs"] -= 3
        span = _gold_tokens(feature, gold)
        at_max_context = span is not None and feature["token_is_max_context"][span[0]]
        if at_max_context:
            result["start_top_index"][0], result["end_top_index"][0] = span
            result["start_top_log_probs"][0] = result["end_top_log_probs"][0] = -0.1
        result["cls_logits"] = np.float32(-5.0 if at_max_context else 5.0)
    predictions, nbest, null_odds = sgp.predictions_v2(examples, features, results)
    score = evaluate_v2(dataset, predictions, null_odds, 0.0)
    explained = _explain_misses(dataset, examples, features, predictions, max_answer_length=30)
    print(f"{name}: {score}; misses: {explained}")
    # Rhine: one coordinate answer ("47°39′N 9°19′E / ...") has more than 30 pieces.
    assert score["NoAns_exact"] == 100.0 and not explained["unexplained"], explained
    assert score["exact"] >= 99.5, (score, explained)
    # The written files are what the scorer's CLI reads, null odds included.
    paths = sgp.write_prediction_files(str(tmp_path / "out"), predictions, nbest, null_odds)
    cli = _run_scorer("2.0", source, paths[0], "--na_prob_file", paths[2], "--na_prob_thresh", "0")
    assert cli["exact"] == pytest.approx(score["exact"]) and cli["best_exact"] >= score["exact"]


def _run_scorer(version, source, pred_file, *extra):
    completed = subprocess.run([sys.executable, "-m", "src.squad_postprocess", "--version", version,
                                "--data_file", str(source), "--pred_file", pred_file, *extra],
                               capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1], check=False)
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout)


def test_written_files_are_accepted_by_the_scorer(make_eval_data, tmp_path):
    source, data_file = make_eval_data(SAMPLE)
    dataset = _dataset(source)
    examples, features = sgp.load_squad_eval_maps(data_file)
    predictions, nbest = sgp.predictions_v1(examples, features, _gold_v1_results(features, _gold_chars(dataset)))
    paths = sgp.write_prediction_files(str(tmp_path / "out"), predictions, nbest)
    assert [Path(p).name for p in paths] == ["predictions.json", "nbest_predictions.json"]
    assert json.loads(Path(paths[0]).read_text(encoding="utf-8")) == predictions
    written = json.loads(Path(paths[1]).read_text(encoding="utf-8"))
    assert set(written) == set(predictions) and all(
        set(entry) == {"text", "probability", "start_logit", "end_logit"} for entries in written.values()
        for entry in entries)
    cli = _run_scorer("1.1", source, paths[0])
    # 8 of these 117 Super Bowl questions have gold answers inside a piece ("5" of "50"): EM 93.2
    assert cli == pytest.approx(evaluate_v1(dataset, predictions)) and cli["exact_match"] > 90


def test_questions_without_results(make_eval_data):
    source, data_file = make_eval_data(SAMPLE)
    examples, features = sgp.load_squad_eval_maps(data_file)
    results = _gold_v1_results(features, _gold_chars(_dataset(source)))
    first = examples[0]["qas_id"]
    partial = {uid: r for uid, r in results.items() if features[uid]["qas_id"] != first}
    predictions, nbest = sgp.predictions_v1(examples, features, partial)
    assert predictions[first] == "" and nbest[first][0]["probability"] == 1.0
    assert predictions[examples[1]["qas_id"]]
    beams = _random_beams({uid: features[uid] for uid in partial}, np.random.default_rng(3))
    predictions, _, null_odds = sgp.predictions_v2(examples, features, beams, null_score_diff_threshold=1e9)
    assert predictions[first] == "" and null_odds[first] == sgp.NO_RESULT_NULL_SCORE
    assert len(null_odds) == len(examples)


def test_data_file_forms(make_eval_data, tmp_path, spm_path, assets):
    source, data_file = make_eval_data(SAMPLE)
    examples, features = sgp.load_squad_eval_maps(data_file)
    folder = Path(data_file).parent
    assert sgp.load_squad_eval_maps(str(folder)) == (examples, features)
    sharded = tmp_path / "dev.mindrecord"
    assert csd.main(_args(spm_path, source, sharded, "--max_query_length", "32", "--is_training", "false",
                          "--partition_number", "2")) == 0
    assert (tmp_path / "dev.mindrecord1").is_file()
    for form in (sharded, tmp_path / "dev.mindrecord1", tmp_path):
        assert sgp.load_squad_eval_maps(str(form)) == (examples, features)
    assert csd.main(_args(spm_path, source, tmp_path / "other.mindrecord", "--is_training", "false")) == 0
    with pytest.raises(UserError, match="holds 2 SQuAD evaluation data sets"):
        sgp.load_squad_eval_maps(str(tmp_path))


def test_missing_feature_maps(tmp_path, spm_path, assets):
    with pytest.raises(UserError, match=r"nothing\.mindrecord\.examples\.jsonl not found.*--is_training false"):
        sgp.load_squad_eval_maps(str(tmp_path / "nothing.mindrecord"))
    with pytest.raises(UserError, match="no SQuAD evaluation data here"):
        sgp.load_squad_eval_maps(str(tmp_path))
    train = tmp_path / "train.mindrecord"
    assert csd.main(_args(spm_path, assets / "squad" / SAMPLE, train, "--is_training", "true")) == 0
    with pytest.raises(UserError, match=r"training data \(is_training true\).*--is_training false"):
        sgp.load_squad_eval_maps(str(train))
    (tmp_path / "bad.mindrecord.examples.jsonl").write_text('{"example_index": 0, "qas_id": "q", "context": "c"}\n')
    with pytest.raises(UserError, match=r"bad\.mindrecord\.features\.jsonl not found"):
        sgp.load_squad_eval_maps(str(tmp_path / "bad.mindrecord"))
    (tmp_path / "bad.mindrecord.features.jsonl").write_text('{"unique_id": 1,\n')
    with pytest.raises(UserError, match=r"features\.jsonl line 1: malformed json"):
        sgp.load_squad_eval_maps(str(tmp_path / "bad.mindrecord"))


def test_bad_results_and_arguments(make_eval_data):
    source, data_file = make_eval_data(SAMPLE)
    examples, features = sgp.load_squad_eval_maps(data_file)
    results = _gold_v1_results(features, _gold_chars(_dataset(source)))
    uid = next(iter(results))
    with pytest.raises(UserError, match="1 of 1 results have unique ids that are not in the evaluation data"):
        sgp.predictions_v1(examples, features, {7: results[uid]})
    with pytest.raises(UserError, match="no model results"):
        sgp.predictions_v1(examples, features, {})
    with pytest.raises(UserError, match="n_best_size must be an integer >= 1, got 0"):
        sgp.predictions_v1(examples, features, results, n_best_size=0)
    with pytest.raises(UserError, match="max_answer_length must be an integer >= 1"):
        sgp.predictions_v2(examples, features, {}, max_answer_length=0)
    with pytest.raises(UserError, match=f"feature {uid}: 20 logits for a feature of"):
        sgp.predictions_v1(examples, features, {uid: (np.zeros(20), np.zeros(20))})
    with pytest.raises(UserError, match="expected \\(start_logits, end_logits\\)"):
        sgp.predictions_v1(examples, features, {uid: np.zeros(3)})
    beams = _random_beams({uid: features[uid]}, np.random.default_rng(4), k1=4, k2=5)
    with pytest.raises(UserError, match=r"start_top_log_probs has shape \(4,\), expected \[5\].*start_n_top"):
        sgp.predictions_v2(examples, features, beams)
    assert sgp.predictions_v2(examples, features, beams, start_n_top=4)[0]
    del beams[uid]["cls_logits"]
    with pytest.raises(UserError, match="expected a dict with"):
        sgp.predictions_v2(examples, features, beams, start_n_top=4)


def test_module_does_not_import_mindspore(project_root):
    code = "import sys, src.tasks.squad_answers; print('mindspore' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=project_root, check=True)
    assert out.stdout.strip() == "False"
