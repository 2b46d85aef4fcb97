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

from .member_ops import loop_bias, loop_norm, member_mm

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
    "split_first_layer",
    "MLPTail",
    "FusedLinear",
    "gru_hidden_blocks",
    "unimix_lerp",
    "onehot_st_gumbel",
    "block_addmm",
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


# ---------------------------------------------------------------- fused forms for a recurrence
# The training recurrence (gdm_models.gdm.step) runs these layers' maps T times on small
# tensors, where the cost is the number of ops: the forms below compute the same maps with
# fewer ops. Each is tested against its plain module form (tests/test_fused_layers.py). They
# also take member-stacked weights ([K, in, out], gdm_models.member_layers) and then states
# shaped (K, rows, d).


def split_first_layer(mlp: MLP, sizes: list[int]) -> tuple[tuple[torch.Tensor, ...], torch.Tensor]:
    """The first linear map of a one-hidden-layer :class:`MLP` on a concatenated input, split
    by the input's parts ``sizes``: ``[x, y] W^T + b = x W_x^T + y W_y^T + b``. Returns the
    column blocks W_x, W_y, ... (views of the parameter, (out, size_k)) and the bias."""
    first = mlp.net[0]
    assert len(mlp.net) == 4  # Linear, LayerNorm, SiLU, Linear (or their member versions)
    weight, bias = first.weight, first.bias
    assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
    return weight.split(sizes, -1), bias


class MLPTail:
    """The rest of a one-hidden-layer :class:`MLP` after its first linear map (LayerNorm,
    SiLU, Linear) with the last weight transposed and the member shapes made once, for a
    recurrence: ``MLPTail(mlp)(x) == mlp.net[3](mlp.net[2](mlp.net[1](x)))``."""

    def __init__(self, mlp: MLP) -> None:
        last = mlp.net[3]
        weight, bias = last.weight, last.bias
        assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
        self.norm = loop_norm(mlp.net[1])
        self.weight_t, self.bias = weight.transpose(-1, -2), loop_bias(bias, weight)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return member_mm(F.silu(self.norm(x)), self.weight_t, self.bias)


class FusedLinear:
    """Several linear maps that read the same input, as one product: ``x [W_1 | W_2 | ...] +
    [b_1 | b_2 | ...]`` split back into the maps' outputs. ``blocks``: the maps' transposed
    weights (in, out_k) (or member-stacked [K, in, out_k]) and biases (``None``: no bias; all
    ``None``: a product without bias). ``FusedLinear(blocks)(x)[k] == x W_k + b_k``."""

    def __init__(self, blocks: list[tuple[torch.Tensor, torch.Tensor | None]]) -> None:
        self.sizes = [w.shape[-1] for w, _ in blocks]
        weight = torch.cat([w for w, _ in blocks], -1)
        bias = None
        if any(b is not None for _, b in blocks):
            lead = weight.shape[:-2]  # (K,) for member-stacked weights
            bias = torch.cat(
                [weight.new_zeros(*lead, w.shape[-1]) if b is None else b for w, b in blocks], -1
            )
        self.weight, self.bias = weight, loop_bias(bias, weight)

    def __call__(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return member_mm(x, self.weight, self.bias).split(self.sizes, -1)


def gru_hidden_blocks(cell: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """The hidden map (W_hh^T, b_hh) of a GRU cell as its (r, z) and n blocks, for a
    :class:`FusedLinear` (then :func:`gru_from_split_gates` takes the two outputs)."""
    hid = int(cell.hidden_size)  # type: ignore[arg-type]
    weight, bias = cell.weight_hh, cell.bias_hh
    assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
    w = weight.transpose(-1, -2).split([2 * hid, hid], -1)
    b = bias.split([2 * hid, hid], -1)
    return [(w[0], b[0]), (w[1], b[1])]


def unimix_lerp(
    logits: torch.Tensor, unimix: float, uniforms: dict[tuple[torch.dtype, int], torch.Tensor]
) -> torch.Tensor:
    """:func:`unimix_probs` as one ``lerp`` towards the uniform probability: p + u (1/C - p)
    = (1 - u) p + u / C. ``uniforms`` caches the 0-d tensors 1/C per (dtype, C) (``lerp``
    does not promote types, and autocast may change the probabilities' dtype)."""
    probs = torch.softmax(logits, dim=-1)
    if unimix <= 0:
        return probs
    key = (probs.dtype, probs.shape[-1])
    if key not in uniforms:
        uniforms[key] = probs.new_full((), 1.0 / probs.shape[-1])
    return torch.lerp(probs, uniforms[key], unimix)


def onehot_st_gumbel(
    probs: torch.Tensor, gumbel: torch.Tensor, classes: torch.Tensor
) -> torch.Tensor:
    """:func:`sample_onehot_st` given the Gumbel noise and ``arange(C)`` (made once)."""
    idx = (torch.log(probs.clamp_min(EPS)) + gumbel).argmax(dim=-1)
    onehot = (idx[..., None] == classes).to(probs.dtype)
    return onehot + probs - probs.detach()


def block_addmm(rows: torch.Tensor, mat: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``rows + mat @ x`` for a pooling or broadcasting matrix ``mat``; a 3-d ``mat`` [K, r,
    c] (a member model) multiplies each member's rows only (one ``baddbmm``)."""
    if mat.dim() == 2:
        return torch.addmm(rows, mat, x)
    k = mat.shape[0]
    r3 = rows if rows.dim() == 3 else rows.view(k, -1, rows.shape[-1])
    x3 = x if x.dim() == 3 else x.view(k, -1, x.shape[-1])
    y = torch.baddbmm(r3, mat, x3)
    return y if rows.dim() == 3 else y.view(rows.shape)
