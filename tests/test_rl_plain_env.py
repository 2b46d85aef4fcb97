"""SB3, sb3-contrib and tianshou on a plain ``gymnasium.Env`` written from docs/contract.md
(issue 48; the four envs: packages/graph-envs/tests/test_rl.py and tests/test_rl_tianshou.py;
skrl and torchrl on this env: tests/test_rl_skrl.py, tests/test_rl_torchrl.py). The env
(tests/example_envs/bands.py) has a ``MultiDiscrete`` key and info values of every type, and
no ``graphwm_envs`` base class: each library's standard pattern, a tiny update, no training
run."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from example_envs.bands import BandsEnv
from graphwm_envs.wrappers import TianshouMask

N = 8


def _quiet(model):
    from stable_baselines3.common.logger import Logger

    model.set_logger(Logger(folder=None, output_formats=[]))  # no /tmp/SB3-* folders
    return model


@pytest.mark.parametrize("algo", ("PPO", "MaskablePPO"))
def test_sb3_multi_input_policy_learns_and_predicts(algo):
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_checker import check_env

    env = BandsEnv(num_nodes=N)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SB3: "unconventional shape" of the (N, N) adjacency
        check_env(env)
    cls = {"PPO": PPO, "MaskablePPO": MaskablePPO}[algo]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _quiet(cls("MultiInputPolicy", env, n_steps=32, batch_size=32, n_epochs=1, seed=0))
        before = [p.detach().clone() for p in model.policy.parameters()]
        model.learn(total_timesteps=32)  # one update, across episode ends (horizon 6)
    assert any(
        not torch.equal(a, b) for a, b in zip(before, model.policy.parameters(), strict=True)
    )
    obs, _ = env.reset(seed=1)
    kwargs = {"action_masks": env.action_masks()} if algo == "MaskablePPO" else {}
    action, _ = model.predict(obs, deterministic=True, **kwargs)
    assert env.action_space.contains(int(action))
    if algo == "MaskablePPO":
        assert env.action_masks()[int(action)]  # a masked choice


def test_tianshou_masked_dqn_update():
    from tianshou.algorithm.modelfree.dqn import DQN, DiscreteQLearningPolicy
    from tianshou.algorithm.optim import AdamOptimizerFactory
    from tianshou.data import Collector, VectorReplayBuffer
    from tianshou.env import DummyVectorEnv
    from tianshou.utils.torch_utils import policy_within_training_step

    torch.manual_seed(0)
    np.random.seed(0)  # noqa: NPY002  (tianshou draws epsilon-greedy from the global one)

    class QNet(torch.nn.Module):
        def __init__(self, size: int) -> None:
            super().__init__()
            self.mlp = torch.nn.Linear(size, N)

        def forward(self, obs, state=None, info=None):
            parts = [torch.as_tensor(obs[k], dtype=torch.float32) for k in sorted(obs.keys())]
            return self.mlp(torch.cat([p.flatten(1) for p in parts], 1)), state

    probe = TianshouMask(BandsEnv(num_nodes=N))
    size = sum(int(np.prod(s.shape)) for s in probe.observation_space["obs"].spaces.values())
    net = QNet(size)
    policy = DiscreteQLearningPolicy(model=net, action_space=probe.action_space, eps_training=0.5)
    algorithm = DQN(policy=policy, optim=AdamOptimizerFactory(lr=1e-3), target_update_freq=4)
    envs = DummyVectorEnv([lambda: TianshouMask(BandsEnv(num_nodes=N))] * 2)
    envs.seed(0)
    buffer = VectorReplayBuffer(128, 2)
    collector = Collector(algorithm, envs, buffer, exploration_noise=True)
    collector.reset()
    before = [p.detach().clone() for p in net.parameters()]
    with policy_within_training_step(policy):
        collector.collect(n_step=32)
        algorithm.update(buffer=buffer, sample_size=16)
    assert len(buffer) >= 32
    assert not np.asarray(buffer.info["invalid_action"]).any()  # masked actions only
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters(), strict=True))
