"""The downstream stage: content-keyed jobs, stored records, report table and figure."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from tiny_models import tiny_trained_model

from graphwm.config import DownstreamConfig
from graphwm.downstream.jobs import downstream_jobs, run_downstream_job
from graphwm.downstream.record import DownstreamRecord
from graphwm.downstream.report import build_downstream_report, load_downstream
from graphwm.store.executors import run_jobs
from graphwm.store.records import seal
from graphwm.store.results import ResultStore

pytest.importorskip("sb3_contrib")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_stage_jobs(jobs, run):
    """The downstream jobs in this process, stored under ``run/downstream``."""
    return run_jobs(
        run_downstream_job,
        jobs,
        ResultStore(run / "downstream"),
        run,
        max_workers=1,
        progress=False,
    )


def test_stage_runs_stores_and_reports(tmp_path):
    run = tmp_path / "run"
    reldir = "train/SAR/gdm/seed0-abc"
    tiny_trained_model("gdm", "SAR").save(run / reldir / "ckpt" / "final")
    trained = [SimpleNamespace(env="SAR", model="gdm", seed=0, key="train-abc", reldir=reldir)]
    section = DownstreamConfig.parse({"budget": 64, "episodes": 2, "num_nodes": 8})
    jobs = downstream_jobs(section, ["SAR"], trained)
    assert [j.agent for j in jobs] == ["dream", "real", "random", "greedy"]
    assert jobs[0].describe()["train"] == "train-abc" and "checkpoint" not in jobs[0].describe()
    # the key ignores where the run lives and the thread count, not the settings
    moved = downstream_jobs(
        section, ["SAR"], [SimpleNamespace(**{**vars(trained[0]), "reldir": "x"})], threads=2
    )
    assert moved[0].key == jobs[0].key
    other = downstream_jobs(
        DownstreamConfig.parse({"budget": 65, "episodes": 2, "num_nodes": 8}), ["SAR"], trained
    )
    assert other[0].key != jobs[0].key

    records = run_stage_jobs(jobs, run)
    assert [r.agent for r in records] == ["dream:gdm", "real", "random", "greedy"]
    assert len(load_downstream(run)) == 4
    results = [
        {"kind": "single_step", "env": "SAR", "model": "gdm", "seed": 0, "size": 8, "gdd": 0.25},
        {
            "kind": "multi_step",
            "env": "SAR",
            "model": "gdm",
            "seed": 0,
            "size": 8,
            "gdd": [0.5, 0.7],
        },
    ]
    out = build_downstream_report(run, run / "report", results)
    table = out["table"].read_text()
    assert "dream:gdm" in table and "| 0.250 |" in table and "| 0.600 |" in table
    assert "MaskablePPO agents: graph policy, 8 parallel env(s) per agent" in table
    assert out["figure"].stat().st_size > 5000
    # a rerun finds every job finished (the stored records come back unchanged)
    again = run_stage_jobs(jobs, run)
    assert again == records
    # run.json scopes the report to the last preset run
    (run / "run.json").write_text(json.dumps({"downstream": []}))
    assert build_downstream_report(run, run / "report", results) == {}
    assert not (run / "report" / "downstream.md").exists()


def test_stored_record_must_be_valid(tmp_path):
    (tmp_path / "downstream").mkdir()
    (tmp_path / "downstream" / "bad.json").write_text(json.dumps({"kind": "downstream"}))
    with pytest.raises(ValueError, match="bad.json.*lacks"):
        load_downstream(tmp_path)
    rec = DownstreamRecord("SAR", 8, "random", None, 0, 0, -3.0, 0.5, 2)
    (tmp_path / "downstream" / "bad.json").write_text(json.dumps(seal(rec.to_dict())))
    assert load_downstream(tmp_path) == [rec]


def test_stage_trains_graph_agents_by_default_and_mlp_by_name(tmp_path, monkeypatch):
    """The policy key reaches the trained agents: the spy records the env each agent trains on
    and the policy class it holds (a stage ignoring the key would train the default twice)."""
    from graphwm_envs.agents import MaskableGraphPolicy
    from sb3_contrib.common.maskable.policies import MaskableMultiInputActorCriticPolicy
    from stable_baselines3.common.vec_env import DummyVecEnv

    import graphwm.downstream.runs as runs
    from graphwm.dream.sb3_vec_env import DreamSB3VecEnv

    seen = []

    def spy(env, budget, seed, ppo_kwargs=None, policy="graph", **net):
        agent = train_agent(env, budget, seed, ppo_kwargs, policy, **net)
        seen.append((type(env), env.num_envs, type(agent.policy), agent.num_timesteps))
        return agent

    train_agent = runs.train_agent
    monkeypatch.setattr(runs, "train_agent", spy)
    run = tmp_path / "run"
    reldir = "train/SAR/gdm/seed0-abc"
    tiny_trained_model("gdm", "SAR").save(run / reldir / "ckpt" / "final")
    trained = [SimpleNamespace(env="SAR", model="gdm", seed=0, key="train-abc", reldir=reldir)]
    base = {"budget": 48, "episodes": 2, "num_nodes": 8, "yardsticks": False}

    graph_section = DownstreamConfig.parse({**base, "dream_envs": 4})
    graph_jobs = downstream_jobs(graph_section, ["SAR"], trained)
    graph = run_stage_jobs(graph_jobs, run)
    # dream: B imagined episodes, one model pass per step; real: as many real envs
    assert seen == [
        (DreamSB3VecEnv, 4, MaskableGraphPolicy, 48),
        (DummyVecEnv, 4, MaskableGraphPolicy, 48),
    ]
    assert [(r.agent, r.policy, r.num_envs) for r in graph] == [
        ("dream:gdm", "graph", 4),
        ("real", "graph", 4),
    ]

    seen.clear()
    mlp_section = DownstreamConfig.parse({**base, "dream_envs": 4, "policy": "mlp"})
    mlp_jobs = downstream_jobs(mlp_section, ["SAR"], trained)
    assert {j.key for j in mlp_jobs}.isdisjoint(j.key for j in graph_jobs)
    mlp = run_stage_jobs(mlp_jobs, run)
    assert [(cls, n, pol) for cls, n, pol, _ in seen] == [
        (DreamSB3VecEnv, 4, MaskableMultiInputActorCriticPolicy),
        (DummyVecEnv, 4, MaskableMultiInputActorCriticPolicy),
    ]
    assert [r.policy for r in mlp] == ["mlp", "mlp"]
    # the parallel env count is part of the key too
    other = downstream_jobs(DownstreamConfig.parse({**base, "dream_envs": 2}), ["SAR"], trained)
    assert {j.key for j in other}.isdisjoint(j.key for j in graph_jobs)

    # a rerun trains nothing and returns the stored records
    seen.clear()
    assert run_stage_jobs(graph_jobs + mlp_jobs, run) == graph + mlp
    assert seen == []
    assert len(load_downstream(run)) == 4


def test_graph_policy_size_reaches_the_agent_and_the_key_only_when_set(tmp_path, monkeypatch):
    """A default section keeps the job payload (so the key) it had before the size keys
    existed; a set size changes the key and the trained network (a stage ignoring the keys
    would train the default network under a new key)."""
    import graphwm.downstream.runs as runs
    from graphwm.downstream.jobs import DownstreamJob
    from graphwm.store.files import content_key

    trained = [SimpleNamespace(env="SAR", model="gdm", seed=0, key="train-abc", reldir="r")]
    base = {"budget": 16, "episodes": 1, "num_nodes": 8, "yardsticks": False}
    default = downstream_jobs(DownstreamConfig.parse(base), ["SAR"], trained)
    # the payload of a default section's real agent: no size keys, as before they existed
    # (the evaluation protocol is keyed since the deterministic one became the stage's)
    payload = {
        "agent": "real",
        "budget": 16,
        "dream_envs": 8,
        "env": "SAR",
        "episodes": 1,
        "eval_seed": 1000000,
        "evaluation": "deterministic",
        "kind": "downstream",
        "num_nodes": 8,
        "policy": "graph",
        "seed": 0,
    }
    assert default[1].describe() == payload
    assert default[1].key == content_key("downstream", payload)
    explicit = {**base, "policy_hidden_dim": 64, "policy_num_layers": 3}
    same = downstream_jobs(DownstreamConfig.parse(explicit), ["SAR"], trained)
    assert [j.key for j in same] == [j.key for j in default]
    sized = {**base, "policy_hidden_dim": 16, "policy_num_layers": 1, "dream_envs": 2}
    small = downstream_jobs(DownstreamConfig.parse(sized), ["SAR"], trained)
    wider = downstream_jobs(
        DownstreamConfig.parse({**sized, "policy_hidden_dim": 24}), ["SAR"], trained
    )
    assert small[1].describe() == {**payload, "dream_envs": 2} | {
        "policy_hidden_dim": 16,
        "policy_num_layers": 1,
    }
    keys = [{j.key for j in jobs} for jobs in (default, small, wider)]
    assert keys[0].isdisjoint(keys[1]) and keys[1].isdisjoint(keys[2])

    seen = []

    def spy(env, budget, seed, ppo_kwargs=None, policy="graph", **net):
        agent = train_agent(env, budget, seed, ppo_kwargs, policy, **net)
        seen.append((agent.policy.net.embed[-1].out_features, len(agent.policy.net.convs)))
        return agent

    train_agent = runs.train_agent
    monkeypatch.setattr(runs, "train_agent", spy)
    real_job = small[1]
    assert isinstance(real_job, DownstreamJob) and real_job.agent == "real"
    (record,) = run_stage_jobs([real_job], tmp_path / "run")
    assert seen == [(16, 1)] and record.policy == "graph" and record.num_envs == 2
    # the record says which policy size it measured (the job key is not the only trace)
    assert (record.policy_hidden_dim, record.policy_num_layers) == (16, 1)
    stored = DownstreamRecord.from_dict(record.to_dict())
    assert (stored.policy_hidden_dim, stored.policy_num_layers) == (16, 1)


def test_records_before_the_policy_key_stay_readable():
    old = DownstreamRecord("SAR", 8, "real", None, 0, 64, -3.0, 0.5, 2).to_dict()
    for key in ("policy", "num_envs", "policy_hidden_dim", "policy_num_layers"):
        del old[key]
    rec = DownstreamRecord.from_dict(old)
    assert rec.policy is None and rec.num_envs is None and rec.mean_return == -3.0
    assert rec.policy_hidden_dim is None and rec.policy_num_layers is None
    with pytest.raises(ValueError, match="policy"):
        DownstreamRecord.from_dict({**old, "policy": 3})
