"""Member-aware tensor operations: the ops through which a model reads its parameters where
it does not call a module (issue 27; :mod:`gdm_models.member_layers` has the modules).

Each function does exactly what the plain op does for an ordinary model's parameter (the same
aten ops on the same tensors, so a single run stays bit-identical), and for a member-stacked
parameter ([K, ...], one more leading axis; :func:`gdm_models.member_layers.stack_members`)
applies member k's slice to member k's rows of the input, whose leading (batch) axis holds the
K members folded member-major (rows ``[k * R, (k + 1) * R)`` are member k's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "fold_rows",
    "member_count",
    "member_apply",
    "member_linear",
    "member_mm",
    "member_addmm",
    "expand_rows",
    "expand_like",
    "member_matmul",
    "member_reduce",
    "loop_norm",
    "loop_bias",
]


def fold_rows(x: torch.Tensor, k: int, *rest: int) -> torch.Tensor:
    """``x`` (K*R, ...) viewed as (K, R, ...) (or as (K, *rest) when ``rest`` is given):
    member k's rows on index k. A view when ``x`` is contiguous (one op)."""
    if x.shape[0] % k:
        raise ValueError(
            f"a member layer of K={k} members got a tensor of shape {tuple(x.shape)}: its "
            "leading (folded batch) axis is not a multiple of K"
        )
    if rest and x.dim() == len(rest) + 1 and x.shape[0] == k and x.shape[-1] == rest[-1]:
        return x  # already (K, rows, ...) (a member loop's 3-d state): no view
    shape = (k, *rest) if rest else (k, x.shape[0] // k, *x.shape[1:])
    return x.view(shape) if x.is_contiguous() else x.reshape(shape)


def _flat(y: torch.Tensor, *shape: int) -> torch.Tensor:
    if tuple(y.shape) == shape:
        return y
    return y.view(shape) if y.is_contiguous() else y.reshape(shape)


def _bias3(bias: torch.Tensor) -> torch.Tensor:
    """A member bias [K, out] as [K, 1, out] (given so, e.g. once before a loop: as it is)."""
    return bias if bias.dim() == 3 else bias.unsqueeze(1)


def member_count(module: nn.Module) -> int:
    """K of a member model (:func:`stack_members`); 0 for an ordinary model."""
    return int(getattr(module, "member_count", 0))


def expand_like(x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``e`` (..., dim) expanded to ``x``'s leading axes (for :func:`member_apply`)."""
    return e.expand(*x.shape[:-1], e.shape[-1])


def member_apply(
    op: Callable[..., torch.Tensor],
    x: torch.Tensor | tuple[torch.Tensor, ...],
    *params: torch.Tensor,
    ndim: int,
) -> torch.Tensor:
    """``op(x, *params)`` (``op(*x, *params)`` for a tuple ``x``) for parameters of ``ndim``
    axes that broadcast against the trailing axes of ``x`` (which has the result's number of
    axes). An ordinary model's parameters (``ndim`` axes) go to ``op`` as they are, the same
    ops as without this function; member-stacked ones ([K, ...], ``ndim + 1`` axes) meet
    member k's rows of ``x`` (folded batch leading, member-major). E.g. ``member_apply(lambda
    x, w, b: x * w + b, x, w, b, ndim=2)``."""
    xs = x if isinstance(x, tuple) else (x,)
    if params[0].dim() == ndim:
        return op(*xs, *params)
    k = params[0].shape[0]
    pad = xs[0].dim() - ndim  # the axes of x before the parameters' (the fold adds one more)
    ps = [p.reshape(k, *([1] * pad), *p.shape[1:]) for p in params]
    y = op(*(fold_rows(t, k) for t in xs), *ps)
    return y.reshape(-1, *y.shape[2:])


def member_linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``F.linear(x, weight, bias)``; a member-stacked ``weight`` [K, out, in] (bias [K, out])
    maps member k's rows of ``x`` (K*R, ..., in) by one ``baddbmm``."""
    if weight.dim() == 2:
        return F.linear(x, weight, bias)
    k, out, d = weight.shape
    x3 = fold_rows(x, k, -1, d)
    w = weight.transpose(1, 2)
    y = torch.bmm(x3, w) if bias is None else torch.baddbmm(_bias3(bias), x3, w)
    return _flat(y, *x.shape[:-1], out)


def member_mm(
    x: torch.Tensor, weight_t: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """``x @ weight_t (+ bias)`` for 2-d ``x`` (rows, in) and a transposed weight (in, out):
    ``torch.mm`` / ``torch.addmm``; member-stacked ([K, in, out], bias [K, out] or [K, 1, out])
    member k's rows by ``weight_t[k]`` (one ``bmm`` / ``baddbmm``; ``x`` may also be given as
    (K, rows, in), then so is the result)."""
    if weight_t.dim() == 2:
        return torch.mm(x, weight_t) if bias is None else torch.addmm(bias, x, weight_t)
    k, d, out = weight_t.shape
    x3 = fold_rows(x, k, -1, d)
    y = torch.bmm(x3, weight_t) if bias is None else torch.baddbmm(_bias3(bias), x3, weight_t)
    return _flat(y, *x.shape[:-1], out)


def member_addmm(rows: torch.Tensor, x: torch.Tensor, weight_t: torch.Tensor) -> torch.Tensor:
    """``rows + x @ weight_t`` (``torch.addmm``) with ``rows`` a (rows, out) tensor of the
    folded batch; member-stacked ``weight_t`` [K, in, out]: one ``baddbmm`` (``rows`` and
    ``x`` may also be given as (K, rows, ...), then so is the result)."""
    if weight_t.dim() == 2:
        return torch.addmm(rows, x, weight_t)
    k, d, out = weight_t.shape
    y = torch.baddbmm(fold_rows(rows, k, -1, out), fold_rows(x, k, -1, d), weight_t)
    return _flat(y, *rows.shape)


def expand_rows(bias: torch.Tensor, rows: int | tuple[int, ...]) -> torch.Tensor:
    """A bias (out,) expanded to (rows, out) (``rows`` an int or a 1-tuple); member-stacked
    ([K, out]) each member's bias to its rows of the folded batch, (K*R, out) for an int, or
    (K, R, out) without a copy for ``rows`` = (K, R)."""
    lead = (rows,) if isinstance(rows, int) else tuple(rows)
    if bias.dim() == 1:
        return bias.expand(*lead, bias.shape[0])
    k, out = bias.shape
    if len(lead) == 2:
        return bias.unsqueeze(1).expand(k, lead[1], out)
    return bias.unsqueeze(1).expand(k, lead[0] // k, out).reshape(lead[0], out)


def member_matmul(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``x @ w`` for a matrix parameter ``w`` (in, out): member-stacked ([K, in, out]) it
    multiplies member k's rows of ``x`` (K*R, ..., in) by ``w[k]`` (one ``bmm``)."""
    if w.dim() == 2:
        return x @ w
    k = w.shape[0]
    y = torch.bmm(fold_rows(x, k, -1, x.shape[-1]), w)
    return _flat(y, *x.shape[:-1], w.shape[-1])


def member_reduce(x: torch.Tensor, members: int) -> torch.Tensor:
    """Per-member view of a tensor whose last axis holds the folded items of ``members``
    members (member-major): (..., K*M) -> (..., K, M); with ``members == 0`` (an ordinary
    model) ``x`` itself."""
    if members == 0:
        return x
    if x.shape[-1] % members:
        raise ValueError(f"cannot split an axis of {x.shape[-1]} items into {members} members")
    return x.reshape(*x.shape[:-1], members, x.shape[-1] // members)


def loop_norm(norm: nn.Module) -> Any:
    """A LayerNorm for a recurrence: the module itself, or for a member LayerNorm the same
    function with its gain and bias shaped [K, 1, d] once (not at every step), applied to
    (K, rows, d) states."""
    weight, bias = norm.weight, norm.bias
    assert isinstance(weight, torch.Tensor) and isinstance(bias, torch.Tensor)
    if weight.dim() == 1:
        return norm
    shape, eps = (weight.shape[-1],), float(getattr(norm, "eps", 1e-5))
    w3, b3 = weight.unsqueeze(1), bias.unsqueeze(1)
    return lambda x: F.layer_norm(x, shape, eps=eps) * w3 + b3


def loop_bias(bias: torch.Tensor | None, weight: torch.Tensor) -> torch.Tensor | None:
    """A member bias [K, out] of a member weight (3-d) shaped [K, 1, out] once."""
    if bias is None or bias.dim() != 2 or weight.dim() != 3:
        return bias
    return bias.unsqueeze(1)
