"""Bring your own env (issue 35, part 4): one registration point that every consumer reads,
``check_graph_env`` naming the broken part of the contract, a default renderer for ``GraphEnv``
subclasses, model presets for an env the paper did not tune, and the paper's whole pipeline
(``graphwm reproduce``) on two envs that are not the paper's: a ``GraphEnv`` subclass
(``example/Spread-v0``) and a plain ``gymnasium.Env`` written from docs/contract.md alone
(``example/EdgeFlip-v0``), both in ``tests/example_envs``."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import example_envs  # noqa: F401  (registers example/Spread-v0 and example/EdgeFlip-v0)
import gymnasium as gym
import numpy as np
import pytest
from example_envs.edgeflip import EdgeFlipEnv
from example_envs.spread import SpreadEnv
from gdm_models import default_hyperparameters, get_hyperparameters, register_hyperparameters
from graphwm_envs import (
    GraphEnvContractError,
    check_graph_env,
    graph_env_info,
    register_graph_env,
)

from graphwm import checks
from graphwm.config import PresetError
from graphwm.envs import env_id, env_limits, env_schema, make_env, model_hyperparameters
from graphwm.metric.graph import extend_schema
from graphwm.pipeline import preset_dict, reproduce

SPREAD = "example_envs:example/Spread-v0"
EDGEFLIP = "example_envs:example/EdgeFlip-v0"


# ----------------------------------------------------------------- the doc shows the files
def test_the_doc_page_shows_the_example_env_as_it_is():
    """docs/own-env.md walks through the files of tests/example_envs, verbatim."""
    root = Path(__file__).resolve().parents[1]
    doc = (root / "docs/own-env.md").read_text()
    blocks = re.findall(r"(?ms)^```python\n(.*?)^```", doc)
    spread = (root / "tests/example_envs/spread.py").read_text()
    assert spread[spread.index("from __future__") :] in blocks
    assert (root / "tests/example_envs/__init__.py").read_text() in blocks


# ------------------------------------------------------------------------- check_graph_env
@pytest.mark.parametrize(
    "env_id",
    [
        "example/Spread-v0",
        "example/EdgeFlip-v0",
        *(f"graphenv/{e}-v0" for e in ("RGC", "OD", "SAR", "CF")),
    ],
)
def test_the_example_envs_and_the_papers_pass_the_checker(env_id):
    check_graph_env(gym.make(env_id, num_nodes=8))


class _NoFeature(EdgeFlipEnv):  # an observation key the schema declares is missing
    def _obs(self):
        obs = super()._obs()
        del obs["node_continuous"]
        return obs


class _WrongDtype(EdgeFlipEnv):
    def _obs(self):
        return {**super()._obs(), "adjacency": super()._obs()["adjacency"].astype(np.int64)}


class _Asymmetric(EdgeFlipEnv):
    def _obs(self):
        obs = super()._obs()
        obs["adjacency"][0, 1], obs["adjacency"][1, 0] = 1, 0
        return obs


class _WidthMismatch(EdgeFlipEnv):  # the schema declares 2 graph features, 3 are observed
    def __init__(self, **kw):
        super().__init__(**kw)
        box = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
        self.observation_space = gym.spaces.Dict(
            {**self.observation_space.spaces, "graph_continuous": box}
        )

    def _obs(self):
        obs = super()._obs()
        obs["graph_continuous"] = np.append(obs["graph_continuous"], np.float32(0.5))
        return obs


class _NoClone(EdgeFlipEnv):
    clone_state = None  # type: ignore[assignment]

    def __getattribute__(self, name):
        if name == "clone_state":
            raise AttributeError(name)
        return super().__getattribute__(name)


class _ForgetfulRestore(EdgeFlipEnv):  # the snapshot lacks the RNG: the future differs
    def restore_state(self, snapshot, seed=None):
        self.adjacency = snapshot["adjacency"].copy()
        self.steps = snapshot["steps"]
        return self._obs()


class _WrongNodes(EdgeFlipEnv):
    def action_to_nodes(self, action):
        return np.ones((self.num_nodes, 1), np.int8)


class _MaskDisagrees(EdgeFlipEnv):  # action_masks() marks another node than the observation
    def action_masks(self):
        return ~super().action_masks()


class _SelfLoop(EdgeFlipEnv):
    def _obs(self):
        obs = super()._obs()
        obs["adjacency"][2, 2] = 1
        return obs


class _BadSchema(EdgeFlipEnv):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.schema = {"node_continuous": ["degree"], "node_categorical": {"on": 1}}


VIOLATIONS = [
    (_NoFeature, "observation['node_continuous']", "the key is missing"),
    (_WrongDtype, "observation['adjacency']", "dtype int64, the contract's is int8"),
    (_Asymmetric, "observation['adjacency']", "not symmetric"),
    (_SelfLoop, "observation['adjacency']", "self-loops"),
    (_WidthMismatch, "observation['graph_continuous']", "declares 2 graph_continuous"),
    (_NoClone, "clone_state", "has no 'clone_state'"),
    (_ForgetfulRestore, "clone_state/restore_state", "another next state or reward"),
    (_WrongNodes, "action_to_nodes", r"shape \(8, 1\), expected \(8,\)"),
    (_MaskDisagrees, "action_mask", "differs from obs\\['action_mask'\\]"),
    (_BadSchema, "schema", "not a valid schema"),
]


@pytest.mark.parametrize(
    ("cls", "part", "problem"), VIOLATIONS, ids=[v[0].__name__ for v in VIOLATIONS]
)
def test_the_checker_names_the_broken_part(cls, part, problem):
    with pytest.raises(GraphEnvContractError, match=problem) as info:
        check_graph_env(cls(num_nodes=8))
    assert info.value.part == part
    assert f"contract part {part!r}" in str(info.value)


def test_a_masked_action_the_env_refuses_is_named():
    class Refuses(SpreadEnv):  # the mask allows vaccinated nodes, the env refuses them
        def _mask(self):
            return np.ones(self.num_nodes, bool)

        def _is_valid(self, action):
            return not self._state.vaccinated[int(action)]

    with pytest.raises(GraphEnvContractError, match="reported invalid") as info:
        check_graph_env(Refuses(num_nodes=8), steps=30)
    assert info.value.part == "action_mask"


# ------------------------------------------------------ GraphEnv subclasses: the renderer
def test_a_graph_env_subclass_renders_and_passes_gymnasiums_checker():
    from gymnasium.utils.env_checker import check_env

    env = SpreadEnv(num_nodes=8, render_mode="rgb_array")
    check_env(env)  # before: TypeError (relative import of '.viewer' without a package)
    env.reset(seed=0)
    env.step(env.sample_valid_action(np.random.default_rng(0)))
    frame = env.render()
    assert frame.ndim == 3 and frame.shape[2] == 3 and frame.dtype == np.uint8
    assert frame.std() > 0  # something was drawn


# ------------------------------------------------------------------ the registration point
def test_registration_declares_schema_and_size_range():
    info = graph_env_info("example/Spread-v0")
    assert info.env_class is SpreadEnv and (info.min_nodes, info.max_nodes) == (5, 200)
    assert info.schema == SpreadEnv.feature_schema().to_dict()
    plain = graph_env_info("example/EdgeFlip-v0")  # gym.register only: read from one env
    assert plain.schema == EdgeFlipEnv(num_nodes=5).schema.to_dict()
    assert (plain.min_nodes, plain.max_nodes) == (5, 5000)
    register_graph_env(
        "example/EdgeFlipSmall-v0",
        "example_envs.edgeflip:EdgeFlipEnv",
        schema=plain.schema,
        min_nodes=6,
        max_nodes=12,
    )
    assert env_limits("example/EdgeFlipSmall-v0") == (6, 12)
    # the default N (20) moves into the declared range, which gym.make enforces (issue 47)
    assert gym.make("example/EdgeFlipSmall-v0").unwrapped.num_nodes == 12
    with pytest.raises(ValueError, match=r"num_nodes must be an integer in \[6, 12\]"):
        gym.make("example/EdgeFlipSmall-v0", num_nodes=20)
    with pytest.raises(ValueError, match="not a valid schema"):
        register_graph_env("example/Bad-v0", EdgeFlipEnv, schema={"node_categorical": {"a": 1}})
    with pytest.raises(ValueError, match="one of the paper's envs"):
        register_graph_env("graphenv/SAR-v0", EdgeFlipEnv)


def test_env_names_resolve_module_id_and_namespace_forms(tmp_path, monkeypatch):
    assert env_id(SPREAD) == "example/Spread-v0"
    assert env_id("example/Spread-v0") == "example/Spread-v0"
    assert env_schema(EDGEFLIP)["graph_continuous"] == ["k", "density"]
    # a bare id whose namespace is the registering package: imported on first use
    pkg = tmp_path / "byo_pkg_ns"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(
            """
            import gymnasium as gym
            gym.register("byo_pkg_ns/Flip-v0", "example_envs.edgeflip:EdgeFlipEnv")
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "byo_pkg_ns/Flip-v0" not in gym.registry
    assert make_env("byo_pkg_ns/Flip-v0", 6).num_nodes == 6
    with pytest.raises(
        ValueError, match=r"unknown env 'nope/X-v0'; choose from \['CF'.*'module:id'"
    ):
        env_id("nope/X-v0")
    with pytest.raises(ValueError, match="cannot import its module 'no_such_mod'"):
        env_id("no_such_mod:nope/X-v0")
    preset = {**preset_dict("tiny"), "envs": ["SAR", "nope/X-v0"]}
    with pytest.raises(PresetError, match=r"'envs\[1\]' \('nope/X-v0'\): unknown env"):
        checks.parse_checked(preset)


