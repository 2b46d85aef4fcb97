"""torchrl 0.14 on the four envs (issue 35): ``GymEnv`` + ``check_env_specs``, ``SerialEnv`` /
``ParallelEnv``, Gymnasium vector envs with autoreset DISABLED, and a few masked PPO updates
(``MaskedCategorical``) with 0 invalid actions. Small budgets: N = 8, 2 envs, 3 updates.
Info readers (issue 48): ``default_info_dict_reader`` on every documented info key, behind
:class:`~graphwm_envs.wrappers.NumpyInfo` (the readers need numpy values), on the four envs and
on a plain ``gymnasium.Env``."""

from __future__ import annotations

import functools

import graphwm_envs  # noqa: F401  (registers graphenv/*)
import gymnasium as gym
import pytest
import torch
from example_envs.bands import BandsEnv
from graphwm_envs.wrappers import ActionMasksObservation, NumpyInfo
from tensordict.nn import TensorDictModule
from torchrl.data import Categorical, NonTensor, Unbounded
from torchrl.envs import GymEnv, GymWrapper, ParallelEnv, SerialEnv, default_info_dict_reader
from torchrl.envs.utils import check_env_specs
from torchrl.modules import MaskedCategorical, ProbabilisticActor, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

N = 8
ENVS = ("RGC", "OD", "SAR", "CF")
#: RGC in pair mode: one Discrete action, masked exactly by the pair mask
KWARGS = {"RGC": {"action_mode": "pair"}}


def _gym_env(name: str) -> GymWrapper:
    """The env with ``action_masks`` (the action mask, any action space) in its observation."""
    env = gym.make(f"graphenv/{name}-v0", num_nodes=N, **KWARGS.get(name, {}))
    return GymWrapper(ActionMasksObservation(env), categorical_action_encoding=True)


OBS_KEYS = ("adjacency", "node_continuous", "node_categorical", "graph_continuous")


class _Net(torch.nn.Module):
    def __init__(self, keys: list[str], size: int, out: int) -> None:
        super().__init__()
        self.keys = keys
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(size, 32), torch.nn.Tanh(), torch.nn.Linear(32, out)
        )

    def forward(self, *arrays: torch.Tensor) -> torch.Tensor:
        batch = arrays[0].shape[: arrays[0].dim() - 1 - (self.keys[0] == "adjacency")]
        flat = [a.float().reshape(*batch, -1) for a in arrays]
        return self.mlp(torch.cat(flat, -1))


class _Masked(torch.nn.Module):
    def forward(self, logits: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return logits, mask.bool()


def _agent(env) -> tuple[ProbabilisticActor, ValueOperator]:
    spec = env.observation_spec
    keys = [k for k in OBS_KEYS if k in spec.keys()] + ["action_mask"]
    size = sum(spec[k].shape[env.batch_dims :].numel() for k in keys)
    actions = env.action_spec.space.n
    logits = TensorDictModule(_Net(keys, size, actions), in_keys=keys, out_keys=["logits"])
    masked = TensorDictModule(_Masked(), ["logits", "action_masks"], ["logits", "mask"])
    module = torch.nn.ModuleList([logits, masked])
    from tensordict.nn import TensorDictSequential

    actor = ProbabilisticActor(
        TensorDictSequential(*module),
        in_keys=["logits", "mask"],
        distribution_class=MaskedCategorical,
        return_log_prob=True,
        spec=env.full_action_spec_unbatched["action"],
    )
    critic = ValueOperator(_Net(keys, size, 1), in_keys=keys)
    return actor, critic


def _invalid(rollout) -> int:
    """Actions the action mask of their own observation forbids."""
    mask = rollout["action_masks"].bool()
    return int((~mask.gather(-1, rollout["action"].long().unsqueeze(-1))).sum())


@pytest.mark.parametrize("name", ENVS)
def test_gym_env_specs_and_random_rollout(name):
    env = GymEnv(f"graphenv/{name}-v0", num_nodes=N, **KWARGS.get(name, {}))
    check_env_specs(env, seed=0)
    assert env.rollout(12, break_when_any_done=False).shape == (12,)


@pytest.mark.parametrize("name", ENVS)
def test_masked_ppo_on_serial_envs_takes_no_invalid_action(name):
    torch.manual_seed(0)
    env = SerialEnv(2, functools.partial(_gym_env, name))
    check_env_specs(env, seed=0)
    actor, critic = _agent(env)
    loss = ClipPPOLoss(actor, critic)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    invalid, steps, before = 0, 0, [p.detach().clone() for p in actor.parameters()]
    for _ in range(3):
        with torch.no_grad():
            data = env.rollout(16, actor, break_when_any_done=False)
            gae(data)
        invalid += _invalid(data)
        steps += data.numel()
        losses = loss(data.reshape(-1))
        total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
        optim.zero_grad()
        total.backward()
        optim.step()
    env.close()
    assert steps == 3 * 2 * 16 and invalid == 0
    assert any(not torch.equal(a, b) for a, b in zip(before, actor.parameters(), strict=True))


def test_parallel_env_two_workers():
    """ParallelEnv: 2 worker processes (the module:id form imports graphwm_envs in them)."""
    make = functools.partial(GymEnv, "graphwm_envs:graphenv/SAR-v0", num_nodes=N)
    env = ParallelEnv(2, make, mp_start_method="fork")  # fork: no torch re-import per worker
    try:
        check_env_specs(env, seed=0)
        data = env.rollout(20, break_when_any_done=False)
        assert data.shape == (2, 20)
        mask = data["action_mask"].bool()
        assert mask.any(-1).all()
    finally:
        env.close()


@pytest.mark.parametrize("name", ("RGC", "SAR"))
def test_gymnasium_vector_env_with_autoreset_disabled(name):
    """The documented way to a Gymnasium vector env in torchrl (docs/rl-libraries.md): autoreset
    DISABLED, which torchrl resets itself through ``reset_mask``."""
    vec = gym.make_vec(
        f"graphenv/{name}-v0",
        num_envs=2,
        vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.DISABLED},
        num_nodes=N,
    )
    env = GymWrapper(vec)
    check_env_specs(env, seed=0)
    data = env.rollout(40, break_when_any_done=False)
    assert data.shape == (2, 40) and data["next", "done"].any()  # episodes ended and restarted


