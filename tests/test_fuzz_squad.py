"""Property-based fuzzing of the SQuAD pipeline on arbitrary unicode contexts: reading answers, doc-stride
windows and features (src.create_squad_data), answer texts and n-best lists from arbitrary model outputs
(src.tasks.squad_answers) and the metrics (src.tasks.squad_metrics)."""
import json
import math
import string

import numpy as np
import pytest
from hypothesis import event, example, given
from hypothesis import strategies as st

from model_utils.errors import UserError
from src import create_squad_data as csd
from src.data import features as text_features
from src.tasks import squad_answers as sgp
from src.tasks import squad_metrics as sp
from tests.fuzz_helpers import TEXT, WORDS, fuzz
from tests.test_create_squad_data import reference_is_max_context

VALID_OPTIONS = st.integers(8, 48).flatmap(lambda seq: st.builds(
    text_features.SquadOptions, max_seq_length=st.just(seq), doc_stride=st.integers(1, 24),
    max_query_length=st.integers(1, seq - 4), is_training=st.booleans()))
OPTIONS = st.one_of(VALID_OPTIONS, st.builds(text_features.SquadOptions, max_seq_length=st.integers(0, 48),
                                             doc_stride=st.integers(-1, 40), max_query_length=st.integers(-1, 48),
                                             is_training=st.booleans()))
LOGIT = st.floats(allow_nan=False, allow_infinity=False, width=32)
# A NaN or infinite model output (a diverged model) put at some position of one result array, or none.
POISON = st.none() | st.tuples(st.sampled_from([math.nan, math.inf, -math.inf]), st.integers(0, 10 ** 6))


# ------------------------------------------------------------------------------------------ create_squad_data

@fuzz(300)
@given(num_tokens=st.integers(0, 120), window=st.integers(1, 40), stride=st.integers(1, 50))
def test_doc_windows_cover_the_context_in_order(num_tokens, window, stride):
    windows = text_features.doc_windows(num_tokens, window, stride)
    assert windows[0][0] == 0
    assert sum(start + length >= num_tokens for start, length in windows) == 1  # only the last reaches the end
    assert windows[-1][0] + windows[-1][1] == num_tokens
    for (start, length), (next_start, _) in zip(windows, windows[1:]):
        assert 1 <= length <= window
        assert start < next_start <= start + min(stride, length)  # no gap, at most `stride` apart
    owners = text_features.max_context_windows(windows, num_tokens)  # the former rule (quadratic) as the reference
    for position in range(num_tokens):  # each token is scored in exactly one window, one that holds it
        best = [i for i in range(len(windows)) if reference_is_max_context(windows, i, position)]
        assert len(best) == 1 and owners[position] == best[0]
        start, length = windows[best[0]]
        assert start <= position < start + length


def _squad_file(tmp_path_factory, context, qas):
    path = tmp_path_factory.mktemp("squad") / "data.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}), encoding="utf-8")
    return path


@fuzz(150)
@given(context=WORDS, v2=st.booleans(),
       answers=st.lists(st.tuples(st.integers(-30, 200), st.integers(0, 30), st.booleans()), min_size=1, max_size=4))
