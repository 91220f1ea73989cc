"""Per-feature SQuAD model outputs -> answer texts, n-best lists and null odds (Google ALBERT's postprocessing).

    examples, features = load_squad_eval_maps("data/squad_dev.mindrecord")
    predictions, nbest = predictions_v1(examples, features, {unique_id: (start_logits, end_logits), ...})
    predictions, nbest, null_odds = predictions_v2(examples, features, {unique_id: beam_outputs, ...})
    write_prediction_files("output/", predictions, nbest, null_odds)

The inputs are the feature maps that `src.create_squad_data` writes beside evaluation data
(`<data>.examples.jsonl`, `<data>.features.jsonl`). A question's context is split into overlapping windows
(features); candidate answer spans of all its windows compete:
- v1.1 (as Google's `write_predictions`): the `n_best_size` best start and end positions by logit, every pair
  scored start_logit + end_logit.
- v2.0 (as Google's `accumulate_predictions_v2`/`write_predictions_v2`): the model's beam search gives the
  `start_n_top` best starts and, for each, the `end_n_top` best ends; a pair scores start_log_prob + end_log_prob.
  The null score of a question is the smallest `cls_logits` over its windows (a high answer-class logit means "no
  answer"; the window that sees the answer best decides), and the question is answered "" when it exceeds
  `null_score_diff_threshold`.
A span counts only if both ends lie in the context part of the window, it is not reversed, it has at most
`max_answer_length` tokens, and the window is the one giving its first token the most context (each token is
judged in the window where it sits most centrally, so a span is not counted twice).

Unlike Google's `get_final_text`, which re-tokenizes the context and guesses the alignment of the lowercased,
accent-stripped pieces with the original words, the answer text here is cut from the original context with the
character span that create_squad_data recorded for every piece: case, accents and punctuation are the original's
by construction. Where no valid span exists Google writes "empty"; here the answer is "", which every SQuAD scorer
treats like any other wrong answer for v1.1 and as "no answer" for v2.0.
"""
import json
import logging
import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from model_utils import json_input
from model_utils.errors import UserError
from src.common.atomic_files import save_json_atomic

EXAMPLES_SUFFIX = ".examples.jsonl"
FEATURES_SUFFIX = ".features.jsonl"
META_SUFFIX = ".meta.json"
EXAMPLE_KEYS = ("example_index", "qas_id", "context")
FEATURE_KEYS = ("unique_id", "example_index", "tokens", "token_to_orig_map", "token_to_char_span",
                "token_is_max_context")
V2_KEYS = ("start_top_log_probs", "start_top_index", "end_top_log_probs", "end_top_index", "cls_logits")
# Google's placeholder log probabilities for the "no valid span" n-best entry of v2.
EMPTY_V2_LOG_PROB = -1e6
# Null score of a v2 question none of whose windows got a model output: "no answer" at any usable threshold,
# and finite so that null_odds.json stays standard JSON.
NO_RESULT_NULL_SCORE = 1e6

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------- loading

def sidecar_base(data_file: str) -> Path:
    """The --output_file of the src.create_* tool that `data_file` names (itself, a numbered shard, or its folder)."""
    path = Path(data_file)
    if path.is_dir():
        found = sorted(path.glob("*" + EXAMPLES_SUFFIX))
        if len(found) == 1:
            return Path(str(found[0])[:-len(EXAMPLES_SUFFIX)])
        if found:
            names = ", ".join(p.name[:-len(EXAMPLES_SUFFIX)] for p in found)
            raise UserError(f"{path} holds {len(found)} SQuAD evaluation data sets ({names}); name the one to use")
        raise UserError(f"{path}: no SQuAD evaluation data here (no *{EXAMPLES_SUFFIX} feature map); create it "
                        f"with src.create_squad_data --is_training false")
    trailing_digits = len(path.name) - len(path.name.rstrip("0123456789"))
    for cut in range(trailing_digits + 1):  # "dev.mindrecord3" is shard 3 of "dev.mindrecord"
        base = path.with_name(path.name[:len(path.name) - cut]) if cut else path
        if base.name and Path(str(base) + EXAMPLES_SUFFIX).is_file():
            return base
    raise UserError(_missing_sidecar_message(path))


