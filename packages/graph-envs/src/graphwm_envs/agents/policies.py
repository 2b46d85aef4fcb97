"""Stable-Baselines3 policies on :class:`~graphwm_envs.agents.network.GraphNet`.

* :class:`MaskableGraphPolicy` for sb3-contrib's ``MaskablePPO``;
* :class:`GraphPolicy` for SB3's ``PPO``.

Both read the action layout from the action space and the N of each observation:
``Discrete(N)`` (one logit per node), ``MultiDiscrete([N] * k)`` (one logit vector per slot,
flattened slot-major like ``env.action_masks()``) and ``Discrete(N (N - 1) / 2)`` (RGC's pair
mode, one logit per unordered pair). Invalid actions are masked from the observation itself
(its ``action_mask``; the non-edges of ``adjacency`` in pair mode), so even plain ``PPO`` and
``predict`` without ``action_masks`` never sample a masked action; MaskablePPO's masks, when
given, are applied instead (they are the same for the graphwm envs).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from sb3_contrib.common.maskable.distributions import (
    MaskableCategoricalDistribution,
    MaskableMultiCategoricalDistribution,
)
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from stable_baselines3.common.distributions import (
    CategoricalDistribution,
    Distribution,
    MultiCategoricalDistribution,
)
from stable_baselines3.common.policies import ActorCriticPolicy
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor

from graphwm_envs.agents.network import GraphNet

HUGE_NEG = -1e8  # sb3-contrib's masked logit


class _NoFeatures(BaseFeaturesExtractor):
    """Placeholder extractor: the graph network reads the observation dict itself."""

    def __init__(self, observation_space: spaces.Space) -> None:
        super().__init__(observation_space, features_dim=1)

    def forward(self, observations: Any) -> torch.Tensor:  # pragma: no cover - never called
        raise RuntimeError("the graph policies do not use a features extractor")


def action_layout(action_space: spaces.Space, num_nodes: int) -> tuple[str, int]:
    """``("node", k)`` for ``Discrete(N)`` (k = 1) / ``MultiDiscrete([N] * k)``, ``("pair", 0)``
    for ``Discrete(N (N - 1) / 2)``; ``ValueError`` for any other space."""
    n = num_nodes
    if isinstance(action_space, spaces.Discrete):
        if int(action_space.n) == n:
            return "node", 1
        if int(action_space.n) == n * (n - 1) // 2:
            return "pair", 0
    if isinstance(action_space, spaces.MultiDiscrete):
        nvec = np.asarray(action_space.nvec).reshape(-1)
        if np.asarray(action_space.nvec).ndim == 1 and np.all(nvec == n):
            return "node", len(nvec)
    raise ValueError(
        f"the graph policies need Discrete(N), MultiDiscrete([N] * k) or Discrete(N(N-1)/2) "
        f"with N = {n} nodes, got {action_space}"
    )


def _graph_observation_space(space: spaces.Space) -> tuple[spaces.Dict, int]:
    """``(space, N)``: the graphwm_envs observation space (a ``Dict`` with an (N, N)
    ``adjacency``) and its number of nodes; ``ValueError`` for any other space."""
    if isinstance(space, spaces.Dict) and "adjacency" in space.spaces:
        shape = space["adjacency"].shape
        if shape:
            return space, int(shape[-1])
    raise ValueError(
        "the graph policies need a graphwm_envs observation space (a Dict with an "
        f"(N, N) 'adjacency'), got {space}"
    )


class _GraphPolicyMixin:
    """The shared part: build the network, compute logits, masks and distributions."""

    action_space: spaces.Space
    observation_space: spaces.Space
    net: GraphNet
    maskable: bool = False

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        lr_schedule: Any,
        *,
        hidden_dim: int = 64,
        num_layers: int = 3,
        conv: str = "graphconv",
        **kwargs: Any,
    ) -> None:
        self._graph_setup(hidden_dim, num_layers, conv)
        kwargs["features_extractor_class"] = _NoFeatures
        kwargs.pop("features_extractor_kwargs", None)
        # the next class in the MRO: (Maskable)ActorCriticPolicy
        super().__init__(observation_space, action_space, lr_schedule, **kwargs)  # type: ignore[call-arg]

    def _get_constructor_parameters(self) -> dict[str, Any]:
        return self._graph_constructor_parameters(super()._get_constructor_parameters())  # type: ignore[misc]

    def _graph_setup(self, hidden_dim: int, num_layers: int, conv: str) -> None:
        self.hidden_dim, self.num_layers, self.conv = hidden_dim, num_layers, conv

    def predict_values(self, obs: Any) -> torch.Tensor:
        return self._logits_value(obs)[1]

    def _build(self, lr_schedule: Any) -> None:
        space, n = _graph_observation_space(self.observation_space)
        kind, _ = action_layout(self.action_space, n)
        self.net = GraphNet(
            space,
            pair=kind == "pair",
            hidden_dim=self.hidden_dim,
            num_layers=self.num_layers,
            conv=self.conv,
        )
        self.optimizer = self.optimizer_class(  # type: ignore[attr-defined]
            self.parameters(),  # type: ignore[attr-defined]
            lr=lr_schedule(1),
            **self.optimizer_kwargs,  # type: ignore[attr-defined]
        )

    def _graph_constructor_parameters(self, data: dict[str, Any]) -> dict[str, Any]:
        for key in ("net_arch", "activation_fn", "ortho_init"):
            data.pop(key, None)
        data.update(hidden_dim=self.hidden_dim, num_layers=self.num_layers, conv=self.conv)
        return data

    @staticmethod
    def _obs_mask(obs: dict[str, torch.Tensor], kind: str, slots: int) -> torch.Tensor:
        """The observation's own action mask, flattened like the logits."""
        if kind == "pair":
            adj = obs["adjacency"]
            n = adj.shape[-1]
            rows, cols = torch.triu_indices(n, n, offset=1, device=adj.device)
            mask = adj.reshape(-1, n, n)[:, rows, cols] == 0
        else:
            node = obs["action_mask"].reshape(-1, obs["adjacency"].shape[-1]) > 0
            mask = node.repeat(1, slots)
        # never all-masked (a terminal observation): then every action stays defined
        return mask | ~mask.any(-1, keepdim=True)

    def _logits_value(
        self, obs: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, str, int, int]:
        n = int(obs["adjacency"].shape[-1])
        kind, slots = action_layout(self.action_space, n)
        if (kind == "pair") != self.net.pair:
            raise ValueError(
                f"this policy was built for another action layout than {self.action_space}"
            )
        logits, value = self.net(obs)
        if kind == "node" and slots > 1:
            logits = logits.repeat(1, slots)  # the same node scores for every slot
        return logits, value, kind, slots, n

    def _distribution(
        self, obs: dict[str, torch.Tensor], action_masks: Any = None
    ) -> tuple[Distribution, torch.Tensor]:
        return self._distribution_full(obs, action_masks)[:2]

    def _distribution_full(
        self, obs: dict[str, torch.Tensor], action_masks: Any = None
    ) -> tuple[Distribution, torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """``(distribution, value, logits, mask, slots)``."""
        logits, value, kind, slots, n = self._logits_value(obs)
        if action_masks is None:
            mask = self._obs_mask(obs, kind, slots)
        else:
            mask = torch.as_tensor(action_masks, device=logits.device).reshape(logits.shape) > 0
        dims = [n] * slots if kind == "node" else [logits.shape[-1]]
        # MultiDiscrete actions arrive as (batch, k) even for k = 1 (SB3 flattens only
        # Discrete ones): a single Categorical would broadcast their log-probs to (batch, batch)
        multi = isinstance(self.action_space, spaces.MultiDiscrete)
        if self.maskable:
            dist: Any = (
                MaskableMultiCategoricalDistribution(dims)
                if multi
                else MaskableCategoricalDistribution(dims[0])
            )
            dist.proba_distribution(action_logits=logits)
            dist.apply_masking(mask)
        else:
            logits = torch.where(mask, logits, torch.full_like(logits, HUGE_NEG))
            dist = MultiCategoricalDistribution(dims) if multi else CategoricalDistribution(dims[0])
            dist.proba_distribution(action_logits=logits)
        return dist, value, logits, mask, slots if kind == "node" else 1

    def _actions(
        self, obs: Any, deterministic: bool, action_masks: Any
    ) -> tuple[Distribution, torch.Tensor, torch.Tensor]:
        """``(distribution, value, actions)``. Deterministic k-slot actions are the k best
        distinct allowed nodes (the per-slot mode would repeat the best node k times)."""
        dist, value, logits, mask, slots = self._distribution_full(obs, action_masks)
        if not deterministic or slots == 1:
            return dist, value, dist.get_actions(deterministic=deterministic)
        n = logits.shape[-1] // slots
        masked = torch.where(mask, logits, torch.full_like(logits, HUGE_NEG)).reshape(-1, slots, n)
        taken = torch.zeros_like(masked[:, 0], dtype=torch.bool)
        chosen = []
        for s in range(slots):
            scores = masked[:, s].masked_fill(taken, 2 * HUGE_NEG)
            pick = scores.argmax(-1)
            chosen.append(pick)
            taken = taken.scatter(1, pick[:, None], True)
        return dist, value, torch.stack(chosen, 1)

    # ---- the ActorCriticPolicy API (the masked variants take action_masks) ----
    def _forward(
        self, obs: Any, deterministic: bool = False, action_masks: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        dist, value, actions = self._actions(obs, deterministic, action_masks)
        log_prob = dist.log_prob(actions)
        # Discrete: (), MultiDiscrete: (k,) (action_layout admits no other space)
        actions = actions.reshape((-1, *(self.action_space.shape or ())))
        return actions, value, log_prob

    def _evaluate(
        self, obs: Any, actions: torch.Tensor, action_masks: Any = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        dist, value = self._distribution(obs, action_masks)
        return value, dist.log_prob(actions), dist.entropy()


class MaskableGraphPolicy(_GraphPolicyMixin, MaskableActorCriticPolicy):
    """Graph policy for ``sb3_contrib.MaskablePPO`` (see the module docstring).

    Args:
        hidden_dim: node embedding width.
        num_layers: message-passing layers (0 switches message passing off).
        conv: the PyG dense layer: ``"graphconv"`` (default), ``"gin"`` or ``"sage"``.
        **kwargs: the usual ``MaskableActorCriticPolicy`` arguments (``net_arch``,
            ``activation_fn`` and the features extractor are unused).
    """

    maskable = True

    def forward(self, obs: Any, deterministic: bool = False, action_masks: Any = None):
        return self._forward(obs, deterministic, action_masks)

    def evaluate_actions(self, obs: Any, actions: torch.Tensor, action_masks: Any = None):
        return self._evaluate(obs, actions, action_masks)

    def get_distribution(self, obs: Any, action_masks: Any = None):
        return self._distribution(obs, action_masks)[0]

    def _predict(self, observation: Any, deterministic: bool = False, action_masks: Any = None):
        return self._actions(observation, deterministic, action_masks)[2]


class GraphPolicy(_GraphPolicyMixin, ActorCriticPolicy):
    """Graph policy for ``stable_baselines3.PPO``; masks come from the observation (see the
    module docstring). Arguments as :class:`MaskableGraphPolicy`."""

    def forward(self, obs: Any, deterministic: bool = False):
        return self._forward(obs, deterministic)

    def evaluate_actions(self, obs: Any, actions: torch.Tensor):
        return self._evaluate(obs, actions)

    def get_distribution(self, obs: Any) -> Distribution:
        return self._distribution(obs)[0]

    def _predict(self, observation: Any, deterministic: bool = False) -> torch.Tensor:
        return self._actions(observation, deterministic, None)[2]