@example(context="ab", v2=False, answers=[(-2, 1, False)])  # answer_start -2 selected "a", counting from the end
@example(context="0", v2=False, answers=[(2, 0, False)])  # an empty answer "at" 2, outside the context
@example(context="000x", v2=False, answers=[(0, 3, True)])  # the "misplaced" answer "000x" is at 0 after all
def test_an_answer_is_kept_exactly_when_its_text_is_at_its_answer_start(tmp_path_factory, context, v2, answers):
    """An answer is kept exactly when it is a non-empty text at its answer_start; the others are counted as
    skipped."""
    qas = [{"id": f"q{index}", "question": "?", "answers": [
        {"text": context[start:start + length] + ("x" if misplaced else ""), "answer_start": start}]}
        for index, (start, length, misplaced) in enumerate(answers)]
    path = _squad_file(tmp_path_factory, context, qas)
    kept = [qa["id"] for qa, (start, _, _) in zip(qas, answers) for text in [qa["answers"][0]["text"]]
            if text and start >= 0 and context[start:start + len(text)] == text]
    stats = {"skipped_examples": 0}
    if not kept:
        with pytest.raises(UserError, match="no questions"):
            list(csd.read_squad_examples(path, True, v2, stats))
        return
    examples, skipped = list(csd.read_squad_examples(path, True, v2, stats)), stats["skipped_examples"]
    assert [example_.qas_id for example_ in examples] == kept and skipped == len(qas) - len(kept)
    for example_ in examples:
        assert example_.answer_text and 0 <= example_.start_char < len(context)
        assert context[example_.start_char:example_.start_char + len(example_.answer_text)] == example_.answer_text


def _check_record(tokenizer, record, options):
    seq = options.max_seq_length
    for name in ("input_ids", "input_mask", "segment_ids", "p_mask"):
        assert record[name].shape == (seq,) and record[name].dtype == np.int32
    length = int(record["input_mask"].sum())
    assert record["input_mask"].tolist() == [1] * length + [0] * (seq - length)
    ids = record["input_ids"].tolist()
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    assert ids[0] == tokenizer.cls_id and ids[length - 1] == tokenizer.sep_id
    assert ids[length:] == [tokenizer.pad_id] * (seq - length)
    assert record["p_mask"][0] == 0 and record["p_mask"][length - 1] == 1


@fuzz(400)
@given(context=WORDS, question=TEXT, options=OPTIONS, data=st.data())
def test_features_of_any_input_are_well_formed_and_point_at_the_answer(tokenizer, context, question, options, data):
    """Records and feature maps of any context, question and options (bad options: UserError). Training
    positions point at pieces that overlap the answer, or at [CLS]; an answer that fits a window is in one."""
    words = list(text_features._WORD.finditer(context))
    start_char = end_char = 0
    if words:
        first = data.draw(st.integers(0, len(words) - 1))
        last = data.draw(st.integers(first, min(first + 3, len(words) - 1)))
        start_char, end_char = words[first].start(), words[last].end()
    example_ = text_features.SquadExample("q", question, context, [context[start_char:end_char]],
                                context[start_char:end_char], start_char)
    try:
        options.check()
    except UserError as err:
        assert any(name in str(err) for name in ("max_seq_length", "doc_stride", "max_query_length"))
        event("options rejected")
        return
    tokenized = text_features.tokenize_context(tokenizer, context)
    answer = tokenized.token_span(start_char, end_char)
    features = list(text_features.example_features(example_, 0, tokenizer, options))
    assert features
    held = 0
    for record, feature in features:
        _check_record(tokenizer, record, options)
        n = int(record["input_mask"].sum())
        assert len(feature["tokens"]) == len(feature["token_to_orig_map"]) == len(feature["token_to_char_span"]) == n
        assert feature["tokens"] == tokenizer.convert_ids_to_tokens(record["input_ids"][:n])
        context_positions = [i for i, span in enumerate(feature["token_to_char_span"]) if span is not None]
        assert record["p_mask"].tolist() == [int(i != 0 and i not in context_positions)
                                             for i in range(options.max_seq_length)]
        for i in context_positions:
            begin, end = feature["token_to_char_span"][i]
            assert 0 <= begin <= end <= len(context)
            assert 0 <= feature["token_to_orig_map"][i] < len(tokenized.doc_tokens)
            assert record["segment_ids"][i] == 1
        if options.is_training:
            first_pos, last_pos = int(record["start_positions"]), int(record["end_positions"])
            if record["is_impossible"]:
                assert first_pos == last_pos == 0
                continue
            held += 1
            assert first_pos in context_positions and last_pos in context_positions and first_pos <= last_pos
            spans = feature["token_to_char_span"]
            assert spans[first_pos][0] < end_char and spans[first_pos][1] > start_char
            assert spans[last_pos][0] < end_char and spans[last_pos][1] > start_char
    window = options.max_seq_length - 3 - min(len(tokenizer.encode(question)), options.max_query_length)
    if options.is_training and answer is not None and answer[1] - answer[0] + options.doc_stride <= window:
        assert held  # windows `doc_stride` apart hold every answer of at most window - doc_stride + 1 pieces
    event(f"{len(features) if len(features) < 3 else 'several'} windows, answer held: {bool(held)}")