#: every info key each env documents (docs/envs/*.md; ``horizon`` from ``reset``), with its type;
#: "plain" is the user-written env of tests/example_envs/bands.py
INFO_KEYS: dict[str, dict[str, type]] = {
    "RGC": {"horizon": int, "edge_added": bool, "robustness": float, "invalid_action": bool},
    "OD": {"horizon": int, "num_rewired": int, "num_adopted": int, "invalid_action": bool},
    "SAR": {
        "horizon": int,
        "collected": bool,
        "delivered": bool,
        "stability_loss": bool,
        "edges_removed": int,
        "outcome": str,
        "invalid_action": bool,
    },
    "CF": {"horizon": int, "num_failed": int, "invalid_action": bool},
    "plain": {"invalid_action": bool, "cut": int, "density": float, "band_name": str},
}
for _keys in INFO_KEYS.values():
    if "horizon" in _keys:
        _keys["step"] = int


def _spec(kind: type):
    """The torchrl spec a user writes for an info value of this Python type."""
    if kind is bool:
        return Categorical(2, (), dtype=torch.bool)
    if kind is str:
        return NonTensor((), example_data="none")
    return Unbounded((), dtype=torch.int64 if kind is int else torch.float64)


class _RecordInfo(gym.Wrapper):
    """Keeps the info of every step, as the env reports it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.infos: list[dict] = []

    def step(self, action):
        out = super().step(action)
        self.infos.append(out[4])
        return out


def _info_env(name: str) -> tuple[GymWrapper, _RecordInfo]:
    inner = (
        BandsEnv(num_nodes=N) if name == "plain" else gym.make(f"graphenv/{name}-v0", num_nodes=N)
    )
    record = _RecordInfo(inner)
    return GymWrapper(NumpyInfo(record), categorical_action_encoding=True), record


@pytest.mark.parametrize("name", (*ENVS, "plain"))
def test_info_reader_reads_every_documented_key(name):
    """``default_info_dict_reader`` with a spec, on every documented key: the specs check, and
    the rollout holds the values the env reported (in its own dtype)."""
    keys = INFO_KEYS[name]
    env, record = _info_env(name)
    reader = default_info_dict_reader(list(keys), spec={k: _spec(t) for k, t in keys.items()})
    env.set_info_dict_reader(reader)
    check_env_specs(env, seed=0)
    record.infos.clear()
    data = env.rollout(6, break_when_any_done=False)
    assert len(record.infos) == 6
    step_keys = [k for k in keys if k in record.infos[0]]
    assert set(step_keys) == set(record.infos[0]) & set(keys)
    for key in step_keys:
        got = data["next", key]
        want = [info[key] for info in record.infos]
        if keys[key] is str:
            assert list(got) == want
        else:
            assert got.tolist() == want
            assert (
                got.dtype == {bool: torch.bool, int: torch.int64, float: torch.float64}[keys[key]]
            )


@pytest.mark.parametrize("name", ("RGC", "OD", "CF"))
def test_info_reader_without_a_spec_and_auto_register(name):
    """The reader as the issue wrote it (keys only, no spec) and torchrl's
    ``auto_register_info_dict()`` on the envs whose info values are all numbers."""
    env, record = _info_env(name)
    env.set_info_dict_reader(default_info_dict_reader(["invalid_action"]))
    data = env.rollout(4, break_when_any_done=False)
    assert data["next", "invalid_action"].tolist() == [
        i["invalid_action"] for i in record.infos[-4:]
    ]
    env, record = _info_env(name)
    env = env.auto_register_info_dict()  # runs check_env_specs itself
    data = env.rollout(4, break_when_any_done=False)
    assert data["next", "invalid_action"].dtype == torch.bool
    assert data["next", "invalid_action"].tolist() == [
        i["invalid_action"] for i in record.infos[-4:]
    ]
