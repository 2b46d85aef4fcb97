"""Evaluation made cheaper without changing its numbers (issue 39, item 4): the single-step
scoring of ``single_step_job`` (the model's samples through ``ModelSampler``, the GDD and the
permutation test) against the old path, kept here as the reference: every sample's pairwise
edge-MLP block computed, the GDD and the test each from their own Gram matrices."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdd_metric import fit_bandwidths
from gdm_models import FeatureScaler, make_model
from gdm_models.backends import use_backend
from tiny_models import TINY_OVERRIDES

from graphwm.envs import env_schema
from graphwm.episodes import record_episode
from graphwm.metric.graph import extend_schema, stack_graphs
from graphwm.metric.protocol import STREAM_ENV, EvalContext, reference_indices, sample_seeds
from graphwm.stages.evaluate import ModelSampler, ReferencePoint
from graphwm.stages.fit import bandwidth_transitions

ENV, N, KAPPA, PERMUTATIONS = "OD", 10, 12, 30


def _points(ctx: EvalContext, seed: int = 3):
    episode = record_episode(ENV, N, seed=seed)
    refs = reference_indices(len(episode["reward"]), 4)
    replay = ctx.replay(seed, episode["actions"], refs, keep_observations=True, check=episode)
    for t in map(int, refs):
        graphs, invalid = ctx.samples(
            replay.snapshots[t],
            episode["actions"][t : t + 1],
            sample_seeds(seed, t, STREAM_ENV, KAPPA),
        )
        terminal = [bool(replay.terminated[t])]
        yield ReferencePoint(0, seed, t, replay, [stack_graphs(graphs[0])], invalid, terminal)


def _score(model, ctx, points, new: bool) -> list[tuple[float, dict, float]]:
    # the old path: the "torch" backend (every block computed, F.silu per pair, torch blocks)
    with use_backend("auto" if new else "torch"):
        sampler, out = ModelSampler(model, KAPPA), []
        for point in points:
            model_set, env_set = sampler(point)[0], point.env_sets[0]
            terminal = point.terminal[0]
            if new:
                res, p = ctx.gdd_and_p_value(model_set, env_set, terminal, PERMUTATIONS, point.t)
            else:  # the old path: two validations, two Gram computations
                res = ctx.gdd(model_set, env_set, terminal)
                p = ctx.p_value(model_set, env_set, terminal, PERMUTATIONS, point.t)
            out.append((res.gdd, {k: getattr(res, k) for k in ("node", "edge", "joint")}, p))
        return out


@pytest.mark.parametrize("name", ["gdm:no-graph-state", "gdm"])
def test_single_step_scoring_matches_the_old_path(name):
    schema = env_schema(ENV)
    small = [record_episode(ENV, 8, seed=s) for s in range(3)]
    pairs = bandwidth_transitions(small, 8, np.random.default_rng(0))
    ctx = EvalContext.build(ENV, N, fit_bandwidths(pairs, extend_schema(schema)))
    # two rows per edge-MLP block: the row-block path of large graphs; one graph latent of two
    # classes, so some of the kappa samples share it (and their pairwise block)
    overrides = {**TINY_OVERRIDES["gdm"], "graph_latent_groups": 1, "edge_chunk_elems": 2 * N * 8}
    torch.manual_seed(0)
    model = make_model(name, schema, FeatureScaler.fit(small, schema), **overrides).eval()
    points = list(_points(ctx))
    old, new = _score(model, ctx, points, False), _score(model, ctx, points, True)
    for (g_old, c_old, p_old), (g_new, c_new, p_new) in zip(old, new, strict=True):
        # the same samples; their continuous features within float rounding (the edge MLP's
        # sum in another order moves the node states by ulps)
        assert g_new == pytest.approx(g_old, rel=1e-5, abs=1e-9)
        assert c_new == pytest.approx(c_old, rel=1e-5, abs=1e-9)
        assert p_new == p_old
    assert len({g for g, _, _ in new}) > 1  # real, distinct transitions


@pytest.mark.parametrize("name", ["gdm", "vanilla-gwm"])
def test_batched_imagination_gives_the_per_transition_samples(name):
    """The model half batched over reference transitions (a GPU's default, here on the CPU):
    every point's rollouts from its own seed, as the per-point path draws them (the GDM as
    one batch of all points' rows, the others through the default loop)."""
    schema = env_schema(ENV)
    small = [record_episode(ENV, 8, seed=s) for s in range(3)]
    ctx = EvalContext.build(ENV, N, None)
    torch.manual_seed(0)
    model = make_model(name, schema, FeatureScaler.fit(small, schema), **TINY_OVERRIDES[name])
    model.eval()
    points = list(_points(ctx))
    for horizon in (1, 2):  # single-step, and two-step rollouts along the reference actions
        for point in points:
            steps = min(horizon, len(point.replay.action_nodes) - point.t)
            point.env_sets = point.env_sets[:1] * steps
        # an evaluation repeat (graphwm noise) draws its own seeds in both paths alike
        repeat = horizon - 1
        single = ModelSampler(model, KAPPA, repeat, batch=False)
        batched = ModelSampler(model, KAPPA, repeat, batch=True)
        for point in points:
            want, got = single(point), batched(point)
            assert len(want) == len(got) == len(point.env_sets)
            for w, g in zip(want, got, strict=True):
                for key in w:
                    if np.issubdtype(w[key].dtype, np.floating):
                        # one batch of every point's rows against each point alone: the same
                        # math at another matrix shape, which a CPU's BLAS may round apart
                        # (AVX-512 kernels do: 3e-8 here); the draws themselves are exact
                        np.testing.assert_allclose(g[key], w[key], rtol=1e-5, atol=1e-6)
                    else:
                        np.testing.assert_array_equal(g[key], w[key])
        assert not batched._preds  # every batched rollout was handed out


def test_bench_evaluation_compares_the_paths_and_extrapolates():
    """benchmarks/bench_evaluation.py end to end on small graphs: both paths timed (the least
    of two timings), the same GDD (its |dGDD| column), and the paper-preset extrapolation."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_evaluation.py"
    args = ["--sizes", "8", "10", "12", "--models", "gdm", "--permutations"]
    out = subprocess.run(
        [sys.executable, str(script), *args, "10", "--timings", "2", "--extrapolate", "paper"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    rows = [line.split("|") for line in out.splitlines() if line.startswith("| OD |")]
    assert [(r[2].strip(), r[3].strip()) for r in rows] == [(n, "gdm") for n in ("8", "10", "12")]
    assert all(float(r[-2]) <= 1e-6 for r in rows)  # max |dGDD| of old and new
    assert "all on the CPU:" in out and "CPU-hours" in out


def test_print_gdds_prints_each_transitions_numbers():
    """benchmarks/print_gdds.py, the cross-tree check of the evaluation's numbers: four
    reference transitions per model, the values single_step_job's scoring gives."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "print_gdds.py"
    out = subprocess.run(
        [sys.executable, str(script), "9", "gdm"],
        capture_output=True, text=True, check=True, timeout=300,
    ).stdout  # fmt: skip
    lines = out.splitlines()
    pattern = r"gdm N=9 t=\d+ gdd=([0-9.e+-]+) p=([0-9.e+-]+)"
    matches = [re.fullmatch(pattern, line) for line in lines]
    assert len(lines) == 4 and all(matches)
    gdds = [float(m.group(1)) for m in matches if m]
    assert all(g > 0 for g in gdds) and len(set(gdds)) > 1  # real, distinct transitions