def test_make_env_refuses_an_env_without_the_protocol():
    gym.register("example/NoProtocol-v0", lambda num_nodes=5: gym.make("CartPole-v1").unwrapped)
    with pytest.raises(TypeError, match=r"lacks \['num_nodes', 'schema'"):
        make_env("example/NoProtocol-v0", 5)


# ---------------------------------------------------------------------- model presets
def test_model_hyperparameters_of_an_env_the_paper_did_not_tune():
    schema = env_schema(SPREAD)
    with pytest.raises(KeyError, match="pass the env's schema"):
        get_hyperparameters("gdm", "example/Spread-v0")
    gdm = get_hyperparameters("gdm", "example/Spread-v0", schema=schema)
    assert gdm == default_hyperparameters("gdm", schema) == model_hyperparameters("gdm", SPREAD)
    # the modal value of the paper's four tuned GDM presets: three of four use these
    assert gdm["model"]["hidden_dim"] == 128 and gdm["train"]["lr"] == 5e-4
    assert gdm["model"]["node_latent_groups"] == 16 and gdm["model"]["free_bits"] == 0.01
    ea = default_hyperparameters("ea-gwm", schema)  # ties (2 vs 4 layers, 64 vs 128) -> the smaller
    assert ea["model"]["mp_layers"] == 2 and ea["model"]["hidden_dim"] == 64
    assert model_hyperparameters("gdm", "SAR") == get_hyperparameters(
        "gdm", "SAR"
    )  # the paper's unchanged
    with pytest.raises(ValueError, match="schema must be a schema dict"):
        default_hyperparameters("gdm", {"nodes": 3})
    register_hyperparameters("gdm", "example/Spread-v0", {"model": {"hidden_dim": 16}, "train": {}})
    try:
        assert model_hyperparameters("gdm", SPREAD)["model"] == {"hidden_dim": 16}
    finally:
        from gdm_models.hyperparameters import HYPERPARAMETERS

        del HYPERPARAMETERS["gdm"]["example/Spread-v0"]


