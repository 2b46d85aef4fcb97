"""Issue 30: inputs the metric used to accept or fail on obscurely."""

from __future__ import annotations

import numpy as np
import pytest
from gdd_metric import Bandwidths, gdd

SCHEMA = {"graph_continuous": ["reward"]}
PRED = {"adjacency": np.zeros((3, 0, 0)), "graph_continuous": np.zeros((3, 1))}
TRUE = {"adjacency": np.zeros((2, 0, 0)), "graph_continuous": np.ones((2, 1))}


@pytest.mark.parametrize("value", ["0.5", True, np.bool_(True), None, [0.5]])
def test_a_bandwidth_must_be_a_real_number(value):
    with pytest.raises(TypeError, match=r"sigma\['x'\] must be a number"):
        Bandwidths(sigma={"x": value})
    with pytest.raises(TypeError, match=r"lambda|lam"):
        Bandwidths(lam={"x": value})


def test_sigma_that_is_no_mapping_is_refused():
    with pytest.raises(TypeError, match="must be a dict"):
        Bandwidths(sigma=True)  # type: ignore[arg-type]


def test_all_zero_weights_are_refused():
    bw = Bandwidths(sigma={"reward": 1.0})
    with pytest.raises(ValueError, match="must not all be 0"):
        gdd(PRED, TRUE, SCHEMA, bw, weights=(0, 0, 0))
    assert gdd(PRED, TRUE, SCHEMA, bw, weights=(0, 1, 0)).gdd > 0


@pytest.mark.parametrize("sigma", [1e155, 1e200, 1e308])
def test_a_huge_bandwidth_its_docs_allow_gives_a_finite_gdd(sigma):
    res = gdd(PRED, TRUE, SCHEMA, Bandwidths(sigma={"reward": sigma}))
    assert np.isfinite(res.gdd) and res.gdd >= 0


def test_deeply_nested_json_is_a_value_error():
    text = '{"sigma": ' + "[" * 100_000 + "]" * 100_000 + "}"
    with pytest.raises(ValueError, match="nests arrays or objects too deeply"):
        Bandwidths.from_json(text)
