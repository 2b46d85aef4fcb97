"""Property-based checks of the GDD (hypothesis): symmetry, identity and non-negativity over
random small inputs of every feature mix, set size, graph size, weights and estimator.

The inputs are drawn from a seeded numpy generator whose seed and shapes hypothesis chooses
(and shrinks); few examples and no deadline keep the default run fast.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from gdd_metric import gdd
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

COMPONENTS = ("node", "graph", "edge", "joint")
# derandomize: the same examples every run; `helpers` is a stateless namespace of factories
FAST = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

problems = st.fixed_dictionaries(
    {
        "seed": st.integers(0, 2**32 - 1),
        "counts": st.tuples(*(st.integers(0, 2) for _ in range(4))),
        "sizes": st.tuples(st.integers(1, 6), st.integers(1, 6)),
        "nodes": st.integers(0, 6),
        "p_edge": st.floats(0.0, 1.0),
        "shift": st.floats(-2.0, 2.0),
        # not all 0 (the metric refuses weights that drop every component kernel), and each 0
        # or >= 1e-3: a weight of 1e-12 alone leaves a GDD of sqrt(rounding noise)
        "weights": st.tuples(
            *(st.one_of(st.just(0.0), st.floats(1e-3, 1.0)) for _ in range(3))
        ).filter(any),
        "epsilon": st.floats(0.0, 3.0),
        "estimator": st.sampled_from(["biased", "unbiased"]),
    }
)


def _draw(helpers, p):
    rng = np.random.default_rng(p["seed"])
    schema = helpers.schema(*p["counts"])
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, p["sizes"][0], p["nodes"], rng, p_edge=p["p_edge"])
    y = helpers.samples(
        schema, p["sizes"][1], p["nodes"], rng, p_edge=p["p_edge"], shift=p["shift"]
    )
    kw = {"weights": p["weights"], "epsilon": p["epsilon"], "estimator": p["estimator"]}
    return schema, bw, x, y, kw


def _valid(p) -> bool:
    # the unbiased estimator needs two samples on each side
    return p["estimator"] == "biased" or min(p["sizes"]) >= 2


@FAST
@given(p=problems)
def test_symmetry(helpers, p):
    assume(_valid(p))
    schema, bw, x, y, kw = _draw(helpers, p)
    a, b = gdd(x, y, schema, bw, **kw), gdd(y, x, schema, bw, **kw)
    for field in ("gdd", "mmd2", *COMPONENTS):
        assert getattr(a, field) == pytest.approx(getattr(b, field), abs=1e-12)


@FAST
@given(p=problems)
def test_identity_gdd_of_a_set_with_itself_is_zero(helpers, p):
    assume(_valid(p))
    schema, bw, x, _, kw = _draw(helpers, p)
    if kw["estimator"] == "unbiased":
        kw["estimator"] = "biased"  # GDD(x, x) = 0 exactly holds for the V-statistic
    copy = {k: v.copy() for k, v in x.items()}
    res = gdd(x, copy, schema, bw, **kw)
    assert res.gdd == 0.0 and res.mmd2 == 0.0
    assert all(getattr(res, c) == 0.0 for c in COMPONENTS)


@FAST
@given(p=problems)
def test_non_negativity(helpers, p):
    """The biased estimator is a squared RKHS distance: every component >= 0; the GDD is a
    root, so >= 0 for either estimator (the unbiased mmd2 itself may dip below zero)."""
    assume(_valid(p))
    schema, bw, x, y, kw = _draw(helpers, p)
    res = gdd(x, y, schema, bw, **kw)
    assert res.gdd >= 0.0 and math.isfinite(res.gdd)
    assert res.gdd == pytest.approx(math.sqrt(max(res.mmd2, 0.0)), abs=1e-15)
    if kw["estimator"] == "biased":
        assert res.mmd2 >= -1e-12
        assert all(getattr(res, c) >= -1e-12 for c in COMPONENTS)
