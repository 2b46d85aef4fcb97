"""Loss terms of the GDM (paper, "Training"; appendix "Feature Scaling").

L = beta_pred L_pred + L_KL + beta_h L_h with
L_KL = beta_n L_KL^n + beta_g L_KL^g + beta_adj L_KL^adj, where for nodes and graph
L_KL^x = beta_dyn [KL(sg(q) || p)]_FB + beta_rep [KL(q || sg(p))]_FB, [x]_FB = max(x, eps).

The KL, L_h and elementwise terms return per-element values (masking/averaging by the caller);
:func:`prediction_loss` is the whole L_pred of every model (GDM and baselines), per graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

import torch
import torch.nn.functional as F

from .layers import EPS

if TYPE_CHECKING:
    from .scaling import FeatureScaler

__all__ = [
    "Prediction",
    "NodeMasks",
    "pair_mask_of",
    "prediction_loss",
    "PREDICTION_LOSS_KEYS",
    "free_bits",
    "kl_dyn_rep",
    "adjacency_kl",
    "h_alignment",
    "masked_mean",
    "mse",
    "cross_entropy",
    "bce_with_logits",
]


def free_bits(kl: torch.Tensor, eps: float) -> torch.Tensor:
    """[x]_FB = max(x, eps)."""
    return torch.clamp(kl, min=eps) if eps > 0 else kl


def kl_dyn_rep(q: torch.Tensor, p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(KL(sg(q) || p), KL(q || sg(p))) of factorised categoricals (..., groups, classes).

    Same values as two :func:`~gdm_models.layers.categorical_kl` calls; the logs are taken once.
    """
    log_q = torch.log(q.clamp_min(EPS))
    log_p = torch.log(p.clamp_min(EPS))
    dyn = (q.detach() * (log_q.detach() - log_p)).sum(dim=(-1, -2))
    rep = (q * (log_q - log_p.detach())).sum(dim=(-1, -2))
    return dyn, rep


def adjacency_kl(
    q: torch.Tensor, signed_logit: torch.Tensor, pair_mask: torch.Tensor, num_nodes: torch.Tensor
) -> torch.Tensor:
    """Adjacency KL per graph (paper, L_KL^adj):

    1/N^2 sum_{i,j} q_ij log(q_ij / p_ij) + (1 - q_ij) log((1 - q_ij) / (1 - p_ij)),
    with p_ij = sigmoid(signed_logit_ij) (see
    :func:`gdm_models.adjacency.next_edge_signed_logit`). Pairs outside ``pair_mask``
    (diagonal, padding) contribute 0 (their edge is fixed to 0 in both q and p).

    q, signed_logit: (..., N, N); pair_mask: (..., N, N) bool; num_nodes: (...) real N.
    """
    log_p = F.logsigmoid(signed_logit)
    log_1mp = F.logsigmoid(-signed_logit)
    kl = torch.xlogy(q, q) - q * log_p + torch.xlogy(1.0 - q, 1.0 - q) - (1.0 - q) * log_1mp
    kl = torch.where(pair_mask, kl, torch.zeros_like(kl))
    return kl.sum(dim=(-1, -2)) / num_nodes.to(kl.dtype) ** 2


def h_alignment(h_minus: torch.Tensor, h_plus: torch.Tensor) -> torch.Tensor:
    """Per state: 1/2 (||h^- - sg(h^+)||^2 + ||h^+ - h^-||^2) (paper, 2 L_h = ...)."""
    return 0.5 * ((h_minus - h_plus.detach()).pow(2).sum(-1) + (h_plus - h_minus).pow(2).sum(-1))


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | tuple[int, ...]) -> torch.Tensor:
    """Mean of ``x`` over ``dim`` counting only entries where ``mask`` is True (0 if none)."""
    m = mask.to(x.dtype)
    return (x * m).sum(dim) / m.sum(dim).clamp_min(1.0)


def mse(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Elementwise squared error (in standardised units when both are standardised)."""
    return (pred - target).pow(2)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Elementwise CE; logits (..., C), integer target (...)."""
    lead = target.shape
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none"
    ).reshape(lead)


