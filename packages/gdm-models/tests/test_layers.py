"""The GRU written out as products (:func:`gru_from_gates`) equals torch.nn.GRUCell (values and
gradients, same parameters): the math every member GRU cell and the GDM's recurrence use."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from gdm_models.layers import LayerNormGRU, gru_from_gates
from torch import nn


def _grads(out: torch.Tensor, params: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out.pow(2).sum(), params)


def test_gru_from_gates_equals_grucell():
    torch.manual_seed(0)
    cell = nn.GRUCell(6, 5)
    x = torch.randn(7, 6, requires_grad=True)
    h = torch.randn(7, 5, requires_grad=True)
    params = [x, h, *cell.parameters()]
    want = cell(x, h)
    gi = F.linear(x, cell.weight_ih, cell.bias_ih)
    got = gru_from_gates(gi, h, F.linear(h, cell.weight_hh, cell.bias_hh))
    torch.testing.assert_close(got, want)
    for g, w in zip(_grads(got, params), _grads(want, params), strict=True):
        torch.testing.assert_close(g, w)


def test_layernorm_gru_step_equals_forward():
    torch.manual_seed(1)
    ln = LayerNormGRU(4, 3)
    x, h = torch.randn(5, 4), torch.randn(5, 3)
    gi = F.linear(x, ln.cell.weight_ih, ln.cell.bias_ih)
    torch.testing.assert_close(ln.step(gi, h), ln(x, h))
