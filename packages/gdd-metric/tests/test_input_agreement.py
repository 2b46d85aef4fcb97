"""Issue 38, class 6: the metric's entry points agree on what they accept. fit_bandwidths
refuses an adjacency that gdd refuses, and the numeric options refuse strings and bools that
``float()`` would silently turn into numbers."""

from __future__ import annotations

import numpy as np
import pytest
from gdd_metric import Bandwidths, fit_bandwidths, gdd

SCHEMA = {"node_continuous": ["x"]}


def _graph(adj, x=(0.0, 1.0, 0.5)) -> dict:
    return {"adjacency": np.asarray(adj), "node_continuous": np.asarray(x)[:, None]}


GOOD = [[0, 1, 0], [1, 0, 0], [0, 0, 0]]
BAD = {
    "asymmetric": ([[0, 1, 0], [0, 0, 0], [0, 0, 0]], "not symmetric"),
    "self-loop": ([[1, 0, 0], [0, 0, 0], [0, 0, 0]], "self-loop"),
    "non-binary": ([[0, 2, 0], [2, 0, 0], [0, 0, 0]], "only 0 and 1"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_fit_bandwidths_refuses_what_gdd_refuses(case):
    adj, message = BAD[case]
    bad = _graph(adj)
    stacked = {k: v[None] for k, v in bad.items()}
    with pytest.raises(ValueError, match=message):  # the metric refuses it ...
        gdd(stacked, stacked, SCHEMA, Bandwidths(sigma={"x": 1.0}))
    with pytest.raises(ValueError, match=rf"transition 0 obs_t1\['adjacency'\].*{message}"):
        fit_bandwidths([(_graph(GOOD), bad)], SCHEMA)  # ... and so does the fit
    # stacked pairs (T, N, N) are checked too
    with pytest.raises(ValueError, match=message):
        fit_bandwidths([(stacked, stacked)], SCHEMA)


def test_fit_bandwidths_still_fits_good_graphs_and_terminal_ones():
    bw = fit_bandwidths([(_graph(GOOD), _graph(GOOD, x=(0.5, 1.0, 0.5)))], SCHEMA)
    assert bw.sigma["x"] == pytest.approx(0.5)
    terminal = {"adjacency": np.zeros((0, 0)), "node_continuous": np.zeros((0, 1))}
    fit_bandwidths([(_graph(GOOD), terminal)], SCHEMA)  # a zero-node side is allowed


@pytest.mark.parametrize(
    "options",
    [
        {"epsilon": "1"},
        {"epsilon": True},
        {"weights": ("1", 1.0, 1.0)},
        {"weights": (1.0, True, 1.0)},
        {"multipliers": ["1"]},
    ],
)
def test_numeric_options_refuse_strings_and_bools(options):
    x = {"adjacency": np.zeros((3, 0, 0)), "graph_continuous": np.zeros((3, 1))}
    bw, schema = Bandwidths(sigma={"r": 1.0}), {"graph_continuous": ["r"]}
    with pytest.raises(TypeError, match="epsilon|weights|multipliers"):
        gdd(x, x, schema, bw, **options)
    # numpy numbers are real numbers
    assert gdd(x, x, schema, bw, epsilon=np.float32(0.5), multipliers=np.array([1.0])).gdd == 0
