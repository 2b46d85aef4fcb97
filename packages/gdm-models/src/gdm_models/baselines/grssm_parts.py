"""G-RSSM's configuration, latent and layers (:mod:`.grssm` has the model): the all-pairs
attention of its recurrent update and the dense GNN layers of its observation encoder."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ..config_checks import check_config_types
from ..layers import EPS, one_hot

__all__ = [
    "ATTENTION_BUDGET_BYTES",
    "AllPairsAttention",
    "DenseGNNLayer",
    "GRSSMConfig",
    "GRSSMLatent",
    "attention_key_bias",
]

#: bytes of attention scores (B x heads x query block x N) per call, by device type; a block
#: of queries is used only when all N queries would exceed it (e.g. imagination at large N).
ATTENTION_BUDGET_BYTES: dict[str, int] = {"cuda": 256 * 2**20, "cpu": 32 * 2**20}
_OTHER_DEVICE_BUDGET = 64 * 2**20


@dataclass
class GRSSMConfig:
    """Hyperparameters of G-RSSM (paper, final hyperparameter table).

    Attributes:
        embed_dim: dim(e), observation-embedding width.
        hidden_dim: dim(h).
        latent_groups, latent_classes: dim(z) = groups x classes (8 x 8).
        mp_layers: L, rounds of all-pairs message passing in the recurrent update.
        encoder_layers: GNN layers of the observation encoder.
        attn_heads: attention heads (must divide hidden_dim).
        beta_adj, beta_dyn, beta_rep, beta_pred: loss weights; free_bits: KL floor (nats).
        unimix: uniform mixture of every latent categorical.
        adj_bias: add a learned scalar to the adjacency logit (see module docstring).
        attn_chunk: query block size of the all-pairs attention (memory O(chunk x N)); 0 (the
            default) sizes the block from :data:`ATTENTION_BUDGET_BYTES` of the device.
    """

    embed_dim: int = 128
    hidden_dim: int = 128
    latent_groups: int = 8
    latent_classes: int = 8
    mp_layers: int = 1
    encoder_layers: int = 1
    attn_heads: int = 4
    beta_adj: float = 1.0
    beta_dyn: float = 1.0
    beta_rep: float = 0.1
    beta_pred: float = 1.0
    free_bits: float = 0.01
    unimix: float = 0.01
    adj_bias: bool = True
    attn_chunk: int = 0

    def __post_init__(self) -> None:
        check_config_types(self)  # types first: 8.5, True or '0.1' named, not compared
        for name in ("embed_dim", "hidden_dim", "latent_groups", "attn_heads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.attn_chunk < 0:
            raise ValueError(f"attn_chunk must be >= 0 (0 = memory budget), got {self.attn_chunk}")
        if self.latent_classes < 2:
            raise ValueError("latent_classes must be >= 2")
        if self.mp_layers < 0 or self.encoder_layers < 0:
            raise ValueError("mp_layers and encoder_layers must be >= 0")
        if self.hidden_dim % self.attn_heads:
            raise ValueError(
                f"attn_heads={self.attn_heads} must divide hidden_dim={self.hidden_dim}"
            )
        for name in ("beta_adj", "beta_dyn", "beta_rep", "beta_pred", "free_bits"):
            v = getattr(self, name)
            if not (isinstance(v, int | float) and np.isfinite(v) and v >= 0):
                raise ValueError(f"{name} must be a finite number >= 0, got {v!r}")
        if not 0 <= self.unimix < 1:
            raise ValueError("unimix must be in [0, 1)")


@dataclass
class GRSSMLatent:
    """Posterior state after the last observation of a trajectory (one graph, N nodes).

    Attributes:
        h: (N, hidden_dim) deterministic state.
        posterior: (N, groups, classes) posterior probabilities of z at the last step;
            imagination draws one z per sample from it.
    """

    h: torch.Tensor
    posterior: torch.Tensor

    @property
    def num_nodes(self) -> int:
        """N."""
        return self.h.shape[0]


def _onehot_st(probs: torch.Tensor, gumbel: torch.Tensor) -> torch.Tensor:
    """:func:`~gdm_models.layers.sample_onehot_st` given the Gumbel noise: forward the one-hot of
    argmax(log p + g), gradient that of ``probs`` (:func:`~gdm_models.layers.one_hot` instead of
    ``F.one_hot``, which checks its input range on the host)."""
    idx = (torch.log(probs.clamp_min(EPS)) + gumbel).argmax(dim=-1)
    onehot = one_hot(idx, probs.shape[-1], probs.dtype)
    return onehot + probs - probs.detach()


def _mlp(i: int, hidden: int, o: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(i, hidden), nn.LayerNorm(hidden), nn.SiLU(), nn.Linear(hidden, o)
    )


class AllPairsAttention(nn.Module):
    """Multi-head dot-product attention from every real node to every real node (incl. itself).

    All heads in one fused ``scaled_dot_product_attention`` call. Queries are split into blocks
    only when the scores of all N queries exceed the memory budget: ``chunk`` query rows if
    ``chunk > 0``, else as many rows as fit in :data:`ATTENTION_BUDGET_BYTES` of the device.
    """

    def __init__(self, dim: int, heads: int, chunk: int = 0) -> None:
        super().__init__()
        self.heads, self.chunk = heads, chunk
        self.qkv = nn.Linear(dim, 3 * dim)
        self.out = nn.Linear(dim, dim)

    def query_block(self, batch: int, n: int, dtype: torch.dtype, device: torch.device) -> int:
        """Number of query rows per attention call (``n`` = all at once)."""
        if self.chunk > 0:
            return min(self.chunk, n)
        budget = ATTENTION_BUDGET_BYTES.get(device.type, _OTHER_DEVICE_BUDGET)
        row_bytes = batch * self.heads * n * torch.finfo(dtype).bits // 8
        return max(1, min(n, budget // max(row_bytes, 1)))

    def forward(self, x: torch.Tensor, node_mask: torch.Tensor) -> torch.Tensor:
        """x (B,N,D), node_mask (B,N) bool -> (B,N,D)."""
        return self.attend(x, attention_key_bias(node_mask, x.dtype))

    def attend(self, x: torch.Tensor, key_bias: torch.Tensor) -> torch.Tensor:
        """:meth:`forward` given the additive key mask (B,1,1,N) of
        :func:`attention_key_bias` (built once per pass, not at every recurrent step)."""
        B, N, D = x.shape
        H = self.heads
        q, k, v = self.qkv(x).view(B, N, 3, H, D // H).permute(2, 0, 3, 1, 4)
        rows = self.query_block(B, N, x.dtype, x.device)
        attend = F.scaled_dot_product_attention
        if rows >= N:
            o = attend(q, k, v, attn_mask=key_bias)
        else:
            blocks = [q[:, :, s : s + rows] for s in range(0, N, rows)]
            o = torch.cat([attend(b, k, v, attn_mask=key_bias) for b in blocks], dim=2)
        return self.out(o.transpose(1, 2).reshape(B, N, D))


def attention_key_bias(node_mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive attention mask (B,1,1,N): 0 for real keys, -inf for padded ones (the float
    form of the boolean key mask, built once per pass instead of once per call).

    The rows are allocated 16-aligned (a view of a (B,1,1,16k) buffer) so that the fused CUDA
    attention kernels take the mask as is instead of padding a copy at every call."""
    N = node_mask.shape[-1]
    n_pad = -(-N // 16) * 16
    zero = torch.zeros((), dtype=dtype, device=node_mask.device)
    bias = torch.where(node_mask, zero, float("-inf"))[:, None, None, :]
    # out of place (no masked_fill_ into a fresh buffer), so that torch.func.vmap batches it
    return F.pad(bias, (0, n_pad - N))[..., :N]


class DenseGNNLayer(nn.Module):
    """e <- LayerNorm(e + SiLU(W_root e + W_nb mean_{u in N(v)} e(u))) on a dense adjacency."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.root = nn.Linear(dim, dim)
        self.neigh = nn.Linear(dim, dim, bias=False)
        self.norm = nn.LayerNorm(dim)

    def forward(self, e: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        deg = adj.sum(-1, keepdim=True)
        agg = (adj @ e) / deg.clamp_min(1.0)
        return self.norm(e + F.silu(self.root(e) + self.neigh(agg)))
