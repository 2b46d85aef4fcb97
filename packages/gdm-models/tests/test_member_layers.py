"""Member-dimension layers (issue 27): a member layer on the K members' rows folded into one
batch equals the K separate layers (forward and gradients), and a member model built by
stack_members holds exactly the members' parameters."""

from __future__ import annotations

import pytest
import torch
from gdm_models import make_model
from gdm_models.layers import LayerNormGRU
from gdm_models.member_layers import (
    MemberEmbedding,
    MemberGRUCell,
    MemberLayerNorm,
    MemberLinear,
    MemberStackError,
    member_state,
    stack_members,
)
from gdm_models.member_ops import (
    expand_rows,
    fold_rows,
    member_addmm,
    member_apply,
    member_linear,
    member_matmul,
    member_mm,
    member_reduce,
)
from gdm_models.synthetic import SYNTHETIC_SCHEMA
from torch import nn

from .conftest import TINY

K, R = 3, 4


def _per_member(layers, x_parts, call):
    """The K separate layers' outputs, concatenated member-major like the folded batch."""
    return torch.cat([call(layer, x) for layer, x in zip(layers, x_parts, strict=True)])


def _check(member, layers, xs, call, params_of):
    """Forward and the gradients (inputs and every parameter) of a member layer against the K
    layers it was stacked from."""
    x = torch.cat(xs).requires_grad_()
    got = call(member, x)
    want = _per_member(layers, [p.detach().requires_grad_() for p in xs], call)
    torch.testing.assert_close(got, want)
    weight = torch.randn_like(got)
    got_g = torch.autograd.grad((got * weight).sum(), [x, *member.parameters()])
    xs2 = [p.detach().requires_grad_() for p in xs]
    out = _per_member(layers, xs2, call)
    plist = [list(params_of(layer)) for layer in layers]
    want_g = torch.autograd.grad((out * weight).sum(), xs2 + [p for ps in plist for p in ps])
    torch.testing.assert_close(got_g[0], torch.cat(want_g[:K]))
    flat = want_g[K:]
    n = len(plist[0])
    for i, g in enumerate(got_g[1:]):  # parameter i of member k is g[k]
        torch.testing.assert_close(g, torch.stack([flat[k * n + i] for k in range(K)]))


@pytest.mark.parametrize("bias", [True, False])
def test_member_linear_equals_k_linears(bias):
    torch.manual_seed(0)
    layers = [nn.Linear(5, 3, bias=bias) for _ in range(K)]
    xs = [torch.randn(R, 2, 5) for _ in range(K)]
    _check(MemberLinear(layers), layers, xs, lambda m, x: m(x), lambda m: m.parameters())


def test_member_layernorm_equals_k_layernorms():
    torch.manual_seed(1)
    layers = [nn.LayerNorm(6) for _ in range(K)]
    for ln in layers:  # not the default affine map (ones, zeros)
        nn.init.normal_(ln.weight)
        nn.init.normal_(ln.bias)
    xs = [torch.randn(R, 3, 6) for _ in range(K)]
    _check(MemberLayerNorm(layers), layers, xs, lambda m, x: m(x), lambda m: m.parameters())


def test_member_embedding_equals_k_embeddings():
    torch.manual_seed(2)
    layers = [nn.Embedding(5, 4) for _ in range(K)]
    idx = [torch.randint(0, 5, (R, 3)) for _ in range(K)]
    member = MemberEmbedding(layers)
    got = member(torch.cat(idx))
    torch.testing.assert_close(got, torch.cat([e(i) for e, i in zip(layers, idx, strict=True)]))
    (g,) = torch.autograd.grad(got.pow(2).sum(), [member.weight])
    for k, (e, i) in enumerate(zip(layers, idx, strict=True)):
        (want,) = torch.autograd.grad(e(i).pow(2).sum(), [e.weight])
        torch.testing.assert_close(g[k], want)


def test_member_gru_cell_equals_torch_grucell():
    torch.manual_seed(3)
    cells = [nn.GRUCell(4, 5) for _ in range(K)]
    member = MemberGRUCell(cells)
    xs = [torch.randn(R, 4) for _ in range(K)]
    hs = torch.randn(K * R, 5)

    def call(m, x):
        if m is member:
            return m(x, hs)
        k = cells.index(m)
        return m(x, hs[k * R : (k + 1) * R])

    _check(member, cells, xs, call, lambda m: m.parameters())
    # no hidden state: zeros, as GRUCell
    x = torch.cat(xs)
    want = torch.cat([c(p) for c, p in zip(cells, xs, strict=True)])
    torch.testing.assert_close(member(x), want)


