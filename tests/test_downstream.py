"""Downstream RL: an agent trains in a dream env and is evaluated in the real env; records,
table, Spearman correlation and figure."""

from __future__ import annotations

import math

import numpy as np
import pytest
from tiny_models import tiny_trained_model

from graphwm.downstream.agents import train_agent
from graphwm.downstream.gdd import attach_gdd, correlations, spearman
from graphwm.downstream.record import GREEDY, RANDOM, REAL, DownstreamRecord
from graphwm.downstream.report import downstream_figure, downstream_table
from graphwm.downstream.runs import AgentSpec, dream_record, yardstick_records
from graphwm.envs import make_env

pytest.importorskip("sb3_contrib")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_agent_trains_in_a_dream_env_and_is_evaluated_in_the_real_env():
    model = tiny_trained_model("gdm", "SAR")
    record = dream_record(model, "gdm", "SAR", 8, AgentSpec(budget=128, episodes=4, seed=0))
    assert record.agent == "dream:gdm" and record.model == "gdm" and record.budget == 128
    assert record.episodes == 4 and math.isfinite(record.mean_return)
    assert math.isfinite(record.se_return) and record.se_return >= 0
    # SAR returns are bounded: -1 per step, at most N x survivors steps, penalties >= -30 - 5 s
    assert -8 * 3 - 30 - 5 * 3 <= record.mean_return <= 3 * 11 + 5
    assert (record.policy, record.num_envs) == ("graph", 8)  # the defaults


def test_same_seed_same_record():
    """Dream and real agents (graph and MLP policy): a rerun with the same seed gives the same
    record (wall time aside), another training seed another one."""
    from graphwm.downstream.runs import real_record

    def plain(rec):
        return {k: v for k, v in rec.to_dict().items() if k != "seconds"}

    model = tiny_trained_model("gdm", "SAR")
    args = dict(budget=64, episodes=4, num_envs=4)
    for policy in ("graph", "mlp"):
        spec = AgentSpec(seed=0, policy=policy, **args)
        first = dream_record(model, "gdm", "SAR", 8, spec)
        again = dream_record(model, "gdm", "SAR", 8, spec)
        assert plain(again) == plain(first) and first.policy == policy
        size = (first.policy_hidden_dim, first.policy_num_layers)
        assert size == ((64, 3) if policy == "graph" else (None, None))  # graph: the defaults
    first = real_record("SAR", 8, AgentSpec(seed=1, **args))
    assert plain(real_record("SAR", 8, AgentSpec(seed=1, **args))) == plain(first)
    assert plain(real_record("SAR", 8, AgentSpec(seed=2, **args))) != plain(first)


def test_budget_counts_the_steps_of_all_parallel_envs():
    from graphwm.downstream.agents import real_vec_env

    agent = train_agent(real_vec_env("SAR", 8, 4), 64, 0)
    assert agent.n_steps == 16 and agent.num_timesteps == 64  # one rollout of 4 x 16 steps
    agent = train_agent(real_vec_env("SAR", 8, 4), 50, 0)  # rounded up to a whole rollout
    assert agent.n_steps == 13 and agent.num_timesteps == 52
    with pytest.raises(ValueError, match="policy"):
        train_agent(make_env("SAR", 8), 16, 0, policy="cnn")
    with pytest.raises(ValueError, match="num_envs"):
        real_vec_env("SAR", 8, 0)


