"""skrl 2.1 on the four envs (issue 35): ``wrap_env`` reads the plain envs (Box and
MultiDiscrete keys); PPO with a policy that masks its logits with ``obs["action_mask"]`` runs
a few updates with 0 invalid actions. A Gymnasium vector env with autoreset SAME_STEP (skrl
takes the returned observation as the next one to act on)."""

from __future__ import annotations

import graphwm_envs  # noqa: F401  (registers graphenv/*)
import gymnasium as gym
import numpy as np
import pytest
import torch
from skrl.agents.torch.ppo import PPO
from skrl.envs.wrappers.torch import wrap_env
from skrl.memories.torch import RandomMemory
from skrl.models.torch import CategoricalMixin, DeterministicMixin, Model, MultiCategoricalMixin
from skrl.trainers.torch import SequentialTrainer
from skrl.utils.spaces.torch import unflatten_tensorized_space

N = 8


def _features(space: gym.spaces.Dict, flat: torch.Tensor) -> tuple[dict, torch.Tensor]:
    """skrl hands models the flattened observation: back to the dict, and one flat input."""
    obs = unflatten_tensorized_space(space, flat)
    return obs, torch.cat([obs[k].float().flatten(1) for k in sorted(obs)], 1)


def _size(space: gym.spaces.Dict) -> int:
    return sum(int(np.prod(s.shape)) for s in space.values())


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
            self.net = _mlp(_size(observation_space), n * self.k)

        def compute(self, inputs, role=""):
            obs, x = _features(self.observation_space, inputs["observations"])
            mask = obs["action_mask"].repeat(1, self.k) == 0
            return self.net(x).masked_fill(mask, -1e9), {}

    return Policy


class Value(DeterministicMixin, Model):
    def __init__(self, observation_space, action_space, device=None):
        Model.__init__(
            self, observation_space=observation_space, action_space=action_space, device=device
        )
        DeterministicMixin.__init__(self)
        self.net = _mlp(_size(observation_space), 1)

    def compute(self, inputs, role=""):
        return self.net(_features(self.observation_space, inputs["observations"])[1]), {}


class CountInvalid(gym.Wrapper):
    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = self.invalid = 0

    def step(self, action):
        out = super().step(action)
        self.steps += 1
        self.invalid += int(out[4]["invalid_action"])
        return out


@pytest.mark.parametrize("name", ("RGC", "OD", "SAR", "CF"))
def test_masked_ppo_trains_with_no_invalid_action(name):
    torch.manual_seed(0)
    counters: list[CountInvalid] = []

    def make() -> gym.Env:
        counters.append(CountInvalid(gym.make(f"graphenv/{name}-v0", num_nodes=N)))
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
