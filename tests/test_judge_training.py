"""The judge-agreement metrics of a trained judge (jaxwebrl.judges.metrics) against independent references:
AUC against scipy's Mann-Whitney U, precision / recall / accuracy counted by hand, the bootstrap interval
around the point value and reproducible, the calibration table's bins."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import mannwhitneyu

from jaxwebrl.judges.metrics import agreement, auc, calibration


def test_auc_equals_mann_whitney_u_with_ties() -> None:
    rng = np.random.default_rng(0)
    labels = rng.random(200) < 0.3
    scores = np.round(rng.random(200) * 0.6 + 0.3 * labels, 1)  # rounded: many ties
    u = mannwhitneyu(scores[labels], scores[~labels]).statistic
    assert labels.sum() > 10 and len(np.unique(scores)) < 20
    assert auc(labels, scores) == pytest.approx(u / (labels.sum() * (~labels).sum()), abs=1e-12)
    assert auc([True, False], [0.9, 0.1]) == 1.0 and auc([True, False], [0.1, 0.9]) == 0.0
    assert auc([True, False], [0.5, 0.5]) == 0.5


def test_agreement_counts_and_intervals() -> None:
    labels = [True, True, True, False, False, False, False, False]
    scores = [0.9, 0.6, 0.2, 0.7, 0.1, 0.3, 0.4, 0.05]
    a = agreement(labels, scores, resamples=500, seed=1)
    # by hand: predicted positive = {0.9, 0.6, 0.7}: tp 2, fp 1, fn 1; 6 of 8 right; majority (negative) 5 of 8
    assert (a.n, a.positives) == (8, 3)
    assert a.point["precision"] == pytest.approx(2 / 3) and a.point["recall"] == pytest.approx(2 / 3)
    assert a.point["accuracy"] == pytest.approx(6 / 8) and a.point["majority_accuracy"] == pytest.approx(5 / 8)
    assert a.point["auc"] == pytest.approx(11 / 15)  # pairs ordered right: 0.9 > 5 negatives, 0.6 > 4, 0.2 > 2
    for k, v in a.point.items():
        assert a.low[k] <= v <= a.high[k] and a.low[k] < a.high[k], k
    assert agreement(labels, scores, resamples=500, seed=1) == a  # fixed seed: the same intervals
    with pytest.raises(ValueError, match="equal, non-empty"):
        agreement([True], [0.1, 0.2])


def test_calibration_bins() -> None:
    table = calibration([True, False, True, True], [0.05, 0.08, 0.95, 0.91], bins=10)
    assert table == [(pytest.approx(0.065), 0.5, 2), (pytest.approx(0.93), 1.0, 2)]
