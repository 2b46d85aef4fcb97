"""Issue 38, the third probe's cases refused before any work: a training step that cannot fit
(OD N = 200 x 64 episodes, batch 64, L = 50: it failed at the first training step after
collect), a multi-step horizon beyond the episodes, ``train.model_overrides`` of a model the
preset does not run (``--models`` narrowing the preset's own list stays accepted)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

import graphwm.work_bounds
from graphwm.checks import parse_checked
from graphwm.cli import main
from graphwm.config import PresetError, read_preset
from graphwm.pipeline import preset_dict
from graphwm.work_bounds import device_memory_bytes, longest_episode, training_peak

GIB = 2**30


@pytest.fixture
def sixteen_gib(monkeypatch):
    """A machine of 16 GiB (a laptop): the bounds do not depend on the test machine's."""
    monkeypatch.setattr(graphwm.work_bounds, "memory_bytes", lambda: 16 * GIB)


@pytest.fixture(scope="module")
def tiny() -> dict:
    return read_preset("tiny")


def _toml(raw: dict, prefix: str = "") -> str:
    """A preset dict as TOML (scalars, lists of scalars, nested tables)."""
    lines = [f"{k} = {json.dumps(v)}" for k, v in raw.items() if not isinstance(v, dict)]
    for key, table in ((k, v) for k, v in raw.items() if isinstance(v, dict)):
        lines += [f"[{prefix}{key}]", _toml(table, f"{prefix}{key}.")]
    return "\n".join(lines) + "\n"


def _od_200(tiny: dict) -> dict:
    """The probe's case: OD, 64 training episodes of N = 200, batch 64, L = 50."""
    raw = copy.deepcopy(tiny)
    raw.update(envs=["OD"], models=["gdm"], ablations=[], ablation_envs=None)
    raw["train"]["model_overrides"] = {}
    raw["train"]["train_overrides"] = {"batch_size": 64, "seq_len": 50}
    raw["collect"].update(train_sizes=[200], train_episodes=64, val_sizes=[20], test_sizes=[20])
    for section in ("multi_step", "downstream", "search"):
        raw.pop(section, None)
    return {k: v for k, v in raw.items() if v is not None}


def test_a_training_step_that_cannot_fit_is_refused_before_collect(
    tiny, sixteen_gib, tmp_path, capsys
):
    raw = _od_200(tiny)
    with pytest.raises(PresetError, match=r"'train'.*'gdm' on OD needs about .* GiB") as err:
        parse_checked(raw)
    message = str(err.value)
    for what in ("batch 64 x seq_len 50", "N = 200", "train.train_overrides.batch_size",
                 "train.train_overrides.seq_len", "collect.train_sizes"):  # fmt: skip
        assert what in message, (what, message)
    # the command line: exit code 2, one line, nothing collected
    path = tmp_path / "od200.toml"
    path.write_text(_toml(raw))
    out = tmp_path / "run"
    assert main(["collect", "--preset", str(path), "--out", str(out), "--quiet"]) == 2
    assert "seq_len" in capsys.readouterr().err
    assert not (out / "data").exists()
    # what the message says to lower makes it fit
    raw["train"]["train_overrides"] = {"batch_size": 8, "seq_len": 20}
    raw["collect"]["train_sizes"] = [25]
    parse_checked(raw)


def test_the_shipped_presets_fit(sixteen_gib):
    """tiny and survey (their own CPU device), medium and paper on the CPU fit a 16 GiB
    machine; on the GPU they are preset for, every training step fits an 80 GB H100 (the check
    uses the GPU's memory where this machine has that GPU, and cannot bound it elsewhere)."""
    for name in ("tiny", "medium", "survey", "paper"):
        raw = read_preset(name)
        parse_checked({**raw, "device": "cpu"})
        p = parse_checked(raw)
        peaks = [training_peak(p, e, m)[0] for e in p.envs for m in p.models_of(e)]
        assert all(peak is not None and 0 < peak < 78 * GIB for peak in peaks), name
    assert device_memory_bytes("cpu", 16 * GIB) == 8 * GIB
    assert device_memory_bytes("mps", 16 * GIB) is None


