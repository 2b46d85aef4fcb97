"""Small synthetic episode generators for tests, examples and benchmarks (no environment
package needed). Every generator draws from a seeded ``numpy.random.Generator``."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "ENV_SCHEMAS",
    "SYNTHETIC_SCHEMA",
    "TINY_GDM_CONFIG",
    "toggle_schema",
    "random_graph",
    "random_episode",
    "schema_episode",
    "toggle_edge_episodes",
]

#: a schema exercising every feature type
SYNTHETIC_SCHEMA: dict[str, Any] = {
    "node_continuous": ["x", "y"],
    "node_categorical": {"kind": 3, "flag": 2},
    "graph_continuous": ["k"],
    "graph_categorical": {"mode": 2},
}

#: the feature schemas of the four environments (graphwm_envs' ``feature_schema()`` without
#: its ranges; this package does not import the envs): synthetic data of their shapes
ENV_SCHEMAS: dict[str, dict[str, Any]] = {
    "SAR": {
        "node_continuous": ["stability"],
        "node_categorical": {"survivor_present": 2, "exit_node": 2, "current_location": 2},
        "graph_continuous": ["k"],
        "graph_categorical": {"escorting": 2},
    },
    "OD": {
        "node_continuous": ["vibe"],
        "node_categorical": {"opinion": 5},
        "graph_continuous": ["k_frac", "k_frac_env"],
        "graph_categorical": {},
    },
    "RGC": {
        "node_continuous": [],
        "node_categorical": {},
        "graph_continuous": ["tau", "k"],
        "graph_categorical": {},
    },
    "CF": {
        "node_continuous": ["load", "capacity"],
        "node_categorical": {},
        "graph_continuous": ["k"],
        "graph_categorical": {},
    },
}

#: GDM config overrides for a model small enough for unit tests and loss fingerprints
TINY_GDM_CONFIG: dict[str, int] = {
    "embed_dim": 8,
    "hidden_dim": 16,
    "node_latent_groups": 3,
    "node_latent_classes": 4,
    "graph_latent_groups": 2,
    "graph_latent_classes": 3,
}


def random_graph(n: int, p: float, rng: np.random.Generator) -> np.ndarray:
    """Symmetric int8 Erdos-Renyi adjacency with zero diagonal."""
    upper = np.triu(rng.random((n, n)) < p, 1)
    return (upper | upper.T).astype(np.int8)


def random_episode(
    n: int, t: int, rng: np.random.Generator, *, edge_p: float = 0.2, terminate: bool = False
) -> dict[str, np.ndarray]:
    """Episode of T transitions on N nodes following :data:`SYNTHETIC_SCHEMA`.

    Dynamics: the selected node toggles its edge to a random other node; node ``x`` drifts by
    +1 on the selected node plus noise; ``y`` is constant 5 (a constant feature); ``kind``
    cycles; graph ``k`` is the edge count. Rewards are the edge count / N.
    """
    adj = np.zeros((t + 1, n, n), np.int8)
    nc = np.zeros((t + 1, n, 2), np.float32)
    nk = np.zeros((t + 1, n, 2), np.int64)
    gc = np.zeros((t + 1, 1), np.float32)
    gk = np.zeros((t + 1, 1), np.int64)
    am = np.ones((t + 1, n), np.int8)
    an = np.zeros((t, n), np.int8)
    rew = np.zeros(t, np.float32)
    a = random_graph(n, edge_p, rng)
    x = rng.normal(size=n).astype(np.float32)
    kind = rng.integers(0, 3, size=n)
    for s in range(t + 1):
        adj[s] = a
        nc[s, :, 0], nc[s, :, 1] = x, 5.0
        nk[s, :, 0], nk[s, :, 1] = kind, (a.sum(1) > 0)
        gc[s, 0] = a.sum() / 2
        gk[s, 0] = s % 2
        am[s, 0] = 0  # node 0 is never selectable
        if s == t:
            break
        v = int(rng.integers(1, n))
        an[s, v] = 1
        w = int(rng.choice([i for i in range(n) if i != v]))
        a = a.copy()
        a[v, w] = a[w, v] = 1 - a[v, w]
        x = x + 0.1 * rng.normal(size=n).astype(np.float32)
        x[v] += 1.0
        kind = (kind + 1) % 3
        rew[s] = a.sum() / 2 / n
    term = np.zeros(t, bool)
    term[-1] = terminate
    return {
        "adjacency": adj,
        "node_continuous": nc,
        "node_categorical": nk,
        "graph_continuous": gc,
        "graph_categorical": gk,
        "action_mask": am,
        "action_nodes": an,
        "reward": rew,
        "terminated": term,
        "truncated": ~term & (np.arange(t) == t - 1),
    }


def schema_episode(
    schema: dict[str, Any], n: int, t: int, rng: np.random.Generator, *, edge_p: float = 0.4
) -> dict[str, np.ndarray]:
    """Episode of T transitions on N nodes with i.i.d. random values for any ``schema`` (dict
    form): Erdos-Renyi graphs G(N, ``edge_p``) drawn afresh every step, one random action per
    step, standard-normal continuous features and rewards, uniform categorical values, action
    mask entries 1 w.p. 0.8; truncated at the end. No dynamics: for tests and benchmarks
    that need valid data of a given shape, not something to learn."""
    cards = list(schema["node_categorical"].values())
    gcards = list(schema["graph_categorical"].values())
    up = np.triu(rng.random((t + 1, n, n)) < edge_p, 1)
    an = np.zeros((t, n), np.int8)
    an[np.arange(t), rng.integers(0, n, t)] = 1
    fnc, fgc = len(schema["node_continuous"]), len(schema["graph_continuous"])
    return {
        "adjacency": (up | up.transpose(0, 2, 1)).astype(np.int8),
        "node_continuous": rng.normal(size=(t + 1, n, fnc)).astype(np.float32),
        "node_categorical": (
            np.stack([rng.integers(0, k, (t + 1, n)) for k in cards], -1)
            if cards
            else np.zeros((t + 1, n, 0), np.int64)
        ),
        "graph_continuous": rng.normal(size=(t + 1, fgc)).astype(np.float32),
        "graph_categorical": (
            np.stack([rng.integers(0, k, t + 1) for k in gcards], -1)
            if gcards
            else np.zeros((t + 1, 0), np.int64)
        ),
        "action_mask": (rng.random((t + 1, n)) < 0.8).astype(np.int8),
        "action_nodes": an,
        "reward": rng.normal(size=t).astype(np.float32),
        "terminated": np.zeros(t, bool),
        "truncated": np.arange(t) == t - 1,
    }


def toggle_schema(n: int) -> dict[str, Any]:
    """Schema of :func:`toggle_edge_episodes`: one categorical node feature, the node id."""
    return {
        "node_continuous": [],
        "node_categorical": {"node_id": n},
        "graph_continuous": [],
        "graph_categorical": {},
    }


def toggle_edge_episodes(
    num_episodes: int, t: int, n: int, p: float, rng: np.random.Generator
) -> list[dict[str, np.ndarray]]:
    """Episodes on a fixed path graph 1-2-...-(N-1) where edge (0, 1) toggles independently
    with probability ``p`` at each step (schema :func:`toggle_schema`; the only feature is
    the node id, so the model can tell the toggling pair apart)."""
    eps = []
    base = np.zeros((n, n), np.int8)
    for i in range(1, n - 1):
        base[i, i + 1] = base[i + 1, i] = 1
    for _ in range(num_episodes):
        a = base.copy()
        a[0, 1] = a[1, 0] = rng.integers(0, 2)
        adj = np.zeros((t + 1, n, n), np.int8)
        for s in range(t + 1):
            adj[s] = a
            if rng.random() < p:
                a = a.copy()
                a[0, 1] = a[1, 0] = 1 - a[0, 1]
        eps.append(
            {
                "adjacency": adj,
                "node_continuous": np.zeros((t + 1, n, 0), np.float32),
                "node_categorical": np.broadcast_to(
                    np.arange(n, dtype=np.int64)[None, :, None], (t + 1, n, 1)
                ).copy(),
                "graph_continuous": np.zeros((t + 1, 0), np.float32),
                "graph_categorical": np.zeros((t + 1, 0), np.int64),
                "action_mask": np.ones((t + 1, n), np.int8),
                "action_nodes": np.zeros((t, n), np.int8),
                "reward": np.zeros(t, np.float32),
                "terminated": np.zeros(t, bool),
                "truncated": np.arange(t) == t - 1,
            }
        )
    return eps
