"""How an RGC frame is drawn: nodes by degree on the fixed scale [0, N - 1]; edges added this
step and earlier in the episode marked (RGC only ever adds edges)."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphwm_envs.core.render import NodeStyle

EDGE_EVENTS = ("added", "added earlier")


def node_style(env: Any) -> NodeStyle:
    """Degree (what the targeted attack removes by), on a scale fixed for every frame."""
    return NodeStyle(
        values=np.asarray(env.state.degrees, dtype=float),
        label="degree",
        vmin=0.0,
        vmax=float(env.num_nodes - 1),
    )


def status(env: Any, info: dict) -> str:
    """Edge budget left and the current robustness."""
    s = env.state
    return f"edges left {s.budget - s.edges_added}/{s.budget}   robustness {s.robustness:.3f}"


def end_reason(env: Any) -> str:
    """Why the episode terminated: the edge budget is spent, or the step limit came first."""
    s = env.state
    return "budget spent" if s.edges_added >= s.budget else "step limit"
