"""tianshou 2.0 on the four envs (issue 35): ``TianshouMask`` gives its ``{"obs", "mask"}``
observation; a ``DummyVectorEnv`` + ``Collector`` feeds a masked DQN a few updates with 0
invalid actions (epsilon-greedy exploration included: tianshou draws it from the mask too).
tests/conftest.py runs tianshou's numba kernels as Python (no JIT compile time)."""

from __future__ import annotations

import graphwm_envs  # noqa: F401  (registers graphenv/*)
import gymnasium as gym
import numpy as np
import pytest
import torch
from conftest import CountInvalid
from graphwm_envs.wrappers import TianshouMask
from tianshou.algorithm.modelfree.dqn import DQN, DiscreteQLearningPolicy
from tianshou.algorithm.optim import AdamOptimizerFactory
from tianshou.data import Collector, VectorReplayBuffer
from tianshou.env import DummyVectorEnv
from tianshou.utils.torch_utils import policy_within_training_step

N = 8
#: RGC in pair mode: tianshou's discrete policies need one Discrete action
KWARGS = {"RGC": {"action_mode": "pair"}}


class QNet(torch.nn.Module):
    """Q-values from the flattened graph observation (tianshou passes ``batch.obs.obs``)."""

    def __init__(self, space: gym.spaces.Dict, actions: int) -> None:
        super().__init__()
        size = sum(int(np.prod(s.shape)) for s in space["obs"].spaces.values())
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(size, 32), torch.nn.ReLU(), torch.nn.Linear(32, actions)
        )

    def forward(self, obs, state=None, info=None):
        parts = [torch.as_tensor(obs[k], dtype=torch.float32) for k in sorted(obs.keys())]
        return self.mlp(torch.cat([p.flatten(1) for p in parts], 1)), state


@pytest.mark.parametrize("name", ("RGC", "OD", "SAR", "CF"))
def test_masked_dqn_trains_with_no_invalid_action(name):
    torch.manual_seed(0)
    np.random.seed(0)  # noqa: NPY002  (tianshou draws epsilon-greedy from the global one)
    counters: list[CountInvalid] = []

    def make() -> gym.Env:
        env = CountInvalid(gym.make(f"graphenv/{name}-v0", num_nodes=N, **KWARGS.get(name, {})))
        counters.append(env)
        return TianshouMask(env)

    envs = DummyVectorEnv([make, make])
    envs.seed(0)
    probe = TianshouMask(gym.make(f"graphenv/{name}-v0", num_nodes=N, **KWARGS.get(name, {})))
    net = QNet(probe.observation_space, int(probe.action_space.n))
    policy = DiscreteQLearningPolicy(model=net, action_space=probe.action_space, eps_training=0.5)
    algorithm = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), target_update_freq=4)
    buffer = VectorReplayBuffer(512, 2)
    collector = Collector(algorithm, envs, buffer, exploration_noise=True)
    collector.reset()
    before = [p.detach().clone() for p in net.parameters()]
    for _ in range(3):
        with policy_within_training_step(policy):
            collector.collect(n_step=32)
            algorithm.update(buffer=buffer, sample_size=16)
    steps = sum(c.steps for c in counters)
    assert steps >= 96 and len(buffer) >= 96
    assert sum(c.invalid for c in counters) == 0
    assert not np.asarray(buffer.info["invalid_action"]).any()
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