def test_a_multi_step_horizon_beyond_the_episodes_is_refused(tiny):
    raw = copy.deepcopy(tiny)
    raw["multi_step"].update(size=6, horizon=1000)
    raw["collect"]["test_sizes"] = [6, 7]
    longest = max(longest_episode(env, 6, 1) for env in raw["envs"])
    assert 1 < longest < 1000
    with pytest.raises(PresetError, match=r"'multi_step.horizon': 1000 .*use at most \d+"):
        parse_checked(raw)
    # the longest horizon an env allows passes for that env
    raw["envs"], raw["ablation_envs"] = ["SAR"], ["SAR"]
    raw["multi_step"]["horizon"] = longest_episode("SAR", 6, 1)
    parse_checked(raw)
    raw["multi_step"]["horizon"] += 1
    with pytest.raises(PresetError, match=r"SAR episode at multi_step.size = 6"):
        parse_checked(raw)


def test_overrides_of_a_model_the_preset_does_not_run_are_refused(tiny):
    raw = copy.deepcopy(tiny)
    raw["train"]["model_overrides"]["g-rssm"] = {"hidden_dim": 8}
    with pytest.raises(PresetError, match=r"'train.model_overrides.g-rssm': the preset does not"):
        parse_checked(raw)
    # a preset dict narrowed by hand keeps a table of a model it no longer runs: refused ...
    narrowed = {**copy.deepcopy(tiny), "models": ["gdm"], "ablations": []}
    with pytest.raises(PresetError, match=r"model_overrides.vanilla-gwm'"):
        parse_checked(narrowed)
    # ... preset_dict narrows it with its tables
    assert set(preset_dict(narrowed, {"models": ["gdm"]})["train"]["model_overrides"]) == {"gdm"}
    parse_checked(preset_dict(narrowed, {"models": ["gdm"]}))


def test_models_narrowed_on_the_command_line_keep_the_file_s_overrides(tiny, tmp_path: Path):
    """--models gdm on tiny (which overrides gdm and vanilla-gwm): accepted, and the left-out
    model's table is still checked; preset_dict's 'models' override likewise."""
    p = parse_checked(read_preset("tiny"), {"models": ["gdm"]})
    assert p.models == ("gdm",) and "vanilla-gwm" in p.train.model_overrides
    assert set(preset_dict("tiny", {"models": ["gdm"]})["train"]["model_overrides"]) == {"gdm"}
    bad = copy.deepcopy(tiny)
    bad["train"]["model_overrides"]["vanilla-gwm"] = {"hidden_dim": -1}
    path = tmp_path / "bad.toml"
    path.write_text(_toml(bad))
    with pytest.raises(PresetError, match=r"model_overrides.vanilla-gwm.hidden_dim"):
        parse_checked(read_preset(path), {"models": ["gdm"]})


def test_a_training_unit_s_cost_is_members_x_steps_x_its_step_estimate(tiny):
    """The executor's longest-first cost of a unit comes from the unit's own job (resolved
    hyperparameters, training files): the preset-level memory estimate times steps and members;
    doubling the steps doubles it, and the GDM's O(N^2) step outweighs Vanilla GWM's."""
    from graphwm.jobs import train_cost, training_units
    from graphwm.stages.ensemble import unit_members

    def units_of(raw: dict) -> tuple:
        p = parse_checked(preset_dict(raw, {"models": raw["models"]}))
        jobs = [(unit_members(u)[0], u) for u in training_units(p)]
        return p, {job.model: u for job, u in jobs if job.env == p.envs[0]}

    raw = {**copy.deepcopy(tiny), "seeds": [0, 1], "models": ["gdm", "vanilla-gwm"]}
    raw["train"]["ensemble"] = 2
    p, units = units_of(raw)
    raw["train"]["steps"] = 2 * p.train.steps
    _, longer = units_of(raw)
    for model in ("gdm", "vanilla-gwm"):
        need, _ = training_peak(p, p.envs[0], model)
        assert need and len(unit_members(units[model])) == 2
        assert train_cost(units[model]) == float(need) * p.train.steps * 2
        assert train_cost(longer[model]) == 2 * train_cost(units[model])
    assert train_cost(units["gdm"]) > train_cost(units["vanilla-gwm"])
