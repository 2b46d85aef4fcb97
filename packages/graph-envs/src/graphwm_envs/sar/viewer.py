"""How a SAR frame is drawn: what the agent observes (survivors within two hops) as discrete
categories, everything beyond as *unknown*; marker size is the node's stability; the edges
that collapsed in the step are marked as removed."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphwm_envs.core.render import NodeStyle
from graphwm_envs.sar.dynamics import OBSERVATION_HOPS, visible_nodes

EDGE_EVENTS = ("removed",)
EMPTY, SURVIVOR, UNKNOWN, EXIT, AGENT, AGENT_ESCORTING = range(6)
CATEGORIES = (
    ("seen, empty", "#ffffff"),
    ("seen survivor", "#ff7f0e"),
    (f"unknown (> {OBSERVATION_HOPS} hops)", "#bdbdbd"),
    ("exit", "#1f77b4", "s"),
    ("agent", "#000000"),
    ("agent escorting", "#9467bd"),
)


def node_codes(env: Any) -> np.ndarray:
    """(N,) category codes: only the survivors the agent can see are shown as survivors."""
    s = env.state
    visible = visible_nodes(s)
    codes = np.full(env.num_nodes, UNKNOWN, dtype=np.int64)
    codes[visible] = EMPTY
    codes[visible & s.survivors] = SURVIVOR
    codes[s.exit_node] = EXIT
    codes[s.location] = AGENT_ESCORTING if s.escorting else AGENT
    return codes


def node_style(env: Any) -> NodeStyle:
    """The agent's view as categories; marker area grows with stability."""
    return NodeStyle(
        values=node_codes(env),
        label="node (agent's view)",
        categories=CATEGORIES,
        sizes=0.25 + 0.75 * np.asarray(env.state.stability, dtype=float),
        markers=np.where(np.arange(env.num_nodes) == env.state.exit_node, "s", "o"),
        note="marker size: stability\nsquare: the exit",
    )


def status(env: Any, info: dict) -> str:
    """Whether a survivor is escorted, and the edges the step collapsed."""
    text = "escorting" if env.state.escorting else "not escorting"
    collapsed = info.get("edges_removed", 0)
    return text + (f"   {collapsed} edge(s) collapsed" if collapsed else "")
