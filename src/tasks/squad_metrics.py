"""SQuAD v1.1 and v2.0 metrics with the official evaluation scripts' rules, as a library and a CLI.

    python -m src.squad_postprocess --version 1.1 --data_file dev-v1.1.json --pred_file predictions.json
    python -m src.squad_postprocess --version 2.0 --data_file dev-v2.0.json --pred_file predictions.json \
        --na_prob_file null_odds.json --na_prob_thresh 0.0

Prints one JSON object with the official scripts' keys and values:
- v1.1: {"exact_match", "f1"} over all questions; a question without a prediction scores 0 and is reported on stderr
  ("Unanswered question ID will receive score 0.").
- v2.0: {"exact", "f1", "total", "HasAns_*", "NoAns_*"} after the null-odds threshold, plus "best_exact",
  "best_exact_thresh", "best_f1", "best_f1_thresh" when null odds are given. The threshold must be given with
  the null odds: the run's null_score_diff_threshold for this package's null_odds.json (null scores, any real
  number), 1.0 for the official script's probabilities. The official v2.0 script cannot score
  a data set with questions missing from the predictions (it reports "Missing prediction for ID" and then fails);
  here that is a clear error listing them.

Answers are compared after the official normalisation: lowercase, punctuation and the articles a/an/the removed,
whitespace collapsed. F1 is the bag-of-tokens overlap, the maximum over the gold answers.
"""
import collections
import json
import re
import string
import sys
from typing import Dict, List, Optional, Tuple

