"""Shared fixtures: random schemas, bandwidths and sample sets of any feature mix."""

from __future__ import annotations

import numpy as np
import pytest
from gdd_metric import Bandwidths


def make_schema(nc: int = 2, nk: int = 2, gc: int = 1, gk: int = 1) -> dict:
    """A schema with the given number of features of each type (cardinalities 2, 3, 4, ...)."""
    return {
        "node_continuous": [f"nc{i}" for i in range(nc)],
        "node_categorical": {f"nk{i}": 2 + i for i in range(nk)},
        "graph_continuous": [f"gc{i}" for i in range(gc)],
        "graph_categorical": {f"gk{i}": 2 + i for i in range(gk)},
    }


def make_bandwidths(schema: dict, rng: np.random.Generator) -> Bandwidths:
    names_c = schema["node_continuous"] + schema["graph_continuous"]
    names_k = list(schema["node_categorical"]) + list(schema["graph_categorical"])
    return Bandwidths(
        sigma={f: float(rng.uniform(0.2, 2.0)) for f in names_c},
        lam={f: float(rng.uniform(0.3, 4.0)) for f in names_k},
    )


def make_set(
    schema: dict,
    s: int,
    n: int,
    rng: np.random.Generator,
    *,
    p_edge: float = 0.4,
    shift: float = 0.0,
) -> dict:
    """S random graphs on N nodes following ``schema``."""
    adj = np.triu((rng.random((s, n, n)) < p_edge).astype(np.int8), 1)
    adj = adj + adj.transpose(0, 2, 1)
    nk = schema["node_categorical"]
    gk = schema["graph_categorical"]
    return {
        "adjacency": adj,
        "node_continuous": rng.normal(shift, 1.0, (s, n, len(schema["node_continuous"]))),
        "node_categorical": np.stack([rng.integers(0, c, (s, n)) for c in nk.values()], -1)
        if nk
        else np.zeros((s, n, 0), dtype=np.int64),
        "graph_continuous": rng.normal(shift, 1.0, (s, len(schema["graph_continuous"]))),
        "graph_categorical": np.stack([rng.integers(0, c, s) for c in gk.values()], -1)
        if gk
        else np.zeros((s, 0), dtype=np.int64),
    }


def make_problem(
    rng: np.random.Generator,
    counts: tuple[int, int, int, int],
    sizes: tuple[int, int],
    n: int,
    shift: float,
) -> tuple[dict, Bandwidths, dict, dict]:
    """Schema with ``counts`` features of each type, random bandwidths, and two sets of
    ``sizes`` graphs on ``n`` nodes, the second with its continuous features shifted."""
    schema = make_schema(*counts)
    bw = make_bandwidths(schema, rng)
    x = make_set(schema, sizes[0], n, rng)
    y = make_set(schema, sizes[1], n, rng, shift=shift)
    return schema, bw, x, y


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


@pytest.fixture
def helpers():
    """The factory functions, as a namespace (tests import no conftest module)."""

    class H:
        schema = staticmethod(make_schema)
        bandwidths = staticmethod(make_bandwidths)
        samples = staticmethod(make_set)
        problem = staticmethod(make_problem)

    return H
