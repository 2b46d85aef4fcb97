"""The GDM's latent state and its noise source (paper, section "Graph Dynamics Model").

Per node v: deterministic state h(v) and categorical stochastic state z(v); for the graph: h_g,
z_g; plus the recurrent adjacency A_t (:class:`GDMLatent`). Every uniform of a forward pass
comes from one :class:`Noise` source, keyed by name, so that tests can replay it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from ..adjacency import symmetric_uniform

__all__ = ["GDMLatent", "Noise", "SPARSE_MAX_DENSITY", "permute_noise"]


@dataclass
class GDMLatent:
    """Latent state of B graphs with N nodes (B = 1 after ``observe``, S in imagination).

    ``h_n`` (B,N,H), ``z_n`` (B,N,Gn*Cn) one-hot, ``h_g`` (B,H) and ``z_g`` (B,Gg*Cg) (zero
    width without graph state), ``adjacency`` (B,N,N) float 0/1 (A_t).
    """

    h_n: torch.Tensor
    z_n: torch.Tensor
    h_g: torch.Tensor
    z_g: torch.Tensor
    adjacency: torch.Tensor

    @property
    def batch_size(self) -> int:
        """B."""
        return self.h_n.shape[0]

    @property
    def num_nodes(self) -> int:
        """N."""
        return self.h_n.shape[1]

    def expand(self, s: int) -> GDMLatent:
        """Repeat a B = 1 latent S times."""
        if self.batch_size == s:
            return self
        if self.batch_size != 1:
            raise ValueError(f"cannot expand a latent with batch {self.batch_size} to {s}")
        return GDMLatent(
            *(t.expand(s, *t.shape[1:]).contiguous() for t in dataclasses.astuple(self))
        )

    def detach(self) -> GDMLatent:
        """Detached copy."""
        return GDMLatent(*(t.detach() for t in dataclasses.astuple(self)))


class Noise:
    """Source of all uniforms of a forward pass, keyed by name (``"<t>/<what>"``).

    Draws from ``generator``; records every draw in ``record``; a ``replay`` dict supplies
    given tensors instead (used to test permutation equivariance with fixed randomness).
    """

    def __init__(
        self,
        generator: torch.Generator | None,
        device: torch.device,
        replay: Mapping[str, torch.Tensor] | None = None,
        blocks: Sequence[torch.Generator] = (),
    ) -> None:
        self.generator, self.device = generator, device
        self.replay = dict(replay or {})
        self.record: dict[str, torch.Tensor] = {}
        #: one generator per equal block of the leading (batch) axis: block k of every draw
        #: comes from ``blocks[k]`` with the block's shape, so a batch of independent problems
        #: draws what each would draw alone (``GDM.imagine_batch``)
        self.blocks = tuple(blocks)

    def uniform(self, key: str, shape: tuple[int, ...], symmetric: bool = False) -> torch.Tensor:
        """Uniforms of ``shape`` ((..., N, N) with one draw per unordered pair if symmetric)."""
        if key in self.replay:
            u = self.replay[key]
            if tuple(u.shape) != tuple(shape):
                raise ValueError(f"replayed noise {key!r} has shape {tuple(u.shape)} != {shape}")
        elif self.blocks:
            k = len(self.blocks)
            if shape[0] % k:
                raise ValueError(f"noise {key!r}: batch {shape[0]} is not {k} equal blocks")
            block = (shape[0] // k, *shape[1:])
            draw = symmetric_uniform if symmetric else _rand
            u = torch.cat([draw(block, g, self.device) for g in self.blocks])
        elif symmetric:
            u = symmetric_uniform(shape, self.generator, self.device)
        else:
            u = torch.rand(shape, generator=self.generator, device=self.device)
        self.record[key] = u
        return u


def _rand(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device | str
) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=device)


#: largest edge density for which message passing uses the sparse (PyG) backend
SPARSE_MAX_DENSITY = 0.05

_NODE_AXIS_NOISE = ("zn_prior", "zn_post", "out_node_cat", "out_action_mask")


def permute_noise(
    record: Mapping[str, torch.Tensor], perm: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Permute the node axes of recorded noise: new node k takes old node ``perm[k]``."""
    out = {}
    for key, u in record.items():
        name = key.split("/", 1)[1]
        if name == "adj":
            out[key] = u[:, perm][:, :, perm]
        elif name.startswith(_NODE_AXIS_NOISE):
            out[key] = u[:, perm]
        else:
            out[key] = u
    return out