def test_member_ops_equal_the_plain_ops_per_member():
    torch.manual_seed(4)
    w = torch.randn(K, 3, 5)  # K (out, in) weights
    b = torch.randn(K, 3)
    x = torch.randn(K * R, 2, 5)
    for k in range(K):
        rows = slice(k * R, (k + 1) * R)
        torch.testing.assert_close(
            member_linear(x, w, b)[rows], torch.nn.functional.linear(x[rows], w[k], b[k])
        )
        x2 = x[:, 0]
        wt = w.transpose(1, 2)
        torch.testing.assert_close(member_mm(x2, wt, b)[rows], torch.addmm(b[k], x2[rows], wt[k]))
        add = torch.randn(K * R, 3)
        torch.testing.assert_close(
            member_addmm(add, x2, wt)[rows], torch.addmm(add[rows], x2[rows], wt[k])
        )
        torch.testing.assert_close(member_matmul(x, wt)[rows], x[rows] @ wt[k])
        torch.testing.assert_close(expand_rows(b, K * R)[rows], b[k].expand(R, 3))
        s = torch.randn(K, 2, 5)
        got = member_apply(lambda a, p: a * p, x, s, ndim=2)
        torch.testing.assert_close(got[rows], x[rows] * s[k])
    # an ordinary model's parameter: the plain op itself
    torch.testing.assert_close(
        member_linear(x, w[0], b[0]), torch.nn.functional.linear(x, w[0], b[0])
    )
    v = torch.arange(12.0).view(2, 6)
    assert member_reduce(v, 0) is v
    torch.testing.assert_close(member_reduce(v, 3), v.view(2, 3, 2))
    with pytest.raises(ValueError, match="not a multiple of K"):
        fold_rows(torch.randn(7, 2), 3)
    with pytest.raises(ValueError, match="members"):
        member_reduce(torch.randn(2, 7), 3)


@pytest.mark.parametrize("name", ["gdm", "vanilla-gwm", "g-rssm"])
def test_stack_members_holds_each_members_parameters(name, scaler):
    cfg = TINY if name == "gdm" else {"hidden_dim": 16}
    models = []
    for s in range(K):
        torch.manual_seed(s)
        models.append(make_model(name, SYNTHETIC_SCHEMA, scaler, **cfg))
    member = stack_members(models)
    assert member.member_count == K
    # the single model's parameter names and order (its Adam state dict indexes them)
    assert [n for n, _ in member.named_parameters()] == [n for n, _ in models[0].named_parameters()]
    assert not any(isinstance(m, (nn.Linear, nn.LayerNorm, nn.Embedding, nn.GRUCell))
                   for m in member.modules())  # fmt: skip
    for k, m in enumerate(models):
        state = member_state(member, k)
        assert state.keys() == m.state_dict().keys()
        assert all(torch.equal(v, m.state_dict()[n]) for n, v in state.items())
    # the models themselves are untouched and still load their own slice
    fresh = make_model(name, SYNTHETIC_SCHEMA, scaler, **cfg)
    fresh.load_state_dict(member_state(member, 1))


def test_stack_members_refuses_different_structures(scaler):
    torch.manual_seed(0)
    a = make_model("gdm", SYNTHETIC_SCHEMA, scaler, **TINY)
    b = make_model("gdm", SYNTHETIC_SCHEMA, scaler, **{**TINY, "graph_state": False})
    with pytest.raises(MemberStackError, match="structure"):
        stack_members([a, b])
    with pytest.raises(ValueError, match="at least one"):
        stack_members([])


def test_layernorm_gru_of_a_member_model_equals_each_member():
    torch.manual_seed(5)
    grus = [LayerNormGRU(4, 3) for _ in range(K)]
    member = stack_members(grus)
    x, h = torch.randn(K * R, 2, 4), torch.randn(K * R, 2, 3)
    want = torch.cat(
        [g(x[k * R : (k + 1) * R], h[k * R : (k + 1) * R]) for k, g in enumerate(grus)]
    )
    torch.testing.assert_close(member(x, h), want)
