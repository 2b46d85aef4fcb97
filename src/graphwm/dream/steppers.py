"""One imagined step at a time, batched over episodes, for every model family of gdm-models.

``WorldModel.imagine_multi`` rolls a whole action sequence from one latent and does not return
the latent it ends in, while an environment must act step by step on actions it does not know
in advance. A :class:`LatentStepper` therefore runs exactly the computations of
``observe`` (on a start observation, T = 0) and of one ``imagine`` step, but keeps the latent
between calls and batches B independent episodes in one forward pass. For B = 1 and the same
generator, ``posterior`` + k calls of ``step`` draw the same samples as ``observe`` followed by
``imagine_multi`` over the k actions (tested for every model), so the dream env imagines with
the model's own semantics.

A state is a dict of tensors with the episode axis first, so rows can be replaced (autoreset)
without knowing the model.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping

import torch

State = dict[str, torch.Tensor]


class LatentStepper(abc.ABC):
    """Batched posterior-on-start and one-step prior imagination of a world model.

    Args:
        model: a trained ``gdm_models.WorldModel`` of the family the stepper handles.
    """

    def __init__(self, model) -> None:
        self.model = model

    @property
    def device(self) -> torch.device:
        """The model's device."""
        return self.model.device

    @abc.abstractmethod
    def posterior(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator) -> State:
        """Latent state after observing B start observations (tensors with a leading B axis,
        as from ``gdm_models.data.observation_to_tensors``)."""

    @abc.abstractmethod
    def step(
        self, state: State, actions: torch.Tensor, generator: torch.Generator
    ) -> tuple[dict[str, torch.Tensor], State]:
        """Imagine one step for B episodes: actions (B, N) float node indicators ->
        (prediction tensors with the keys of ``gdm_models.PREDICTION_KEYS``, next state)."""

    @staticmethod
    def replace_rows(state: State, rows: torch.Tensor, new: State) -> State:
        """``state`` with the episodes ``rows`` replaced by the rows of ``new`` (same order)."""
        return {k: v.index_copy(0, rows, new[k]) for k, v in state.items()}


def _full_mask(b: int, n: int, device: torch.device) -> torch.Tensor:
    return torch.ones(b, n, dtype=torch.bool, device=device)


