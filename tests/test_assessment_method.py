"""Fine-tuning metrics against scipy and against values worked out by hand."""
import numpy as np
import pytest

from model_utils.errors import UserError
from src.tasks.assessment_method import (METHODS, accuracy, f1, matthews_correlation, pearson_correlation,
                                         spearman_correlation)


def test_hand_worked_binary_case():
    labels = [1, 1, 1, 0, 0, 0, 0, 1]
    predictions = [1, 1, 0, 0, 0, 1, 0, 1]  # TP 3, FN 1, FP 1, TN 3
    assert accuracy(labels, predictions) == 0.75
    assert f1(labels, predictions) == pytest.approx(0.75)  # 2*3 / (4 + 4)
    assert matthews_correlation(labels, predictions) == pytest.approx((3 * 3 - 1 * 1) / 16)  # sqrt(4*4*4*4) = 16
    assert f1(labels, predictions, average="macro") == pytest.approx(0.75)


def test_mcc_multiclass_and_degenerate_cases():
    # perfect and inverted predictions
    assert matthews_correlation([0, 1, 2, 2], [0, 1, 2, 2]) == pytest.approx(1.0)
    assert matthews_correlation([0, 1, 0, 1], [1, 0, 1, 0]) == pytest.approx(-1.0)
    assert matthews_correlation([0, 1, 0, 1], [1, 1, 1, 1]) == 0.0  # constant prediction: undefined -> 0
    assert f1([0, 0], [0, 0]) == 0.0  # no positives anywhere


def test_correlations_match_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    labels = np.round(rng.uniform(0, 5, 300), 1)  # STS-B-like scores with many ties
    predictions = labels + rng.normal(0, 1.0, 300)
    predictions[:40] = np.round(predictions[:40])
    assert pearson_correlation(labels, predictions) == pytest.approx(stats.pearsonr(labels, predictions)[0],
                                                                     rel=1e-10)
    assert spearman_correlation(labels, predictions) == pytest.approx(stats.spearmanr(labels, predictions)[0],
                                                                      rel=1e-10)
    with pytest.raises(UserError, match="constant"):
        pearson_correlation([1, 1, 1], [1, 2, 3])


def test_mcc_and_macro_f1_against_independent_formulas():
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 3, 500)
    predictions = np.where(rng.random(500) < 0.6, labels, rng.integers(0, 3, 500))
    # macro F1 from per-class precision and recall
    scores = []
    for c in range(3):
        tp = np.sum((labels == c) & (predictions == c))
        precision, recall = tp / np.sum(predictions == c), tp / np.sum(labels == c)
        scores.append(2 * precision * recall / (precision + recall))
    assert f1(labels, predictions, average="macro") == pytest.approx(np.mean(scores))
    # binary MCC equals the phi coefficient, i.e. Pearson correlation of the 0/1 indicators
    binary_labels, binary_predictions = labels == 2, predictions == 2
    phi = np.corrcoef(binary_labels.astype(float), binary_predictions.astype(float))[0, 1]
    assert matthews_correlation(binary_labels, binary_predictions) == pytest.approx(phi)


def test_method_names_and_bad_input():
    assert set(METHODS) >= {"accuracy", "f1", "mcc", "spearman_correlation"}
    with pytest.raises(UserError, match="equally long"):
        accuracy([1, 2], [1])
    with pytest.raises(UserError, match="'binary' or 'macro'"):
        f1([1], [1], average="micro")
