"""The explicit-products GRU equals torch.nn.GRUCell (values and gradients, same parameters)."""

from __future__ import annotations

import torch
from gdm_models.layers import ExplicitGRUCell, LayerNormGRU, gru_explicit, use_explicit_gru
from torch import nn


def _grads(out: torch.Tensor, params: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    return torch.autograd.grad(out.pow(2).sum(), params)


def test_gru_explicit_equals_grucell():
    torch.manual_seed(0)
    cell = nn.GRUCell(6, 5)
    x = torch.randn(7, 6, requires_grad=True)
    h = torch.randn(7, 5, requires_grad=True)
    params = [x, h, *cell.parameters()]
    want = cell(x, h)
    got = gru_explicit(x, h, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    torch.testing.assert_close(got, want)
    for g, w in zip(_grads(got, params), _grads(want, params), strict=True):
        torch.testing.assert_close(g, w)


def test_layernorm_gru_explicit_flag_and_use_explicit_gru():
    torch.manual_seed(1)
    mod = nn.ModuleDict({"ln": LayerNormGRU(4, 3), "plain": nn.GRUCell(3, 3)})
    x, h = torch.randn(2, 5, 4), torch.randn(2, 5, 3)
    fused = mod["ln"](x, h)
    keys = mod.state_dict().keys()
    use_explicit_gru(mod)
    ln = mod["ln"]
    assert isinstance(ln, LayerNormGRU) and ln.explicit
    assert type(mod["plain"]) is ExplicitGRUCell and mod.state_dict().keys() == keys
    torch.testing.assert_close(ln(x, h), fused)
    # the explicit path runs no fused GRU op (no vmap batching rule), the default one does
    with torch.profiler.profile() as prof:
        ln(x, h)
        mod["plain"](h[0], h[1])
    assert not any("gru_cell" in e.name for e in prof.events())
    ln.explicit = False
    with torch.profiler.profile() as prof:
        ln(x, h)
    assert any("gru_cell" in e.name for e in prof.events())


def test_explicit_gru_under_vmap_equals_per_member():
    torch.manual_seed(2)
    cells = [nn.GRUCell(3, 4) for _ in range(3)]
    stacked = {k: torch.stack([dict(c.named_parameters())[k] for c in cells]).detach()
               for k in dict(cells[0].named_parameters())}  # fmt: skip
    x, h = torch.randn(3, 2, 3), torch.randn(3, 2, 4)
    explicit = ExplicitGRUCell(3, 4)

    def run(p, xi, hi):
        return torch.func.functional_call(explicit, p, (xi, hi))

    got = torch.func.vmap(run)(stacked, x, h)
    want = torch.stack([c(x[k], h[k]) for k, c in enumerate(cells)])
    torch.testing.assert_close(got, want)