def _missing_sidecar_message(base: Path) -> str:
    expected = f"{base}{EXAMPLES_SUFFIX}"
    meta = Path(str(base) + META_SUFFIX)
    try:
        is_training = json.loads(meta.read_text(encoding="utf-8")).get("is_training")
    except (OSError, ValueError, AttributeError):
        is_training = None
    if is_training:
        return (f"{base} is SQuAD training data (is_training true), which has no feature map ({expected}); "
                f"predictions need evaluation data: create it with src.create_squad_data --is_training false")
    return (f"{expected} not found: predictions need the feature map that src.create_squad_data writes beside "
            f"evaluation data; create the data with --is_training false")


def _read_jsonl(path: Path, keys: Sequence[str]) -> List[Dict[str, Any]]:
    """Rows of a sidecar, each checked to have `keys` (errors name file and line)."""
    rows = []
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json_input.loads(line)
            except json.JSONDecodeError as err:
                raise UserError(f"{path} line {line_number}: malformed json ({err.msg})") from None
            missing = [key for key in keys if not isinstance(row, dict) or key not in row]
            if missing:
                raise UserError(f"{path} line {line_number}: missing field '{missing[0]}' (not written by "
                                f"src.create_squad_data, or by an older version?)")
            rows.append(row)
    if not rows:
        raise UserError(f"{path}: empty")
    return rows


def _check_feature(feature: Dict[str, Any], num_examples: int, path: Path) -> None:
    where = f"{path}: feature {feature['unique_id']}"
    if not 0 <= feature["example_index"] < num_examples:
        raise UserError(f"{where}: example_index {feature['example_index']} is not in the examples file")
    lengths = {len(feature[key]) for key in ("tokens", "token_to_orig_map", "token_to_char_span",
                                             "token_is_max_context")}
    if len(lengths) != 1:
        raise UserError(f"{where}: its per-token lists have different lengths")


def load_squad_eval_maps(data_file: str) -> Tuple[List[dict], Dict[int, dict]]:
    """(examples in example_index order, features keyed by unique_id) from the `<data_file>.examples.jsonl` and
    `<data_file>.features.jsonl` sidecars that src.create_squad_data writes beside evaluation data. `data_file` is
    the --output_file given to create_squad_data (or one of its numbered shards `X.mindrecord0`, or the folder
    holding exactly one such data set). Missing sidecars -> UserError naming the expected path and saying the data
    must be created with is_training false."""
    base = sidecar_base(data_file)
    features_path = Path(str(base) + FEATURES_SUFFIX)
    if not features_path.is_file():
        raise UserError(f"{features_path} not found beside {base}{EXAMPLES_SUFFIX}: incompletely copied? "
                        f"Re-create the data with src.create_squad_data --is_training false")
    examples_path = Path(str(base) + EXAMPLES_SUFFIX)
    examples = sorted(_read_jsonl(examples_path, EXAMPLE_KEYS), key=lambda row: row["example_index"])
    if [row["example_index"] for row in examples] != list(range(len(examples))):
        raise UserError(f"{examples_path}: example_index is not 0..{len(examples) - 1}")
    features: Dict[int, dict] = {}
    for feature in _read_jsonl(features_path, FEATURE_KEYS):
        _check_feature(feature, len(examples), features_path)
        if feature["unique_id"] in features:
            raise UserError(f"{features_path}: unique_id {feature['unique_id']} appears twice")
        features[feature["unique_id"]] = feature
    return examples, features


# --------------------------------------------------------------------------------------------------- checking

def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise UserError(f"{name} must be an integer >= 1, got {value!r}")


def _result_ids(results: Dict[Any, Any]) -> Dict[int, Any]:
    """`results` with plain int keys (drivers may hand over numpy ints or the ids as strings)."""
    normalized = {}
    for key, value in results.items():
        try:
            normalized[int(key)] = value
        except (TypeError, ValueError):
            raise UserError(f"result key {key!r} is not a feature unique_id") from None
    return normalized


def _features_by_example(examples: Sequence[dict], features: Dict[int, dict],
                         results: Dict[int, Any]) -> List[List[dict]]:
    """For each example, its features that have a result, in unique_id order. No results, or results that match
    no feature, mean results of another data set: an error, not an all-empty prediction."""
    if not results:
        raise UserError("no model results to turn into predictions")
    unknown = sorted(uid for uid in results if uid not in features)
    if unknown:
        raise UserError(f"{len(unknown)} of {len(results)} results have unique ids that are not in the evaluation "
                        f"data (first: {unknown[0]}): results of another data set?")
    grouped: List[List[dict]] = [[] for _ in examples]
    for unique_id in sorted(results):
        grouped[features[unique_id]["example_index"]].append(features[unique_id])
    without = sum(1 for group in grouped if not group)
    if without:  # e.g. a driver that dropped the last incomplete batch
        logger.warning("%d of %d SQuAD questions got no model output and are answered ''", without, len(examples))
    return grouped