# -------------------------------------------------------------------------------------- squad_get_predictions

def _eval_maps(tokenizer, contexts, options):
    """(examples, features) as load_squad_eval_maps returns them for evaluation data of these contexts."""
    examples, features = [], {}
    for index, context in enumerate(contexts):
        examples.append({"example_index": index, "qas_id": f"q{index}", "context": context})
        example_ = text_features.SquadExample(f"q{index}", "what?", context, [])
        for _, feature in text_features.example_features(example_, index, tokenizer, options):
            unique_id = text_features.FIRST_UNIQUE_ID + len(features)
            features[unique_id] = json.loads(json.dumps(dict(unique_id=unique_id, **feature)))
    return examples, features


def _check_answers(examples, predictions, nbest, n_best_size):
    for example_ in examples:
        context, qas_id = example_["context"], example_["qas_id"]
        entries = nbest[qas_id]
        assert 1 <= len(entries) <= n_best_size
        texts = [entry["text"] for entry in entries]
        assert len(set(texts)) == len(texts)
        assert all(text == text.strip() and text in context for text in texts)
        assert texts == [""] or all(texts)
        probabilities = [entry["probability"] for entry in entries]
        assert all(0 <= p <= 1 for p in probabilities) and math.isclose(sum(probabilities), 1, rel_tol=1e-6)
        assert probabilities == sorted(probabilities, reverse=True)
        assert predictions[qas_id] in (texts[0], "")
        assert predictions[qas_id] in context


def _poison(arrays, poison):
    """Puts the poison value at one position of one of the float arrays (every array is read)."""
    if poison is not None:
        value, where = poison
        target = arrays[where % len(arrays)]
        target[where % target.size] = value


def _floats(data, size, dtype=np.float32):
    return np.array(data.draw(st.lists(LOGIT, min_size=size, max_size=size)), dtype)


@fuzz(200)
@given(contexts=st.lists(WORDS, min_size=1, max_size=3), seq=st.integers(12, 40), stride=st.integers(1, 16),
       n_best_size=st.integers(1, 8), max_answer_length=st.integers(1, 12), poison=POISON, data=st.data())
def test_v1_answers_are_context_substrings(tokenizer, contexts, seq, stride, n_best_size, max_answer_length, poison,
                                           data):
    """Any logits of any subset of the windows: every answer is a substring of its context (or ""), n-best
    texts are distinct with probabilities summing to 1; NaN or infinite logits are a UserError."""
    options = text_features.SquadOptions(seq, stride, 4, is_training=False)
    examples, features = _eval_maps(tokenizer, contexts, options)
    uids = data.draw(st.lists(st.sampled_from(sorted(features)), min_size=1, unique=True))
    # drivers may hand over the ids as numpy ints or strings
    results = {data.draw(st.sampled_from([str(uid), np.int64(uid), uid])): (_floats(data, seq), _floats(data, seq))
               for uid in uids}
    _poison([array for pair in results.values() for array in pair], poison)
    if poison is not None:
        with pytest.raises(UserError, match="NaN or infinite"):
            sgp.predictions_v1(examples, features, results, n_best_size, max_answer_length)
        return
    predictions, nbest = sgp.predictions_v1(examples, features, results, n_best_size, max_answer_length)
    assert set(predictions) == set(nbest) == {example_["qas_id"] for example_ in examples}
    _check_answers(examples, predictions, nbest, n_best_size)


