"""The GDM as a world model: training loss, ``observe``/``imagine`` and batched stepping
with the network of its :class:`~gdm_models.gdm.cell.GDMCell` (paper, section "Graph
Dynamics Model"), and the registry factory of ``"gdm"`` and its ablations.

State dicts keep the flat keys of the checkpoints written before the cell existed
(``gru_n.cell.weight_ih``, ``mp.layers.0.lin.weight``, ...; the parameters' order is also
unchanged): :meth:`GDM.state_dict` writes them and :meth:`GDM.load_state_dict` reads them (and
the cell's nested names, ``cell.deter.gru_n.cell.weight_ih``), so old checkpoints, ``latest/``
training states and their optimiser states load as they are."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from ..data import Batch, TensorObs, predictions_to_numpy
from ..inputs import check_latent_widths
from ..member_layers import MemberModel, MemberNoise, pad_node_axis
from ..scaling import FeatureScaler
from ..schema import Schema
from ..world_model import StepResult, StepState, WorldModel, terms_to_floats
from .cell import GDMCell, sample_categoricals
from .config import ABLATIONS, GDMConfig
from .latent import GDMLatent, Noise
from .sequence_loss import (
    CORE_FIELDS,
    SEQUENCE_NOISE,
    draw_sequence_noise,
    sequence_core,
    sequence_loss_terms,
)
from .terms import combine_terms, loss_scales, transition_terms

__all__ = ["GDM", "build_gdm"]

#: the stepping state's keys, the fields of :class:`GDMLatent` in order
STATE_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(GDMLatent))


def _state(latent: GDMLatent) -> StepState:
    return {k: getattr(latent, k) for k in STATE_KEYS}


class GDM(WorldModel, MemberModel):
    """Graph Dynamics Model. Build with ``make_model("gdm", schema, scaler, **overrides)``
    or ``GDM(schema, scaler, GDMConfig(...))``. Its network is :attr:`cell`. A
    :class:`~gdm_models.member_layers.MemberModel`: its ensembles train as one member model."""

    #: under compile, batches are zero-padded to a multiple of this many nodes (static shapes)
    compile_pad_multiple: int = 16
    config: GDMConfig

    def __init__(
        self,
        schema: Mapping[str, Any] | Schema,
        scaler: FeatureScaler | None = None,
        config: GDMConfig | None = None,
    ) -> None:
        super().__init__(schema, scaler, GDMConfig() if config is None else config)
        self.cell = GDMCell(self.schema, self.scaler, self.config)
        self.register_state_dict_post_hook(_flat_keys)
        self.register_load_state_dict_pre_hook(_nested_keys)

    # ================================================================== loss terms
    def loss_scales(self) -> dict[str, float]:
        """Weight of every logged per-transition term (:func:`~.terms.loss_scales`)."""
        return loss_scales(self.config)

    def combine_terms(
        self, per_step: Mapping[str, torch.Tensor], step_mask: torch.Tensor, members: int = 0
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(B, L) terms averaged and weighted (:func:`~.terms.combine_terms`)."""
        cache = self.__dict__.setdefault("_term_weight_cache", {})
        return combine_terms(self.config, cache, per_step, step_mask, members)

    def transition_terms(self, *args: Any) -> dict[str, torch.Tensor]:
        """Per-transition loss terms (:func:`~.terms.transition_terms` of the cell)."""
        return transition_terms(self.cell, self.scaler, *args)

    def _compile_target(self) -> Callable[..., Any]:
        """The time-vectorised loss core (:func:`~gdm_models.gdm.sequence_loss.sequence_core`);
        the noise is drawn eagerly before it (padded batches get noise of the padded shape)."""
        return partial(sequence_core, self)

    # ================================================================== training
    def training_loss(
        self, batch: Batch, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Loss of paper eq. (loss) averaged over the L transitions of each window.

        Terms (logged): ``pred`` and its parts ``pred_node``, ``pred_graph``, ``pred_adj``,
        ``pred_action``, ``pred_reward``, ``pred_cont``; ``kl_n_dyn``, ``kl_n_rep``,
        ``kl_g_dyn``, ``kl_g_rep`` (after free bits), ``kl_adj``, ``h`` (L_h) and ``total``.
        ``pred_adj`` is the adjacency BCE of the ``no-recurrent-adj`` ablation's decoder head;
        with the recurrent adjacency the decoder passes A_t through and topology is learned by
        ``kl_adj`` instead, so there it is 0 by construction.
        """
        gen = self.make_generator(generator if generator is not None else 0)
        return self.loss_tensors(batch, Noise(gen, self.device))

    def loss_terms(self, batch: Batch, noise: Noise) -> tuple[torch.Tensor, dict[str, float]]:
        """:meth:`loss` with an explicit :class:`Noise` source (time-vectorised path, noise
        keys ``"seq/<name>"``; the step-by-step reference with keys ``"<t>/<name>"`` is
        :func:`gdm_models.reference.gdm_loss_reference`)."""
        total, terms = self.loss_tensors(batch, noise)
        return total, terms_to_floats(terms)

    def loss_tensors(
        self, batch: Batch, noise: Noise
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """:meth:`training_loss` with an explicit :class:`Noise` source (compiled after
        :meth:`enable_compile`)."""
        if self.compiled:
            padded = batch.pad_nodes_to_multiple(self.compile_pad_multiple)
            per_step = sequence_loss_terms(self, padded, noise, self._compiled)
        else:
            per_step = sequence_loss_terms(self, batch, noise)
        return self.combine_terms(per_step, batch.step_mask)

    # ================================================================== member model
    def member_noise(self, shape: tuple[int, int, int], generator: torch.Generator) -> MemberNoise:
        """The window's uniforms (:data:`SEQUENCE_NOISE` order) as :meth:`training_loss`
        draws them for a (B, L, N) batch from ``generator``."""
        u = draw_sequence_noise(self, Noise(generator, generator.device), *shape)
        return tuple(u[k] for k in SEQUENCE_NOISE)

    def pad_member_noise(self, noise: MemberNoise, num_nodes: int) -> MemberNoise:
        """Node axes padded to ``num_nodes``
        (:func:`~gdm_models.member_layers.pad_node_axis`; masked out anyway)."""
        out = []
        for name, u in zip(SEQUENCE_NOISE, noise, strict=True):
            if u is not None and name == "adj":  # (B, L, N, N)
                u = pad_node_axis(pad_node_axis(u, -1, num_nodes), -2, num_nodes)
            elif u is not None and name.startswith("zn"):  # (B, T, N, groups, classes)
                u = pad_node_axis(u, -3, num_nodes)
            out.append(u)  # graph latents have no node axis
        return tuple(out)

    def member_loss(
        self, batch: Batch, noise: MemberNoise, members: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The time-vectorised loss (:func:`~gdm_models.gdm.sequence_loss.sequence_core`) of a
        member model on its folded batch, averaged per member (:meth:`combine_terms`)."""
        per_step = sequence_core(self, *(getattr(batch, k) for k in CORE_FIELDS), *noise)
        return self.combine_terms(per_step, batch.step_mask, members)

    # ================================================================== inference API
    @torch.no_grad()
    def observe_tensors(
        self, obs: Mapping[str, torch.Tensor], actions: torch.Tensor, noise: Noise
    ) -> GDMLatent:
        """Posterior over a trajectory given tensors (T+1 obs, T actions; no batch axis)."""
        return self._posterior_pass(obs, actions, noise, [obs["adjacency"].shape[0] - 1])[0]

    def _posterior_pass(
        self,
        obs: Mapping[str, torch.Tensor],
        actions: torch.Tensor,
        noise: Noise,
        capture: Sequence[int],
    ) -> list[GDMLatent]:
        """One posterior pass up to max(capture) (a scan of the posterior step,
        :meth:`GDMCell.posterior_latents`); the latents after each captured step."""
        t1 = max(capture) + 1
        n = obs["adjacency"].shape[-1]
        zero = torch.zeros(1, n, device=self.device, dtype=actions.dtype)
        acts = torch.cat([zero, actions[: t1 - 1]])[None]  # step 0: the zero action
        latents = self.cell.posterior_latents(
            {k: v[None, :t1] for k, v in obs.items()}, acts, noise
        )
        return [latents[t] for t in capture]

    def _observe_at(
        self, obs: TensorObs, actions: torch.Tensor, steps: list[int], generator: torch.Generator
    ) -> list[GDMLatent]:
        """Posterior latents at several steps from one pass (see ``WorldModel.observe_at``)."""
        return self._posterior_pass(obs, actions, Noise(generator, self.device), steps)

    @torch.no_grad()
    def imagine_tensors(
        self, latent: GDMLatent, actions: torch.Tensor, noise: Noise
    ) -> tuple[list[dict[str, torch.Tensor]], GDMLatent]:
        """Prior rollout of S samples over K actions ((K, S, N) float); tensors per step
        (noise keys ``"i<k>/<what>"``)."""
        latent = latent.expand(actions.shape[1])
        preds = []
        for k in range(actions.shape[0]):
            pred, latent = self.imagine_step(latent, actions[k], noise, f"i{k}")
            preds.append(pred)
        return preds, latent

    @torch.no_grad()
    def imagine_batch(
        self,
        latents: Sequence[Any],
        action_sequences: Sequence[Any],
        num_samples: int,
        generators: Sequence[torch.Generator | int],
    ) -> list[list[dict[str, np.ndarray]]]:
        """The rollouts of R latents of one graph size over K actions each, as one batch of
        R * ``num_samples`` rows (a GPU's few large launches instead of R small ones): every
        uniform of latent r is drawn from ``generators[r]`` in the shape of its own rollout
        (:class:`Noise` ``blocks``), so the samples are those of
        ``WorldModel.imagine_batch``'s loop up to float rounding of the batched products.
        Latents of other sizes or action counts fall back to the loop."""
        n_s = {self._latent_num_nodes(latent) for latent in latents}
        acts = [
            self.prepare_actions(a, self._latent_num_nodes(latent), int(num_samples))
            for latent, a in zip(latents, action_sequences, strict=True)
        ]
        if len(latents) < 2 or len(n_s) > 1 or len({a.shape[0] for a in acts}) > 1:
            return super().imagine_batch(latents, action_sequences, num_samples, generators)
        gens = [self.make_generator(g) for g in generators]
        rows = [latent.expand(int(num_samples)) for latent in latents]
        latent = GDMLatent(
            *(torch.cat(parts) for parts in zip(*(r.tensors() for r in rows), strict=True))
        )
        actions = torch.cat(acts, 1)  # (K, R * S, N)
        noise = Noise(None, self.device, blocks=gens)
        out: list[list[dict[str, np.ndarray]]] = [[] for _ in latents]
        for k in range(actions.shape[0]):
            pred, latent = self.imagine_step(latent, actions[k], noise, "i0")
            for r, block in enumerate(out):
                rs = slice(r * num_samples, (r + 1) * num_samples)
                block.append(predictions_to_numpy({key: v[rs] for key, v in pred.items()}))
        return out

    def imagine_step(
        self,
        latent: GDMLatent,
        action: torch.Tensor,
        noise: Noise,
        key: str,
    ) -> tuple[dict[str, torch.Tensor], GDMLatent]:
        """One prior step of B graphs ((B, N) float actions, :meth:`GDMCell.imagine_step`):
        the sampled prediction tensors (environment units, the keys of
        :data:`~gdm_models.world_model.PREDICTION_KEYS`) and the next latent. ``key`` names
        this step's noise (``"<key>/<what>"``)."""
        sc, dev = self.scaler, self.device
        S, N = action.shape
        node_out, graph_out, nxt = self.cell.imagine_step(latent, action, noise, key)
        pred: dict[str, torch.Tensor] = {"adjacency": nxt.adjacency}
        pred["node_continuous"] = sc.unscale_node(node_out["node_continuous"])
        pred["node_categorical"] = sample_categoricals(
            node_out["node_categorical"], (S, N), noise, f"{key}/out_node_cat", dev
        )
        u = noise.uniform(f"{key}/out_action_mask", (S, N))
        pred["action_mask"] = (u < torch.sigmoid(node_out["action_mask"])).long()
        pred["graph_continuous"] = sc.unscale_graph(graph_out["graph_continuous"])
        pred["graph_categorical"] = sample_categoricals(
            graph_out["graph_categorical"], (S,), noise, f"{key}/out_graph_cat", dev
        )
        pred["reward"] = sc.unscale_reward(graph_out["reward"])
        u = noise.uniform(f"{key}/out_cont", (S,))
        pred["continuation"] = (u < torch.sigmoid(graph_out["continuation"])).long()
        return pred, nxt

    def _latent_num_nodes(self, latent: Any) -> int:
        if not isinstance(latent, GDMLatent):
            raise TypeError("latent must be a GDMLatent returned by GDM.observe")
        c = self.config
        got = {name: getattr(latent, name).shape[-1] for name in ("h_n", "z_n")}
        check_latent_widths(
            got, {"h_n": c.hidden_dim, "z_n": c.node_latent_groups * c.node_latent_classes}
        )
        return latent.num_nodes

    # ================================================================== batched stepping
    def start(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator) -> StepState:
        """The posterior after B start observations: the first posterior step of
        ``observe`` (zero latent, zero action, observed adjacency), batched."""
        self.check_start_observations(obs)
        b, n = obs["adjacency"].shape[:2]
        actions = torch.zeros(b, 1, n, device=self.device)
        [latent] = self.cell.posterior_latents(
            {k: v[:, None] for k, v in obs.items()}, actions, Noise(generator, self.device)
        )
        return _state(latent)

    def state_from_latent(
        self, latent: Any, num_samples: int, generator: torch.Generator
    ) -> StepState:
        """``num_samples`` copies of the ``observe`` latent (no randomness)."""
        self._latent_num_nodes(latent)
        return _state(latent.expand(num_samples))

    def _step(
        self, state: StepState, actions: torch.Tensor, generator: torch.Generator
    ) -> StepResult:
        """One prior step of B rows (:meth:`imagine_step`)."""
        pred, latent = self.imagine_step(
            GDMLatent(**state), actions, Noise(generator, self.device), "i0"
        )
        return pred, _state(latent)


def _flat_key(key: str) -> str:
    """A cell key without the cell's prefixes: ``cell.deter.gru_n.x`` -> ``gru_n.x``,
    ``cell.mp.x`` -> ``mp.x`` (the message-passing module is itself a part)."""
    rest = key.removeprefix("cell.")
    part, _, leaf = rest.partition(".")
    return rest if part == "mp" else leaf


def _flat_keys(module: nn.Module, state: dict[str, Any], prefix: str, meta: Any) -> None:
    """State-dict post hook of :class:`GDM`: the cell's keys under their flat names."""
    for key in [k for k in state if k.startswith(prefix + "cell.")]:
        state[prefix + _flat_key(key[len(prefix) :])] = state.pop(key)


def _nested_keys(module: nn.Module, state: dict[str, Any], prefix: str, *_: Any) -> None:
    """Load-state-dict pre hook of :class:`GDM`: flat keys back to the cell's names."""
    names = {_flat_key(k): k for k in module.cell.state_dict(keep_vars=True)}  # type: ignore[union-attr]
    for key in [k for k in state if k.startswith(prefix) and not k.startswith(prefix + "cell.")]:
        new = names.get(key[len(prefix) :])
        if new is not None:
            state[prefix + "cell." + new] = state.pop(key)


def build_gdm(
    schema: Mapping[str, Any] | Schema,
    scaler: FeatureScaler | None = None,
    *,
    variant: str | None = None,
    **overrides: Any,
) -> GDM:
    """Registry factory for ``"gdm"`` and ``"gdm:<ablation>[+<ablation>...]"``.

    Ablation settings take precedence over ``overrides`` (so hyperparameters with ``beta_h=1`` do
    not undo ``gdm:no-beta-h``).
    """
    flags: dict[str, Any] = {}
    if variant:
        for name in variant.split("+"):
            if name not in ABLATIONS:
                raise KeyError(f"unknown GDM ablation {name!r}; known: {sorted(ABLATIONS)}")
            flags.update(ABLATIONS[name])
    known = {f.name for f in dataclasses.fields(GDMConfig)}
    bad = set(overrides) - known
    if bad:
        raise TypeError(f"unknown GDM config fields {sorted(bad)}")
    return GDM(schema, scaler, GDMConfig(**{**overrides, **flags}))