from model_utils.config import ArgumentParser, real
from model_utils.errors import UserError, run_cli
from src.data.input_text import load_json, require

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official normalisation: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_score(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold: str, prediction: str, empty_matches_empty: bool) -> float:
    """Token-overlap F1. v2.0 (`empty_matches_empty`) scores an empty answer 1 against an empty gold answer and 0
    otherwise; v1.1 scores anything without a common token 0."""
    gold_tokens = normalize_answer(gold).split()
    predicted_tokens = normalize_answer(prediction).split()
    if empty_matches_empty and (not gold_tokens or not predicted_tokens):
        return float(gold_tokens == predicted_tokens)
    common = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(predicted_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def questions(dataset: List[dict]) -> List[dict]:
    """Every question (qa dict) of a SQuAD `data` list, in file order."""
    return [qa for article in dataset for paragraph in article["paragraphs"] for qa in paragraph["qas"]]


def evaluate_v1(dataset: List[dict], predictions: Dict[str, str], warn=print) -> Dict[str, float]:
    """Official v1.1: EM and F1 (max over gold answers) over all questions, missing predictions scoring 0."""
    exact = f1 = 0.0
    qas = questions(dataset)
    for qa in qas:
        if qa["id"] not in predictions:
            warn(f"Unanswered question {qa['id']} will receive score 0.")
            continue
        golds = [answer["text"] for answer in qa["answers"]]
        prediction = predictions[qa["id"]]
        exact += max(exact_score(gold, prediction) for gold in golds)
        f1 += max(f1_score(gold, prediction, empty_matches_empty=False) for gold in golds)
    return {"exact_match": 100.0 * exact / len(qas), "f1": 100.0 * f1 / len(qas)}


def raw_scores_v2(dataset: List[dict], predictions: Dict[str, str]) -> Tuple[Dict[str, int], Dict[str, float],
                                                                           Dict[str, bool]]:
    """Per-question EM and F1 before thresholding, and whether each question has an answer. Gold answers that
    normalise to nothing are dropped; an unanswerable question's only gold answer is ''."""
    exact, f1, has_answer = {}, {}, {}
    missing = []
    for qa in questions(dataset):
        golds = [answer["text"] for answer in qa["answers"] if normalize_answer(answer["text"])]
        has_answer[qa["id"]] = bool(qa["answers"])
        if qa["id"] not in predictions:
            missing.append(qa["id"])
            continue
        golds = golds or [""]
        prediction = predictions[qa["id"]]
        exact[qa["id"]] = max(exact_score(gold, prediction) for gold in golds)
        f1[qa["id"]] = max(f1_score(gold, prediction, empty_matches_empty=True) for gold in golds)
    if missing:
        shown = ", ".join(missing[:5]) + (f" ... and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UserError(f"{len(missing)} of {len(has_answer)} questions have no prediction ({shown}); SQuAD v2.0 "
                        f"scoring needs one per question (the official script fails on this too)")
    return exact, f1, has_answer


def _threshold(scores: Dict[str, float], na_probs: Dict[str, float], has_answer: Dict[str, bool],
               threshold: float) -> Dict[str, float]:
    """A question whose null probability exceeds `threshold` counts as answered 'no answer'."""
    return {qid: float(not has_answer[qid]) if na_probs[qid] > threshold else score for qid, score in scores.items()}


def _summary(exact: Dict[str, float], f1: Dict[str, float], qids: List[str]) -> Dict[str, float]:
    return {"exact": 100.0 * sum(exact[q] for q in qids) / len(qids),
            "f1": 100.0 * sum(f1[q] for q in qids) / len(qids), "total": len(qids)}


def _best_threshold(predictions: Dict[str, str], scores: Dict[str, float], na_probs: Dict[str, float],
                    has_answer: Dict[str, bool]) -> Tuple[float, float]:
    """Sweep the threshold over the null probabilities in increasing order, as the official script: start from
    'answer nothing' (every unanswerable question right) and add questions one by one."""
    score = best = sum(1 for qid in has_answer if not has_answer[qid])
    best_threshold = 0.0
    for qid in sorted(na_probs, key=lambda q: na_probs[q]):
        if qid not in scores:
            continue
        if has_answer[qid]:
            score += scores[qid]
        elif predictions[qid]:
            score -= 1
        if score > best:
            best, best_threshold = score, na_probs[qid]
    return 100.0 * best / len(scores), best_threshold


def evaluate_v2(dataset: List[dict], predictions: Dict[str, str], na_probs: Optional[Dict[str, float]] = None,
                na_prob_threshold: float = 1.0) -> Dict[str, float]:
    """Official v2.0 results (see the module docstring for the keys)."""
    exact_raw, f1_raw, has_answer = raw_scores_v2(dataset, predictions)
    given_na = na_probs is not None
    if given_na:
        absent = [qid for qid in exact_raw if qid not in na_probs]
        if absent:
            raise UserError(f"the null-odds file has no value for {len(absent)} answered questions "
                            f"(first: {absent[0]}); was it written with these predictions?")
    else:
        na_probs = {qid: 0.0 for qid in predictions}
    exact = _threshold(exact_raw, na_probs, has_answer, na_prob_threshold)
    f1 = _threshold(f1_raw, na_probs, has_answer, na_prob_threshold)
    result = _summary(exact, f1, list(exact))
    for name, wanted in (("HasAns", True), ("NoAns", False)):
        qids = [qid for qid, answerable in has_answer.items() if answerable == wanted]
        if qids:
            result.update({f"{name}_{key}": value for key, value in _summary(exact, f1, qids).items()})
    if given_na:
        relevant = {qid: p for qid, p in na_probs.items() if qid in predictions}  # file order breaks ties
        result["best_exact"], result["best_exact_thresh"] = _best_threshold(predictions, exact_raw, relevant,
                                                                            has_answer)
        result["best_f1"], result["best_f1_thresh"] = _best_threshold(predictions, f1_raw, relevant, has_answer)
    return result


def load_dataset(data_file: str) -> List[dict]:
    """The `data` list of a SQuAD json file, with the fields scoring reads checked (a damaged file is reported
    at the place of the damage, not as a KeyError in the middle of scoring)."""
    data = load_json(data_file, "data file")
    if not isinstance(data, dict) or not isinstance(data.get("data"), list):
        raise UserError(f"{data_file}: not a SQuAD data file (no 'data' list)")
    for a, article in enumerate(data["data"]):
        for p, paragraph in enumerate(require(article, "paragraphs", list, f"{data_file}: data[{a}]")):
            where = f"{data_file}: data[{a}].paragraphs[{p}]"
            for q, qa in enumerate(require(paragraph, "qas", list, where)):
                require(qa, "id", str, f"{where}.qas[{q}]")
                for i, answer in enumerate(require(qa, "answers", list, f"{where}.qas[{q}]")):
                    require(answer, "text", str, f"{where}.qas[{q}].answers[{i}]")
    return data["data"]


def check_answerable(dataset: List[dict], data_file: str) -> None:
    """v1.1 scores a question by its best match among the gold answers: a question without any (SQuAD v2.0's
    unanswerable ones) has nothing to score against, and the official v1.1 script crashes on it."""
    for a, article in enumerate(dataset):
        for p, paragraph in enumerate(article["paragraphs"]):
            for q, qa in enumerate(paragraph["qas"]):
                if not qa["answers"]:
                    raise UserError(f"{data_file}: data[{a}].paragraphs[{p}].qas[{q}]: question {qa['id']} has no "
                                    f"gold answers (an unanswerable SQuAD v2.0 question?): score this file with "
                                    f"--version 2.0")


def load_inputs(data_file: str, pred_file: str, na_prob_file: str = "") -> Tuple[List[dict], Dict[str, str],
                                                                                 Optional[Dict[str, float]]]:
    """The data set's `data` list, the predictions and the null odds, checked to belong together."""
    dataset = load_dataset(data_file)
    predictions = load_json(pred_file, "predictions file")
    if not isinstance(predictions, dict) or not all(isinstance(v, str) for v in predictions.values()):
        raise UserError(f"{pred_file}: expected a json object mapping question ids to answer strings")
    if not predictions:
        raise UserError(f"{pred_file}: no predictions")
    ids = {qa["id"] for qa in questions(dataset)}
    if not ids & set(predictions):
        raise UserError(f"{pred_file}: none of its {len(predictions)} question ids is in {data_file}: predictions "
                        f"for another data set?")
    na_probs = load_json(na_prob_file, "null-odds file") if na_prob_file else None
    if na_probs is not None and not (isinstance(na_probs, dict) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in na_probs.values())):
        raise UserError(f"{na_prob_file}: expected a json object mapping question ids to null odds (numbers)")
    return dataset, predictions, na_probs


