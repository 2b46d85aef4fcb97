"""skrl 2.1 on the four envs and on a plain ``gymnasium.Env`` (issues 35, 48), as skrl's users
write it: models sized by ``self.num_observations`` (skrl's count of the observation space)
behind :class:`~graphwm_envs.wrappers.SkrlObservation`, which presents ``MultiDiscrete`` keys as
integer ``Box`` es (skrl counts a ``MultiDiscrete([c])`` as c columns but flattens it to one).
PPO with a policy that masks its logits with ``obs["action_mask"]`` runs a few updates with 0
invalid actions. A Gymnasium vector env with autoreset SAME_STEP (skrl takes the returned
observation as the next one to act on)."""

from __future__ import annotations

import graphwm_envs  # noqa: F401  (registers graphenv/*)
import gymnasium as gym
import pytest
import torch
from conftest import CountInvalid
from example_envs.bands import BandsEnv
from graphwm_envs.wrappers import SkrlObservation
from skrl.agents.torch.ppo import PPO
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model, MultiCategoricalMixin
from skrl.trainers.torch import SequentialTrainer
from skrl.utils.spaces.torch import unflatten_tensorized_space

N = 8


ENVS = ("RGC", "OD", "SAR", "CF", "plain")


def _make(name: str) -> gym.Env:
    """One of the four envs, or the plain ``gymnasium.Env`` (a ``MultiDiscrete`` key too)."""
    if name == "plain":
        return BandsEnv(num_nodes=N)
    return gym.make(f"graphenv/{name}-v0", num_nodes=N)


def _mlp(inp: int, out: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(inp, 32), torch.nn.Tanh(), torch.nn.Linear(32, out))


def _policy_class(action_space: gym.Space) -> type:
    """A categorical policy (one per node component) whose logits the node mask masks."""
    multi = isinstance(action_space, gym.spaces.MultiDiscrete)
    mixin = MultiCategoricalMixin if multi else CategoricalMixin

    class Policy(mixin, Model):  # type: ignore[valid-type, misc]
        def __init__(self, observation_space, action_space, device=None):
            Model.__init__(
                self, observation_space=observation_space, action_space=action_space, device=device
            )
            mixin.__init__(self)
            self.k = len(action_space.nvec) if multi else 1
            n = observation_space["action_mask"].shape[0]
            self.net = _mlp(self.num_observations, n * self.k)  # skrl's standard sizing

        def compute(self, inputs, role=""):
            x = inputs["observations"]  # skrl's flattened observation
            obs = unflatten_tensorized_space(self.observation_space, x)
            mask = obs["action_mask"].repeat(1, self.k) == 0
            return self.net(x.float()).masked_fill(mask, -1e9), {}

    return Policy


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device=None):
        Model.__init__(
            self, observation_space=observation_space, action_space=action_space, device=device
        )
        DeterministicMixin.__init__(self)
        self.net = _mlp(self.num_observations, 1)

    def compute(self, inputs, role=""):
        return self.net(inputs["observations"].float()), {}


@pytest.mark.parametrize("name", ENVS)
def test_num_observations_is_the_flattened_width(name):
    """skrl's count equals the width of the tensor it hands a model, with the wrapper; without
    it the count is off by the one-hot sizes wherever a key is a ``MultiDiscrete``."""
    env = wrap_env(SkrlObservation(_make(name)), verbose=False)
    flat, _ = env.reset()
    value = Value(env.observation_space, env.action_space, env.device)
    assert value.num_observations == flat.shape[1]
    assert value.act({"observations": flat})[0].shape == (1, 1)
    plain = wrap_env(_make(name), wrapper="gymnasium", verbose=False)
    categorical = [
        s for s in plain.observation_space.values() if isinstance(s, gym.spaces.MultiDiscrete)
    ]
    extra = sum(int(s.nvec.sum()) - s.shape[0] for s in categorical)
    assert (
        Value(plain.observation_space, plain.action_space).num_observations == flat.shape[1] + extra
    )
    assert (extra > 0) == (name in ("SAR", "plain"))


@pytest.mark.parametrize("name", ENVS)
def test_masked_ppo_trains_with_no_invalid_action(name):
    torch.manual_seed(0)
    counters: list[CountInvalid] = []

    def make() -> gym.Env:
        counters.append(CountInvalid(SkrlObservation(_make(name))))
        return counters[-1]

    vec = gym.vector.SyncVectorEnv([make, make], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    env = wrap_env(vec)
    obs_space, act_space = env.observation_space, env.action_space
    models = {
        "policy": _policy_class(act_space)(obs_space, act_space, env.device),
        "value": Value(obs_space, act_space, env.device),
    }
    before = [p.detach().clone() for p in models["policy"].parameters()]
    agent = PPO(
        models=models,
        memory=RandomMemory(memory_size=16, num_envs=env.num_envs, device=env.device),
        observation_space=obs_space,
        action_space=act_space,
        device=env.device,
        cfg={
            "rollouts": 16,
            "learning_epochs": 2,
            "mini_batches": 2,
            "experiment": {"write_interval": 0, "checkpoint_interval": 0},
        },
    )
    cfg = {"timesteps": 48, "headless": True, "disable_progressbar": True}
    cfg["close_environment_at_exit"] = False
    SequentialTrainer(env=env, agents=agent, cfg=cfg).train()  # 3 PPO updates
    assert sum(c.steps for c in counters) == 2 * 48
    assert sum(c.invalid for c in counters) == 0
    after = list(models["policy"].parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
