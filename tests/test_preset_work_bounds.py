"""Issue 38, class 2: memory and time bounded before work. The GDD's peak memory is estimated
from what one evaluation really holds (measured here against the estimate), and the run's
permutation-test work is checked before any stage runs, naming what to lower."""

from __future__ import annotations

import copy
import tracemalloc

import numpy as np
import pytest
from gdd_metric import Bandwidths, gdd

from graphwm.checks import parse_checked
from graphwm.config import PresetError, read_preset
from graphwm.work_bounds import (
    MAX_PERMUTATION_HOURS,
    memory_bytes,
    permutation_hours,
    reference_transitions,
    sample_bytes,
)

SCHEMA = {"node_continuous": ["v"], "node_categorical": {"o": 3}, "graph_continuous": ["g"]}


def _samples(k: int, n: int, rng: np.random.Generator) -> dict:
    upper = np.triu(rng.random((k, n, n)) < 0.3, 1)
    return {
        "adjacency": (upper | upper.transpose(0, 2, 1)).astype(np.int8),
        "node_continuous": rng.random((k, n, 1)).astype(np.float32),
        "node_categorical": rng.integers(0, 3, (k, n, 1)),
        "graph_continuous": rng.random((k, 1)).astype(np.float32),
    }


def test_the_gdd_memory_estimate_bounds_what_one_gdd_holds():
    """tracemalloc sees numpy's allocations: the estimate is an upper bound of the measured
    peak and not a loose one (the old estimate, 8 kappa^2 bytes, was 64x too low)."""
    rng = np.random.default_rng(0)
    k, n = 300, 6
    pred, true = _samples(k, n, rng), _samples(k, n, rng)
    bw = Bandwidths(sigma={"v": 0.3, "g": 0.3}, lam={"o": 1.0})
    tracemalloc.start()
    gdd(pred, true, SCHEMA, bw)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    need = sample_bytes(k, n)
    assert 0.7 * need <= peak <= 1.1 * need, (peak, need)


@pytest.fixture(scope="module")
def tiny() -> dict:
    return read_preset("tiny")


def _with(raw: dict, section: str, **values) -> dict:
    out = copy.deepcopy(raw)
    out.setdefault(section, {}).update(values)
    return out


def test_ten_thousand_samples_are_refused_before_any_work(tiny):
    # 20,000 pooled samples: 16 float64 Gram matrices of 20,000^2 entries = 51 GB
    assert sample_bytes(10_000, 6) > memory_bytes() // 2
    with pytest.raises(PresetError, match=r"'evaluate.num_samples': 10000 needs about .*GiB"):
        parse_checked(_with(tiny, "evaluate", num_samples=10_000))


def test_a_run_of_years_of_permutations_is_refused_naming_what_to_lower(tiny):
    # one transition's relabelings are bounded by the field (p-value resolution 1e-6) ...
    with pytest.raises(PresetError, match=r"'evaluate.permutations'.*<= 1000000"):
        parse_checked(_with(tiny, "evaluate", permutations=2**31 - 1))
    # ... and the run's by its CPU-hours: the paper preset's 1.1 million reference
    # transitions at 10^6 relabelings each would take about 11,000 CPU-hours
    paper = read_preset("paper")
    with pytest.raises(PresetError, match=r"'evaluate.permutations'.*CPU-hours.*lower"):
        parse_checked(_with(paper, "evaluate", permutations=10**6))
    parse_checked(_with(tiny, "evaluate", permutations=200))  # the paper's count passes


def test_the_paper_preset_s_permutation_work_is_counted_and_allowed():
    p = parse_checked(read_preset("paper"))
    preset = getattr(p, "preset", p)
    # evaluate.reference_transitions x test episodes x seeds, per env, test size and model
    ev, c = preset.evaluate, preset.collect
    episodes = min(c.test_episodes, ev.max_episodes or c.test_episodes)
    want = sum(len(preset.test_sizes(e)) * len(preset.models_of(e)) for e in preset.envs) * (
        ev.reference_transitions * episodes * len(preset.seeds)
    )
    assert reference_transitions(preset) == want
    hours = permutation_hours(preset)
    assert 0 < hours < MAX_PERMUTATION_HOURS


def test_the_curve_subset_default_fits_a_preset_with_one_test_episode(tiny):
    """Setting train.eval_every on the tiny preset (1 test episode) no longer fails on
    evaluate.curve_episodes, a key the user never set; set explicitly, 2 is still refused."""
    raw = copy.deepcopy(tiny)
    raw["train"]["eval_every"] = 1
    p = parse_checked(raw)
    preset = getattr(p, "preset", p)
    assert preset.collect.test_episodes == 1 and preset.evaluate.curve_episodes == 1
    raw["evaluate"]["curve_episodes"] = 2
    with pytest.raises(PresetError, match="curve_episodes"):
        parse_checked(raw)
