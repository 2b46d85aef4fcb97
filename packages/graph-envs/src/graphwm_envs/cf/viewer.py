"""How a CF frame is drawn: each node's load relative to its rated capacity on the fixed scale
[0, 2] (the hidden safety factor is never drawn), cut-off nodes greyed, the edges the step
removed (the agent's cut and the failures) marked."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphwm_envs.core.render import NodeStyle

EDGE_EVENTS = ("removed",)
RATIO_MAX = 2.0


def load_ratio(env: Any) -> np.ndarray:
    """(N,) ``load / capacity`` (0 where both are 0; ``RATIO_MAX`` for a load on no capacity)."""
    s = env.state
    load, capacity = np.asarray(s.load, dtype=float), np.asarray(s.capacity, dtype=float)
    ratio = np.divide(load, capacity, out=np.zeros_like(load), where=capacity > 0)
    ratio[(capacity <= 0) & (load > 0)] = RATIO_MAX
    return ratio


def node_style(env: Any) -> NodeStyle:
    """Load / rated capacity on [0, 2], the same scale in every frame of every episode."""
    p = env.params
    connected = np.asarray(env.state.adjacency).any(axis=1)
    return NodeStyle(
        values=load_ratio(env),
        label="load / capacity",
        vmin=0.0,
        vmax=RATIO_MAX,
        cmap="YlOrRd",
        muted=np.logical_not(connected),
        muted_label="cut off (no edges)",
        note=f"a node fails above the hidden\nsafety factor in [{p.xi_low}, {p.xi_high}]",
    )


def status(env: Any, info: dict) -> str:
    """Nodes that still have an edge, and this step's stochastic failures."""
    connected = int(np.asarray(env.state.adjacency).any(axis=1).sum())
    failed = info.get("num_failed")
    text = f"nodes with edges {connected}/{env.num_nodes}"
    return text + (f"   failed this step {failed}" if failed is not None else "")


def end_reason(env: Any) -> str:
    """Why the episode terminated: the graph fell apart, or the horizon came first."""
    if not np.asarray(env.state.adjacency).any():
        return "no edges left"
    return "horizon reached, largest component penalised"