def test_the_metric_graph_refuses_a_feature_it_would_add():
    with pytest.raises(ValueError, match="already has a feature named 'reward'"):
        extend_schema({"graph_continuous": ["reward"]})


# --------------------------------------------------------------------- the whole pipeline
@pytest.fixture(scope="module")
def own_run(tmp_path_factory):
    """``graphwm reproduce`` with the tiny preset on the two example envs."""
    preset = preset_dict("tiny")
    preset.update(envs=[SPREAD, EDGEFLIP], ablation_envs=[SPREAD])
    preset["downstream"]["envs"] = [SPREAD, EDGEFLIP]
    out = tmp_path_factory.mktemp("own") / "run"
    report = reproduce(preset, out, progress=False)
    return out, Path(report), preset


def test_reproduce_runs_end_to_end_on_envs_that_are_not_the_papers(own_run):
    out, report, _ = own_run
    results = [json.loads(p.read_text()) for p in (out / "results").rglob("*.json")]
    kinds = {(r["env"], r.get("model"), r["kind"]) for r in results}
    for env in (SPREAD, EDGEFLIP):
        for model in ("gdm", "vanilla-gwm"):
            assert (env, model, "single_step") in kinds
            assert (env, model, "multi_step") in kinds
        assert (env, None, "self_gdd") in kinds
    assert (SPREAD, "gdm:no-h-plus", "single_step") in kinds
    assert all(np.isfinite(r["gdd"]).all() for r in results)
    downstream = [json.loads(p.read_text()) for p in (out / "downstream").glob("*.json")]
    agents = {(d["env"], d["agent"]) for d in downstream}
    for env in (SPREAD, EDGEFLIP):
        assert {
            (env, "real"),
            (env, "random"),
            (env, "dream:gdm"),
            (env, "dream:vanilla-gwm"),
        } <= agents
    table = (report / "gdd_single_step.md").read_text()
    assert SPREAD in table and EDGEFLIP in table
    assert "dream:gdm" in (report / "downstream.md").read_text()


