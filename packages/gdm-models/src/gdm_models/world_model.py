"""The ``WorldModel`` base class shared by the GDM and every baseline, and the conversion of
its predictions to the environment's dtypes (:mod:`gdm_models.data`).

Contract for implementers (GDM, Vanilla GWM, EA-GWM, G-RSSM, ...)
----------------------------------------------------------------
Subclass :class:`WorldModel` and

* call ``super().__init__(schema, scaler, config)`` where ``config`` is a ``@dataclass``
  instance holding *every* constructor hyperparameter (JSON-able scalars/strings/bools);
  the model must be reconstructible as ``factory(schema, scaler, **dataclasses.asdict(config))``;
* add one line for its factory to :data:`gdm_models.registry.MODELS` (and its hyperparameters, if
  any, to :data:`gdm_models.hyperparameters.HYPERPARAMETERS`);
* implement the abstract methods:

  - ``_observe_at(obs, actions, steps, generator) -> list[latent]``: condition on one
    trajectory of T+1 observations and T actions (validated tensors) and return the latents
    after the observations ``steps`` (the posterior for latent models; a state-space model may
    return the observation itself). :meth:`observe` and :meth:`observe_at` call it;
  - ``_latent_num_nodes(latent) -> int``: check that a latent is what ``_observe_at``
    returns and give its number of nodes;
  - ``start(obs, generator) -> state`` and ``_step(state, actions, generator) -> (prediction,
    state)``: batched stepping (below; the public :meth:`step` checks the actions and calls
    ``_step``, the one step function: a single rollout is a batch of one);
    ``state_from_latent(latent, num_samples, generator) -> state``: the stepping state of
    ``num_samples`` rollouts from an ``observe`` latent.
    :meth:`imagine_multi` (and :meth:`imagine`) are derived from these two;
  - ``training_loss(batch, generator) -> (total, terms)``: ``batch`` is a padded
    :class:`~gdm_models.data.Batch` (with ``node_mask``/``step_mask``) on the model's device;
    ``total`` a differentiable scalar; ``terms`` a dict of detached 0-d tensors with a fixed
    key set (logged by the trainer; :meth:`loss` converts them to floats).

* draw all randomness from the ``generator`` argument (a ``torch.Generator`` on the model's
  device; :meth:`WorldModel.make_generator` turns ``None``/an int seed into one);
* never assume a GPU: use ``self.device`` for new tensors;
* optionally, for ensembles trained as one member model (K seeds with member-dimension
  layers): inherit :class:`gdm_models.member_layers.MemberModel` as well and implement its
  methods (the member axis lives in that module, not here). Without it ensembles train
  member by member.

Batched stepping (``start`` / ``step``, what DreamerV3's ``obs_step`` / ``img_step`` are to
its RSSM): a state is a ``dict[str, torch.Tensor]`` with one row per independent rollout;
with one generator, ``start`` + k ``step`` calls draw what ``observe`` + ``imagine_multi`` draw
(docs/models.md, "The WorldModel API"). Inputs are checked by :mod:`gdm_models.inputs`.

Input checks and conversions (``prepare_sequence``, ``prepare_actions``, ``make_generator``,
...) come from :class:`gdm_models.model_inputs.ModelInputs`. Saving and loading go through
:mod:`gdm_models.training.checkpoint` (``model.save(path)``,
``WorldModel.load(path)`` / :func:`gdm_models.training.checkpoint.load_checkpoint`).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from .compiling import compile_or_eager, default_compile_mode
from .config_checks import check_config_types
from .data import (  # (PREDICTION_KEYS, predictions_to_numpy: re-exported, their old home)
    NP_DTYPES,
    PREDICTION_KEYS,
    Batch,
    TensorObs,
    predictions_to_numpy,
)
from .inputs import check_step_actions
from .model_inputs import ModelInputs, check_num_samples
from .scaling import FeatureScaler
from .schema import Schema

__all__ = [
    "NP_DTYPES",
    "PREDICTION_KEYS",
    "StepState",
    "WorldModel",
    "bind_checkpoint_io",
    "predictions_to_numpy",
]

#: a batched stepping state: tensors with the batch (rollout) axis first (module docstring)
StepState = dict[str, torch.Tensor]
#: what :meth:`WorldModel.step` returns: (sampled prediction tensors, next state)
StepResult = tuple[dict[str, torch.Tensor], StepState]


def terms_to_floats(terms: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """Detached 0-d loss-term tensors -> python floats with one host transfer (``loss``)."""
    values = torch.stack(list(terms.values())).tolist()
    return dict(zip(terms, values, strict=True))


class WorldModel(nn.Module, ModelInputs, abc.ABC):
    """Abstract base class of all world models (see the module docstring for the contract).

    Args:
        schema: feature schema (dict or :class:`Schema`).
        scaler: fitted :class:`FeatureScaler` (``None`` -> identity scaling).
        config: a dataclass instance with all hyperparameters.
    """

    #: registry name (e.g. ``"gdm"``, ``"gdm:no-h-plus"``, ``"g-rssm"``); set by the registry.
    model_name: str = ""
    #: the hyperparameters (a dataclass instance; each model narrows the type)
    config: Any

    def __init__(
        self,
        schema: Mapping[str, Any] | Schema,
        scaler: FeatureScaler | None,
        config: Any,
    ) -> None:
        super().__init__()
        if not dataclasses.is_dataclass(config) or isinstance(config, type):
            raise TypeError("config must be a dataclass instance")
        check_config_types(config)  # before any layer sees a size of 8.5 or True
        self.schema = Schema.from_dict(schema)
        self.scaler = FeatureScaler.identity(self.schema) if scaler is None else scaler
        self.scaler.check_schema(self.schema)
        self.config = config

    # ------------------------------------------------------------------ abstract API
    @torch.no_grad()
    def observe(
        self,
        obs_sequence: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        actions: Any,
        generator: torch.Generator | int | None = None,
    ) -> Any:
        """Condition on T+1 observations and T actions; return the latent of the last step
        (the posterior latent; a state-space model returns the last observation)."""
        obs, act = self.prepare_sequence(obs_sequence, actions)
        last = obs["adjacency"].shape[0] - 1
        return self._observe_at(obs, act, [last], self.make_generator(generator))[0]

    @torch.no_grad()
    def observe_at(
        self,
        obs_sequence: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        actions: Any,
        steps: Sequence[int],
        generator: torch.Generator | int | None = None,
    ) -> list[Any]:
        """Latents at several steps of one trajectory, ``[observe(obs[:t+1], actions[:t])]``.

        One pass over the trajectory (O(T) instead of O(T * len(steps))); with the same seed
        the latent at step t equals ``observe`` of the prefix up to t, because the posterior
        consumes its noise step by step.
        """
        obs, act = self.prepare_sequence(obs_sequence, actions)
        idx = self.check_steps(steps, obs["adjacency"].shape[0])
        if not idx:
            return []
        return self._observe_at(obs, act, idx, self.make_generator(generator))

    @abc.abstractmethod
    def _observe_at(
        self, obs: TensorObs, actions: torch.Tensor, steps: list[int], generator: torch.Generator
    ) -> list[Any]:
        """Validated tensors (T+1 obs, T actions) -> latents at ``steps`` (non-empty, in
        range), from one pass over the trajectory: what every model implements, and what
        :meth:`observe` (``steps = [T]``) and :meth:`observe_at` call."""

    @torch.no_grad()
    def imagine_multi(
        self,
        latent: Any,
        action_sequence: Any,
        num_samples: int,
        generator: torch.Generator | int | None = None,
    ) -> list[dict[str, np.ndarray]]:
        """Sample ``num_samples`` rollouts over K actions ((K, N) the same for every sample,
        or (K, S, N)) from ``latent``; return K prediction dicts (see :meth:`imagine`)."""
        check_num_samples(num_samples)
        n = self._latent_num_nodes(latent)
        self.check_imagination_size(action_sequence, n, int(num_samples))
        actions = self.prepare_actions(action_sequence, n, int(num_samples))
        return self._imagine(latent, actions, self.make_generator(generator))

    @torch.no_grad()
    def imagine_batch(
        self,
        latents: Sequence[Any],
        action_sequences: Sequence[Any],
        num_samples: int,
        generators: Sequence[torch.Generator | int],
    ) -> list[list[dict[str, np.ndarray]]]:
        """``[imagine_multi(latent, actions, num_samples, generator) for ...]``: the rollouts
        of several latents (an evaluation's reference transitions), each from its own
        generator. A model may run them as one batch (the GDM does: each latent's noise drawn
        from its own generator in its own shape, so the samples are those of the loop up to
        float rounding); the default is the loop."""
        return [
            self.imagine_multi(latent, actions, num_samples, generator)
            for latent, actions, generator in zip(
                latents, action_sequences, generators, strict=True
            )
        ]

    @abc.abstractmethod
    def _latent_num_nodes(self, latent: Any) -> int:
        """Check that ``latent`` is what this model's :meth:`observe` returns (else a clear
        ``TypeError``/``DataError``) and return its number of nodes N."""

    def _imagine(
        self, latent: Any, actions: torch.Tensor, generator: torch.Generator
    ) -> list[dict[str, np.ndarray]]:
        """Checked latent and (K, S, N) float actions -> K sampled prediction dicts, by
        :meth:`step` from :meth:`state_from_latent`."""
        state = self.state_from_latent(latent, actions.shape[1], generator)
        out = []
        for k in range(actions.shape[0]):
            pred, state = self.step(state, actions[k], generator)
            out.append(predictions_to_numpy(pred))
        return out

    # ------------------------------------------------------------------ batched stepping
    @abc.abstractmethod
    def start(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator) -> StepState:
        """The state after observing B start observations (tensors with a leading B axis,
        every node real); see the module docstring."""

    def step(
        self,
        state: StepState,
        actions: torch.Tensor,
        generator: torch.Generator,
    ) -> StepResult:
        """One imagined transition of every row: (B, N) float actions -> (sampled prediction
        tensors with the keys of :data:`PREDICTION_KEYS`, next state); see the module
        docstring. One rollout is a batch of one; the model's backend
        (:mod:`gdm_models.backends`) picks how its rows are computed, never the caller.

        Raises ``TypeError`` for actions that are not a tensor and :class:`DataError` for
        actions of the wrong shape, or not exactly 0/1 (NaN, inf, 2.0, 0.5)."""
        check_step_actions(state, actions)
        return self._step(state, actions, generator)

    @abc.abstractmethod
    def _step(
        self, state: StepState, actions: torch.Tensor, generator: torch.Generator
    ) -> StepResult:
        """What every model implements for :meth:`step`: one imagined transition of B rows."""

    @abc.abstractmethod
    def state_from_latent(
        self, latent: Any, num_samples: int, generator: torch.Generator
    ) -> StepState:
        """The state of ``num_samples`` rollouts from a latent of :meth:`observe` (a model
        whose latent is a distribution draws one sample per rollout from ``generator``)."""

    @staticmethod
    def replace_rows(state: StepState, rows: torch.Tensor, new: StepState) -> StepState:
        """``state`` with the rows ``rows`` replaced by the rows of ``new`` (same order)."""
        return {k: v.index_copy(0, rows, new[k]) for k, v in state.items()}

    @abc.abstractmethod
    def training_loss(
        self, batch: Batch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Training loss on a padded batch: ``(total, terms)`` with the logged terms as
        detached 0-d tensors on the device (no host synchronisation; the trainer reads them
        every ``log_every`` steps). ``generator`` drives the model's noise (``None``: seed 0
        for the stochastic models). Compiled after :meth:`enable_compile`."""

    # ------------------------------------------------------------------ derived API
    def loss(
        self, batch: Batch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """:meth:`training_loss` with the terms as floats (one host synchronisation)."""
        total, terms = self.training_loss(batch, generator)
        return total, terms_to_floats(terms)

    # ------------------------------------------------------------------ torch.compile
    #: under compile, batches are zero-padded to a multiple of this many nodes (static shapes)
    compile_pad_multiple: int = 8
    #: the compiled tensor-only loss after :meth:`enable_compile` (``None``: eager)
    _compiled: Any = None

    def _compile_target(self) -> Callable[..., Any]:
        """The tensor-only function :meth:`enable_compile` compiles (the whole loss after the
        noise draw); a model without one cannot be compiled."""
        raise NotImplementedError(f"{type(self).__name__} has no compilable loss")

    def enable_compile(self, mode: str | None = None, **compile_kwargs: Any) -> bool:
        """Run the whole tensor-only loss (after the noise draw) through ``torch.compile`` as
        one graph with static shapes.

        ``mode`` defaults to "reduce-overhead" (CUDA graphs) on CUDA, "default" elsewhere.
        Batches are padded to a multiple of :attr:`compile_pad_multiple` nodes (the loss is
        unchanged: padded nodes are masked everywhere). Falls back to eager with one
        :class:`~gdm_models.compiling.CompileFallbackWarning` when torch.compile is
        unavailable or fails. Returns whether the compiled path is active.
        """
        name = f"the {self.model_name or type(self).__name__} loss"
        mode = mode or default_compile_mode(self.device)
        compiled = compile_or_eager(
            self._compile_target(), name, mode=mode, dynamic=False, **compile_kwargs
        )
        self._compiled = compiled if compiled.is_compiled else None
        return compiled.is_compiled

    def disable_compile(self) -> None:
        """Back to the eager path."""
        self._compiled = None

    @property
    def compiled(self) -> bool:
        """Whether :meth:`training_loss` runs the compiled loss."""
        return self._compiled is not None and self._compiled.is_compiled

    def imagine(
        self,
        latent: Any,
        action_nodes: Any,
        num_samples: int,
        generator: torch.Generator | int | None = None,
    ) -> dict[str, np.ndarray]:
        """One-step imagination: ``num_samples`` samples of the next observation.

        ``action_nodes`` is (N,) (same action for all samples) or (S, N).
        """
        a = np.asarray(action_nodes)
        return self.imagine_multi(latent, a[None], num_samples, generator)[0]

    # ------------------------------------------------------------------ helpers
    @property
    def device(self) -> torch.device:
        """Device of the model's parameters (CPU if it has none)."""
        for p in self.parameters():
            return p.device
        for b in self.buffers():
            return b.device
        return torch.device("cpu")

    def config_dict(self) -> dict[str, Any]:
        """The config as a plain dict."""
        return dataclasses.asdict(self.config)

    def save(self, path: str | Path) -> Path:
        """Save weights, config, schema and scaler
        (:func:`gdm_models.training.checkpoint.save_checkpoint`)."""
        return _checkpoint_io().save(self, path)

    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        schema: Mapping[str, Any] | Schema | None = None,
        device: torch.device | str = "cpu",
    ) -> WorldModel:
        """Load a checkpoint written by :meth:`save`; optionally require a given schema
        (:func:`gdm_models.training.checkpoint.load_checkpoint`)."""
        model = _checkpoint_io().load(path, schema=schema, device=device)
        if cls is not WorldModel and not isinstance(model, cls):
            raise TypeError(f"checkpoint holds a {type(model).__name__}, not a {cls.__name__}")
        return model


@dataclasses.dataclass(frozen=True)
class CheckpointIO:
    """The checkpoint functions behind :meth:`WorldModel.save` / :meth:`WorldModel.load`.

    Loading rebuilds a model by name through the registry, which sits above the models, so
    this module cannot import the checkpoint module; the package's ``__init__`` binds its
    functions here once (:func:`bind_checkpoint_io`)."""

    save: Callable[[WorldModel, str | Path], Path]
    load: Callable[..., WorldModel]


_CHECKPOINT_IO: list[CheckpointIO] = []


def bind_checkpoint_io(save: Callable[..., Path], load: Callable[..., Any]) -> None:
    """Set the functions :meth:`WorldModel.save` / :meth:`WorldModel.load` call."""
    _CHECKPOINT_IO[:] = [CheckpointIO(save, load)]


def _checkpoint_io() -> CheckpointIO:
    if not _CHECKPOINT_IO:  # only when the package's __init__ did not run (never in practice)
        raise RuntimeError("import gdm_models to bind the checkpoint functions")
    return _CHECKPOINT_IO[0]
