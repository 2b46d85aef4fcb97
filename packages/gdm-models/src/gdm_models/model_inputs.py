"""The input checks and conversions every world model's public entry points share (a mixin
of :class:`~gdm_models.world_model.WorldModel`): trajectories and action sequences validated
against the data contract and the model's schema and turned into tensors on its device, seeds
into generators, ``observe_at`` steps and imagination sizes checked before any work. The
single checks live in :mod:`gdm_models.inputs` and :mod:`gdm_models.data`."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from .data import (
    OBS_KEYS,
    DataError,
    observation_to_tensors,
    stack_observations,
    validate_action_nodes,
    validate_observation_sequence,
    validate_start_observations,
)
from .inputs import check_seed, check_steps
from .machine import memory_bytes
from .schema import Schema

__all__ = ["ModelInputs", "check_num_samples"]


def check_num_samples(num_samples: Any) -> None:
    """``num_samples`` of an imagination: an int >= 1 (``TypeError`` / ``ValueError``)."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int | np.integer):
        raise TypeError(f"num_samples must be an int, got {type(num_samples).__name__}")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}")


class ModelInputs(abc.ABC):
    """The checked inputs of a world model with a :attr:`schema` on a :attr:`device`."""

    schema: Schema

    @property
    @abc.abstractmethod
    def device(self) -> torch.device:
        """The device new tensors go to (the model's)."""

    @staticmethod
    def check_steps(steps: Sequence[int], num_observations: int) -> list[int]:
        """Validate ``observe_at`` step indices against T+1 observations."""
        return check_steps(steps, num_observations)

    @staticmethod
    def check_imagination_size(action_sequence: Any, n: int, num_samples: int) -> None:
        """Refuse, by name and before any allocation, a rollout whose outputs alone (K x S
        sampled N x N int8 adjacencies and the (K, S, N) float32 actions) exceed half this
        machine's memory (the bound :func:`gdm_models.registry.check_model_fits` uses)."""
        steps = int(np.shape(action_sequence)[0]) if np.ndim(action_sequence) else 1
        need = max(steps, 1) * num_samples * n * (n + 4)
        if need > memory_bytes() // 2:
            raise ValueError(
                f"num_samples={num_samples:,} over {steps} step(s) of N = {n} needs at least "
                f"{need / 2**30:.3g} GiB for the sampled graphs alone, more than half this "
                f"machine's memory ({memory_bytes() / 2**31:.3g} GiB): draw fewer samples"
            )

    def check_start_observations(self, obs: Mapping[str, Any]) -> None:
        """What every model's :meth:`start` checks first: B observations against the data
        contract and this model's schema (:func:`~gdm_models.data.validate_start_observations`)."""
        validate_start_observations(obs, self.schema)

    def make_generator(self, generator: torch.Generator | int | None) -> torch.Generator:
        """Return ``generator`` or a new ``torch.Generator`` on ``self.device``.

        ``None`` draws a seed from numpy's OS entropy (non-deterministic); an integer in
        [0, 2**64 - 1] seeds it. Anything else (a float, a string, a bool, a numpy Generator)
        raises ``TypeError``; a seed out of range ``ValueError``.
        """
        if isinstance(generator, torch.Generator):
            if generator.device.type != self.device.type:
                raise ValueError(f"generator is on {generator.device}, model is on {self.device}")
            return generator
        g = torch.Generator(device=self.device)
        if generator is None:
            seed = int(np.random.SeedSequence().generate_state(1, dtype=np.uint64)[0] >> 1)
        else:
            seed = check_seed(generator)
        g.manual_seed(seed)
        return g

    def prepare_sequence(
        self,
        obs_sequence: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        actions: Any,
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Validate a trajectory and convert it to tensors on ``self.device``.

        Returns ``(obs, actions)`` with ``obs[k]`` of shape (T+1, ...) and actions (T, N) float.
        A single observation dict (no time axis) is accepted as T = 0.
        """
        if isinstance(obs_sequence, Mapping):
            adj = np.asarray(obs_sequence["adjacency"])
            if adj.ndim == 2:
                obs_sequence = {k: np.asarray(obs_sequence[k])[None] for k in OBS_KEYS}
        else:
            obs_sequence = stack_observations(list(obs_sequence))
        n = validate_observation_sequence(obs_sequence, self.schema, lead=1)
        t1 = np.asarray(obs_sequence["adjacency"]).shape[0]
        if t1 < 1:
            raise DataError("observe needs at least one observation")
        if actions is None:
            actions = np.zeros((0, n), np.int8)
        a = np.asarray(actions)
        if a.size == 0 and t1 == 1:
            a = np.zeros((0, n), np.int8)
        a = validate_action_nodes(a, n, lead=1)
        if a.shape[0] != t1 - 1:
            raise DataError(
                f"got {t1} observations and {a.shape[0]} actions; expected {t1 - 1} actions"
            )
        obs_t = observation_to_tensors(obs_sequence, self.device)
        return obs_t, torch.as_tensor(a, dtype=torch.float32, device=self.device)

    def prepare_actions(self, action_sequence: Any, n: int, num_samples: int) -> torch.Tensor:
        """Validate actions (K,N) or (K,S,N) and return a (K,S,N) float tensor."""
        a = np.asarray(action_sequence)
        if a.ndim == 2:
            a = validate_action_nodes(a, n, lead=1)
            a = np.broadcast_to(a[:, None], (a.shape[0], num_samples, n))
        elif a.ndim == 3:
            a = validate_action_nodes(a, n, lead=2)
            if a.shape[1] != num_samples:
                raise DataError(f"action_sequence has {a.shape[1]} samples, expected {num_samples}")
        else:
            raise DataError(f"action_sequence must be (K,N) or (K,S,N), got shape {a.shape}")
        if a.shape[0] < 1:
            raise DataError("action_sequence must contain at least one action")
        # a copy: the caller's array may be a read-only view (torch warns on those)
        return torch.tensor(a, dtype=torch.float32, device=self.device)
