"""Loss terms of the GDM (paper, "Training"; appendix "Feature Scaling").

L = beta_pred L_pred + L_KL + beta_h L_h with
L_KL = beta_n L_KL^n + beta_g L_KL^g + beta_adj L_KL^adj, where for nodes and graph
L_KL^x = beta_dyn [KL(sg(q) || p)]_FB + beta_rep [KL(q || sg(p))]_FB, [x]_FB = max(x, eps).

All functions return per-element values; masking/averaging is done by the caller.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .rssm import _EPS

__all__ = [
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

    Same values as two :func:`~gdm_models.rssm.categorical_kl` calls; the logs are taken once.
    """
    log_q = torch.log(q.clamp_min(_EPS))
    log_p = torch.log(p.clamp_min(_EPS))
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
