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
import torch.nn.functional as F
from torch import nn

__all__ = [
    "MLP",
    "LayerNormGRU",
    "gru_from_gates",
    "gru_from_split_gates",
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


def gru_from_gates(gi: torch.Tensor, h: torch.Tensor, gh: torch.Tensor) -> torch.Tensor:
    """The GRU update of :class:`torch.nn.GRUCell` from its two linear maps, written out:
    ``gi = x W_ih^T + b_ih`` and ``gh = h W_hh^T + b_hh`` (``(..., 3H)``, gates r, z, n):

    r = sigmoid(gi_r + gh_r), z = sigmoid(gi_z + gh_z), n = tanh(gi_n + r * gh_n),
    h' = (1 - z) * n + z * h  (computed as n + (h - n) z, as the fused kernel does).

    The input gates may be computed for all time steps before a recurrence, and the maps may
    hold per-member weights (:class:`~gdm_models.member_layers.MemberGRUCell`)."""
    hid = h.shape[-1]
    gh_rz, gh_n = gh.split([2 * hid, hid], -1)
    return gru_from_split_gates(gi, h, gh_rz, gh_n)


def gru_from_split_gates(
    gi: torch.Tensor, h: torch.Tensor, gh_rz: torch.Tensor, gh_n: torch.Tensor
) -> torch.Tensor:
    """:func:`gru_from_gates` with ``gh`` given as its (r, z) and n parts (..., 2H), (..., H)."""
    hid = h.shape[-1]
    gi_rz, gi_n = gi.split([2 * hid, hid], -1)
    r, z = torch.sigmoid(gi_rz + gh_rz).split([hid, hid], -1)
    n = torch.tanh(gi_n + r * gh_n)
    return n + (h - n) * z


class LayerNormGRU(nn.Module):
    """h_t = LayerNorm(GRU(x_t | h_{t-1})) over arbitrary leading axes. :meth:`step` computes
    it from precomputed input gates, so that the input's part can be computed for all time
    steps before a recurrence."""

    def __init__(self, in_dim: int, hidden: int) -> None:
        super().__init__()
        self.cell = nn.GRUCell(in_dim, hidden)
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        lead = h.shape[:-1]
        x2, h2 = x.reshape(-1, x.shape[-1]), h.reshape(-1, h.shape[-1])
        return self.norm(self.cell(x2, h2)).reshape(*lead, -1)

    def step(self, gi: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """LayerNorm(GRU) from precomputed input gates ``gi = x W_ih^T + b_ih`` (..., 3H)."""
        c = self.cell
        return self.norm(gru_from_gates(gi, h, F.linear(h, c.weight_hh, c.bias_hh)))


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
