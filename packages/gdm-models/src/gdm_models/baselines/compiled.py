"""Opt-in ``torch.compile`` of a baseline's training loss (issue 10).

Eager training is launch-bound on a GPU: a G-RSSM step is ~2,600 small kernels, each costing
more host time than device time. Compiling the whole tensor-only loss function (the models'
``_loss_tensors``: no ``.item()``, noise passed in as a tensor) fuses the elementwise chains
and, with ``mode="reduce-overhead"``, replays the step as CUDA graphs. That needs static
shapes, so every batch is padded along the node axis to a multiple of ``node_multiple``
(padded nodes are masked everywhere, so the loss is unchanged; the graphs of the paper's
15-25-node training sets then take at most three shapes).

If ``torch.compile`` is unavailable or fails, the loss falls back to eager with a one-line
warning. Compilation is a property of the running model, not of its configuration: it is
not saved in checkpoints.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import torch
import torch.nn.functional as F

from ..data import Batch

__all__ = ["pad_nodes", "CompiledLoss"]

_NODE_AXIS = {  # field -> node axes counted from the end
    "adjacency": (-1, -2),
    "node_continuous": (-2,),
    "node_categorical": (-2,),
    "action_mask": (-1,),
    "action_nodes": (-1,),
    "node_mask": (-1,),
}


def pad_nodes(batch: Batch, multiple: int) -> Batch:
    """``batch`` with its node axis zero-padded (``node_mask`` False) to a multiple of
    ``multiple`` nodes; the batch itself when it already is."""
    if multiple < 1:
        raise ValueError(f"node multiple must be >= 1, got {multiple}")
    n = batch.num_nodes
    extra = -n % multiple
    if extra == 0:
        return batch
    out = {}
    for f in fields(batch):
        t = getattr(batch, f.name)
        for axis in _NODE_AXIS.get(f.name, ()):
            pad = [0, 0] * (-axis - 1) + [0, extra]
            t = F.pad(t, pad)
        out[f.name] = t
    return Batch(**out)


class CompiledLoss:
    """A loss function compiled on first use, eager after a failure (one-line warning).

    Args:
        fn: the tensor-only loss function.
        mode, backend, fullgraph: passed to ``torch.compile`` (``dynamic=False``).
        node_multiple: pad every batch's node axis to this multiple (static shapes).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        mode: str | None = None,
        backend: str = "inductor",
        fullgraph: bool = False,
        node_multiple: int = 8,
    ) -> None:
        if node_multiple < 1:
            raise ValueError(f"node_multiple must be >= 1, got {node_multiple}")
        self.eager = fn
        self.node_multiple = node_multiple
        self.compiled: Callable[..., Any] | None = None
        try:
            self.compiled = torch.compile(
                fn, mode=mode, backend=backend, fullgraph=fullgraph, dynamic=False
            )
        except Exception as e:  # noqa: BLE001 - any failure means: stay eager
            self._fall_back(e)

    def _fall_back(self, error: BaseException) -> None:
        warnings.warn(
            f"torch.compile unavailable for the training loss ({type(error).__name__}: "
            f"{error}); training eagerly",
            RuntimeWarning,
            stacklevel=3,
        )
        self.compiled = None

    @property
    def active(self) -> bool:
        """Whether the compiled function is in use."""
        return self.compiled is not None

    def __call__(self, *args: Any) -> Any:
        if self.compiled is not None:
            try:
                return self.compiled(*args)
            except Exception as e:  # noqa: BLE001 - compile errors surface at the first call
                self._fall_back(e)
        return self.eager(*args)