def _check_finite(unique_id: int, **values: Any) -> None:
    """Model outputs must be numbers: NaN or infinity would make NaN probabilities and non-standard json."""
    for name, value in values.items():
        if not np.all(np.isfinite(value)):
            raise UserError(f"result of feature {unique_id}: {name} has NaN or infinite values (a diverged or "
                            f"broken model?)")


def _check_length(unique_id: int, name: str, values: np.ndarray, expected: int, hint: str) -> None:
    if values.ndim != 1 or len(values) != expected:
        raise UserError(f"result of feature {unique_id}: {name} has shape {values.shape}, expected [{expected}] "
                        f"({hint})")


def results_from_outputs(unique_ids: Sequence[int], outputs: Sequence[np.ndarray]) -> Dict[int, Any]:
    """Per-feature results from a head's outputs for rows `unique_ids`: the v1 head's two arrays give
    (start_logits, end_logits), the v2 head's five a dict with the V2_KEYS."""
    if len(outputs) == 2:
        return {int(uid): (outputs[0][i], outputs[1][i]) for i, uid in enumerate(unique_ids)}
    if len(outputs) == len(V2_KEYS):
        return {int(uid): {key: outputs[k][i] for k, key in enumerate(V2_KEYS)} for i, uid in enumerate(unique_ids)}
    raise UserError(f"a SQuAD head returns 2 (v1.1) or {len(V2_KEYS)} (v2.0) outputs, got {len(outputs)}")


# ------------------------------------------------------------------------------------------------------ spans

