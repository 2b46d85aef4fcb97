"""SparseGAT-style message passing: hand-computed layer, dense vs sparse backends."""

from __future__ import annotations

import torch
from gdm_models.message_passing import GraphMessagePassing, dense_to_edges, normalise_weights


def test_normalise_weights_rows_and_isolated_nodes():
    w = torch.tensor([[[0.0, 2.0, 2.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    a = normalise_weights(w)
    torch.testing.assert_close(a[0, 0], torch.tensor([0.0, 0.5, 0.5]))
    torch.testing.assert_close(a[0, 2], torch.zeros(3))


def test_layer_by_hand_with_injection():
    torch.manual_seed(0)
    mp = GraphMessagePassing(node_dim=3, inject_dim=2, layers=1)
    layer = mp.layers[0]
    h = torch.randn(1, 3, 3)
    g = torch.randn(1, 2)
    w = torch.tensor([[[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    out = mp.forward_dense(h, g, w)
    x = torch.cat([h, g[:, None].expand(1, 3, 2)], -1)[0]
    msg0 = 0.5 * (layer.lin.weight @ x[1] + layer.lin.weight @ x[2])
    want0 = layer.norm(layer.root.weight @ x[0] + layer.root.bias + msg0)
    torch.testing.assert_close(out[0, 0], want0)


def test_dense_and_sparse_backends_agree_and_gradient_reaches_non_edges():
    torch.manual_seed(1)
    mp = GraphMessagePassing(node_dim=4, inject_dim=3, layers=2)
    a = (torch.rand(2, 7, 7) < 0.4).float()
    a = torch.triu(a, 1)
    a = a + a.transpose(1, 2)
    a[0, 3] = 0
    a[0, :, 3] = 0  # an isolated node
    h, g = torch.randn(2, 7, 4), torch.randn(2, 3)
    torch.testing.assert_close(mp.forward_dense(h, g, a), mp.forward_sparse(h, g, a))
    # straight-through weights: forward = a, gradient also flows to the non-edges
    b = torch.rand(2, 7, 7, requires_grad=True)
    b_bar = b + (a - b).detach()
    mp.forward_dense(h, g, b_bar).pow(2).sum().backward()
    assert (b.grad[a == 0] != 0).any()


def test_dense_to_edges_weights():
    a = torch.tensor([[[0.0, 1.0, 1.0], [1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    ei, w = dense_to_edges(a)
    assert ei.shape == (2, 4)
    targets = ei[1].tolist()
    assert sorted(zip(targets, w.tolist(), strict=True)) == [(0, 0.5), (0, 0.5), (1, 1.0), (2, 1.0)]