def bce_with_logits(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Elementwise binary cross-entropy from logits."""
    return F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype), reduction="none")


# ---------------------------------------------------------------------------- L_pred
@dataclass
class Prediction:
    """Heads' outputs for one step (B graphs, N nodes), the input of :func:`prediction_loss`.

    ``node_continuous``/``graph_continuous``/``reward`` are in standardised units; the rest are
    logits. ``adjacency_logit`` is symmetric, or ``None`` for a model whose decoder passes the
    adjacency through (the GDM with its recurrent adjacency learns topology through L_KL^adj).
    """

    node_continuous: torch.Tensor  # (B,N,Fnc)
    node_categorical: list[torch.Tensor]  # (B,N,K_f) logits
    action_mask_logit: torch.Tensor  # (B,N)
    adjacency_logit: torch.Tensor | None  # (B,N,N)
    graph_continuous: torch.Tensor  # (B,Fgc)
    graph_categorical: list[torch.Tensor]  # (B,K_f) logits
    reward: torch.Tensor  # (B,)
    continuation_logit: torch.Tensor  # (B,)


def pair_mask_of(node_mask: torch.Tensor) -> torch.Tensor:
    """(B,N,N) bool mask of real, off-diagonal node pairs."""
    n = node_mask.shape[-1]
    m = node_mask[..., :, None] & node_mask[..., None, :]
    return m & ~torch.eye(n, dtype=torch.bool, device=node_mask.device)


@dataclass
class NodeMasks:
    """Float forms of a (B,N) node mask, built once per loss and shared by its terms.

    Attributes:
        node: (B,N) 1.0 on real nodes. count: (B,) real nodes (>= 1).
        pair: (B,N,N) 1.0 on real off-diagonal pairs. pair_count: (B,) their number (>= 1).
    """

    node: torch.Tensor
    count: torch.Tensor
    pair: torch.Tensor
    pair_count: torch.Tensor

    @classmethod
    def of(
        cls, node_mask: torch.Tensor, dtype: torch.dtype, pair_mask: torch.Tensor | None = None
    ) -> NodeMasks:
        """Masks of ``node_mask`` (bool) in ``dtype``; ``pair_mask`` if the caller has it."""
        m = node_mask.to(dtype)
        pm = (pair_mask_of(node_mask) if pair_mask is None else pair_mask).to(dtype)
        return cls(m, m.sum(-1).clamp_min(1.0), pm, pm.sum((-1, -2)).clamp_min(1.0))


#: keys of :func:`prediction_loss`' result (per-graph tensors) besides ``node_per_node``.
PREDICTION_LOSS_KEYS: tuple[str, ...] = (
    "node",
    "graph",
    "adjacency",
    "action_mask",
    "reward",
    "continuation",
)


def _feature_terms(
    continuous: torch.Tensor,
    categorical: Sequence[torch.Tensor],
    scaled_continuous_target: Callable[[], torch.Tensor],
    categorical_target: torch.Tensor,
) -> list[torch.Tensor]:
    """One loss term per feature group of a node or graph factor: the MSE summed over the
    continuous features (standardised; the target is scaled only when there are any) and one
    cross-entropy per categorical feature."""
    terms: list[torch.Tensor] = []
    if continuous.shape[-1]:
        terms.append(mse(continuous, scaled_continuous_target()).sum(-1))
    for i, logits in enumerate(categorical):
        terms.append(cross_entropy(logits, categorical_target[..., i]))
    return terms


def prediction_loss(
    pred: Prediction,
    target: Mapping[str, torch.Tensor],
    masks: NodeMasks,
    scaler: FeatureScaler,
    *,
    adjacency_norm: Literal["pairs", "nodes_squared"] = "pairs",
) -> dict[str, torch.Tensor]:
    """Per-graph terms of L_pred (paper, "Training"; MSE in standardised units, appendix
    "Feature Scaling"), the one prediction loss of every model.

    ``target`` holds the next observation's tensors (environment units, categorical as integers)
    plus ``reward`` (B,) and ``continuation`` (B,) in {0,1}. Returns (B,) tensors:

    * ``node``: 1/(N |F_n|) sum_v sum_f l_f (MSE / CE), 0 if |F_n| = 0;
    * ``node_per_node``: (B,N) the per-node mean over node features (0 on padding), for
      EA-GWM's critical-node weighting;
    * ``graph``: 1/|F_g| sum_f l_f (0 if |F_g| = 0);
    * ``adjacency``: BCE over real off-diagonal pairs divided by their number N(N-1)
      (``adjacency_norm="pairs"``, the baselines) or by N^2 (``"nodes_squared"``, the GDM's
      no-recurrent-adj head, the normalisation of L_KL^adj); 0 when ``pred.adjacency_logit``
      is None. The paper does not fix this normalisation (docs/models.md);
    * ``action_mask``: BCE mean over real nodes; ``reward``: MSE (standardised);
      ``continuation``: BCE.
    """
    m, n_real = masks.node, masks.count
    # node features: 1/|F_n| sum_f l_f(v), masked
    node_terms = _feature_terms(
        pred.node_continuous,
        pred.node_categorical,
        lambda: scaler.scale_node(target["node_continuous"]),
        target["node_categorical"],
    )
    f_n = pred.node_continuous.shape[-1] + len(pred.node_categorical)  # |F_n|
    per_node = sum(node_terms) * m / f_n if node_terms else torch.zeros_like(m)
    node = per_node.sum(-1) / n_real
    # graph features
    graph_terms = _feature_terms(
        pred.graph_continuous,
        pred.graph_categorical,
        lambda: scaler.scale_graph(target["graph_continuous"]),
        target["graph_categorical"],
    )
    zeros = torch.zeros_like(pred.reward)
    f_g = pred.graph_continuous.shape[-1] + len(pred.graph_categorical)  # |F_g|
    graph = cast(torch.Tensor, sum(graph_terms)) / f_g if graph_terms else zeros
    # adjacency BCE over real off-diagonal (ordered) pairs == over unordered pairs (symmetric)
    if adjacency_norm not in ("pairs", "nodes_squared"):
        raise ValueError(f"adjacency_norm must be 'pairs' or 'nodes_squared': {adjacency_norm!r}")
    if pred.adjacency_logit is None:
        adjacency = zeros
    else:
        bce = bce_with_logits(pred.adjacency_logit, target["adjacency"]) * masks.pair
        if adjacency_norm == "pairs":
            adjacency = bce.sum((-1, -2)) / masks.pair_count
        else:
            adjacency = bce.sum((-1, -2)) / n_real**2
    action_mask = (bce_with_logits(pred.action_mask_logit, target["action_mask"]) * m).sum(-1)
    return {
        "node": node,
        "node_per_node": per_node,
        "graph": graph,
        "adjacency": adjacency,
        "action_mask": action_mask / n_real,
        "reward": mse(pred.reward, scaler.scale_reward(target["reward"])),
        "continuation": bce_with_logits(pred.continuation_logit, target["continuation"]),
    }
