"""The metric graph of a transition (docs/architecture.md, contract 4), defined once for the
project.

The next observation is extended with the reward (continuous graph feature ``reward``), the
continuation flag ``1 - terminated`` (categorical graph feature ``continuation``, 2 values) and
the action mask (categorical node feature ``action_mask``, 2 values), as the paper's
"Evaluation Details" prescribe. The schema is extended the same way. A reference transition
whose reference step terminated is scored on reward and continuation only.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gdm_models.data import OBS_KEYS, complete_observation

METRIC_KEYS = (
    "adjacency",
    "node_continuous",
    "node_categorical",
    "graph_continuous",
    "graph_categorical",
)


def extend_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The env schema plus ``reward``, ``continuation`` and ``action_mask``."""
    out = copy.deepcopy(dict(schema))
    # an env of one's own may use any feature name: refuse the three the metric adds
    names = {n for key in METRIC_KEYS[1:] for n in out.get(key, ())}
    for name in ("reward", "continuation", "action_mask"):
        if name in names:
            raise ValueError(
                f"env schema already has a feature named {name!r} (the metric graph adds "
                "'reward', 'continuation' and 'action_mask'; rename the env's feature)"
            )
    out["node_categorical"] = {**out.get("node_categorical", {}), "action_mask": 2}
    out["graph_continuous"] = [*out.get("graph_continuous", []), "reward"]
    out["graph_categorical"] = {**out.get("graph_categorical", {}), "continuation": 2}
    out.setdefault("node_continuous", [])
    return out


def terminal_schema() -> dict[str, Any]:
    """Schema of a terminal transition: reward and continuation only."""
    return {
        "node_continuous": [],
        "node_categorical": {},
        "graph_continuous": ["reward"],
        "graph_categorical": {"continuation": 2},
    }


def metric_graph(obs: Mapping[str, np.ndarray], reward: float, terminated: bool) -> dict:
    """One transition's metric graph (single sample, no leading axis).

    A feature key the env leaves out (a feature type it lacks) is read as zero-width.
    """
    obs = complete_observation(obs)
    return {
        "adjacency": np.asarray(obs["adjacency"], dtype=np.int8),
        "node_continuous": np.asarray(obs["node_continuous"], dtype=np.float64),
        "node_categorical": np.concatenate(
            [
                np.asarray(obs["node_categorical"], dtype=np.int64),
                np.asarray(obs["action_mask"], dtype=np.int64)[:, None],
            ],
            axis=1,
        ),
        "graph_continuous": np.append(
            np.asarray(obs["graph_continuous"], dtype=np.float64), float(reward)
        ),
        "graph_categorical": np.append(
            np.asarray(obs["graph_categorical"], dtype=np.int64), int(not terminated)
        ),
    }


def stack_graphs(graphs: Sequence[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Stack single metric graphs on a leading sample axis."""
    if not graphs:
        raise ValueError("cannot stack an empty list of metric graphs")
    return {k: np.stack([g[k] for g in graphs]) for k in METRIC_KEYS}


def model_samples_to_metric(samples: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Model output (observation keys + ``reward`` (S,) + ``continuation`` (S,)) -> metric set."""
    missing = [k for k in (*OBS_KEYS, "reward", "continuation") if k not in samples]
    if missing:
        raise ValueError(f"model samples miss keys {missing}")
    return {
        "adjacency": np.asarray(samples["adjacency"], dtype=np.int8),
        "node_continuous": np.asarray(samples["node_continuous"], dtype=np.float64),
        "node_categorical": np.concatenate(
            [
                np.asarray(samples["node_categorical"], dtype=np.int64),
                np.asarray(samples["action_mask"], dtype=np.int64)[..., None],
            ],
            axis=-1,
        ),
        "graph_continuous": np.concatenate(
            [
                np.asarray(samples["graph_continuous"], dtype=np.float64),
                np.asarray(samples["reward"], dtype=np.float64)[:, None],
            ],
            axis=-1,
        ),
        "graph_categorical": np.concatenate(
            [
                np.asarray(samples["graph_categorical"], dtype=np.int64),
                np.asarray(samples["continuation"], dtype=np.int64)[:, None],
            ],
            axis=-1,
        ),
    }


def terminal_view(sample_set: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Restrict a stacked metric set to reward and continuation (zero nodes, see gdd-metric)."""
    s = sample_set["graph_continuous"].shape[0]
    return {
        "adjacency": np.zeros((s, 0, 0), dtype=np.int8),
        "node_continuous": np.zeros((s, 0, 0), dtype=np.float64),
        "node_categorical": np.zeros((s, 0, 0), dtype=np.int64),
        "graph_continuous": sample_set["graph_continuous"][:, -1:],
        "graph_categorical": sample_set["graph_categorical"][:, -1:],
    }