class _Candidates:
    """Valid spans of one example's windows: parallel arrays over all of them, in the order they were added."""

    def __init__(self) -> None:
        self.parts: List[Tuple[dict, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, feature: dict, starts: np.ndarray, ends: np.ndarray, start_scores: np.ndarray,
            end_scores: np.ndarray, max_answer_length: int) -> None:
        keep = _valid_spans(feature, starts, ends, max_answer_length)
        if keep.any():
            self.parts.append((feature, starts[keep], ends[keep], start_scores[keep], end_scores[keep]))

    def best_first(self) -> Iterable[Tuple[dict, int, int, float, float]]:
        """(feature, start, end, start score, end score) by decreasing total score; ties keep insertion order."""
        if not self.parts:
            return
        owners = np.concatenate([np.full(len(p[1]), i) for i, p in enumerate(self.parts)])
        starts, ends, start_scores, end_scores = (np.concatenate([p[k] for p in self.parts]) for k in range(1, 5))
        for i in np.argsort(-(start_scores + end_scores), kind="stable"):
            yield (self.parts[owners[i]][0], int(starts[i]), int(ends[i]), float(start_scores[i]),
                   float(end_scores[i]))


def _context_masks(feature: dict) -> Tuple[np.ndarray, np.ndarray]:
    """(token may be part of an answer, an answer may start at the token: in context and at its max context)."""
    in_context = np.array([word != -1 and span is not None for word, span
                           in zip(feature["token_to_orig_map"], feature["token_to_char_span"])], dtype=bool)
    return in_context, in_context & np.array(feature["token_is_max_context"], dtype=bool)


def _valid_spans(feature: dict, starts: np.ndarray, ends: np.ndarray, max_answer_length: int) -> np.ndarray:
    """Which (start, end) token pairs are answers this window may give (see the module docstring)."""
    in_context, start_allowed = _context_masks(feature)
    length = len(in_context)
    inside = (starts >= 0) & (starts < length) & (ends >= 0) & (ends < length)
    valid = inside.copy()
    s, e = starts[inside], ends[inside]
    valid[inside] = start_allowed[s] & in_context[e] & (e >= s) & (e - s + 1 <= max_answer_length)
    return valid


def _span_text(example: dict, feature: dict, start: int, end: int) -> str:
    """The original context's characters from the first piece's start to the last piece's end."""
    spans = feature["token_to_char_span"]
    return example["context"][spans[start][0]:spans[end][1]].strip()


def _softmax(scores: Sequence[float]) -> List[float]:
    top = max(scores)
    exps = [math.exp(score - top) for score in scores]
    total = sum(exps)
    return [value / total for value in exps]


def _nbest(example: dict, candidates: _Candidates, n_best_size: int, score_names: Tuple[str, str],
           empty_score: float) -> List[dict]:
    """The best `n_best_size` distinct non-empty answer texts with softmax probabilities over their scores; a
    single "" entry (probability 1) when no valid span exists."""
    chosen: List[Tuple[str, float, float]] = []
    seen = set()
    for feature, start, end, start_score, end_score in candidates.best_first():
        text = _span_text(example, feature, start, end)
        if not text or text in seen:  # a span of bare word-boundary pieces has no text
            continue
        seen.add(text)
        chosen.append((text, start_score, end_score))
        if len(chosen) == n_best_size:
            break
    if not chosen:
        return [{"text": "", "probability": 1.0, score_names[0]: empty_score, score_names[1]: empty_score}]
    probabilities = _softmax([s + e for _, s, e in chosen])
    return [{"text": text, "probability": p, score_names[0]: s, score_names[1]: e}
            for (text, s, e), p in zip(chosen, probabilities)]


# --------------------------------------------------------------------------------------------------------- v1

def _v1_candidates(feature: dict, unique_id: int, result: Any,
                   n_best_size: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Every pair of the `n_best_size` best start and end positions, with their logits."""
    try:
        start_logits, end_logits = (np.asarray(x, dtype=np.float64) for x in result)
    except (TypeError, ValueError):
        raise UserError(f"result of feature {unique_id}: expected (start_logits, end_logits)") from None
    if start_logits.ndim != 1 or start_logits.shape != end_logits.shape:
        raise UserError(f"result of feature {unique_id}: start_logits {start_logits.shape} and end_logits "
                        f"{end_logits.shape} must be two vectors of one logit per position")
    if len(start_logits) < len(feature["tokens"]):
        raise UserError(f"result of feature {unique_id}: {len(start_logits)} logits for a feature of "
                        f"{len(feature['tokens'])} tokens: results of another data set?")
    _check_finite(unique_id, start_logits=start_logits, end_logits=end_logits)
    top_starts = np.argsort(-start_logits, kind="stable")[:n_best_size]
    top_ends = np.argsort(-end_logits, kind="stable")[:n_best_size]
    starts = np.repeat(top_starts, len(top_ends))
    ends = np.tile(top_ends, len(top_starts))
    return starts, ends, start_logits[starts], end_logits[ends]


def predictions_v1(examples: Sequence[dict], features: Dict[int, dict],
                   results: Dict[int, Tuple[np.ndarray, np.ndarray]], n_best_size: int = 20,
                   max_answer_length: int = 30) -> Tuple[Dict[str, str], Dict[str, List[dict]]]:
    """SQuAD v1.1 answers from start/end logits.

    results: unique_id -> (start_logits [S], end_logits [S]) float arrays (S = the feature's max_seq_length).
    Returns (predictions {qas_id: answer text}, nbest {qas_id: [{"text", "probability", "start_logit",
    "end_logit"}, ...]}); a question without any valid span is answered "" (Google: "empty")."""
    _check_positive(n_best_size=n_best_size, max_answer_length=max_answer_length)
    results = _result_ids(results)
    predictions: Dict[str, str] = {}
    nbest: Dict[str, List[dict]] = {}
    for example, example_features in zip(examples, _features_by_example(examples, features, results)):
        candidates = _Candidates()
        for feature in example_features:
            uid = feature["unique_id"]
            starts, ends, start_scores, end_scores = _v1_candidates(feature, uid, results[uid], n_best_size)
            candidates.add(feature, starts, ends, start_scores, end_scores, max_answer_length)
        entries = _nbest(example, candidates, n_best_size, ("start_logit", "end_logit"), 0.0)
        predictions[example["qas_id"]] = entries[0]["text"]
        nbest[example["qas_id"]] = entries
    return predictions, nbest


# --------------------------------------------------------------------------------------------------------- v2

def _v2_candidates(feature: dict, unique_id: int, result: Any, start_n_top: int,
                   end_n_top: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, float]:
    """The K1 x K2 beam pairs of one window (start i, end i*K2+j) with their log probs, and its cls logit."""
    if not isinstance(result, dict) or any(key not in result for key in V2_KEYS):
        raise UserError(f"result of feature {unique_id}: expected a dict with {', '.join(V2_KEYS)}")
    arrays = {key: np.asarray(result[key]) for key in V2_KEYS[:4]}
    hint = "start_n_top/end_n_top must be those of the model that produced the results"
    for key, size in zip(V2_KEYS[:4], (start_n_top, start_n_top, start_n_top * end_n_top,
                                       start_n_top * end_n_top)):
        _check_length(unique_id, key, arrays[key], size, hint)
    try:
        cls_logit = float(np.asarray(result["cls_logits"]).reshape(()))
    except (TypeError, ValueError):
        raise UserError(f"result of feature {unique_id}: cls_logits must be one number") from None
    _check_finite(unique_id, start_top_log_probs=arrays["start_top_log_probs"],
                  end_top_log_probs=arrays["end_top_log_probs"], cls_logits=cls_logit)
    starts = np.repeat(arrays["start_top_index"].astype(np.int64), end_n_top)
    start_scores = np.repeat(arrays["start_top_log_probs"].astype(np.float64), end_n_top)
    return (starts, arrays["end_top_index"].astype(np.int64), start_scores,
            arrays["end_top_log_probs"].astype(np.float64), cls_logit)


def predictions_v2(examples: Sequence[dict], features: Dict[int, dict], results: Dict[int, dict],
                   n_best_size: int = 20, max_answer_length: int = 30, start_n_top: int = 5, end_n_top: int = 5,
                   null_score_diff_threshold: float = 0.0
                   ) -> Tuple[Dict[str, str], Dict[str, List[dict]], Dict[str, float]]:
    """SQuAD v2.0 answers from the beam-search outputs of Google ALBERT's v2 head.

    results: unique_id -> {"start_top_log_probs": [K1], "start_top_index": [K1] int, "end_top_log_probs":
    [K1*K2], "end_top_index": [K1*K2] int (entry i*K2+j = j-th best end for the i-th best start), "cls_logits":
    float}, K1 = start_n_top, K2 = end_n_top. Returns (predictions, nbest, null_odds): null_odds[qas_id] is the
    smallest cls_logits of the question's windows (NO_RESULT_NULL_SCORE when none has a result), and the answer
    is "" when it exceeds null_score_diff_threshold (or no valid span exists), else the best span's text."""
    _check_positive(n_best_size=n_best_size, max_answer_length=max_answer_length, start_n_top=start_n_top,
                    end_n_top=end_n_top)
    threshold = float(null_score_diff_threshold)
    results = _result_ids(results)
    predictions: Dict[str, str] = {}
    nbest: Dict[str, List[dict]] = {}
    null_odds: Dict[str, float] = {}
    for example, example_features in zip(examples, _features_by_example(examples, features, results)):
        candidates = _Candidates()
        null_score = NO_RESULT_NULL_SCORE if not example_features else math.inf
        for feature in example_features:
            uid = feature["unique_id"]
            starts, ends, start_scores, end_scores, cls_logit = _v2_candidates(feature, uid, results[uid],
                                                                               start_n_top, end_n_top)
            null_score = min(null_score, cls_logit)
            candidates.add(feature, starts, ends, start_scores, end_scores, max_answer_length)
        entries = _nbest(example, candidates, n_best_size, ("start_log_prob", "end_log_prob"), EMPTY_V2_LOG_PROB)
        qas_id = example["qas_id"]
        null_odds[qas_id] = null_score
        predictions[qas_id] = "" if null_score > threshold else entries[0]["text"]
        nbest[qas_id] = entries
    return predictions, nbest, null_odds


# ------------------------------------------------------------------------------------------------------ files

def write_prediction_files(output_dir: str, predictions: Dict[str, str], nbest: Dict[str, List[dict]],
                           null_odds: Optional[Dict[str, float]] = None) -> List[str]:
    """predictions.json, nbest_predictions.json and (when null_odds is given) null_odds.json, each written
    atomically, in the official formats the SQuAD scorers read. Returns their paths."""

    outputs = [("predictions.json", predictions), ("nbest_predictions.json", nbest)]
    if null_odds is not None:
        outputs.append(("null_odds.json", null_odds))
    paths = []
    for name, values in outputs:
        path = str(Path(output_dir) / name)
        save_json_atomic(values, path)
        paths.append(path)
    return paths

