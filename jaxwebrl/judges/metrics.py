"""How well a judge agrees with reference labels: accuracy, precision, recall and AUC with 95% bootstrap
intervals, the majority-class baseline beside them, and a calibration table (for the plot in a report).

`scores` are the judge's probability of SUCCESS (e.g. the verdict token's probability); a score >= 0.5 is a
SUCCESS verdict. Intervals are percentile bootstrap over episodes with a fixed seed, so a report is
reproducible.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np


def auc(labels: Sequence[bool], scores: Sequence[float]) -> float:
    """Area under the ROC curve = P(score of a random positive > a random negative), ties count 1/2."""
    y = np.asarray(labels, bool)
    s = np.asarray(scores, np.float64)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order), np.float64)
    allv = np.concatenate([pos, neg])[order]
    # average ranks of ties
    i = 0
    while i < len(allv):
        j = i
        while j + 1 < len(allv) and allv[j + 1] == allv[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    r_pos = ranks[: len(pos)].sum()
    return float((r_pos - len(pos) * (len(pos) + 1) / 2.0) / (len(pos) * len(neg)))


def _point(labels: np.ndarray, scores: np.ndarray) -> dict[str, float]:
    pred = scores >= 0.5
    tp = float(np.sum(pred & labels))
    fp = float(np.sum(pred & ~labels))
    fn = float(np.sum(~pred & labels))
    majority = labels.mean() >= 0.5
    accuracy = float(np.mean(pred == labels))
    return {
        "accuracy": accuracy,
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "recall": tp / (tp + fn) if tp + fn else float("nan"),
        "auc": auc(labels, scores),
        "majority_accuracy": float(np.mean(labels == majority)),
        "accuracy_minus_majority": accuracy - float(np.mean(labels == majority)),  # paired, per resample
    }


@dataclasses.dataclass(frozen=True)
class Agreement:
    n: int
    positives: int
    point: dict[str, float]
    low: dict[str, float]
    high: dict[str, float]

    def row(self, name: str) -> str:
        return f"{self.point[name]:.3f} [{self.low[name]:.3f}, {self.high[name]:.3f}]"


def agreement(labels: Sequence[bool], scores: Sequence[float], *, resamples: int = 2000, seed: int = 0) -> Agreement:
    """Point values and 95% percentile-bootstrap intervals of `_point`'s metrics."""
    y = np.asarray(labels, bool)
    s = np.asarray(scores, np.float64)
    if y.shape != s.shape or not len(y):
        raise ValueError(f"labels ({y.shape}) and scores ({s.shape}) must be equal, non-empty vectors")
    point = _point(y, s)
    rng = np.random.default_rng(seed)
    draws: dict[str, list[float]] = {k: [] for k in point}
    for _ in range(resamples):
        idx = rng.integers(0, len(y), len(y))
        for k, v in _point(y[idx], s[idx]).items():
            draws[k].append(v)
    low = {k: float(np.nanpercentile(v, 2.5)) for k, v in draws.items()}
    high = {k: float(np.nanpercentile(v, 97.5)) for k, v in draws.items()}
    return Agreement(len(y), int(y.sum()), point, low, high)


def calibration(labels: Sequence[bool], scores: Sequence[float], bins: int = 10) -> list[tuple[float, float, int]]:
    """(mean score, observed success rate, count) per equal-width score bin that holds episodes."""
    y = np.asarray(labels, bool)
    s = np.asarray(scores, np.float64)
    which = np.minimum((s * bins).astype(int), bins - 1)
    return [(float(s[which == b].mean()), float(y[which == b].mean()), int(np.sum(which == b)))
            for b in range(bins) if np.any(which == b)]
