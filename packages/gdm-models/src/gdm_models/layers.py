"""Generic network layers: LayerNorm-GRU, MLPs and categorical latents, shared by the GDM and
the baselines (paper, "Background" and "Recurrent Dynamics and Posterior-Informed Deterministic
State").

Categorical latents are ``groups x classes`` one-hot vectors; every categorical distribution
mixes 1% of a uniform distribution into its probabilities ("unimix", DreamerV3) and samples
are straight-through one-hot vectors (forward: the one-hot sample, backward: the gradient of
the probabilities).
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = [
    "MLP",
    "LayerNormGRU",
    "CategoricalHead",
    "unimix_probs",
    "gumbel_from_uniform",
    "sample_onehot_st",
    "categorical_kl",
    "EPS",
    "one_hot",
]

#: probability floor before a log (categorical samples and KLs)
EPS = 1e-7


class MLP(nn.Module):
    """``Linear -> LayerNorm -> SiLU`` (``layers`` times) ``-> Linear``."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int = 1) -> None:
        super().__init__()
        mods: list[nn.Module] = []
        d = in_dim
        for _ in range(layers):
            mods += [nn.Linear(d, hidden), nn.LayerNorm(hidden), nn.SiLU()]
            d = hidden
        mods.append(nn.Linear(d, out_dim))
        self.net = nn.Sequential(*mods)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class LayerNormGRU(nn.Module):
    """h_t = LayerNorm(GRU(x_t | h_{t-1})) over arbitrary leading axes."""

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(in_dim, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        lead = h.shape[:-1]
        out = self.cell(x.reshape(-1, x.shape[-1]), h.reshape(-1, h.shape[-1]))
        return self.norm(out).reshape(*lead, -1)


def unimix_probs(logits: torch.Tensor, unimix: float) -> torch.Tensor:
    """Probabilities ``(1 - unimix) softmax(logits) + unimix / C`` over the last axis."""
    probs = torch.softmax(logits, dim=-1)
    if unimix > 0:
        probs = (1.0 - unimix) * probs + unimix / logits.shape[-1]
    return probs


def gumbel_from_uniform(u: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise from uniforms in (0, 1)."""
    u = u.clamp(EPS, 1.0 - EPS)
    return -torch.log(-torch.log(u))


def one_hot(idx: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """``F.one_hot(idx, num_classes).to(dtype)`` as a comparison with ``arange``: the same
    numbers without ``F.one_hot``'s range check on the host, which ``torch.func.vmap`` of
    ``grad`` (ensemble training) cannot run. ``idx`` must lie in ``[0, num_classes)``."""
    return (idx[..., None] == torch.arange(num_classes, device=idx.device)).to(dtype)


def sample_onehot_st(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Straight-through one-hot sample from ``probs`` (last axis) using uniforms ``u``.

    The forward value is the one-hot vector of ``argmax(log p + Gumbel(u))`` (an exact
    categorical sample); the gradient is that of ``probs``.
    """
    idx = (torch.log(probs.clamp_min(EPS)) + gumbel_from_uniform(u)).argmax(dim=-1)
    onehot = one_hot(idx, probs.shape[-1], probs.dtype)
    return onehot + probs - probs.detach()


def categorical_kl(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """KL(q || p) of factorised categoricals (..., groups, classes), summed over groups."""
    kl = q * (torch.log(q.clamp_min(EPS)) - torch.log(p.clamp_min(EPS)))
    return kl.sum(dim=(-1, -2))


class CategoricalHead(nn.Module):
    """MLP producing ``groups x classes`` unimix probabilities."""

    def __init__(self, in_dim: int, hidden: int, groups: int, classes: int, unimix: float) -> None:
        super().__init__()
        self.groups, self.classes, self.unimix = groups, classes, unimix
        self.mlp = MLP(in_dim, hidden, groups * classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits = self.mlp(x).reshape(*x.shape[:-1], self.groups, self.classes)
        return unimix_probs(logits, self.unimix)