@fuzz(200)
@given(context=WORDS, data=st.data())
def test_v1_gold_positions_give_the_answer_text(tokenizer, context, data):
    """Logits peaked at the first and last piece of some words of the context give back those words' text, cut
    from the original context (up to characters no piece keeps, at its ends)."""
    examples, features = _eval_maps(tokenizer, [context], text_features.SquadOptions(512, 128, 4, is_training=False))
    if len(features) > 1:
        return
    (unique_id, feature), = features.items()
    words = list(text_features._WORD.finditer(context))
    if not words:
        return
    first = data.draw(st.integers(0, len(words) - 1))
    last = data.draw(st.integers(first, len(words) - 1))
    answer = context[words[first].start():words[last].end()]
    covering = [i for i, span in enumerate(feature["token_to_char_span"])
                if span and span[0] < span[1] and span[0] < words[last].end() and span[1] > words[first].start()]
    if not covering:
        return
    start_logits, end_logits = np.zeros(512, np.float32), np.zeros(512, np.float32)
    start_logits[covering[0]] = end_logits[covering[-1]] = 10
    predictions, _ = sgp.predictions_v1(examples, features, {unique_id: (start_logits, end_logits)}, 5, 512)
    assert predictions["q0"] in answer
    assert tokenizer.normalize_text(predictions["q0"]) == tokenizer.normalize_text(answer)


@fuzz(200)
@given(contexts=st.lists(WORDS, min_size=1, max_size=3), seq=st.integers(12, 40), stride=st.integers(1, 16),
       top=st.tuples(st.integers(1, 4), st.integers(1, 4)), threshold=st.floats(-5, 5), poison=POISON,
       data=st.data())
def test_v2_answers_and_null_odds(tokenizer, contexts, seq, stride, top, threshold, poison, data):
    """Beam outputs with any indices (also outside the window) and log probs: every answer is a substring of its
    context or "", the null odds are the smallest cls logit of the question's windows; NaN or infinite outputs
    are a UserError."""
    k1, k2 = top
    options = text_features.SquadOptions(seq, stride, 4, is_training=False)
    examples, features = _eval_maps(tokenizer, contexts, options)
    uids = data.draw(st.lists(st.sampled_from(sorted(features)), min_size=1, unique=True))
    index = st.integers(-2, seq + 2)
    results = {uid: {
        "start_top_log_probs": _floats(data, k1, np.float64),
        "start_top_index": np.array(data.draw(st.lists(index, min_size=k1, max_size=k1))),
        "end_top_log_probs": _floats(data, k1 * k2, np.float64),
        "end_top_index": np.array(data.draw(st.lists(index, min_size=k1 * k2, max_size=k1 * k2))),
        "cls_logits": _floats(data, 1)} for uid in uids}
    _poison([result[key] for result in results.values()
             for key in ("start_top_log_probs", "end_top_log_probs", "cls_logits")], poison)
    if poison is not None:
        with pytest.raises(UserError, match="NaN or infinite"):
            sgp.predictions_v2(examples, features, results, 5, 8, k1, k2, threshold)
        return
    predictions, nbest, null_odds = sgp.predictions_v2(examples, features, results, 5, 8, k1, k2, threshold)
    _check_answers(examples, predictions, nbest, 5)
    for example_ in examples:
        qas_id = example_["qas_id"]
        cls = [float(results[uid]["cls_logits"][0]) for uid in uids
               if features[uid]["example_index"] == example_["example_index"]]
        assert null_odds[qas_id] == (min(cls) if cls else sgp.NO_RESULT_NULL_SCORE)
        if null_odds[qas_id] > threshold:
            assert predictions[qas_id] == ""


# ------------------------------------------------------------------------------------------ squad_postprocess

ANSWER = st.one_of(TEXT, st.lists(st.sampled_from(["a", "an", "the", "The", "cat", "Cat!", ".", "x-y", "1,000",
                                                   " ", "é", "\u00a0"]), max_size=6).map(" ".join))


