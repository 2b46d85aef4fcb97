"""The optional torch backend agrees with numpy (CPU here; CUDA too when present)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from gdd_metric import gdd, gdd_many, permutation_test

torch = pytest.importorskip("torch")

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
FIELDS = ("gdd", "mmd2", "node", "graph", "edge", "joint")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mix", list(itertools.product((0, 2), (0, 2), (0, 1), (0, 1)))[::3])
def test_torch_matches_numpy(helpers, device, mix):
    rng = np.random.default_rng(sum(mix))
    schema, bw, x, y = helpers.problem(rng, mix, (6, 5), 9, shift=0.4)
    a = gdd(x, y, schema, bw)
    b = gdd(x, y, schema, bw, backend="torch", device=device)
    for field in FIELDS:
        assert getattr(b, field) == pytest.approx(getattr(a, field), abs=1e-9), field


def test_torch_batched_and_permutation(helpers, rng):
    schema = helpers.schema(1, 1, 1, 1)
    bw = helpers.bandwidths(schema, rng)
    pairs = [(helpers.samples(schema, 4, 3, rng), helpers.samples(schema, 4, 3, rng))] * 3
    for a, b in zip(
        gdd_many(pairs, schema, bw), gdd_many(pairs, schema, bw, backend="torch"), strict=True
    ):
        assert b.mmd2 == pytest.approx(a.mmd2, abs=1e-12)
    x, y = pairs[0]
    assert permutation_test(
        x, y, schema, bw, 30, np.random.default_rng(2), backend="torch"
    ) == pytest.approx(permutation_test(x, y, schema, bw, 30, np.random.default_rng(2)))


def test_backend_errors(helpers, rng):
    schema = helpers.schema(1, 0, 0, 0)
    bw = helpers.bandwidths(schema, rng)
    x = helpers.samples(schema, 3, 3, rng)
    with pytest.raises(ValueError, match="backend"):
        gdd(x, x, schema, bw, backend="jax")
    with pytest.raises(ValueError, match="CPU"):
        gdd(x, x, schema, bw, device="cuda")