class GDMStepper(LatentStepper):
    """The GDM: posterior step with the observed adjacency, then prior steps
    (``GDM.imagine_tensors``), carrying the ``GDMLatent``."""

    _FIELDS = ("h_n", "z_n", "h_g", "z_g", "adjacency")

    def posterior(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator) -> State:
        from gdm_models.gdm import Noise

        m = self.model
        b, n = obs["adjacency"].shape[:2]
        dev = self.device
        pair = ~torch.eye(n, dtype=torch.bool, device=dev)[None]
        # the first posterior step of GDM.observe (zero latent, zero action), batched
        latent, _ = m._posterior_step(
            m.initial_latent(b, n),
            torch.zeros(b, n, device=dev),
            obs,
            _full_mask(b, n, dev),
            pair,
            Noise(generator, dev),
            0,
            need_prior=False,
        )
        return dict(zip(self._FIELDS, dataclasses.astuple(latent), strict=True))

    def step(
        self, state: State, actions: torch.Tensor, generator: torch.Generator
    ) -> tuple[dict[str, torch.Tensor], State]:
        from gdm_models.gdm import GDMLatent, Noise

        blocks = self._gpu_blocks(*actions.shape)
        if blocks is None:  # the model's default path
            preds, latent = self.model.imagine_tensors(
                GDMLatent(**state), actions[None], Noise(generator, self.device)
            )
            return preds[0], dict(zip(self._FIELDS, dataclasses.astuple(latent), strict=True))
        # GPU: blocks of episodes, each with the dense edge MLP
        outs, latents = [], []
        mlp = self.model.edge_mlp
        mlp.impl = "dense"
        try:
            for rows in blocks:
                sub = GDMLatent(**{k: v[rows] for k, v in state.items()})
                preds, latent = self.model.imagine_tensors(
                    sub, actions[None, rows], Noise(generator, self.device)
                )
                outs.append(preds[0])
                latents.append(latent)
        finally:
            del mlp.impl  # back to the class default ("auto")
        pred = {k: torch.cat([o[k] for o in outs]) for k in outs[0]}
        parts = [dataclasses.astuple(lat) for lat in latents]
        return pred, {f: torch.cat([p[i] for p in parts]) for i, f in enumerate(self._FIELDS)}

    #: largest B * N * N * width of the pairwise edge MLP computed in one dense block on a GPU
    DENSE_EDGE_ELEMS = 1 << 28

    def _gpu_blocks(self, b: int, n: int) -> list[slice] | None:
        """On a GPU, episodes in blocks whose pairwise edge-MLP activations fit
        ``DENSE_EDGE_ELEMS``, so each block runs ``EdgeUpdateMLP.forward_dense`` (one
        broadcast; the same function as the default no-grad row blocks, tested equal in
        gdm-models) instead of the default Python loop over graphs. ``None`` (default path) on
        a CPU or when the model chose its edge-MLP implementation itself."""
        mlp = getattr(self.model, "edge_mlp", None)
        if mlp is None or self.device.type != "cuda" or getattr(mlp, "impl", None) != "auto":
            return None
        per_graph = n * n * mlp.hidden
        size = max(1, self.DENSE_EDGE_ELEMS // per_graph)
        return [slice(i, min(b, i + size)) for i in range(0, b, size)]


class GWMStepper(LatentStepper):
    """Vanilla GWM and EA-GWM: the state is the (sampled) graph itself."""

    def posterior(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator) -> State:
        from gdm_models.baselines.common import state_from_observation

        m = self.model
        b, n = obs["adjacency"].shape[:2]
        st = state_from_observation(obs, _full_mask(b, n, self.device), m.schema, m.scaler)
        return self._flatten(st)

    def step(
        self, state: State, actions: torch.Tensor, generator: torch.Generator
    ) -> tuple[dict[str, torch.Tensor], State]:
        from gdm_models.baselines.common import sampled_state

        m = self.model
        st = self._unflatten(state)
        pred, _ = m.step(st, actions)
        sample = sampled_state(pred, st.node_mask, m.schema, m.scaler, generator)
        return sample.obs, self._flatten(sample.state)

    @staticmethod
    def _flatten(st) -> State:
        out = {
            "adjacency": st.adjacency,
            "node_continuous": st.node_continuous,
            "graph_continuous": st.graph_continuous,
            "action_mask": st.action_mask,
            "node_mask": st.node_mask,
        }
        out.update({f"node_categorical{i}": t for i, t in enumerate(st.node_categorical)})
        out.update({f"graph_categorical{i}": t for i, t in enumerate(st.graph_categorical)})
        return out

    def _unflatten(self, state: State):
        from gdm_models.baselines.common import GraphState

        s = self.model.schema
        return GraphState(
            adjacency=state["adjacency"],
            node_continuous=state["node_continuous"],
            node_categorical=[
                state[f"node_categorical{i}"] for i in range(len(s.node_cardinalities))
            ],
            graph_continuous=state["graph_continuous"],
            graph_categorical=[
                state[f"graph_categorical{i}"] for i in range(len(s.graph_cardinalities))
            ],
            action_mask=state["action_mask"],
            node_mask=state["node_mask"],
        )


class GRSSMStepper(LatentStepper):
    """G-RSSM: posterior filtering of the start observation, one z drawn from the posterior
    (as ``GRSSM.imagine_multi`` does), then prior steps."""

    def posterior(self, obs: Mapping[str, torch.Tensor], generator: torch.Generator) -> State:
        m = self.model
        b, n = obs["adjacency"].shape[:2]
        mask = _full_mask(b, n, self.device)
        out = m._filter(
            {k: v[:, None] for k, v in obs.items()},
            torch.zeros(b, 0, n, device=self.device),
            mask,
            generator,
        )
        h, post = out["h"][:, -1], out["posterior"][:, -1]
        return {"h": h, "z": m.sample_z(post, generator)}

    def step(
        self, state: State, actions: torch.Tensor, generator: torch.Generator
    ) -> tuple[dict[str, torch.Tensor], State]:
        from gdm_models.baselines.common import sampled_state

        m = self.model
        b, n = actions.shape
        mask = _full_mask(b, n, self.device)
        h = m.transition(state["h"], state["z"], actions, mask)
        z = m.sample_z(m.prior(h), generator)
        pred = m.decode(h, z, mask)
        return sampled_state(pred, mask, m.schema, m.scaler, generator).obs, {"h": h, "z": z}


def _default_steppers() -> list[tuple[type, Callable[[object], LatentStepper]]]:
    from gdm_models.baselines import GRSSM, GWM
    from gdm_models.gdm import GDM

    return [(GDM, GDMStepper), (GWM, GWMStepper), (GRSSM, GRSSMStepper)]


_EXTRA: list[tuple[type, Callable[[object], LatentStepper]]] = []


def register_stepper(model_class: type, factory: Callable[[object], LatentStepper]) -> None:
    """Teach the dream envs a new model family (checked before the built-in ones)."""
    _EXTRA.insert(0, (model_class, factory))


def stepper_for(model) -> LatentStepper:
    """The stepper of ``model``'s family; ``TypeError`` for an unknown family."""
    for cls, factory in _EXTRA + _default_steppers():
        if isinstance(model, cls):
            return factory(model)
    raise TypeError(
        f"no dream-env stepper for {type(model).__name__}; the built-in ones cover the GDM "
        "(and its ablations), vanilla-gwm, ea-gwm and g-rssm; add one with register_stepper"
    )
