"""Building blocks shared by the baselines (Vanilla GWM, EA-GWM, G-RSSM).

* :class:`GraphState` - a (possibly soft) graph observation in model units: continuous features
  standardised with the :class:`~gdm_models.scaling.FeatureScaler` (paper, appendix "Feature
  Scaling"), categorical/binary factors as probability vectors (one-hot for observations), the
  adjacency as edge probabilities (0/1 for observations).
* :class:`FeatureSetEncoder` - feature-specific linear encoders averaged into one embedding;
  categorical inputs are probability vectors so that differentiable rollouts can feed
  predicted probabilities back (paper, appendix "Baseline Implementations").
* :class:`FeatureHeads` - feature-specific prediction heads.
* The heads' outputs are a :class:`gdm_models.losses.Prediction`, scored by the one
  :func:`gdm_models.losses.prediction_loss` that every model uses.
* Sampling helpers; every random draw takes a ``torch.Generator``. Undirected graphs: one
  Bernoulli draw per *unordered* pair (upper triangle, mirrored), zero diagonal.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..backends import compiled_loops
from ..layers import one_hot
from ..losses import NodeMasks, Prediction, masked_mean, pair_mask_of
from ..member_ops import expand_like, member_apply
from ..scaling import FeatureScaler
from ..schema import Schema

__all__ = [
    "GraphState",
    "FeatureSetEncoder",
    "FeatureHeads",
    "masked_node_mean",
    "state_from_observation",
    "sample_symmetric_bernoulli",
    "sample_bernoulli",
    "sample_categorical",
    "sampled_state",
    "soft_state",
    "SampledOutputs",
]


# ---------------------------------------------------------------------------- containers
@dataclass
class GraphState:
    """A batch of graph states in model units (B graphs padded to N nodes).

    Attributes:
        adjacency: (B,N,N) edge probabilities (0/1 when observed), symmetric, zero diagonal.
        node_continuous: (B,N,Fnc) standardised continuous node features.
        node_categorical: list over categorical node features of (B,N,K_f) probabilities.
        graph_continuous: (B,Fgc) standardised continuous graph features.
        graph_categorical: list of (B,K_f) probabilities.
        action_mask: (B,N) probability that the node is a valid action.
        node_mask: (B,N) bool, real (non-padded) nodes.
    """

    adjacency: torch.Tensor
    node_continuous: torch.Tensor
    node_categorical: list[torch.Tensor]
    graph_continuous: torch.Tensor
    graph_categorical: list[torch.Tensor]
    action_mask: torch.Tensor
    node_mask: torch.Tensor

    def expand(self, num_samples: int) -> GraphState:
        """Repeat a single state (B = 1) ``num_samples`` times along the batch axis."""

        def rep(t: torch.Tensor) -> torch.Tensor:
            return t.expand(num_samples, *t.shape[1:]).contiguous()

        return GraphState(
            rep(self.adjacency),
            rep(self.node_continuous),
            [rep(t) for t in self.node_categorical],
            rep(self.graph_continuous),
            [rep(t) for t in self.graph_categorical],
            rep(self.action_mask),
            rep(self.node_mask),
        )

    def to_tensors(self) -> dict[str, torch.Tensor]:
        """Flat dict of tensors, batch axis first (a ``WorldModel`` stepping state); the
        categorical factors as ``node_categorical<i>`` / ``graph_categorical<i>``."""
        out = {
            "adjacency": self.adjacency,
            "node_continuous": self.node_continuous,
            "graph_continuous": self.graph_continuous,
            "action_mask": self.action_mask,
            "node_mask": self.node_mask,
        }
        out.update({f"node_categorical{i}": t for i, t in enumerate(self.node_categorical)})
        out.update({f"graph_categorical{i}": t for i, t in enumerate(self.graph_categorical)})
        return out

    @classmethod
    def from_tensors(cls, tensors: Mapping[str, torch.Tensor], schema: Schema) -> GraphState:
        """Inverse of :meth:`to_tensors`."""
        return cls(
            adjacency=tensors["adjacency"],
            node_continuous=tensors["node_continuous"],
            node_categorical=[
                tensors[f"node_categorical{i}"] for i in range(len(schema.node_cardinalities))
            ],
            graph_continuous=tensors["graph_continuous"],
            graph_categorical=[
                tensors[f"graph_categorical{i}"] for i in range(len(schema.graph_cardinalities))
            ],
            action_mask=tensors["action_mask"],
            node_mask=tensors["node_mask"],
        )


# ---------------------------------------------------------------------------- masks
def masked_node_mean(x: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
    """Mean of (B,N,D) ``x`` over real nodes -> (B,D) (Pool = mean, paper appendix)."""
    return masked_mean(x, node_mask[..., None], -2)


# ---------------------------------------------------------------------------- encoders / heads
class FeatureSetEncoder(nn.Module):
    """Mean of feature-specific linear embeddings.

    Continuous (standardised) feature f: ``x_f w_f + b_f``; categorical feature f given as a
    probability vector p (one-hot for observations): ``W_f p + b_f``; binary extras (e.g. the
    action mask) as a probability q: ``q w + b``. With no features at all the embedding is a
    learned constant (e.g. the graph embedding in RGC, which has no graph features).
    """

    def __init__(self, num_cont: int, cards: tuple[int, ...], num_binary: int, dim: int) -> None:
        super().__init__()
        self.num_cont, self.cards, self.num_binary, self.dim = (
            num_cont,
            tuple(cards),
            num_binary,
            dim,
        )
        n_scalar = num_cont + num_binary
        self.scalar_weight = nn.Parameter(torch.randn(n_scalar, dim) * 0.5)
        self.scalar_bias = nn.Parameter(torch.zeros(n_scalar, dim))
        self.cat = nn.ModuleList([nn.Linear(k, dim) for k in self.cards])
        self.count = n_scalar + len(self.cards)
        self.empty = nn.Parameter(torch.zeros(dim))

    def forward(
        self,
        cont: torch.Tensor,
        cat: list[torch.Tensor],
        binary: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """cont (...,Fc), cat list of (...,K_f), binary (...,Fb) -> (...,dim)."""
        if self.count == 0:  # (member-stacked parameters meet their members' rows)
            return member_apply(expand_like, cont, self.empty, ndim=1)
        scal = cont if binary is None else torch.cat([cont, binary.to(cont.dtype)], dim=-1)
        if scal.shape[-1] != self.num_cont + self.num_binary:
            raise ValueError(
                f"encoder expects {self.num_cont} continuous and {self.num_binary} binary inputs, "
                f"got {scal.shape[-1]} columns"
            )
        total = member_apply(
            lambda x, w, b: (x * w + b).sum(-2),
            scal[..., :, None],
            self.scalar_weight,
            self.scalar_bias,
            ndim=2,
        )
        for lin, p in zip(self.cat, cat, strict=True):
            total = total + lin(p)
        return total / self.count


class FeatureHeads(nn.Module):
    """Feature-specific linear heads: continuous outputs (standardised) and categorical logits."""

    def __init__(self, dim: int, num_cont: int, cards: tuple[int, ...]) -> None:
        super().__init__()
        self.cont = nn.Linear(dim, num_cont) if num_cont else None
        self.cat = nn.ModuleList([nn.Linear(dim, k) for k in cards])

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        cont = self.cont(x) if self.cont is not None else x.new_zeros(*x.shape[:-1], 0)
        return cont, [h(x) for h in self.cat]


# ---------------------------------------------------------------------------- observations
def state_from_observation(
    obs: Mapping[str, torch.Tensor],
    node_mask: torch.Tensor,
    schema: Schema,
    scaler: FeatureScaler,
) -> GraphState:
    """Observation tensors (as from :func:`gdm_models.data.observation_to_tensors`, batch axis
    first) -> :class:`GraphState` with standardised scalars and one-hot categorical factors."""
    m = node_mask.to(obs["adjacency"].dtype)
    adj = obs["adjacency"].to(m.dtype) * pair_mask_of(node_mask).to(m.dtype)
    nk = obs["node_categorical"]
    gk = obs["graph_categorical"]
    node_cat = [
        one_hot(nk[..., i], k, m.dtype) * m[..., None]
        for i, k in enumerate(schema.node_cardinalities)
    ]
    graph_cat = [one_hot(gk[..., i], k, m.dtype) for i, k in enumerate(schema.graph_cardinalities)]
    return GraphState(
        adjacency=adj,
        node_continuous=scaler.scale_node(obs["node_continuous"].to(m.dtype)) * m[..., None],
        node_categorical=node_cat,
        graph_continuous=scaler.scale_graph(obs["graph_continuous"].to(m.dtype)),
        graph_categorical=graph_cat,
        action_mask=obs["action_mask"].to(m.dtype) * m,
        node_mask=node_mask,
    )


# ---------------------------------------------------------------------------- sampling
def sample_bernoulli(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """0/1 float sample of Bernoulli(sigmoid(logits))."""
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    return (u < torch.sigmoid(logits)).to(logits.dtype)


def sample_symmetric_bernoulli(
    logits: torch.Tensor, node_mask: torch.Tensor, generator: torch.Generator
) -> torch.Tensor:
    """Symmetric 0/1 adjacency (B,N,N) with zero diagonal: one Bernoulli(sigmoid(logit_ij))
    draw per unordered pair i < j (upper-triangle logits), mirrored to (j, i)."""
    n = logits.shape[-1]
    u = torch.rand(logits.shape, generator=generator, device=logits.device, dtype=logits.dtype)
    if logits.dim() == 3 and compiled_loops(logits, u):
        from ..cpu_kernels import upper_draw_

        # the same comparisons in one compiled pass over the upper triangle (CPU imagination)
        return upper_draw_(torch.sigmoid(logits), u, node_mask.expand(logits.shape[:2]))
    upper = torch.triu(torch.ones(n, n, dtype=torch.bool, device=logits.device), diagonal=1)
    draw = (u < torch.sigmoid(logits)) & upper & pair_mask_of(node_mask)
    return (draw | draw.transpose(-1, -2)).to(logits.dtype)


def sample_categorical(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Integer sample (...,) from softmax(logits) over the last axis (inverse-CDF)."""
    probs = torch.softmax(logits, dim=-1)
    u = torch.rand(
        probs.shape[:-1] + (1,), generator=generator, device=probs.device, dtype=probs.dtype
    )
    idx = (probs.cumsum(-1) < u).sum(-1)
    return idx.clamp_max(probs.shape[-1] - 1)


