"""The extra training losses of EA-GWM (Song et al. 2026; paper, appendix "Baseline
Implementations"), each an independent, switchable term.

Where the paper is silent we follow the public code of Song and Cai
("graph_world_model_accumulative_error"):

* spectral loss: sum over the GNN layers of ``(||W_l||_2 - 1)^2``, the spectral norm estimated
  by power iteration (4 iterations per call, warm-started from the previous estimate);
* rollout-consistency loss: k-step (k = 4) teacher-free rollouts whose predictions are compared
  with the observed trajectory at every step 1..k (the paper generalises MSE to
  classification losses for categorical / binary factors);
* critical-node loss: node-level state losses weighted by per-node weights with mean one within
  each graph - proportional to the degree (paper) or to the row sums of the normalised
  adjacency (public code).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..backends import compiled_loops
from ..losses import masked_mean
from ..member_ops import member_reduce

__all__ = [
    "power_iteration",
    "spectral_loss",
    "spectral_loss_per_layer",
    "normalized_adjacency",
    "critical_node_weights",
    "critical_node_loss",
    "rollout_consistency_loss",
]


def power_iteration(
    weight: torch.Tensor, u: torch.Tensor, num_iterations: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Largest singular value of ``weight`` (out, in) by power iteration from ``u`` (in,).

    The iterations run without gradient; the returned ``sigma = v^T W u`` is differentiable in
    ``W`` with gradient ``v u^T`` (the exact gradient of the top singular value when the
    iteration has converged). Returns ``(sigma, u_new)`` (``u_new`` detached, unit norm).
    """
    with torch.no_grad():
        u = F.normalize(u.to(weight.dtype), dim=0, eps=1e-12)
        for _ in range(num_iterations):
            v = F.normalize(weight @ u, dim=0, eps=1e-12)
            u = F.normalize(weight.T @ v, dim=0, eps=1e-12)
        v = F.normalize(weight @ u, dim=0, eps=1e-12)
    sigma = torch.dot(v, weight @ u)
    return sigma, u.detach()


