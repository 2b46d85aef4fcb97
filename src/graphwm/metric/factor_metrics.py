"""Factor-wise distribution metrics (paper appendix "Factor-Wise Distribution Metrics").

Computed between the model's and the environment's sample sets of one transition:

* ``adjacency_bce``: binary cross-entropy of the model's empirical edge probabilities
  (clipped to [1e-3, 1 - 1e-3] because they come from a finite number of samples) against
  the environment's empirical edge frequencies, averaged over unordered node pairs;
* each continuous feature: the 1-D Wasserstein-1 distance between the model's and the
  environment's samples (environment units), averaged over nodes for node features;
* each categorical feature: the total-variation distance between the empirical category
  distributions, averaged over nodes for node features.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

EDGE_PROB_CLIP = 1e-3


def wasserstein1(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """W1 between sample sets along axis 0 (columns independent), via quantile functions."""
    x, y = np.sort(x, axis=0), np.sort(y, axis=0)
    if x.shape[0] == y.shape[0]:
        return np.abs(x - y).mean(axis=0)
    q = np.linspace(0, 1, 201)[1:-1]
    return np.abs(np.quantile(x, q, axis=0) - np.quantile(y, q, axis=0)).mean(axis=0)


def total_variation(x: np.ndarray, y: np.ndarray, card: int) -> np.ndarray:
    """TV distance between empirical category distributions along axis 0."""
    px = np.stack([(x == c).mean(axis=0) for c in range(card)])
    py = np.stack([(y == c).mean(axis=0) for c in range(card)])
    return 0.5 * np.abs(px - py).sum(axis=0)


def adjacency_bce(model_adj: np.ndarray, env_adj: np.ndarray) -> float:
    """BCE of empirical model edge probabilities against empirical env edge frequencies."""
    n = model_adj.shape[-1]
    if n < 2:
        return 0.0
    iu = np.triu_indices(n, k=1)
    p = np.clip(model_adj[:, iu[0], iu[1]].mean(axis=0), EDGE_PROB_CLIP, 1 - EDGE_PROB_CLIP)
    q = env_adj[:, iu[0], iu[1]].mean(axis=0)
    return float(np.mean(-(q * np.log(p) + (1 - q) * np.log(1 - p))))


def factor_metrics(
    model_set: Mapping[str, np.ndarray],
    env_set: Mapping[str, np.ndarray],
    schema: Mapping[str, Any],
    terminal: bool,
) -> dict[str, Any]:
    """Factor-wise metrics of one transition on metric sample sets (extended ``schema``)."""
    features: dict[str, float] = {}
    out: dict[str, Any] = {"features": features}
    if not terminal:
        out["adjacency_bce"] = adjacency_bce(model_set["adjacency"], env_set["adjacency"])
        for i, name in enumerate(schema["node_continuous"]):
            m, e = model_set["node_continuous"][..., i], env_set["node_continuous"][..., i]
            features[name] = float(wasserstein1(m, e).mean())
        for i, (name, card) in enumerate(schema["node_categorical"].items()):
            m, e = model_set["node_categorical"][..., i], env_set["node_categorical"][..., i]
            features[name] = float(total_variation(m, e, card).mean())
    for i, name in enumerate(schema["graph_continuous"]):
        if terminal and name != "reward":
            continue
        m, e = model_set["graph_continuous"][:, i], env_set["graph_continuous"][:, i]
        features[name] = float(wasserstein1(m, e))
    for i, (name, card) in enumerate(schema["graph_categorical"].items()):
        if terminal and name != "continuation":
            continue
        m, e = model_set["graph_categorical"][:, i], env_set["graph_categorical"][:, i]
        features[name] = float(total_variation(m, e, card))
    return out


def metric_name(factor: str, schema: Mapping[str, Any]) -> str:
    """The metric behind one factor of :func:`factor_metrics`: ``"BCE"`` (adjacency),
    ``"W1"`` (continuous features and the reward) or ``"TV"`` (categorical features, the
    action mask and the continuation); ``schema`` is the env's feature schema."""
    if factor == "adjacency_bce":
        return "BCE"
    continuous = {*schema["node_continuous"], *schema["graph_continuous"], "reward"}
    return "W1" if factor in continuous else "TV"


def average_metrics(items: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean of factor-metric dicts (each key averaged over the items that have it)."""
    bces = [d["adjacency_bce"] for d in items if "adjacency_bce" in d]
    names: dict[str, list[float]] = {}
    for d in items:
        for k, v in d["features"].items():
            names.setdefault(k, []).append(v)
    out: dict[str, Any] = {"features": {k: float(np.mean(v)) for k, v in names.items()}}
    if bces:
        out["adjacency_bce"] = float(np.mean(bces))
    return out