def test_trained_agents_are_evaluated_the_documented_way(monkeypatch):
    """A dream or real agent's record is graphwm_envs.agents.evaluate_agent's deterministic
    protocol on reset(eval_seed + e): a stand-in agent that takes the first valid node gets
    the packaged protocol's returns, and is never asked for a sample."""
    from graphwm_envs.agents import agent_returns

    import graphwm.downstream.runs as runs

    class FirstValid:
        asked: set[bool] = set()

        def predict(self, obs, action_masks, deterministic):
            FirstValid.asked.add(deterministic)
            return np.array([np.flatnonzero(m)[0] for m in action_masks]), None

    monkeypatch.setattr(runs, "train_agent", lambda *args, **kwargs: FirstValid())
    monkeypatch.setattr(runs, "real_vec_env", lambda *args: None)
    record = runs.real_record("SAR", 8, AgentSpec(budget=16, episodes=3, seed=0, eval_seed=5))
    assert FirstValid.asked == {True}
    # the packaged protocol (its by-hand check: graph-envs' test_agent_evaluation.py)
    returns = agent_returns(FirstValid(), "graphenv/SAR-v0", episodes=3, seed=5, num_nodes=8)
    assert len(set(returns)) > 1  # three different episodes
    assert record.mean_return == pytest.approx(np.mean(returns))
    assert record.se_return == pytest.approx(np.std(returns, ddof=1) / np.sqrt(3))


def test_train_agent_rejects_a_zero_budget():
    with pytest.raises(ValueError, match="budget"):
        train_agent(make_env("SAR", 8), 0, 0)


def test_yardsticks_match_graphwm_envs_heuristics():
    from graphwm_envs.heuristics import evaluate_heuristic, random_action

    records = yardstick_records("SAR", 8, episodes=3, eval_seed=7)
    assert [r.agent for r in records] == [RANDOM, GREEDY]
    expected = evaluate_heuristic("graphenv/SAR-v0", random_action, episodes=3, seed=7, num_nodes=8)
    assert (records[0].mean_return, records[0].se_return) == pytest.approx(expected)


