"""Data contract: a feature type an env lacks is absent from its observations; the metric reads
an absent key as zero-width, and refuses one the schema needs."""

from __future__ import annotations

import numpy as np
import pytest
from gdd_metric import Bandwidths, fit_bandwidths, gdd


def _samples(s: int, n: int, seed: int, zero_width: bool) -> dict:
    rng = np.random.default_rng(seed)
    upper = np.triu(rng.random((s, n, n)) < 0.4, k=1)
    out = {
        "adjacency": (upper | upper.transpose(0, 2, 1)).astype(np.int8),
        "graph_continuous": rng.random((s, 2)),
    }
    if zero_width:
        out |= {
            "node_continuous": np.zeros((s, n, 0)),
            "node_categorical": np.zeros((s, n, 0), np.int64),
            "graph_categorical": np.zeros((s, 0), np.int64),
        }
    return out


SCHEMA = {"graph_continuous": ["tau", "k"]}
BW = Bandwidths(sigma={"tau": 0.5, "k": 0.5})


def test_absent_keys_score_like_zero_width_arrays():
    absent = gdd(_samples(4, 6, 0, False), _samples(5, 6, 1, False), SCHEMA, BW)
    zero = gdd(_samples(4, 6, 0, True), _samples(5, 6, 1, True), SCHEMA, BW)
    assert absent.gdd == pytest.approx(zero.gdd, abs=0) and absent.gdd > 0


def test_fit_bandwidths_reads_absent_keys_as_zero_width():
    a, b = _samples(3, 6, 2, False), _samples(3, 6, 3, False)
    pairs = [({k: v[i] for k, v in a.items()}, {k: v[i] for k, v in b.items()}) for i in range(3)]
    bw = fit_bandwidths(pairs, SCHEMA)
    assert set(bw.sigma) == {"tau", "k"} and all(v > 0 for v in bw.sigma.values())


def test_an_absent_key_the_schema_needs_is_refused():
    schema = {"graph_continuous": ["tau", "k"], "node_continuous": ["x"]}
    bw = Bandwidths(sigma={"tau": 0.5, "k": 0.5, "x": 1.0})
    with pytest.raises(KeyError, match="node_continuous"):
        gdd(_samples(3, 6, 0, False), _samples(3, 6, 1, False), schema, bw)
