"""The member axis: K models with the same architecture as one module (issues 27 and 36).

This module owns it: the interface a model implements to train its K seeds as one
(:class:`MemberModel`), the member layers that hold the K members' weights on a leading axis,
and :func:`stack_members`, which builds the member model from K ordinary ones.

A model opts in by construction: its class inherits :class:`MemberModel` (GDM, G-RSSM,
Vanilla / EA-GWM: ``class GDM(WorldModel, MemberModel)``) and implements
:meth:`MemberModel.member_loss` (and, for a stochastic model, :meth:`MemberModel.member_noise`
and :meth:`MemberModel.pad_member_noise`). The training engines ask
``isinstance(model, MemberModel)``; a model that does not inherit it (e.g. one registered by
another package) trains its ensembles member by member (the loop engine).

An ensemble of K seeds of one configuration trains as one *member model*
(:func:`stack_members`): a deep copy of member 0 whose parameterised leaf modules are replaced
by member versions holding the K members' parameters stacked on a new leading axis ([K, ...]).
Every tensor of the model's forward pass keeps the members folded into its leading (batch)
axis, member-major: rows ``[k * B, (k + 1) * B)`` belong to member k. A member layer views its
input as [K, rows, ...] and applies member k's parameters to member k's rows in one batched
kernel:

* :class:`MemberLinear` - ``x W_k^T + b_k`` by one ``torch.baddbmm`` (weight [K, out, in]);
* :class:`MemberLayerNorm` - LayerNorm without affine, then the per-member gain and bias;
* :class:`MemberEmbedding` - one lookup in the members' tables laid end to end;
* :class:`MemberGRUCell` - the GRU cell as explicit products
  (:func:`~gdm_models.layers.gru_from_gates`) with per-member weights.

The parameter names equal those of the replaced ``torch.nn`` modules, so member k's slice of
every parameter and buffer (:func:`member_state`) is an ordinary state dict of the single model,
and a member model's ``parameters()`` lists the parameters in the single model's order (an
Adam state dict of the member model slices into single-model Adam state dicts). Parameters a
model holds directly (not in a leaf module above) are stacked as they are; a
:class:`MemberModel` reads them, and any weight it uses outside its module, through
:mod:`gdm_models.member_ops`, whose
functions leave a single model's computation untouched (the same ops on the same tensors, so a
single run stays bit-identical).

A tensor reaching a member layer must have the member-major folded batch leading
(``shape[0] % K == 0`` is checked; a time-major tensor would pass that check with the wrong
rows, which the ensemble-equals-single-runs tests catch).
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from .data import Batch
from .layers import gru_from_gates
from .member_ops import fold_rows, member_linear

__all__ = [
    "MemberModel",
    "MemberNoise",
    "PAD_UNIFORM",
    "pad_node_axis",
    "MemberLinear",
    "MemberLayerNorm",
    "MemberEmbedding",
    "MemberGRUCell",
    "MEMBER_LAYERS",
    "stack_members",
    "member_state",
    "MemberStackError",
]


#: a training step's uniforms for a member model, each with the batch axis first (``None``
#: where a configuration draws nothing)
MemberNoise = tuple[torch.Tensor | None, ...]

#: value of the uniforms of padded nodes in an ensemble's folded batch (finite, inside (0, 1);
#: padded nodes are masked out of every loss term)
PAD_UNIFORM = 0.5


def pad_node_axis(u: torch.Tensor, axis: int, n: int) -> torch.Tensor:
    """Pad axis ``axis`` (negative) of the uniforms ``u`` to ``n`` entries with
    :data:`PAD_UNIFORM` (``u`` itself when it has them)."""
    if u.shape[axis] == n:
        return u
    pad = [0, 0] * (-axis)
    pad[-1] = n - u.shape[axis]
    return F.pad(u, pad, value=PAD_UNIFORM)


class MemberModel(nn.Module, abc.ABC):
    """The interface of a model whose K seeds train as one member model (the ensemble's
    member engine, :class:`~gdm_models.training.engines.MemberEngine`).

    A model opts in by inheriting it beside :class:`~gdm_models.world_model.WorldModel`
    (``class GDM(WorldModel, MemberModel)``) and implementing :meth:`member_loss`; a stochastic
    model also implements :meth:`member_noise` and :meth:`pad_member_noise` (the defaults draw
    nothing: a deterministic model's). The engine stacks K such models
    (:func:`stack_members`), folds the members' batches into one batch, member-major, and
    calls these three methods on the stacked copy; the model's own code must read every
    weight used outside its module through :mod:`gdm_models.member_ops` (the plain op for an
    ordinary model, the per-member op for a stacked weight) and take every mean per member
    (:func:`~gdm_models.member_ops.member_reduce`).
    """

    def member_noise(self, shape: tuple[int, int, int], generator: torch.Generator) -> MemberNoise:
        """The uniforms one training step draws for a batch of ``shape`` = (B, L, N) (the
        member's own batch and node count), in the order and shapes of the single run, so that
        member k draws the single run's numbers (on the generator's device). Each tensor has
        the batch axis first (the engine concatenates the members' noise on it). Default: no
        noise (a deterministic model)."""
        return ()

    def pad_member_noise(self, noise: MemberNoise, num_nodes: int) -> MemberNoise:
        """``noise`` (:meth:`member_noise`) with its node axes padded to ``num_nodes``
        (:func:`pad_node_axis`; padded nodes are masked out of every loss term). Default:
        ``noise``."""
        return noise

    @abc.abstractmethod
    def member_loss(
        self, batch: Batch, noise: MemberNoise, members: int
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """For a member model (:func:`stack_members`) of ``members`` = K members: the K losses
        (K,) and the logged terms, each (K,), on ``batch``, the members' batches padded to one
        node count and concatenated member-major, with ``noise`` the members'
        :meth:`member_noise` padded and concatenated likewise. Member k's loss is its single
        run's ``training_loss`` (up to float rounding), so the gradient of the sum is each
        member's own."""


class MemberStackError(TypeError):
    """Raised when models cannot be stacked into one member model (the reason is the message)."""


def _stack(params: Sequence[torch.Tensor]) -> nn.Parameter:
    """The members' parameters stacked on a new leading axis (trainable as the first one)."""
    stacked = torch.stack([p.detach() for p in params]).contiguous()
    return nn.Parameter(stacked, requires_grad=params[0].requires_grad)


class MemberLinear(nn.Module):
    """K :class:`torch.nn.Linear` maps: weight [K, out, in], bias [K, out] (or none); input
    (K*R, ..., in), member-major."""

    def __init__(self, layers: Sequence[nn.Linear]) -> None:
        super().__init__()
        self.in_features, self.out_features = layers[0].in_features, layers[0].out_features
        self.weight = _stack([m.weight for m in layers])
        self.bias = _stack([m.bias for m in layers]) if layers[0].bias is not None else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return member_linear(x, self.weight, self.bias)


class MemberLayerNorm(nn.Module):
    """K :class:`torch.nn.LayerNorm` over the last axis: the normalisation without affine,
    then ``x * weight_k + bias_k``."""

    def __init__(self, layers: Sequence[nn.LayerNorm]) -> None:
        super().__init__()
        first = layers[0]
        if len(first.normalized_shape) != 1 or not first.elementwise_affine:
            raise MemberStackError("member LayerNorm: one normalised axis with an affine map only")
        self.normalized_shape = tuple(first.normalized_shape)
        self.eps = first.eps
        self.weight = _stack([m.weight for m in layers])
        self.bias = _stack([m.bias for m in layers])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k, d = self.weight.shape
        y = fold_rows(F.layer_norm(x, self.normalized_shape, eps=self.eps), k, -1, d)
        # a product and a sum (fewer ops in the backward pass than one addcmul)
        y = y * self.weight.unsqueeze(1) + self.bias.unsqueeze(1)
        return y if y.shape == x.shape else y.view(x.shape)


class MemberEmbedding(nn.Module):
    """K :class:`torch.nn.Embedding` tables: weight [K, num, dim]; indices (K*R, ...)."""

    def __init__(self, layers: Sequence[nn.Embedding]) -> None:
        super().__init__()
        first = layers[0]
        if first.padding_idx is not None or first.max_norm is not None:
            raise MemberStackError("member Embedding: no padding_idx or max_norm")
        self.num_embeddings, self.embedding_dim = first.num_embeddings, first.embedding_dim
        self.weight = _stack([m.weight for m in layers])

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        k = self.weight.shape[0]
        offset = torch.arange(k, device=idx.device) * self.num_embeddings
        flat = fold_rows(idx, k) + offset.view(k, *([1] * idx.dim()))
        return F.embedding(flat, self.weight.reshape(-1, self.embedding_dim)).reshape(
            *idx.shape, self.embedding_dim
        )


class MemberGRUCell(nn.Module):
    """K :class:`torch.nn.GRUCell` as explicit products (:func:`gru_from_gates`): weights
    [K, 3H, in] and [K, 3H, H], biases [K, 3H]; the same numbers as each member's cell up to
    float rounding (the fused kernel sums in another order)."""

    def __init__(self, cells: Sequence[nn.GRUCell]) -> None:
        super().__init__()
        first = cells[0]
        if first.bias_ih is None:
            raise MemberStackError("member GRU cell: a cell with biases only")
        self.input_size, self.hidden_size = first.input_size, first.hidden_size
        self.weight_ih = _stack([c.weight_ih for c in cells])
        self.weight_hh = _stack([c.weight_hh for c in cells])
        self.bias_ih = _stack([c.bias_ih for c in cells])
        self.bias_hh = _stack([c.bias_hh for c in cells])

    def gates(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        """``x W_k^T + b_k`` of member k's rows of ``x`` (K*R, D) -> (K*R, 3H)."""
        return member_linear(x, weight, bias)

    def forward(self, input: torch.Tensor, hx: torch.Tensor | None = None) -> torch.Tensor:
        if hx is None:
            hx = input.new_zeros(input.shape[0], self.hidden_size)
        gi = self.gates(input, self.weight_ih, self.bias_ih)
        return gru_from_gates(gi, hx, self.gates(hx, self.weight_hh, self.bias_hh))


#: leaf module type -> its member version (exact types: a subclass may compute otherwise)
MEMBER_LAYERS: dict[type[nn.Module], Callable[[Sequence[nn.Module]], nn.Module]] = {
    nn.Linear: MemberLinear,  # type: ignore[dict-item]
    nn.LayerNorm: MemberLayerNorm,  # type: ignore[dict-item]
    nn.Embedding: MemberEmbedding,  # type: ignore[dict-item]
    nn.GRUCell: MemberGRUCell,  # type: ignore[dict-item]
}


M = TypeVar("M", bound=nn.Module)


def stack_members(models: Sequence[M]) -> M:
    """One member model of ``models`` (same class and architecture): a deep copy of
    ``models[0]`` whose leaf modules of :data:`MEMBER_LAYERS` hold the K members' parameters
    stacked ([K, ...]) and whose other parameters and buffers are stacked likewise. The
    models are not changed. Its attribute ``member_count`` is K.

    Raises:
        MemberStackError: when the models differ in structure or a module cannot be stacked.
    """
    if not models:
        raise ValueError("stack_members needs at least one model")
    names = [n for n, _ in models[0].named_modules()]
    for m in models[1:]:
        if [n for n, _ in m.named_modules()] != names or type(m) is not type(models[0]):
            raise MemberStackError("the members differ in their module structure")
    out = copy.deepcopy(models[0])
    for name, module in list(out.named_modules()):
        maker = MEMBER_LAYERS.get(type(module))
        if maker is not None:
            layer = maker([m.get_submodule(name) for m in models])
            parent, _, attr = name.rpartition(".")
            setattr(out.get_submodule(parent) if parent else out, attr, layer)
    replaced = {n for n, m in out.named_modules() if type(m) in MEMBER_LAYERS.values()}
    for name, module in out.named_modules():
        if name in replaced:
            continue
        sources = [m.get_submodule(name) for m in models]
        for pname, _ in list(module.named_parameters(recurse=False)):
            setattr(module, pname, _stack([getattr(s, pname) for s in sources]))
        for bname, b in list(module.named_buffers(recurse=False)):
            if b is not None:
                module.register_buffer(
                    bname,
                    torch.stack([getattr(s, bname) for s in sources]).clone(),
                    persistent=bname not in module._non_persistent_buffers_set,
                )
    out.member_count = len(models)  # type: ignore[assignment]
    return out


def member_state(member_model: nn.Module, i: int) -> dict[str, torch.Tensor]:
    """Member ``i``'s slice of every parameter and buffer: a state dict of the single model."""
    return {n: v[i].detach().clone() for n, v in member_model.state_dict().items()}