def spectral_loss(
    weights: list[torch.Tensor],
    us: list[torch.Tensor],
    num_iterations: int = 4,
    target: float = 1.0,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """R_spectral = sum_l (sigma_max(W_l) - target)^2 and the updated power-iteration vectors.

    Weights of one shape (the GNN layers) run their power iterations together, batched over
    the layers (the same per-layer iteration as :func:`power_iteration`, in a few kernels).
    Member-stacked weights ([K, out, in], vectors [K, in]) give the K members' losses (K,)."""
    if len(weights) != len(us):
        raise ValueError("need one power-iteration vector per weight matrix")
    if not weights:
        return torch.zeros(()), []
    if len({tuple(w.shape) for w in weights}) > 1:
        if weights[0].dim() > 2:
            raise ValueError("member-stacked spectral losses need weights of one shape")
        return spectral_loss_per_layer(weights, us, num_iterations, target)
    if weights[0].dim() == 2:
        w, u = torch.stack(weights), torch.stack(us)
        sigma, u_new = _batched_power_iteration(w, u, num_iterations)
        return ((sigma - target) ** 2).sum(), list(u_new.unbind(0))
    # member-stacked: the L * K matrices (layer-major) in one batched power iteration
    n_layers, k = len(weights), weights[0].shape[0]
    w = torch.stack(weights).flatten(0, 1)
    sigma, u_new = _batched_power_iteration(w, torch.stack(us).flatten(0, 1), num_iterations)
    loss = ((sigma - target) ** 2).view(n_layers, k).sum(0)
    return loss, list(u_new.view(n_layers, k, -1).unbind(0))


def spectral_loss_per_layer(
    weights: list[torch.Tensor], us: list[torch.Tensor], num_iterations: int, target: float
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """:func:`spectral_loss` with one :func:`power_iteration` per layer (any shapes; the
    reference the batched form is tested against)."""
    total = weights[0].new_zeros(())
    new_us = []
    for w, u in zip(weights, us, strict=True):
        sigma, u_new = power_iteration(w, u, num_iterations)
        total = total + (sigma - target) ** 2
        new_us.append(u_new)
    return total, new_us


def _batched_power_iteration(
    weight: torch.Tensor, u: torch.Tensor, num_iterations: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`power_iteration` for a stack of matrices (L, out, in) and vectors (L, in)."""
    with torch.no_grad():
        u = F.normalize(u.to(weight.dtype), dim=-1, eps=1e-12)
        for _ in range(num_iterations):
            v = F.normalize(torch.bmm(weight, u[..., None])[..., 0], dim=-1, eps=1e-12)
            u = F.normalize(
                torch.bmm(weight.transpose(1, 2), v[..., None])[..., 0], dim=-1, eps=1e-12
            )
        v = F.normalize(torch.bmm(weight, u[..., None])[..., 0], dim=-1, eps=1e-12)
    sigma = (v * torch.bmm(weight, u[..., None])[..., 0]).sum(-1)  # v^T W u per layer
    return sigma, u.detach()


def normalized_adjacency(
    adjacency: torch.Tensor, node_mask: torch.Tensor, self_loops: bool = True
) -> torch.Tensor:
    """D^-1/2 A D^-1/2 over real nodes (paper, "Related Work": A~ = D^-1/2 A D^-1/2).

    With ``self_loops`` the renormalised form D~^-1/2 (A + I) D~^-1/2 of a GCN is used (every
    real node then has degree >= 1). Rows/columns of zero degree and of padded nodes are zero.
    ``adjacency`` (B,N,N) may hold edge probabilities; its diagonal is ignored.
    """
    if adjacency.dim() == 3 and node_mask.dtype == torch.bool and compiled_loops(adjacency):
        from ..cpu_kernels import gcn_normalised

        # a 0/1 adjacency (imagination's sampled states) in two compiled passes, bit for bit
        out = gcn_normalised(adjacency, node_mask, self_loops)
        if out is not None:
            return out
    n = adjacency.shape[-1]
    m = node_mask.to(adjacency.dtype)
    eye = torch.eye(n, dtype=adjacency.dtype, device=adjacency.device)
    a = adjacency * (1.0 - eye) * m[..., :, None] * m[..., None, :]
    if self_loops:
        a = a + eye * m[..., :, None]
    deg = a.sum(-1)
    d_inv_sqrt = torch.where(deg > 0, deg.clamp_min(1e-12).rsqrt(), torch.zeros_like(deg))
    return d_inv_sqrt[..., :, None] * a * d_inv_sqrt[..., None, :]


def critical_node_weights(
    adjacency: torch.Tensor,
    node_mask: torch.Tensor,
    mode: str = "degree",
    self_loops: bool = True,
) -> torch.Tensor:
    """Critical-node weights c(v) (B,N): mean one over the real nodes of each graph.

    ``mode="degree"``: c(v) proportional to the degree (paper, appendix "Baseline
    Implementations"); ``mode="normalized"``: proportional to the row sums of the normalised
    adjacency (public code of Song and Cai). A graph whose weights are all zero (no edges) gets
    uniform weights 1. Padded nodes get 0. The weights carry no gradient.
    """
    with torch.no_grad():
        m = node_mask.to(adjacency.dtype)
        if mode == "degree":
            n = adjacency.shape[-1]
            eye = torch.eye(n, dtype=adjacency.dtype, device=adjacency.device)
            raw = (adjacency * (1.0 - eye) * m[..., None, :]).sum(-1)
        elif mode == "normalized":
            raw = normalized_adjacency(adjacency, node_mask, self_loops).sum(-1)
        else:
            raise ValueError(
                f"unknown critical-node weighting {mode!r}; use 'degree' or 'normalized'"
            )
        raw = raw * m
        mean = raw.sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1.0)
        c = torch.where(mean > 0, raw / mean.clamp_min(1e-12), torch.ones_like(raw))
        return c * m


def critical_node_loss(
    per_node_loss: torch.Tensor, weights: torch.Tensor, node_mask: torch.Tensor
) -> torch.Tensor:
    """R_critical per graph: 1/N sum_v c(v) l(v) over real nodes (B,)."""
    return masked_mean(per_node_loss * weights, node_mask, -1)


def rollout_consistency_loss(
    start: Any,
    num_steps: int,
    step: Callable[[Any, int], Any],
    advance: Callable[[Any, Any], Any],
    step_loss: Callable[[Any, int], tuple[torch.Tensor, torch.Tensor]],
    members: int = 0,
) -> torch.Tensor:
    """k-step teacher-free rollout loss: mean over valid (item, j), j = 1..k, of the loss of the
    j-th rolled-out prediction against the observed state j steps ahead.

    Args:
        start: the states to roll out from (observed, teacher-forced only at j = 0).
        num_steps: k.
        step: ``step(state, j) -> prediction`` for rollout step j (uses the j-th action).
        advance: ``advance(state, prediction) -> next state`` (differentiable, i.e. built from
            predicted values and probabilities; never from observations).
        step_loss: ``step_loss(prediction, j) -> (loss (M,), valid (M,) bool)``.
        members: > 0 when the M items are the folded items of that many members (member-major):
            the mean is then per member.
    Returns a scalar (0 when nothing is valid), or (K,) per member.
    """
    if num_steps < 1:
        raise ValueError(f"rollout length k must be >= 1, got {num_steps}")
    state = start
    total = None
    count = None
    for j in range(1, num_steps + 1):
        pred = step(state, j)
        loss, valid = step_loss(pred, j)
        v = valid.to(loss.dtype)
        if members:
            s, c = member_reduce(loss * v, members).sum(-1), member_reduce(v, members).sum(-1)
        else:
            s, c = (loss * v).sum(), v.sum()
        total = s if total is None else total + s
        count = c if count is None else count + c
        if j < num_steps:
            state = advance(state, pred)
    assert total is not None and count is not None  # num_steps >= 1
    return total / count.clamp_min(1.0)
