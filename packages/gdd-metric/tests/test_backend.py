"""The explicit backend protocol: selection by name or instance, every heavy piece goes through
the backend, and the one Jaccard chunk loop gives the same kernel for any chunk size."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
from gdd_metric import Backend, gdd, gdd_many, get_backend, gram_matrices, permutation_test
from gdd_metric.backend import NumpyBackend
from gdd_metric.grams import jaccard_gram


class RecordingBackend(NumpyBackend):
    """numpy, plus a record of which protocol methods ran."""

    def __init__(self, chunk_bytes: int = 64 * 2**20) -> None:
        super().__init__(chunk_bytes)
        self.calls: list[str] = []

    def node_continuous_terms(self, x, sigma, multipliers):
        self.calls.append("node_continuous_terms")
        return super().node_continuous_terms(x, sigma, multipliers)

    def node_categorical_terms(self, x, cardinalities, lam):
        self.calls.append("node_categorical_terms")
        return super().node_categorical_terms(x, cardinalities, lam)

    def edge_counts(self, z):
        self.calls.append("edge_counts")
        return super().edge_counts(z)


def test_selection_is_explicit():
    assert isinstance(get_backend(), NumpyBackend)
    assert get_backend("numpy").name == "numpy"
    mine = NumpyBackend()
    assert get_backend(mine) is mine
    with pytest.raises(TypeError):
        Backend()  # type: ignore[abstract]  # the protocol itself is abstract
    with pytest.raises(ValueError, match="backend must be one of"):
        get_backend("jax")
    with pytest.raises(ValueError, match="Backend instance"):
        get_backend(mine, device="cpu")


def test_every_heavy_piece_runs_through_the_backend(helpers, rng):
    schema, bw, x, y = helpers.problem(rng, (2, 2, 1, 1), (5, 4), 6, shift=0.5)
    rec = RecordingBackend()
    got = gdd(x, y, schema, bw, backend=rec)
    assert set(rec.calls) == {"node_continuous_terms", "node_categorical_terms", "edge_counts"}
    assert got == gdd(x, y, schema, bw)  # bit-identical to the default numpy backend
    rec.calls.clear()
    permutation_test(x, y, schema, bw, 5, np.random.default_rng(0), backend=rec)
    gdd_many([(x, y)], schema, bw, backend=rec)
    assert rec.calls.count("edge_counts") == 2


@pytest.mark.parametrize("chunk_bytes", [4, 4 * 9, 4 * 9 * 7, 2**30])
def test_jaccard_chunk_loop_is_chunk_size_independent(helpers, rng, chunk_bytes):
    schema = helpers.schema(0, 0, 0, 0)
    x = helpers.samples(schema, 5, 12, rng)
    y = helpers.samples(schema, 4, 12, rng, p_edge=0.1)
    full = gram_matrices(x, y, schema, {}).edge
    rec = RecordingBackend(chunk_bytes)
    support = [x["adjacency"].any(0), y["adjacency"].any(0)]
    chunked = jaccard_gram([x["adjacency"], y["adjacency"]], support, rec)
    np.testing.assert_array_equal(chunked, full)
    edges = np.count_nonzero(np.triu(support[0] | support[1], 1))
    step = min(2**24 - 1, max(1, chunk_bytes // (4 * 9)))
    assert rec.calls.count("edge_counts") == -(-edges // step)


def test_torch_edge_counts_equal_numpy(rng):
    pytest.importorskip("torch")
    z = (rng.random((7, 50)) < 0.3).astype(np.float32)
    want = NumpyBackend().edge_counts(z)
    got = get_backend("torch").edge_counts(z)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("module", ["mmd", "bandwidths", "backend", "stats", "schema"])
def test_docstring_examples_run(module):
    """The ``>>>`` examples in the docstrings (gdd, Bandwidths, fit_bandwidths) run."""
    mod = importlib.import_module(f"gdd_metric.{module}")
    result = doctest.testmod(mod, raise_on_error=False)
    assert result.failed == 0
    if module in ("mmd", "bandwidths", "stats"):
        assert result.attempted > 3


def test_the_numpy_path_never_imports_torch():
    """gdd-metric's core is numpy only: importing it and computing a GDD loads no torch."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, gdd_metric as g\n"
        "s = {'node_continuous': ['x'], 'node_categorical': {}, 'graph_continuous': [],"
        " 'graph_categorical': {}}\n"
        "rng = np.random.default_rng(0)\n"
        "x = {'adjacency': np.zeros((3, 4, 4), np.int8),"
        " 'node_continuous': rng.normal(size=(3, 4, 1))}\n"
        "print(g.gdd(x, x, s, g.Bandwidths(sigma={'x': 1.0}, lam={})).gdd)\n"
        "assert 'torch' not in sys.modules\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "0.0"
