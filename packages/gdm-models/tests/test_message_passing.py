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


def _pyg_reference(layer):
    """torch_geometric's ``MessagePassing(aggr="add")`` with SparseGATLayer's message, holding
    the same weights: the backend SparseGATLayer replaced."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=FutureWarning)
        from torch_geometric.nn import MessagePassing

    class PygLayer(MessagePassing):
        def __init__(self) -> None:
            super().__init__(aggr="add")
            self.lin, self.root, self.norm = layer.lin, layer.root, layer.norm

        def forward(self, x, edge_index, edge_weight):
            msg = self.propagate(edge_index, x=self.lin(x), edge_weight=edge_weight)
            return self.norm(self.root(x) + msg)

        def message(self, x_j, edge_weight):
            return edge_weight[:, None] * x_j

    return PygLayer()


def test_sparse_layer_equals_torch_geometric_bit_for_bit():
    """The torch-only sparse layer gives exactly torch_geometric's result (same process, same
    machine), forward and gradient, on random graphs with isolated nodes and repeated edges."""
    from gdm_models.message_passing import SparseGATLayer

    gen = torch.Generator().manual_seed(7)
    for trial in range(6):
        torch.manual_seed(trial)
        m, e, d_in, d_out = 5 + 7 * trial, 3 + 40 * trial, 6, 5
        layer = SparseGATLayer(d_in, d_out)
        ref = _pyg_reference(layer)
        x = torch.randn(m, d_in, generator=gen)
        ei = torch.randint(0, m - 1, (2, e), generator=gen)  # node m-1 gets no edge
        w = torch.rand(e, generator=gen)
        x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
        out, want = layer(x1, ei, w), ref(x2, ei, w)
        assert torch.equal(out, want)
        # an isolated node receives no message (1-row matmul may round differently)
        torch.testing.assert_close(out[-1], layer.norm(layer.root(x[-1:]))[0])
        out.pow(2).sum().backward()
        want.pow(2).sum().backward()
        assert x1.grad is not None and x2.grad is not None
        assert torch.equal(x1.grad, x2.grad)


def test_sparse_layer_state_dict_keys_unchanged():
    """Checkpoints written with the torch_geometric layer still load: same keys and shapes."""
    from gdm_models.message_passing import SparseGATLayer

    layer = SparseGATLayer(4, 3)
    ref = _pyg_reference(SparseGATLayer(4, 3))
    assert {k: v.shape for k, v in layer.state_dict().items()} == {
        k: v.shape for k, v in ref.state_dict().items()
    }
    layer.load_state_dict(ref.state_dict())  # strict


def test_sparse_layer_rejects_bad_edge_index():
    import pytest
    from gdm_models.message_passing import SparseGATLayer

    with pytest.raises(ValueError, match="edge_index"):
        SparseGATLayer(2, 2)(torch.randn(3, 2), torch.zeros(3, 4, dtype=torch.long), torch.ones(4))


def test_import_gdm_models_leaves_torch_geometric_out():
    """``import gdm_models`` must not pay for torch_geometric's import (seconds per worker)."""
    import subprocess
    import sys

    code = "import sys, gdm_models; print('torch_geometric' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