def test_spearman_and_correlations_by_hand():
    assert spearman([1, 2, 3, 4], [10, 8, 5, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert math.isnan(spearman([1, 2], [2, 1]))  # too few models
    recs = [_rec("m1", 1.0, 0.10, 0.9), _rec("m2", 2.0, 0.30, 0.5), _rec("m3", 3.0, 0.20, 0.2)]
    recs.append(DownstreamRecord("SAR", 8, REAL, None, 0, 64, 9.0, 0.1, 4))
    c = correlations(recs)["SAR"]
    assert c["n"] == 3  # the real-env agent is not a model
    assert c["single"] == pytest.approx(spearman([0.10, 0.30, 0.20], [1, 2, 3]))  # 0.5
    assert c["multi"] == pytest.approx(-1.0)


def _rec(model, ret, single, multi):
    return DownstreamRecord(
        "SAR", 8, f"dream:{model}", model, 0, 64, ret, 0.1, 4, gdd_single=single, gdd_multi=multi
    )


def test_attach_gdd_table_and_figure(tmp_path):
    recs = [
        DownstreamRecord("SAR", 8, f"dream:{m}", m, 0, 64, r, 0.2, 4)
        for m, r in (("gdm", -3.0), ("vanilla-gwm", -5.0), ("g-rssm", -4.0))
    ]
    recs += [
        DownstreamRecord("SAR", 8, REAL, None, 0, 64, -2.0, 0.3, 4),
        DownstreamRecord("SAR", 8, RANDOM, None, 0, 0, -6.0, 0.5, 4),
    ]
    single = {("SAR", "gdm", 0): 0.1, ("SAR", "vanilla-gwm", 0): 0.4, ("SAR", "g-rssm", 0): 0.2}
    recs = attach_gdd(recs, single, {("SAR", "gdm", 0): 0.3})
    assert recs[0].gdd_single == 0.1 and recs[0].gdd_multi == 0.3 and recs[1].gdd_multi is None
    assert recs[3].gdd_single is None  # reference rows carry no GDD
    assert [DownstreamRecord.from_dict(r.to_dict() | {"config": {}}) for r in recs] == recs
    table = downstream_table(recs)
    assert "| SAR | 8 | real | 64 | -2.000 ± 0.300 | - | - |" in table
    assert "| SAR | 8 | dream:gdm | 64 | -3.000 ± 0.200 | 0.100 | 0.300 |" in table
    # lower GDD <-> higher return for these three models: Spearman -1
    assert "| SAR | -1.000 | - | 3 |" in table
    path = downstream_figure(recs, tmp_path / "fig" / "downstream.png")
    assert path.exists() and path.stat().st_size > 5000
    with pytest.raises(ValueError, match="no downstream records"):
        downstream_figure([], tmp_path / "empty.png")


def test_downstream_job_for_each_agent_kind(tmp_path):
    from graphwm.downstream.jobs import DownstreamJob, run_downstream_job
    from graphwm.downstream.runs import has_greedy

    model = tiny_trained_model("vanilla-gwm", "OD")
    model.save(tmp_path / "ckpt")
    spec = AgentSpec(budget=64, seed=0, episodes=2, eval_seed=3)
    dream = DownstreamJob("dream", spec, "OD", 8, model="vanilla-gwm", checkpoint="ckpt")
    rec = run_downstream_job(dream, tmp_path)
    assert rec.agent == "dream:vanilla-gwm" and rec.kind == "downstream" and rec.budget == 64
    # OD: 50 steps, reward = change of the target fraction, so |return| <= 1
    assert -1.0 <= rec.mean_return <= 1.0
    assert DownstreamRecord.from_dict(rec.to_dict()) == rec
    rand = run_downstream_job(DownstreamJob(RANDOM, spec, "OD", 8), tmp_path)
    assert rand.budget == 0 and rand.model is None
    assert has_greedy("OD") and has_greedy("SAR")
    with pytest.raises(ValueError, match="unknown yardstick"):
        run_downstream_job(DownstreamJob("oracle", spec, "OD", 8), tmp_path)


def test_record_validation_and_gdd_maps():
    with pytest.raises(ValueError, match="lacks"):
        DownstreamRecord.from_dict({"env": "SAR"}, "x.json")
    good = _rec("gdm", 1.0, 0.1, 0.2).to_dict()
    with pytest.raises(ValueError, match="'mean_return' must be a number"):
        DownstreamRecord.from_dict({**good, "mean_return": "high"})
    with pytest.raises(ValueError, match="not a downstream record"):
        DownstreamRecord.from_dict({**good, "kind": "single_step"})
    from graphwm.downstream.gdd import gdd_maps

    single = [
        {"env": "SAR", "model": "gdm", "seed": 0, "size": 10, "gdd": 0.2},
        {"env": "SAR", "model": "gdm", "seed": 0, "size": 20, "gdd": 0.4},
        {"env": "SAR", "model": "g-rssm", "seed": 0, "size": 20, "gdd": 0.5},
        {"env": "SAR", "model": "g-rssm", "seed": 0, "size": 40, "gdd": 0.7},
    ]
    multi = [
        {"env": "SAR", "model": "gdm", "seed": 0, "size": 20, "gdd": [0.1, 0.3]},
        {"env": "SAR", "model": "gdm", "seed": 0, "size": 40, "gdd": [0.9, 0.9]},
    ]
    s, m = gdd_maps(single, multi, num_nodes=10)
    assert s[("SAR", "gdm", 0)] == 0.2  # the downstream size was evaluated
    assert s[("SAR", "g-rssm", 0)] == pytest.approx(0.6)  # else the mean over sizes
    assert m == {("SAR", "gdm", 0): pytest.approx(0.2)}  # closest size, mean over horizon


def _trained(model: str, seed: int = 0, env: str = "SAR"):
    """A stand-in for a training job: what the downstream jobs read of one."""
    from types import SimpleNamespace

    return SimpleNamespace(env=env, model=model, seed=seed, key=f"train-{model}", reldir=model)


def test_downstream_config_parse_and_jobs():
    from graphwm.config import DownstreamConfig
    from graphwm.downstream.jobs import downstream_jobs

    cfg = DownstreamConfig.parse(
        {"budget": 256, "episodes": 5, "num_nodes": 8, "models": ["gdm"], "ppo": {"n_steps": 64}}
    )
    assert (cfg.budget, cfg.episodes, cfg.num_nodes, cfg.models) == (256, 5, 8, ("gdm",))
    assert (cfg.policy, cfg.dream_envs) == ("graph", 8)
    jobs = downstream_jobs(cfg, ["SAR"], [_trained("gdm"), _trained("g-rssm")])
    agents = [j.agent for j in jobs]
    assert agents == ["dream", REAL, RANDOM, GREEDY]  # g-rssm is not selected
    assert jobs[0].checkpoint == "gdm/ckpt/final" and jobs[0].describe()["ppo"] == {"n_steps": 64}
    assert jobs[0].spec.ppo_kwargs == {"n_steps": 64} and jobs[0].describe()["train"] == "train-gdm"
    assert [(j.spec.policy, j.spec.num_envs) for j in jobs[:2]] == [("graph", 8)] * 2
    described = jobs[2].describe()
    assert "budget" not in described and "policy" not in described  # yardsticks do not train
    assert {j.spec.episodes for j in jobs} == {5}
    for bad, match in (
        ({}, r"'downstream\.budget' is missing"),
        ({"budget": 0}, "downstream.budget"),
        ({"budget": 8, "agents": 3}, r"'downstream\.agents' is unknown"),
        ({"budget": 8, "ppo": {"lr": 1}}, "downstream.ppo"),
        ({"budget": 8, "real_agent": "yes"}, "downstream.real_agent"),
        ({"budget": 8, "policy": "cnn"}, r"downstream\.policy.*one of \['graph', 'mlp'\]"),
        ({"budget": 8, "dream_envs": 0}, "downstream.dream_envs"),
    ):
        with pytest.raises(ValueError, match=match):
            DownstreamConfig.parse(bad)


def _net_size(agent) -> tuple[int, int]:
    """``(width, message-passing layers)`` of a trained graph agent's network."""
    net = agent.policy.net
    return net.embed[-1].out_features, len(net.convs)


def test_graph_policy_size_keys_parse_refuse_and_reach_the_job_configs():
    import inspect

    from graphwm_envs.agents import MaskableGraphPolicy

    from graphwm.downstream.jobs import downstream_jobs
    from graphwm.downstream.section import GRAPH_NET_DEFAULTS, DownstreamConfig

    # the defaults are the policy's own, so a section without the keys builds today's agent
    own = inspect.signature(MaskableGraphPolicy.__init__).parameters
    assert GRAPH_NET_DEFAULTS == {
        "policy_hidden_dim": own["hidden_dim"].default,
        "policy_num_layers": own["num_layers"].default,
    }
    default = DownstreamConfig.parse({"budget": 8})
    assert (default.policy_hidden_dim, default.policy_num_layers) == (64, 3)
    jobs = downstream_jobs(default, ["SAR"], [_trained("gdm")])
    assert all("policy_hidden_dim" not in j.describe() for j in jobs)
    small = DownstreamConfig.parse({"budget": 8, "policy_hidden_dim": 16, "policy_num_layers": 0})
    trained = downstream_jobs(small, ["SAR"], [_trained("gdm")])[:2]
    assert [
        (j.describe()["policy_hidden_dim"], j.describe()["policy_num_layers"]) for j in trained
    ] == [(16, 0)] * 2
    assert [(j.spec.policy_hidden_dim, j.spec.policy_num_layers) for j in trained] == [(16, 0)] * 2
    assert DownstreamConfig.parse(small.to_dict()) == small
    # the MLP policy has no such network: non-default values are refused, defaults accepted
    mlp = DownstreamConfig.parse({"budget": 8, "policy": "mlp", "policy_num_layers": 3})
    assert DownstreamConfig.parse(mlp.to_dict()) == mlp
    for bad, match in (
        ({"policy_hidden_dim": 0}, r"'downstream\.policy_hidden_dim': must be an integer >= 1"),
        ({"policy_num_layers": -1}, r"'downstream\.policy_num_layers': must be an integer >= 0"),
        ({"policy_hidden_dim": 2.5}, r"'downstream\.policy_hidden_dim': must be an integer"),
        (
            {"policy": "mlp", "policy_hidden_dim": 32},
            r"'downstream\.policy_hidden_dim': sets the graph policy's network, but policy is "
            r"'mlp'.*got 32",
        ),
        ({"policy": "mlp", "policy_num_layers": 1}, r"'downstream\.policy_num_layers'"),
    ):
        with pytest.raises(ValueError, match=match):
            DownstreamConfig.parse({"budget": 8, **bad})


def test_train_agent_builds_the_graph_policy_of_the_given_size():
    from graphwm.downstream.agents import real_vec_env

    def trained(**net):
        return train_agent(real_vec_env("SAR", 8, 2), 16, 0, **net)

    assert _net_size(trained()) == (64, 3)
    agent = trained(policy_hidden_dim=16, policy_num_layers=1)
    assert _net_size(agent) == (16, 1)
    assert {m.normalized_shape for m in agent.policy.net.norms} == {(16,)}
    assert _net_size(trained(policy_num_layers=0)) == (64, 0)
    with pytest.raises(ValueError, match="graph policy's network, but policy is 'mlp'"):
        train_agent(real_vec_env("SAR", 8, 2), 16, 0, policy="mlp", policy_hidden_dim=16)
    with pytest.raises(ValueError, match="policy_hidden_dim must be >= 1"):
        trained(policy_hidden_dim=0)


def test_downstream_section_is_checked_against_the_preset():
    from graphwm.config import DownstreamConfig

    def models_of(env):
        return ["gdm", "gdm:no-h-plus"] if env == "SAR" else ["gdm"]

    DownstreamConfig.parse({"budget": 8, "models": ["gdm:no-h-plus"]}).check(["SAR"], models_of)
    with pytest.raises(ValueError, match=r"downstream.envs\[0\]"):
        DownstreamConfig.parse({"budget": 8, "envs": ["CF"]}).check(["SAR"], models_of)
    with pytest.raises(ValueError, match=r"downstream.models\[0\]"):
        DownstreamConfig.parse({"budget": 8, "envs": ["OD"], "models": ["gdm:no-h-plus"]}).check(
            ["SAR", "OD"], models_of
        )


def test_train_agent_leaves_no_logger_folders(tmp_path, monkeypatch):
    """SB3's default logger makes an empty SB3-<time> folder in the temp dir per agent."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("SB3_LOGDIR", raising=False)
    agent = train_agent(make_env("SAR", 8), 16, 0)
    assert agent.num_timesteps >= 16
    assert list(tmp_path.glob("SB3-*")) == []


def test_the_downstream_section_is_a_typed_field_of_the_preset():
    """No section registry loaded by name: the preset's ``downstream`` field is the typed
    section, read and written back like every other section."""
    from pathlib import Path

    import graphwm.config
    from graphwm.config import DownstreamConfig, Preset, read_preset

    preset = Preset.parse(read_preset("smoke"))
    assert isinstance(preset.downstream, DownstreamConfig)
    assert preset.downstream.envs == ("SAR", "OD") and preset.downstream.budget == 1024
    assert Preset.parse(preset.to_dict()) == preset
    assert preset.to_dict()["downstream"] == preset.downstream.to_dict()
    without = {k: v for k, v in read_preset("smoke").items() if k != "downstream"}
    assert Preset.parse(without).downstream is None
    assert "importlib" not in Path(graphwm.config.__file__).read_text(encoding="utf-8")
    with pytest.raises(ValueError, match=r"preset key 'downstream\.budget': must be an integer"):
        Preset.parse({**read_preset("smoke"), "downstream": {"budget": "many"}})


def test_agent_spec_is_the_one_set_of_training_settings():
    spec = AgentSpec.with_ppo({"n_steps": 16, "gamma": 0.9}, budget=32, seed=3)
    assert spec.ppo == (("gamma", 0.9), ("n_steps", 16)) and hash(spec)
    assert spec.ppo_kwargs == {"n_steps": 16, "gamma": 0.9}
    assert AgentSpec(budget=32).ppo_kwargs is None
    assert spec.net == {"policy_hidden_dim": 64, "policy_num_layers": 3}
