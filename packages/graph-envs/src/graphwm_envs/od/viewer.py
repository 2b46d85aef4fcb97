"""How an OD frame is drawn: opinions as discrete colours (the target opinion first), the
edges rewired by the step marked as added / removed."""

from __future__ import annotations

from typing import Any

import numpy as np

from graphwm_envs.core.render import NodeStyle

EDGE_EVENTS = ("added", "removed")
# target first (orange), then colours far from it and from the edge markers (green, red)
_PALETTE = ("#ff7f0e", "#1f77b4", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f")


def node_style(env: Any) -> NodeStyle:
    """Opinion, a categorical feature with one legend entry per value."""
    p = env.params
    names = [
        f"opinion {v}" + (" (target)" if v == p.target_opinion else "")
        for v in range(p.num_opinions)
    ]
    colours = _colours(p.num_opinions, p.target_opinion)
    return NodeStyle(
        values=np.asarray(env.state.opinion, dtype=np.int64),
        label="opinion",
        categories=tuple(zip(names, colours, strict=True)),
    )


def _colours(count: int, target: int) -> list[str]:
    if count <= len(_PALETTE):
        others = list(_PALETTE[1:count])
    else:
        from matplotlib import colormaps
        from matplotlib.colors import to_hex

        others = [to_hex(colormaps["tab20"](i % 20)) for i in range(1, count)]
    return others[:target] + [_PALETTE[0]] + others[target:]


def status(env: Any, info: dict) -> str:
    """Share of nodes holding the target opinion."""
    share = float(np.mean(env.state.opinion == env.params.target_opinion))
    return f"target opinion held by {share:.0%}"