def _self_gdd_jobs(preset):
    from graphwm.checks import parse_checked
    from graphwm.jobs import evaluation_jobs

    return [j for j in evaluation_jobs(parse_checked(preset)) if j.kind == "self_gdd"]


def test_pool_workers_resolve_the_env_by_its_name(own_run):
    """Both envs' self-GDD jobs in two spawned worker processes: each imports the
    registering module from the ``module:id`` name and reproduces the local records."""
    from graphwm.stages.evaluate import self_gdd_job
    from graphwm.store.executors import run_jobs
    from graphwm.store.results import ResultStore

    out, _, preset = own_run
    jobs = _self_gdd_jobs(preset)
    assert {j.env for j in jobs} == {SPREAD, EDGEFLIP}
    import multiprocessing as mp
    import os
    from concurrent.futures import ProcessPoolExecutor

    from graphwm.store.outcomes import execute

    local = run_jobs(self_gdd_job, jobs, ResultStore(out / "results"), out, progress=False)
    # spawned processes directly: the local executor's driver may run both jobs itself
    with ProcessPoolExecutor(2, mp_context=mp.get_context("spawn")) as pool:
        outcomes = list(pool.map(execute, [self_gdd_job] * len(jobs), jobs, [str(out)] * len(jobs)))
    assert all(o.pid != os.getpid() for o in outcomes)
    assert [o.results[0].gdd for o in outcomes] == [r.gdd for r in local]


# slow: the pool test above already resolves the env by name in fresh worker processes
@pytest.mark.slow
def test_a_ray_worker_resolves_the_env_by_its_name(own_run, monkeypatch):
    """The same self-GDD job on Ray as in the local run: the Ray worker imports the
    registering module from the ``module:id`` name. The module must be importable there:
    a local Ray's workers see the driver's environment at ``ray.init``, so ``PYTHONPATH``
    (an installed package needs nothing)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    tests_dir = str(Path(__file__).resolve().parent)
    monkeypatch.setenv("PYTHONPATH", tests_dir)
    from graphwm.checks import parse_checked
    from graphwm.jobs import evaluation_jobs
    from graphwm.stages.evaluate import self_gdd_job
    from graphwm.store.executors import run_jobs
    from graphwm.store.results import ResultStore

    out, _, preset = own_run
    job = next(
        j
        for j in evaluation_jobs(parse_checked(preset))
        if j.kind == "self_gdd" and j.env == EDGEFLIP
    )
    local = run_jobs(self_gdd_job, [job], ResultStore(out / "results"), out, progress=False)
    remote = run_jobs(
        self_gdd_job, [job], ResultStore(out / "check-ray"), out, executor="ray", progress=False
    )
    ray.shutdown()
    assert local == remote


def test_dream_envs_accept_an_env_that_only_has_the_protocol():
    """``DreamEnv`` and ``DreamVectorEnv`` imitate a plain ``gymnasium.Env`` (no
    ``GraphEnv`` subclass): spaces, schema, masks and horizon come from the protocol."""
    import torch
    from gdm_models import make_model

    from graphwm.dream import DreamEnv, DreamVectorEnv

    real = EdgeFlipEnv(num_nodes=6)
    torch.manual_seed(0)
    model = make_model("vanilla-gwm", real.schema.to_dict(), None, hidden_dim=8)
    dream = DreamEnv(model, real, seed=0)
    obs, _ = dream.reset(seed=0)
    assert set(obs) == set(real.observation_space.spaces)
    obs, reward, terminated, truncated, info = dream.step(
        int(np.flatnonzero(obs["action_mask"])[0])
    )
    assert real.observation_space.contains(obs) and np.isfinite(reward)
    assert info["invalid_action"] is False
    vector = DreamVectorEnv(model, real, 3, seed=0)
    batch, _ = vector.reset(seed=0)
    assert batch["adjacency"].shape == (3, 6, 6)
    vector.step(np.zeros(3, np.int64))
