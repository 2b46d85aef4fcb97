"""Issue 47 (the fourth probe): a categorical node feature's cardinality never sizes an
allocation. A cardinality of 1e9 used to allocate a one-hot block of N * 1e9 per sample
(``MemoryError``, 894 GiB) and 1e30 failed in numpy ("Maximum allowed dimension exceeded"):
the one-hot products are now sized by the codes present, and a cardinality no int64 code
can reach is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from gdd_metric import Bandwidths, gdd, gdd_many


def _sets(card: int, rng: np.random.Generator):
    def one(s: int) -> dict:
        return {
            "adjacency": np.zeros((s, 4, 4), np.int8),
            "node_categorical": rng.integers(0, 3, (s, 4, 1)) * (card // 3),
        }

    return one(5), one(6)


@pytest.mark.parametrize("card", [10**9, 2**62])
def test_a_huge_cardinality_gives_the_gdd_of_the_same_codes_without_allocating_it(card):
    pred, true = _sets(card, np.random.default_rng(0))
    bw = Bandwidths(lam={"kind": 0.7})
    big = gdd(pred, true, {"node_categorical": {"kind": card}}, bw)
    # the same matches with small codes: the kernel only asks whether two codes are equal
    small = {k: v // (card // 3) if k == "node_categorical" else v for k, v in pred.items()}
    small_true = {k: v // (card // 3) if k == "node_categorical" else v for k, v in true.items()}
    ref = gdd(small, small_true, {"node_categorical": {"kind": 3}}, bw)
    assert big.gdd == pytest.approx(ref.gdd, rel=1e-12, abs=1e-15) and big.gdd > 0
    many = gdd_many([(pred, true)], {"node_categorical": {"kind": card}}, bw)
    assert many[0].gdd == pytest.approx(ref.gdd, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("card", [10**30, 2**63])
def test_a_cardinality_no_int64_code_reaches_is_refused_by_name(card):
    pred, true = _sets(3, np.random.default_rng(0))
    with pytest.raises(ValueError, match=r"\['kind'\]: cardinality .* exceeds"):
        gdd(pred, true, {"node_categorical": {"kind": card}}, Bandwidths(lam={"kind": 1.0}))
