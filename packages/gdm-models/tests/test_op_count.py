"""The GDM's training step stays few-op: its aten ops per time step (what a launch-bound GPU
pays for, docs/models.md "Speed and memory") are counted at two window lengths."""

from __future__ import annotations

import pytest
import torch
from gdm_models.gdm import Noise
from torch.utils._python_dispatch import TorchDispatchMode


class _CountOps(TorchDispatchMode):
    """Counts every aten op dispatched below autograd (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _ops(model, dataset, seq_len: int) -> int:
    """Aten ops of one loss + backward of the GDM on 2 windows of ``seq_len`` transitions."""
    batch = dataset.make_batch([(0, 0), (1, 0)], seq_len=seq_len)
    noise = Noise(torch.Generator().manual_seed(0), model.device)
    with _CountOps() as count:
        total, _ = model.loss_tensors(batch, noise)
        total.backward()
    return count.n


#: bound on the aten ops per time step (this counter, TINY config, one message-passing layer):
#: 492 (GDM) and 274 (no graph state) before the posterior loop's observation, action and
#: noise parts were moved out of it and its products stacked (issue 27); 283 and 144 after
MAX_OPS_PER_STEP = {"gdm": 330, "gdm:no-graph-state": 180}


@pytest.mark.parametrize("name", sorted(MAX_OPS_PER_STEP))
def test_gdm_training_ops_per_time_step(make_tiny, dataset, name):
    model = make_tiny(name, mp_layers=1)
    _ops(model, dataset, 2)  # warm-up (lazy first-call paths)
    counts = [_ops(model, dataset, seq_len) for seq_len in (3, 5, 7)]
    per_step = (counts[2] - counts[0]) / 4
    assert counts[1] - counts[0] == counts[2] - counts[1]  # exactly linear in L
    assert per_step <= MAX_OPS_PER_STEP[name], (counts, per_step)
