"""The GDM's latent state and its noise source (paper, section "Graph Dynamics Model").

Per node v: deterministic state h(v) and categorical stochastic state z(v); for the graph: h_g,
z_g; plus the recurrent adjacency A_t (:class:`GDMLatent`). Every uniform of a forward pass
comes from one :class:`Noise` source, keyed by name, so that tests can replay it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch

from ..adjacency import symmetric_uniform

__all__ = [
    "PriorNoise",
    "PosteriorSequence",
    "GDMLatent",
    "Noise",
    "SPARSE_MAX_DENSITY",
    "NEIGHBOURS_MAX_DENSITY",
    "permute_noise",
]


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
        return GDMLatent(*(t.expand(s, *t.shape[1:]).contiguous() for t in self.tensors()))

    def detach(self) -> GDMLatent:
        """Detached copy."""
        return GDMLatent(*(t.detach() for t in self.tensors()))

    def tensors(self) -> tuple[torch.Tensor, ...]:
        """The fields in order, the tensors themselves (``dataclasses.astuple`` would
        deep-copy each: 0.17 s for 30 latents at N = 1000)."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


class PriorNoise(NamedTuple):
    """The uniforms of one prior step of M graphs: ``u_zg`` (M, Gg, Cg) (None without graph
    state), ``u_adj`` (M, N, N) symmetric (None without the recurrent adjacency), ``u_zn``
    (M, N, Gn, Cn)."""

    u_zg: torch.Tensor | None
    u_adj: torch.Tensor | None
    u_zn: torch.Tensor


@dataclass
class PosteriorSequence:
    """The posterior pass's observation-, action- and noise-only inputs over T steps (what a
    posterior step's ``inputs`` takes, the same for every backend): ``a_emb`` (B,T,N,E) action
    embeddings, ``a_pool`` (B,T,E) their pools, ``e_v`` (B,T,N,E), ``e_g`` (B,T,E), ``alpha``
    (B,T,N,N) normalised weights of the observed A_t (or (B,N,N), the same at every step),
    ``u_zg`` (B,T,Gg,Cg) (None without graph state) and ``u_zn`` (B,T,N,Gn,Cn) uniforms."""

    a_emb: torch.Tensor
    a_pool: torch.Tensor
    e_v: torch.Tensor
    e_g: torch.Tensor
    alpha: torch.Tensor
    u_zg: torch.Tensor | None
    u_zn: torch.Tensor

    def fields(self) -> tuple[Any, ...]:
        """The inputs in the order above."""
        return tuple(getattr(self, f.name) for f in dataclasses.fields(self))


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


#: largest edge density for which message passing on a hard adjacency uses the sparse (PyG)
#: backend, per device type. CPU: measured crossover (one thread, 30 graphs, hidden 128, two
#: layers): at N = 1000 sparse 210 / dense 419 ms at density 0.2%, 385 / 392 at 0.5%, 720 /
#: 440 at 1%, 1553 / 325 at 3%; at N = 300 about equal at 1%, 221 / 62 at 3% (docs/models.md,
#: "Imagination"). Other devices: 5%, not measured.
SPARSE_MAX_DENSITY: dict[str, float] = {"cpu": 0.005, "cuda": 0.05, "other": 0.05}

#: largest edge density for which message passing on a hard adjacency on the CPU without
#: autograd takes the compiled neighbour lists
#: (:meth:`~gdm_models.message_passing.GraphMessagePassing.forward_neighbours`: the sparse
#: backend's numbers bit for bit). Measured crossover with the dense product (same setting as
#: above): N = 1000 139 / 404 ms at 2%, 249 / 403 at 10%, 479 / 449 at 30%; N = 200 23 / 39 at
#: 10%, 37 / 34 at 30%
NEIGHBOURS_MAX_DENSITY = 0.2

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
