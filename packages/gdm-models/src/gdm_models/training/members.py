"""The member axis of what the member engine (:class:`~gdm_models.training.engines.MemberEngine`)
feeds and saves: the K members' batches folded into one batch (:func:`concat_batches`) and
Adam state dicts split per member and stacked back (:func:`member_opt_state`,
:func:`stack_opt_states`)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..data import Batch

__all__ = ["OptState", "concat_batches", "member_opt_state", "stack_opt_states"]

OptState = dict[str, Any]


def concat_batches(batches: Sequence[Batch], n: int) -> Batch:
    """Member batches (on the CPU) zero-padded to ``n`` nodes and concatenated on the batch
    axis, member-major (the folded batch of a member model; padded nodes are masked out as in
    :meth:`~gdm_models.data.Batch.pad_nodes`). Assembled in numpy: no torch op per member."""
    out = {}
    for name in Batch.__dataclass_fields__:
        parts = [getattr(b, name).numpy() for b in batches]
        shape = [sum(p.shape[0] for p in parts)]
        shape += [
            n if ax in _NODE_AXES[name] else parts[0].shape[ax] for ax in range(1, parts[0].ndim)
        ]
        arr = np.zeros(shape, dtype=parts[0].dtype)
        row = 0
        for p in parts:
            arr[(slice(row, row + p.shape[0]), *(slice(0, d) for d in p.shape[1:]))] = p
            row += p.shape[0]
        out[name] = torch.from_numpy(arr)
    return Batch(**out)


#: the node axes of each :class:`~gdm_models.data.Batch` field
_NODE_AXES: dict[str, tuple[int, ...]] = {
    "adjacency": (2, 3),
    "node_continuous": (2,),
    "node_categorical": (2,),
    "action_mask": (2,),
    "action_nodes": (2,),
    "node_mask": (1,),
}
_NODE_AXES.update({k: () for k in Batch.__dataclass_fields__ if k not in _NODE_AXES})


def member_opt_state(stacked: Mapping[str, Any], i: int) -> OptState:
    """Member ``i``'s slice of a stacked Adam's state dict: a single Adam's state dict (the
    shared step count stays a scalar)."""
    state = {
        idx: {
            name: v.clone() if name == "step" or not torch.is_tensor(v) else v[i].clone()
            for name, v in st.items()
        }
        for idx, st in stacked["state"].items()
    }
    return {"state": state, "param_groups": copy.deepcopy(stacked["param_groups"])}


def stack_opt_states(states: Sequence[Mapping[str, Any]]) -> OptState:
    """Stack single-Adam state dicts of the members (inverse of :func:`member_opt_state`)."""
    indices = [set(s["state"]) for s in states]
    if any(ix != indices[0] for ix in indices):
        raise ValueError("the members' optimizer states cover different parameters")
    out: dict[Any, dict[str, Any]] = {}
    for idx in indices[0]:
        parts = [s["state"][idx] for s in states]
        entry: dict[str, Any] = {}
        for name, v in parts[0].items():
            if name == "step" or not torch.is_tensor(v):
                if any(
                    not torch.equal(torch.as_tensor(p[name]), torch.as_tensor(v)) for p in parts
                ):
                    raise ValueError("the members' optimizer step counts differ")
                entry[name] = v
            else:
                entry[name] = torch.stack([p[name] for p in parts])
        out[idx] = entry
    return {"state": out, "param_groups": copy.deepcopy(states[0]["param_groups"])}
