"""Each env's class docstring is its specification (Gymnasium's sections, so ``help()`` and the
wheel carry it), and its ``>>>`` example runs; the configuration dataclasses take effect."""

from __future__ import annotations

import doctest
import pydoc

import graphwm_envs
import gymnasium as gym
import numpy as np
import pytest
from graphwm_envs.rgc import RGCParams
from graphwm_envs.rgc.env import edge_budget, num_pairs
from graphwm_envs.sar import SARParams

SECTIONS = (
    "Description",
    "Action Space",
    "Observation Space",
    "Rewards",
    "Starting State",
    "Episode End",
    "Arguments",
    "Version History",
)


def _env_class(env_id: str) -> type:
    return type(gym.make(env_id, num_nodes=5).unwrapped)


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_class_docstring_is_the_spec(env_id):
    cls = _env_class(env_id)
    doc = cls.__doc__ or ""
    assert doc.startswith(f"``{env_id}``")
    positions = [doc.index(f"## {section}") for section in SECTIONS]
    assert positions == sorted(positions)  # Gymnasium's order
    assert str(cls.max_nodes) in doc  # the size limit is stated where users look
    assert "## Action Space" in pydoc.render_doc(cls, renderer=pydoc.plaintext)


@pytest.mark.parametrize("env_id", graphwm_envs.ENV_IDS)
def test_class_docstring_example_runs(env_id):
    cls = _env_class(env_id)
    tests = doctest.DocTestFinder(recurse=False).find(cls, cls.__name__, globs={})
    assert tests and len(tests[0].examples) >= 4
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_sar_params_take_effect():
    params = SARParams(stability_loss=0.1, stability_loss_prob=1.0, collect_reward=3.0)
    env = gym.make("graphenv/SAR-v0", num_nodes=12, params=params).unwrapped
    rng = np.random.default_rng(0)
    for seed in range(20):
        obs, _ = env.reset(seed=seed)
        target = int(env.sample_valid_action(rng))
        before = float(env.state.stability[target])
        has_survivor = bool(env.state.survivors[target])
        _, reward, *_ = env.step(target)
        assert env.state.stability[target] == pytest.approx(max(0.0, before - 0.1))
        if has_survivor:
            assert reward == pytest.approx(-1.0 + 3.0)
            return
    raise AssertionError("no survivor next to the exit in 20 seeds")


def test_rgc_params_budget_fraction_and_schema_range():
    env = gym.make("graphenv/RGC-v0", num_nodes=20, params=RGCParams(budget_fraction=0.1))
    obs, _ = env.reset(seed=0)
    assert edge_budget(20, 0.1) == 19
    assert obs["graph_continuous"][0] == pytest.approx(19 / num_pairs(20))
    lo, hi = env.unwrapped.schema.range_of("tau")
    assert lo == 0.0 and hi >= 19 / num_pairs(20)
    default = gym.make("graphenv/RGC-v0").unwrapped.schema.range_of("tau")
    assert default == (0.0, pytest.approx(0.1))  # unchanged for the paper's 5%


def test_params_validation():
    with pytest.raises(ValueError, match="stability_loss_prob"):
        SARParams(stability_loss_prob=1.5)
    with pytest.raises(ValueError, match="budget_fraction"):
        RGCParams(budget_fraction=0.0)
    with pytest.raises(TypeError, match="SARParams"):
        gym.make("graphenv/SAR-v0", params={"stability_loss": 0.1})
