"""Issue 47, section 2: a user's env is checked before anything of it is stored.

An env that breaks the contract (an adjacency of another node count than the features) or
whose ``reset`` raises makes ``graphwm collect`` exit 2 before any stage, with one error line
naming the env id and the error, and nothing stored; the Python entry points refuse it alike.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from graphwm.cli import main
from graphwm.config import PresetError
from graphwm.pipeline import RunPaths, preset_dict, stage_collect

MODULE = textwrap.dedent(
    """
    import gymnasium as gym
    from example_envs.edgeflip import EdgeFlipEnv


    class ShortAdjacency(EdgeFlipEnv):
        # an (N - 1, N - 1) adjacency beside (N, k) node features
        def _obs(self):
            obs = super()._obs()
            obs["adjacency"] = obs["adjacency"][:-1, :-1].copy()
            return obs


    class BoomReset(EdgeFlipEnv):
        def reset(self, *, seed=None, options=None):
            raise RuntimeError("boom in reset")


    gym.register("relbad/Short-v0", ShortAdjacency)
    gym.register("relbad/Boom-v0", BoomReset)
    """
)

CASES = [
    ("relenv_bad_envs:relbad/Short-v0", r"observation\['adjacency'\].*shape \(5, 5\)"),
    ("relenv_bad_envs:relbad/Boom-v0", r"RuntimeError: boom in reset"),
]


@pytest.fixture
def bad_envs(tmp_path, monkeypatch):
    (tmp_path / "relenv_bad_envs.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(("name", "error"), CASES, ids=["short-adjacency", "reset-raises"])
def test_collect_refuses_a_broken_own_env_before_any_work(bad_envs, capsys, name, error):
    out = bad_envs / "run"
    argv = ["collect", "--preset", "tiny", "--envs", name, "--out", str(out), "--quiet"]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("graphwm: error: ") and name in lines[0]
    assert re.search(error, lines[0]), lines[0]
    stored = [p for p in out.rglob("*") if p.is_file()] if out.exists() else []
    assert stored == []


@pytest.mark.parametrize(("name", "error"), CASES, ids=["short-adjacency", "reset-raises"])
def test_the_collect_stage_refuses_it_too(bad_envs, name, error):
    preset = {**preset_dict("tiny"), "envs": [name], "ablation_envs": []}
    with pytest.raises(PresetError, match=error):
        stage_collect(preset, RunPaths(bad_envs / "run"), progress=False)
    assert not (bad_envs / "run" / "data").exists()
