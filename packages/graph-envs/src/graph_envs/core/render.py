"""Matplotlib rendering of a graph with per-node values, to an RGB array."""

from __future__ import annotations

import numpy as np


def render_graph(
    adjacency: np.ndarray,
    positions: np.ndarray,
    node_values: np.ndarray,
    label: str,
    title: str,
    size_px: int = 480,
) -> np.ndarray:
    """Draw the graph (edges as a line collection, nodes coloured by ``node_values``).

    Returns an (H, W, 3) uint8 array. Uses the Agg backend, so no display is needed.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure

    dpi = 96
    fig = Figure(figsize=(size_px / dpi, size_px / dpi), dpi=dpi)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_axes((0.02, 0.02, 0.78, 0.9))
    cax = fig.add_axes((0.84, 0.1, 0.03, 0.74))
    rows, cols = np.nonzero(np.triu(adjacency, k=1))
    segments = np.stack([positions[rows], positions[cols]], axis=1)
    ax.add_collection(LineCollection(segments, colors="0.6", linewidths=0.8, zorder=1))
    n = len(positions)
    marker = max(6.0, 200.0 / max(1.0, np.sqrt(n)))
    sc = ax.scatter(
        positions[:, 0],
        positions[:, 1],
        c=node_values,
        s=marker**1.3,
        cmap="viridis",
        zorder=2,
        edgecolors="k",
        linewidths=0.3,
    )
    fig.colorbar(sc, cax=cax, label=label)
    ax.set_title(title, fontsize=8)
    ax.set_aspect("equal")
    ax.autoscale_view()
    ax.set_axis_off()
    canvas.draw()
    image = np.asarray(canvas.buffer_rgba())[..., :3].copy()
    return image
