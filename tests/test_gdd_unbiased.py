"""Both GDD estimators in every model evaluation (issue 49): ``gdd_unbiased`` beside ``gdd``.

The unbiased value of a single-step record is checked against a slow reference written out
by hand: for each scored transition gdd-metric's per-pair double loop
(:func:`gdd_metric.reference.reference_gdd`, no code shared with the vectorised kernels) with
the U-statistic, its signed square root, then the mean per episode and over episodes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import single_step_record
from gdd_metric.reference import reference_gdd

from graphwm import jobs
from graphwm.checks import parse_checked
from graphwm.metric.protocol import EvalContext
from graphwm.report.tables import build_tables, to_markdown
from graphwm.stages import evaluate
from graphwm.stages.collect import DataRef
from graphwm.stages.evaluate import EvalJob, multi_step_job, single_step_job
from graphwm.stages.fit import load_fitted
from graphwm.store.records import MultiStepRecord, ResultsFormatError, SingleStepRecord

ENV, SIZE, KAPPA, REFS = "SAR", 8, 6, 3


@pytest.fixture(scope="module")
def tiny_gdm():
    from tiny_models import tiny_trained_model

    return tiny_trained_model("gdm", ENV, num_nodes=SIZE, steps=2)


def _job(preset: dict, kind: str, horizon: int = 1, permutations: int = 0) -> EvalJob:
    checked = parse_checked(preset)
    test = DataRef(ENV, "test", SIZE, checked.collect.test_episodes, False)
    train = jobs.train_job_for(checked, ENV, "gdm", 0)
    fit = jobs.fit_job(checked, ENV)
    return EvalJob(kind, ENV, SIZE, 0, test, fit, KAPPA, REFS, 2, horizon, train, permutations)


@pytest.fixture
def scored(monkeypatch, tiny_gdm):
    """Every (view, biased result, unbiased value) that ``EvalContext.gdd_both`` returns,
    in call order, with the tiny GDM as the evaluated model."""
    monkeypatch.setattr(evaluate, "_load_model", lambda job, run_dir: tiny_gdm)
    calls: list[tuple] = []
    original = EvalContext.gdd_both

    def spy(self, model_set, env_set, terminal, *args, **kwargs):
        out = original(self, model_set, env_set, terminal, *args, **kwargs)
        calls.append((self.view(model_set, env_set, terminal), out[0], out[1]))
        return out

    monkeypatch.setattr(EvalContext, "gdd_both", spy)
    return calls


def _slow_signed_root(view, bandwidths) -> float:
    mmd2 = reference_gdd(*view, bandwidths, estimator="unbiased").mmd2
    return math.copysign(math.sqrt(abs(mmd2)), mmd2)


def test_single_step_unbiased_equals_the_slow_reference(all_envs_run, scored, one_torch_thread):
    preset, paths = all_envs_run
    job = _job(preset, "single_step", permutations=20)
    record = single_step_job(job, paths.root)
    bandwidths, _ = load_fitted(job.fit.dir(paths.root))
    assert record.gdd_transitions is not None and len(scored) == record.num_transitions >= 4
    slow = [_slow_signed_root(view, bandwidths) for view, _, _ in scored]
    # the spied sets are the ones the record scored: their biased GDDs are its per-transition
    flat = [g for episode in record.gdd_transitions for g in episode]
    assert [result.gdd for _, result, _ in scored] == flat
    np.testing.assert_allclose([u for _, _, u in scored], slow, rtol=1e-9, atol=1e-12)
    # averaged as the GDD: per episode (the record's grouping), then over episodes
    counts = np.cumsum([0] + [len(e) for e in record.gdd_transitions])
    expected = np.mean([np.mean(slow[a:b]) for a, b in zip(counts[:-1], counts[1:], strict=True)])
    assert record.gdd_unbiased == pytest.approx(expected, rel=1e-9, abs=1e-12)
    # the estimators differ: the unbiased one drops the within-set diagonal
    assert record.gdd_unbiased < record.gdd
    assert record.indistinguishable is not None  # the test still runs beside both


def test_multi_step_stores_the_unbiased_gdd_per_horizon(all_envs_run, scored, one_torch_thread):
    preset, paths = all_envs_run
    record = multi_step_job(_job(preset, "multi_step", horizon=2), paths.root)
    assert record.gdd_unbiased is not None and len(record.gdd_unbiased) == 2
    bandwidths, _ = load_fitted(_job(preset, "multi_step").fit.dir(paths.root))
    # per scored transition, the slow reference; per horizon their mean (as the GDD's)
    for view, _, u in scored[:4]:
        assert u == pytest.approx(_slow_signed_root(view, bandwidths), rel=1e-9, abs=1e-12)
    every = [u for _, _, u in scored]
    assert min(every) <= np.mean(record.gdd_unbiased) <= max(every)
    assert all(u < g for u, g in zip(record.gdd_unbiased, record.gdd, strict=True))


def _old_single(seed: int) -> dict:
    """A single-step record as runs before issue 49 wrote it (no ``gdd_unbiased``)."""
    return single_step_record(
        "OD",
        "gdm",
        20,
        seed,
        0.7 + 0.01 * seed,
        components={"node": 0.1, "graph": 0.2, "edge": 0.3, "joint": 0.01},
        factor_metrics={"adjacency_bce": 0.05, "features": {"opinion": 0.03}},
    )


def test_a_record_without_the_unbiased_gdd_loads_and_reads_a_dash():
    records = []
    for seed in range(2):
        record = SingleStepRecord.from_dict(_old_single(seed), "old.json")
        assert record.gdd_unbiased is None and "gdd_unbiased" not in record.to_dict()
        records.append(record.to_dict())
    tables = {t.name: t for t in build_tables(records)}
    unbiased = to_markdown(tables["gdd_single_step_unbiased"])
    row = next(ln for ln in unbiased.splitlines() if "| GDM |" in ln)
    assert row.split("|")[3].strip() == "—"
    assert "0.705" in to_markdown(tables["gdd_single_step"])  # the biased GDD is still there
    old_multi = {
        "kind": "multi_step", "env": "OD", "model": "gdm", "seed": 0, "size": 50,
        "horizons": [1, 2], "gdd": [0.5, 0.6], "invalid_rate_model": [0.0, 0.1],
        "invalid_rate_env": [0.0, 0.0],
        "components": {c: [0.1, 0.2] for c in ("node", "graph", "edge", "joint")},
    }  # fmt: skip
    assert MultiStepRecord.from_dict(old_multi, "old.json").gdd_unbiased is None
    with pytest.raises(ResultsFormatError, match="'gdd_unbiased' has 1 entries, expected 2"):
        MultiStepRecord.from_dict({**old_multi, "gdd_unbiased": [0.1]}, "new.json")
