"""Peak memory of one training step, estimated before any work (issue 38: a run that would
fail at its first training step is refused before it collects anything).

:func:`training_step_bytes` counts what one step of :func:`gdm_models.train` holds at its peak:
the weights, their gradients and Adam's two moments (16 bytes a parameter), and the
activations kept for the backward pass, per graph and time step of the batch (B windows of L
transitions, padded to the batch's largest N), from the model's widths:

* GDM: per node, its embedding and recurrent widths, its node latent (groups x classes) and the
  message-passing layers; per node pair (the recurrent adjacency is dense: edge-update logits,
  gates, the XOR update and its KL over all N^2 pairs), a constant and, unless the dense edge
  MLP is checkpointed (on the CPU beyond :data:`gdm_models.adjacency.DENSE_CHECKPOINT_BYTES`),
  its hidden layer (``mlp_width`` floats a pair);
* Vanilla GWM and EA-GWM: per node, the hidden width and each GNN layer; per pair, the
  normalised adjacency and the adjacency logits and loss (EA-GWM: its rollout, spectral and
  critical-node losses on top, fitted separately);
* G-RSSM: per node, its embedding, recurrent and latent widths and each attention round; per
  pair, the encoder's dense GNN layers.

The coefficients (float32 values a node or a pair per graph and step) are least-squares fits
(non-negative) of peaks measured on a 2-core x86-64 CPU: the increase of the process's peak
resident memory (``VmHWM``, reset before the call) over one ``train(steps=1)`` call, on
synthetic episodes, at N = 20 to 160, B x L = 20 to 160, and varied widths, layers and latent
sizes (11 configurations per model). The fits are within 10% of every measured GDM and G-RSSM
peak and within 30% of every GWM one; :data:`SAFETY` (1.35) on top makes the estimate an upper
bound of every measured peak, at most 2x above it (``tests/test_training_memory.py``
measures a GDM step again; ``benchmarks/bench_training_memory.py`` measures any model and
size: at N = 30 and 60, unfitted sizes, the estimate was 1.08-1.35x the measured peak of the
three baselines). K ensemble members trained as one member model hold K times the
activations.
"""

from __future__ import annotations

import torch

from .adjacency import DENSE_BLOCK_BYTES, DENSE_CHECKPOINT_BYTES
from .baselines.grssm_parts import GRSSMConfig
from .baselines.gwm_config import GWMConfig
from .gdm.config import GDMConfig
from .world_model import WorldModel

__all__ = ["SAFETY", "training_step_bytes", "activation_floats"]

#: factor on the fitted activations: every measured peak is below the estimate
SAFETY = 1.35
#: float32 values a node or a pair holds per graph and step; fits (see the module docstring)
GDM_FIT = {"node_width": 23.4, "node_latent": 24.5, "mp": 8.1, "pair": 30.7, "pair_mlp": 2.6}
GWM_FIT = {"hidden": 19.0, "mp": 4.2, "pair": 4.5}
EA_GWM_FIT = {"hidden": 12.9, "mp": 16.2, "pair": 58.0}
GRSSM_FIT = {"node_width": 15.8, "mp": 12.5, "pair_encoder": 11.2}


def _edge_mlp_checkpointed(config: GDMConfig, graphs: int, n: int, device: torch.device) -> bool:
    """Whether the GDM's dense edge MLP recomputes its blocks in the backward pass instead of
    keeping them (:meth:`gdm_models.adjacency.EdgeUpdateMLP.forward_dense`): more than one
    block, and more than the device's checkpoint budget in all."""
    kind = device.type if device.type in DENSE_BLOCK_BYTES else "other"
    per_graph = n * n * config.mlp_width * 4
    one_block = per_graph * graphs <= DENSE_BLOCK_BYTES[kind]
    return not one_block and per_graph * graphs > DENSE_CHECKPOINT_BYTES[kind]


def activation_floats(
    model: WorldModel, num_nodes: int, graphs: int = 1, device: str | torch.device = "cpu"
) -> float | None:
    """Float32 activations one graph-step of ``model`` keeps for the backward pass at
    ``num_nodes`` nodes (fitted, before :data:`SAFETY`); ``graphs``: the graph-steps of the
    step (B x L x members, which decides the GDM's checkpointing). ``None``: a model this
    module has no fit for (one registered at run time)."""
    n, c = num_nodes, model.config
    if isinstance(c, GDMConfig):
        f = GDM_FIT
        node = f["node_width"] * (c.embed_dim + c.hidden_dim)
        node += f["node_latent"] * c.node_latent_groups * c.node_latent_classes
        node += f["mp"] * c.hidden_dim * c.mp_layers
        pair = f["pair"]
        if not _edge_mlp_checkpointed(c, graphs, n, torch.device(device)):
            pair += f["pair_mlp"] * c.mlp_width
        return n * node + n * n * pair
    if isinstance(c, GWMConfig):
        f = EA_GWM_FIT if _is_ea(c) else GWM_FIT
        return n * (f["hidden"] * c.hidden_dim + f["mp"] * c.hidden_dim * c.mp_layers) + (
            n * n * f["pair"]
        )
    if isinstance(c, GRSSMConfig):
        f = GRSSM_FIT
        width = c.embed_dim + c.hidden_dim + c.latent_groups * c.latent_classes
        node = f["node_width"] * width + f["mp"] * c.hidden_dim * c.mp_layers
        return n * node + n * n * f["pair_encoder"] * c.encoder_layers
    return None


def _is_ea(config: GWMConfig) -> bool:
    """EA-GWM is the GWM with any of its three extra losses on."""
    return bool(config.rollout_weight or config.spectral_weight or config.critical_weight)


def training_step_bytes(
    model: WorldModel,
    *,
    batch_size: int,
    seq_len: int,
    num_nodes: int,
    members: int = 1,
    device: str | torch.device = "cpu",
) -> int | None:
    """Estimated peak bytes of one training step of ``model`` (it may be built on torch's
    ``meta`` device: only its config and parameter shapes are read): ``batch_size`` windows of
    ``seq_len`` transitions of ``num_nodes``-node graphs (the batch's largest), ``members``
    ensemble members trained as one member model, on ``device``. Weights, gradients and
    Adam's moments (16 bytes a parameter, times ``members``) plus the activations
    (:func:`activation_floats`, times :data:`SAFETY`). ``None``: no estimate for this model.

    >>> from gdm_models import make_model
    >>> schema = {"node_continuous": ["x"], "node_categorical": {}, "graph_continuous": []}
    >>> with torch.device("meta"):
    ...     model = make_model("gdm", schema)
    >>> small = training_step_bytes(model, batch_size=8, seq_len=20, num_nodes=25)
    >>> large = training_step_bytes(model, batch_size=64, seq_len=50, num_nodes=200)
    >>> f"{small / 2**30:.2f} GiB, {large / 2**30:.0f} GiB"
    '0.47 GiB, 63 GiB'
    """
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len),
                        ("num_nodes", num_nodes), ("members", members)):  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    graphs = batch_size * seq_len * members
    per_graph = activation_floats(model, num_nodes, graphs, device)
    if per_graph is None:
        return None
    weights = 16 * members * sum(int(p.numel()) for p in model.parameters())
    return int(weights + SAFETY * 4 * graphs * per_graph)