def check_null_odds_flags(args) -> None:
    """The threshold has no default: the official script's 1.0 is meant for probabilities, while this package's
    null_odds.json holds null scores thresholded at the run's null_score_diff_threshold, so a default would
    silently give other numbers than the run's eval_results.json. A flag that would be ignored is refused."""
    if args.version == "1.1" and (args.na_prob_file or args.na_prob_thresh is not None):
        raise UserError(f"{'--na_prob_file' if args.na_prob_file else '--na_prob_thresh'} is for --version 2.0")
    if args.na_prob_thresh is not None and not args.na_prob_file:
        raise UserError("--na_prob_thresh goes with --na_prob_file (the null odds it is compared with)")
    if args.na_prob_file and args.na_prob_thresh is None:
        raise UserError("--na_prob_file needs --na_prob_thresh: the run's null_score_diff_threshold (0.0 by default) "
                        "for this package's null_odds.json (null scores, not probabilities), 1.0 for the official "
                        "script's probabilities")


def main(argv: List[str]) -> int:
    parser = ArgumentParser(prog="python -m src.squad_postprocess", description=__doc__.splitlines()[0])
    parser.add_argument("--version", required=True, choices=["1.1", "2.0"], help="SQuAD version of the data")
    parser.add_argument("--data_file", required=True, help="official-format SQuAD json (dev set)")
    parser.add_argument("--pred_file", required=True, help="predictions.json: {question id: answer text}")
    parser.add_argument("--na_prob_file", default="",
                        help="v2.0: {question id: null odds}; this package's null_odds.json holds null scores (the "
                             "answer-class logit, any real number), the official script's file probabilities")
    parser.add_argument("--na_prob_thresh", type=real, default=None,
                        help="v2.0, required with --na_prob_file: a question counts as unanswered when its null odds "
                             "exceed this; the run's null_score_diff_threshold (0.0 by default) for this package's "
                             "null_odds.json, 1.0 for the official script's probabilities")
    args = parser.parse_args(argv)
    check_null_odds_flags(args)
    dataset, predictions, na_probs = load_inputs(args.data_file, args.pred_file, args.na_prob_file)
    if args.version == "1.1":
        check_answerable(dataset, args.data_file)
    version = load_json(args.data_file, "data file").get("version")
    if args.version == "1.1" and version != "1.1":  # a warning, as in the official v1.1 script
        print(f"Evaluation expects v-1.1, but got dataset with v-{version}", file=sys.stderr)
    if args.version == "1.1":
        result = evaluate_v1(dataset, predictions, warn=lambda message: print(message, file=sys.stderr))
    else:
        result = evaluate_v2(dataset, predictions, na_probs,
                             args.na_prob_thresh if na_probs is not None else 1.0)  # no odds: the threshold is moot
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