@fuzz(400)
@given(gold=ANSWER, prediction=ANSWER)
@example(gold="the", prediction="")
def test_answer_metrics(gold, prediction):
    normalized = sp.normalize_answer(prediction)
    assert normalized == " ".join(normalized.split())
    assert not set(normalized) & set(string.punctuation)
    assert not set(normalized.split()) & {"a", "an", "the"}
    exact = sp.exact_score(gold, prediction)
    assert exact in (0, 1) and exact == sp.exact_score(prediction, gold)
    for v2 in (False, True):
        f1 = sp.f1_score(gold, prediction, empty_matches_empty=v2)
        assert 0 <= f1 <= 1 and f1 == pytest.approx(sp.f1_score(prediction, gold, empty_matches_empty=v2))
        if exact and (v2 or normalized):
            assert f1 == 1
        if normalized or v2:
            assert sp.f1_score(prediction, prediction, empty_matches_empty=v2) == 1


@fuzz(200)
@given(gold=ANSWER, prediction=ANSWER)
def test_metrics_equal_the_official_port(gold, prediction):
    """The same EM, F1 and normalisation as HF's port of the official SQuAD v2.0 script."""
    metrics = pytest.importorskip("transformers.data.metrics.squad_metrics")
    assert sp.normalize_answer(prediction) == metrics.normalize_answer(prediction)
    assert sp.exact_score(gold, prediction) == metrics.compute_exact(gold, prediction)
    assert sp.f1_score(gold, prediction, empty_matches_empty=True) == metrics.compute_f1(gold, prediction)


QUESTION = st.fixed_dictionaries({"answers": st.lists(st.fixed_dictionaries({"text": ANSWER}), max_size=3),
                                  "prediction": ANSWER, "null_odds": st.floats(0, 1)})


@fuzz(150)
@given(qas=st.lists(QUESTION, min_size=1, max_size=6), threshold=st.floats(0, 1))
def test_evaluation_scores(qas, threshold):
    """Scores in [0, 100] for any predictions; the gold answers score 100 (v1.1 F1: when they have a token)."""
    dataset = [{"paragraphs": [{"qas": [{"id": f"q{i}", "answers": qa["answers"]} for i, qa in enumerate(qas)]}]}]
    predictions = {f"q{i}": qa["prediction"] for i, qa in enumerate(qas)}
    null_odds = {f"q{i}": qa["null_odds"] for i, qa in enumerate(qas)}
    result = sp.evaluate_v2(dataset, predictions, null_odds, threshold)
    for key, value in result.items():
        if not key.endswith(("total", "thresh")):
            assert 0 <= value <= 100, key
    # v2.0 drops gold answers that normalise to nothing (unless all do)
    gold = {f"q{i}": next((a["text"] for a in qa["answers"] if sp.normalize_answer(a["text"])), "")
            for i, qa in enumerate(qas)}
    best = sp.evaluate_v2(dataset, gold)
    assert best["exact"] == best["f1"] == 100
    answerable = [qa for qa in qas if qa["answers"]]
    if answerable:
        v1_dataset = [{"paragraphs": [{"qas": [{"id": f"q{i}", "answers": qa["answers"]}
                                               for i, qa in enumerate(answerable)]}]}]
        v1 = sp.evaluate_v1(v1_dataset, {f"q{i}": qa["answers"][0]["text"] for i, qa in enumerate(answerable)})
        assert v1["exact_match"] == 100
        if all(sp.normalize_answer(qa["answers"][0]["text"]) for qa in answerable):
            assert v1["f1"] == 100
        v1 = sp.evaluate_v1(v1_dataset, {f"q{i}": qa["prediction"] for i, qa in enumerate(answerable)})
        assert 0 <= v1["exact_match"] <= 100 and 0 <= v1["f1"] <= 100
