"""The static step's clipping (:func:`gdm_models.training.step.clip_grad_norms_`) gives
torch's ``clip_grad_norm_`` numbers bit for bit, in a few foreach ops."""

from __future__ import annotations

import math

import pytest
import torch
from gdm_models.training.step import clip_grad_norms_

#: bit-for-bit claims against torch's own kernels, which differ by CPU instruction set
pytestmark = pytest.mark.exact_float


def _params(seed: int, scale: float) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(7, 3), (3,), (5, 5, 2), (1,), (11,)]
    params = [torch.nn.Parameter(torch.zeros(s)) for s in shapes]
    for p in params:
        p.grad = torch.randn(p.shape, generator=g) * scale
    return params


@pytest.mark.parametrize("max_norm", [0.5, 3.0, math.inf])
@pytest.mark.parametrize("seed,scale", [(0, 1.0), (1, 1e-3), (2, 50.0)])
def test_equals_torch_clip_grad_norm_bit_for_bit(max_norm, seed, scale):
    ours, ref = _params(seed, scale), _params(seed, scale)
    total = clip_grad_norms_(ours, max_norm)
    expected = torch.nn.utils.clip_grad_norm_(ref, max_norm)
    assert torch.equal(total, expected)
    for a, b in zip(ours, ref, strict=True):
        assert torch.equal(a.grad, b.grad)
    if max_norm < float(expected):  # the clipping did act
        assert not torch.equal(ours[0].grad, _params(seed, scale)[0].grad)


def test_skips_missing_gradients_and_handles_none_at_all():
    params = _params(0, 1.0)
    params[1].grad = None
    ref = _params(0, 1.0)
    ref[1].grad = None
    assert torch.equal(clip_grad_norms_(params, 1.0), torch.nn.utils.clip_grad_norm_(ref, 1.0))
    assert float(clip_grad_norms_([torch.nn.Parameter(torch.zeros(2))], 1.0)) == 0.0


def _profiled_aten_ops(fn) -> int:
    """aten ops torch.profiler records for ``fn()`` (nested calls and composite ops included:
    each is a trip through the dispatcher, what a launch-bound step pays for)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return sum(1 for e in prof.events() if e.name.startswith("aten::"))


def _grads(n: int) -> list[torch.nn.Parameter]:
    params = [torch.nn.Parameter(torch.zeros(3)) for _ in range(n)]
    for p in params:
        p.grad = torch.ones(3)
    return params


def test_fewer_dispatches_than_torch_clip_grad_norm():
    """torch's version calls ``.to(first device)`` on each parameter's norm (a dispatch per
    parameter); this one skips it: 45 more parameters cost 45 fewer ops here than there."""
    ours = [_profiled_aten_ops(lambda n=n: clip_grad_norms_(_grads(n), 1.0)) for n in (5, 50)]
    ref = [
        _profiled_aten_ops(lambda n=n: torch.nn.utils.clip_grad_norm_(_grads(n), 1.0, foreach=True))
        for n in (5, 50)
    ]
    # _grads itself is profiled in both; the difference per 45 parameters is the .to() calls
    assert (ref[1] - ref[0]) - (ours[1] - ours[0]) == 45, (ours, ref)
