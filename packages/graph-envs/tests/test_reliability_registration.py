"""Issue 47 (the fourth probe): an env id, a registration and an env's reseeding are checked
before any work, and each bad case is refused by name (not by a crash deep inside).

* ``check_graph_env`` refuses an env whose ``restore_state`` ignores its seed (it would collapse
  the GDD's reference sample set), and the four shipped envs still pass it;
* ``register_graph_env``'s size range is enforced by ``gym.make`` too;
* ``gym.make_vec(id, num_envs=0)`` names ``num_envs``;
* ``resolve_env_id`` turns any failure of the registering module into a ``ValueError``.
"""

from __future__ import annotations

import textwrap

import gymnasium as gym
import numpy as np
import pytest
from graphwm_envs import (
    ENV_IDS,
    GraphEnvContractError,
    check_graph_env,
    graph_env_info,
    register_graph_env,
    resolve_env_id,
)
from graphwm_envs.od.env import ODEnv
from graphwm_envs.sar.env import SAREnv


# ------------------------------------------------------------------- reseeding in the checker
class _IgnoresSeed(SAREnv):
    """restore_state drops its seed: every reseeded restore replays the snapshot's future."""

    def restore_state(self, snapshot, seed=None):
        return super().restore_state(snapshot)


class _DeterministicIgnoresSeed(_IgnoresSeed):
    deterministic_transitions = True  # the documented way out for an env with nothing to reseed


def test_the_checker_refuses_an_env_whose_restore_ignores_the_seed():
    with pytest.raises(GraphEnvContractError, match="it ignores the seed") as info:
        check_graph_env(_IgnoresSeed(num_nodes=8))
    assert info.value.part == "clone_state/restore_state"


def test_an_env_declaring_deterministic_transitions_is_not_asked_to_reseed():
    check_graph_env(_DeterministicIgnoresSeed(num_nodes=8))


@pytest.mark.parametrize("env_id", ENV_IDS)
@pytest.mark.parametrize("num_nodes", [5, 20])
def test_the_shipped_envs_pass_the_reseeding_check(env_id, num_nodes):
    for seed in range(3):
        check_graph_env(gym.make(env_id, num_nodes=num_nodes, disable_env_checker=True), seed=seed)


def test_reseeded_restores_of_a_stochastic_env_draw_different_next_states():
    """What the check stands for: the GDD's env samples of one snapshot are not all one."""
    env = SAREnv(num_nodes=10)
    obs, _ = env.reset(seed=0)
    snap = env.clone_state()
    action = env.sample_valid_action(np.random.default_rng(0))
    nexts = []
    for seed in range(6):
        env.restore_state(snap, seed=seed)
        nexts.append(env.step(action)[0]["node_continuous"].tobytes())
    assert len(set(nexts)) > 1


# ------------------------------------------------------------------ the declared size range
def test_gym_make_enforces_the_declared_size_range():
    register_graph_env("reliability/SmallSAR-v0", "graphwm_envs.sar.env:SAREnv", max_nodes=9)
    assert gym.make("reliability/SmallSAR-v0", num_nodes=9).unwrapped.num_nodes == 9
    assert gym.make("reliability/SmallSAR-v0").unwrapped.num_nodes == 9  # 20 is out of range
    for n in (10, 2, 7.5):
        with pytest.raises(ValueError, match=r"'reliability/SmallSAR-v0': num_nodes must be an"):
            gym.make("reliability/SmallSAR-v0", num_nodes=n)
    info = graph_env_info("reliability/SmallSAR-v0")
    assert info.env_class is SAREnv and info.max_nodes == 9


def test_an_empty_size_range_is_refused_at_registration():
    with pytest.raises(ValueError, match="size range of 'reliability/Tiny-v0' is empty"):
        register_graph_env("reliability/Tiny-v0", SAREnv, max_nodes=3)  # SAR's min is 5
    assert "reliability/Tiny-v0" not in gym.registry


# ----------------------------------------------------------------------------- make_vec
@pytest.mark.parametrize("num_envs", [0, -1, 1.5, True])
@pytest.mark.parametrize("env_id", ["graphenv/OD-v0", "reliability/VecOD-v0"])
def test_make_vec_names_a_bad_num_envs(env_id, num_envs):
    register_graph_env("reliability/VecOD-v0", ODEnv)
    with pytest.raises(ValueError, match=r"num_envs must be an integer >= 1"):
        gym.make_vec(env_id, num_envs=num_envs, num_nodes=8)


def test_make_vec_by_default_builds_the_sync_vector_env():
    vec = gym.make_vec("graphenv/OD-v0", num_envs=2, num_nodes=8)
    obs, _ = vec.reset(seed=0)
    assert isinstance(vec, gym.vector.SyncVectorEnv) and obs["adjacency"].shape == (2, 8, 8)
    vec.close()
    disabled = gym.vector.AutoresetMode.DISABLED  # the vector env's own arguments pass through
    vec = gym.make_vec("graphenv/OD-v0", num_envs=2, num_nodes=8, autoreset_mode=disabled)
    assert vec.metadata["autoreset_mode"] == disabled
    vec.close()


# --------------------------------------------------------------------------- resolve_env_id
@pytest.mark.parametrize(
    ("body", "cause"),
    [
        ("raise RuntimeError('broken at import')", r"RuntimeError: broken at import"),
        ("raise KeyError('missing')", r"KeyError: 'missing'"),
        ("import sys\nsys.exit(3)", r"it called sys.exit\(3\)"),
        ("import not_a_module_anywhere_47", r"No module named 'not_a_module_anywhere_47'"),
    ],
    ids=["RuntimeError", "KeyError", "sys.exit", "missing dependency"],
)
def test_a_module_that_fails_on_import_is_a_value_error_naming_it(
    tmp_path, monkeypatch, body, cause
):
    name = f"reliability_broken_{abs(hash(body)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match=rf"module '{name}'.*{cause}"):
        resolve_env_id(f"{name}:reliability/X-v0")
    # the namespace convention imports the package too: its failure is named the same way
    with pytest.raises(ValueError, match=rf"module '{name}'.*{cause}"):
        resolve_env_id(f"{name}/X-v0")


@pytest.mark.parametrize("module", ["../../etc/passwd", "a b", "mod-x", "pkg..mod"])
def test_a_module_part_that_is_no_module_name_is_refused(module):
    with pytest.raises(ValueError, match=r"is not a Python module name"):
        resolve_env_id(f"{module}:x")