def soft_state(
    pred: Prediction, node_mask: torch.Tensor, masks: NodeMasks | None = None
) -> GraphState:
    """Differentiable next state: predicted scalars and *probabilities* of every categorical /
    binary factor (paper, appendix "Baseline Implementations"); adjacency sigmoid(logits)."""
    masks = NodeMasks.of(node_mask, pred.reward.dtype) if masks is None else masks
    m = masks.node
    assert pred.adjacency_logit is not None  # the baselines' decoders predict the adjacency
    return GraphState(
        adjacency=torch.sigmoid(pred.adjacency_logit) * masks.pair,
        node_continuous=pred.node_continuous * m[..., None],
        node_categorical=[torch.softmax(x, -1) * m[..., None] for x in pred.node_categorical],
        graph_continuous=pred.graph_continuous,
        graph_categorical=[torch.softmax(x, -1) for x in pred.graph_categorical],
        action_mask=torch.sigmoid(pred.action_mask_logit) * m,
        node_mask=node_mask,
    )


@dataclass
class SampledOutputs:
    """A sampled next observation in environment units (tensors, batch axis first)."""

    obs: dict[str, torch.Tensor]
    state: GraphState


def sampled_state(
    pred: Prediction,
    node_mask: torch.Tensor,
    schema: Schema,
    scaler: FeatureScaler,
    generator: torch.Generator,
) -> SampledOutputs:
    """Sample every categorical/binary factor from its predicted distribution (adjacency one
    draw per unordered pair); continuous features and reward are the predicted means. Returns
    both the environment-unit prediction dict (see
    :data:`gdm_models.world_model.PREDICTION_KEYS`) and the hard :class:`GraphState` to
    continue a rollout from."""
    m = node_mask.to(pred.reward.dtype)
    assert pred.adjacency_logit is not None  # the baselines' decoders predict the adjacency
    adj = sample_symmetric_bernoulli(pred.adjacency_logit, node_mask, generator)
    nk = [sample_categorical(x, generator) for x in pred.node_categorical]
    gk = [sample_categorical(x, generator) for x in pred.graph_categorical]
    am = sample_bernoulli(pred.action_mask_logit, generator) * m
    cont = sample_bernoulli(pred.continuation_logit, generator)
    lead_n = pred.node_continuous.shape[:-1]
    lead_g = pred.graph_continuous.shape[:-1]
    dev = pred.reward.device
    obs = {
        "adjacency": adj,
        "node_continuous": scaler.unscale_node(pred.node_continuous) * m[..., None],
        "node_categorical": (
            torch.stack(nk, -1) * node_mask[..., None]
            if nk
            else torch.zeros(*lead_n, 0, dtype=torch.long, device=dev)
        ),
        "graph_continuous": scaler.unscale_graph(pred.graph_continuous),
        "graph_categorical": (
            torch.stack(gk, -1) if gk else torch.zeros(*lead_g, 0, dtype=torch.long, device=dev)
        ),
        "action_mask": am,
        "reward": scaler.unscale_reward(pred.reward),
        "continuation": cont,
    }
    # soft_state's fields but the sampled ones (its adjacency, sigmoid(logits) over the pairs,
    # would only be replaced)
    hard = GraphState(
        adjacency=adj,
        node_continuous=pred.node_continuous * m[..., None],
        graph_continuous=pred.graph_continuous,
        node_mask=node_mask,
        node_categorical=[
            F.one_hot(x, k).to(m.dtype) * m[..., None]
            for x, k in zip(nk, schema.node_cardinalities, strict=True)
        ],
        graph_categorical=[
            F.one_hot(x, k).to(m.dtype) for x, k in zip(gk, schema.graph_cardinalities, strict=True)
        ],
        action_mask=am,
    )
    return SampledOutputs(obs=obs, state=hard)
