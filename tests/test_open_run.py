"""``graphwm.open_run`` (issue 48 item 3): what a tiny run holds, a trained model by (env,
model, seed, step), the fitted bandwidths, the test episodes, the metric schema, and the GDD
of a model on one transition, which with the evaluation's sample count equals the run's
stored per-transition GDD."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import tiny_preset

import graphwm
from graphwm.metric.protocol import reference_indices
from graphwm.pipeline import reproduce
from graphwm.stages.fit import load_fitted


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """SAR, the GDM, one seed, 4 steps with the checkpoints of steps 2 and 4 kept."""
    preset = tiny_preset(envs=["SAR"], models=["gdm"], ablations=[], ablation_envs=[])
    preset.pop("downstream", None)
    overrides = {"gdm": preset["train"]["model_overrides"]["gdm"]}
    preset["train"] = {**preset["train"], "eval_every": 2, "model_overrides": overrides}
    root = tmp_path_factory.mktemp("open_run") / "run"
    reproduce(preset, root, progress=False)
    return preset, root


def test_lists_what_the_run_holds(tiny_run):
    preset, root = tiny_run
    run = graphwm.open_run(root)
    assert run.preset == "tiny" and run.envs == ["SAR"]
    assert [(m.env, m.model, m.seed, m.steps) for m in run.models] == [("SAR", "gdm", 0, (2, 4))]
    assert [(f.env, f.size, f.episodes) for f in run.test_files] == [("SAR", 7, 1)]
    kinds = sorted(r.kind for r in run.results)
    assert "single_step" in kinds and "multi_step" in kinds
    text = str(run)
    assert "SAR: test sizes [7]" in text and "gdm seed 0, kept steps [2, 4]" in text


def test_loads_a_model_by_env_model_seed_and_step(tiny_run):
    _, root = tiny_run
    run = graphwm.open_run(root)
    final = run.load_model("SAR", "gdm", seed=0)
    early = run.load_model("SAR", "gdm", seed=0, step=2)
    assert not final.training
    pairs = zip(final.parameters(), early.parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in pairs)  # two more steps changed the weights
    with pytest.raises(ValueError, match=r"keeps no checkpoint of step 3; it keeps \[2, 4\]"):
        run.load_model("SAR", "gdm", step=3)
    with pytest.raises(KeyError, match="no model 'vanilla-gwm' on 'SAR' with seed 0"):
        run.load_model("SAR", "vanilla-gwm")


def test_bandwidths_schema_and_test_episodes(tiny_run):
    _, root = tiny_run
    run = graphwm.open_run(root)
    (fit_dir,) = (root / "fit" / "SAR").iterdir()
    assert run.bandwidths("SAR").to_json() == load_fitted(fit_dir)[0].to_json()
    schema = run.metric_schema("SAR")
    assert "reward" in schema["graph_continuous"] and "continuation" in schema["graph_categorical"]
    assert list(schema["node_categorical"])[-1] == "action_mask"
    (episode,) = run.test_episodes("SAR")
    sidecar = json.loads(next((root / "data" / "SAR").glob("test_n7-*.json")).read_text())
    assert episode.seed == sidecar["seeds"][0] and episode.num_nodes == 7
    assert len(episode.observations) == len(episode.reward) + 1
    assert episode.observations[0]["adjacency"].shape == (7, 7)
    with pytest.raises(ValueError, match=r"test sizes \[7\] for 'SAR'; pass size="):
        run.test_episodes("SAR", size=8)


def test_score_gives_the_stored_transition_gdd(tiny_run, one_torch_thread):
    preset, root = tiny_run
    run = graphwm.open_run(root)
    (record,) = [r for r in run.results if r.kind == "single_step"]
    model = run.load_model("SAR", "gdm", seed=0)
    (episode,) = run.test_episodes("SAR")
    ev = preset["evaluate"]
    steps = reference_indices(len(episode.reward), ev["reference_transitions"])
    scores = [run.score(model, "SAR", t=int(t), num_samples=ev["num_samples"]) for t in steps]
    assert [s.gdd for s in scores] == pytest.approx(record.gdd_transitions[0], rel=1e-9)
    redrawn = run.score(model, "SAR", t=int(steps[0]), num_samples=ev["num_samples"], seed=1)
    assert redrawn.gdd != scores[0].gdd  # another draw of both sample sets


def test_refuses_what_is_not_a_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run.json"):
        graphwm.open_run(tmp_path)
    with pytest.raises(FileNotFoundError, match="no such folder"):
        graphwm.open_run(tmp_path / "missing")
