"""The batched imagination engine shared by :class:`DreamEnv` (B = 1) and the vector env.

It holds B imagined episodes of one world model that imitates one real env: their latent
states, step counts, horizons and last valid action masks. ``start`` runs the model's posterior
on real start observations (batched, ``WorldModel.start``), ``step`` imagines one step of all B
episodes in one forward pass (``WorldModel.step``) and returns a valid observation (see
:mod:`graphwm.dream.validity`), the reward head's prediction, termination sampled from the
continuation head and truncation at the real env's horizon. Only the models' public stepping
API is used, so any ``WorldModel`` works. All randomness comes from one ``torch.Generator`` on
the model's device.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import torch
from gdm_models.data import OBS_KEYS
from gymnasium import spaces

from graphwm.dream.validity import ObservationFixer, start_mask, valid_reward
from graphwm.envs import graph_env, schema_of


def check_finite_weights(model) -> None:
    """Refuse a model with NaN or inf in a weight (a diverged training): its predictions
    would be NaN, never data for an agent. Raises ``ValueError`` naming the weight."""
    for name, tensor in model.state_dict().items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(
                f"the world model's weight {name!r} holds NaN or inf: a dream env over it "
                "would pass NaN predictions off as observations and rewards"
            )


@dataclass(frozen=True)
class StartState:
    """Where an imagined episode starts: a real observation and the real episode's horizon.

    Attributes:
        observation: an observation of the real env (its observation-space keys).
        horizon: truncation length (``None``: the episode ends only by the model's
            continuation head).
    """

    observation: Mapping[str, np.ndarray]
    horizon: int | None


def real_horizon(env: gym.Env) -> int | None:
    """Truncation length of the real env's current episode (after its reset).

    The graph envs compute it per episode (SAR: N x initial survivors, OD: H = 50; RGC and CF
    terminate instead, ``None``); other envs fall back to ``spec.max_episode_steps``.
    """
    max_steps = getattr(env.unwrapped, "_max_steps", None)
    if callable(max_steps):
        h = max_steps()
        return None if h is None else int(h)
    spec = getattr(env, "spec", None)
    return None if spec is None or spec.max_episode_steps is None else int(spec.max_episode_steps)


def real_start(env: gym.Env, seed: int | None) -> StartState:
    """The start state of ``env.reset(seed=seed)``."""
    obs, _ = env.reset(seed=None if seed is None else int(seed))
    return StartState({k: np.asarray(v).copy() for k, v in obs.items()}, real_horizon(env))


def stored_starts(
    episodes: Sequence[Mapping[str, np.ndarray]], max_steps: int | None = None
) -> list[StartState]:
    """Start states from recorded episodes (the contract's episode dicts).

    The first observation of each episode; its horizon is the episode's length when it ended by
    truncation, else ``max_steps`` (the recorded episode terminated before its time limit, which
    the observation alone does not reveal).
    """
    out = []
    for ep in episodes:
        truncated = np.asarray(ep.get("truncated", [False]))
        horizon = len(ep["reward"]) if truncated.size and bool(truncated[-1]) else max_steps
        obs = {k: np.asarray(ep[k][0]).copy() for k in OBS_KEYS if k in ep}
        out.append(StartState(obs, horizon))
    if not out:
        raise ValueError("stored_starts needs at least one episode")
    return out


def check_model_matches_env(model, env: gym.Env) -> None:
    """Raise ``TypeError`` for an object that is no ``gdm_models.WorldModel`` and
    ``ValueError`` if the model was trained on another feature schema."""
    from gdm_models import Schema, WorldModel

    if not isinstance(model, WorldModel):
        raise TypeError(
            f"a dream env needs a gdm_models.WorldModel (it steps through WorldModel.start / "
            f"WorldModel.step), got {type(model).__name__}"
        )

    ms = model.schema
    es = Schema.from_dict(schema_of(graph_env(env)))
    names = ("node_continuous", "node_categorical", "graph_continuous", "graph_categorical")
    for name in names:
        if tuple(getattr(ms, name)) != tuple(getattr(es, name)):
            raise ValueError(
                f"the model's {name} {getattr(ms, name)} differ from the env's "
                f"{getattr(es, name)}: it was trained on another env"
            )


def _dict_space(space: spaces.Space) -> spaces.Dict:
    if not isinstance(space, spaces.Dict):
        raise TypeError(f"expected a spaces.Dict observation space, got {space}")
    return space


class DreamCore:
    """B imagined episodes of ``model`` imitating ``env``.

    Args:
        model: a trained ``gdm_models.WorldModel`` (kept on its device, set to eval mode).
        env: the real env it imitates (spaces, schema, ``action_to_nodes`` come from it).
        num_episodes: B.
        seed: seeds the torch generator (``None``: OS entropy).
    """

    def __init__(self, model, env: gym.Env, num_episodes: int, seed: int | None = None) -> None:
        if int(num_episodes) < 1:
            raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
        check_model_matches_env(model, env)
        check_finite_weights(model)
        self.model = model.eval()
        self.real = graph_env(env)
        self.observation_space = _dict_space(self.real.observation_space)
        self.action_space = self.real.action_space
        self.num_nodes = int(self.real.num_nodes)
        self.num_episodes = int(num_episodes)
        self.schema = schema_of(self.real)
        self.device = model.device
        self.fixer = ObservationFixer(self.observation_space, self.device)
        self.generator = torch.Generator(device=self.device)
        self.seed(seed)
        self.state: dict[str, torch.Tensor] | None = None
        self.steps = np.zeros(self.num_episodes, np.int64)
        self.horizons = np.full(self.num_episodes, -1, np.int64)  # -1: no truncation
        self.masks = torch.ones(
            self.num_episodes, self.num_nodes, dtype=torch.int64, device=self.device
        )
        self.action_masks(np.ones((1, self.num_nodes), bool))  # a node-selection space?

    def seed(self, seed: int | None) -> None:
        """Reseed the generator (``None``: from OS entropy)."""
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1, dtype=np.uint64)[0] >> 1)
        self.generator.manual_seed(int(seed))

    def model_inputs(self, observations: Sequence[Mapping[str, np.ndarray]]):
        """Stacked model tensors of B real observations (absent feature types -> zero width)."""
        from gdm_models.data import complete_observation, observation_to_tensors

        stacked = {
            key: np.stack([np.asarray(o[key]) for o in observations])
            for key in OBS_KEYS
            if key in observations[0]
        }
        # an env without a feature type: zero-width arrays, as the data contract completes them
        return observation_to_tensors(complete_observation(stacked), self.device)

    @torch.no_grad()
    def start(self, rows: np.ndarray, starts: Sequence[StartState]) -> None:
        """(Re)start the episodes ``rows`` from ``starts`` (posterior on the start states)."""
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) != len(starts):
            raise ValueError(f"{len(rows)} rows but {len(starts)} start states")
        if len(rows) == 0:
            return
        for s in starts:
            if np.asarray(s.observation["adjacency"]).shape != (self.num_nodes,) * 2:
                raise ValueError(
                    f"start state has adjacency {np.shape(s.observation['adjacency'])}, "
                    f"the env has {self.num_nodes} nodes"
                )
        new = self.model.start(self.model_inputs([s.observation for s in starts]), self.generator)
        if self.state is None:
            if not np.array_equal(rows, np.arange(self.num_episodes)):
                raise RuntimeError("the first start must cover every episode")
            self.state = new
        else:
            idx = torch.as_tensor(rows, device=self.device)
            self.state = self.model.replace_rows(self.state, idx, new)
        self.steps[rows] = 0
        self.horizons[rows] = [-1 if s.horizon is None else int(s.horizon) for s in starts]
        masks = start_mask(np.stack([s.observation["action_mask"] for s in starts]))
        self.masks[torch.as_tensor(rows, device=self.device)] = torch.as_tensor(
            masks, device=self.device
        )

    @torch.no_grad()
    def step(
        self, action_nodes: np.ndarray
    ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
        """Imagine one step of every episode: ``(obs, reward, terminated, truncated)``,
        each with a leading B axis; ``action_nodes`` is (B, N)."""
        if self.state is None:
            raise RuntimeError("start the episodes before stepping them")
        a = torch.as_tensor(np.asarray(action_nodes), dtype=torch.float32, device=self.device)
        if tuple(a.shape) != (self.num_episodes, self.num_nodes):
            raise ValueError(
                f"action_nodes must be ({self.num_episodes}, {self.num_nodes}), "
                f"got {tuple(a.shape)}"
            )
        pred, self.state = self.model.step(self.state, a, self.generator)
        obs, mask = self.fixer.observation(pred, self.masks)
        if mask is not None:
            self.masks = mask
        reward = valid_reward(pred["reward"])
        # termination sampled from the continuation head (the model already sampled it)
        terminated = (pred["continuation"].round() == 0).cpu().numpy()
        self.steps += 1
        truncated = ~terminated & (self.horizons >= 0) & (self.steps >= self.horizons)
        return obs, reward, terminated, truncated

    def mask_array(self) -> np.ndarray:
        """The current node masks (B, N) as bool."""
        return self.masks.cpu().numpy().astype(bool)

    def action_masks(self, node_masks: np.ndarray) -> np.ndarray:
        """MaskablePPO's form of (B, N) node masks: as is for ``Discrete``, repeated per
        component for ``MultiDiscrete`` (the graph envs' ``action_masks()`` convention)."""
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete) and space.n == self.num_nodes:
            return node_masks
        if isinstance(space, gym.spaces.MultiDiscrete) and np.all(space.nvec == self.num_nodes):
            return np.tile(node_masks, (1, len(space.nvec)))
        raise NotImplementedError(
            f"dream envs support node-selection action spaces (Discrete(N), "
            f"MultiDiscrete([N] * k)); {space} has a mask the node mask cannot express "
            "(e.g. RGC's action_mode='pair')"
        )
