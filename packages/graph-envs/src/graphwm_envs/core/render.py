"""Matplotlib rendering of a graph env's current state, to an RGB array a person can read.

A frame shows:

* nodes coloured by one feature, either *categorical* (a discrete legend, one colour per
  value) or *continuous* (a colour bar on a scale fixed for the whole episode, so colours are
  comparable across frames);
* what the agent cannot observe drawn as *unknown* (e.g. SAR's nodes beyond two hops);
* the edges added (green) and removed (red, dashed) by the last step, and, for envs that only
  add edges, the edges added earlier in the episode (light green);
* the nodes the last action selected (a ring);
* a title with the step, the last reward, the return so far, the outcome and the env's
  graph-level status.

Each env's choices live in its ``viewer.py`` (``graphwm_envs.<env>.viewer``), which provides
``node_style(env) -> NodeStyle``, ``status(env, info) -> str``, the tuple ``EDGE_EVENTS``
(which of "added", "removed", "added earlier" the env can produce) and optionally
``end_reason(env) -> str`` (why an episode terminated, when ``info`` does not say). Envs
without a viewer fall back to the action mask as a categorical feature.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

FIGURE_PX = (640, 480)  # width, height
_DPI = 96
EDGE_COLOUR = "0.65"
ADDED_COLOUR = "#1a9850"
EARLIER_COLOUR = "#a6d96a"
REMOVED_COLOUR = "#d73027"
SELECTED_COLOUR = "#ff00ff"
MUTED_COLOUR = "#8c8c8c"


@dataclass(frozen=True)
class NodeStyle:
    """How to colour the nodes of one frame.

    Attributes:
        values: (N,) integer codes into ``categories`` (categorical) or real values
            (continuous).
        label: legend title or colour-bar label.
        categories: ``(name, colour)`` or ``(name, colour, marker)`` per code for a
            categorical feature; empty for a continuous one.
        vmin, vmax: the continuous colour scale (fix them per episode, not per frame); values
            outside it are drawn in its end colours.
        cmap: matplotlib colour map of a continuous feature.
        sizes: optional (N,) factors in (0, 1] of the marker area.
        markers: optional (N,) matplotlib marker per node (default ``"o"``).
        muted: optional (N,) bool, nodes drawn in grey whatever their value (e.g. cut off).
        muted_label: legend entry of the muted nodes.
        note: a line shown under the legend (e.g. what the marker size means).
    """

    values: np.ndarray
    label: str
    categories: tuple[tuple[str, ...], ...] = ()
    vmin: float = 0.0
    vmax: float = 1.0
    cmap: str = "viridis"
    sizes: np.ndarray | None = None
    markers: np.ndarray | None = None
    muted: np.ndarray | None = None
    muted_label: str = ""
    note: str = ""


class EpisodeTrace:
    """What a frame needs beyond the current state: the last step and the episode so far.

    The env keeps one (when it has a ``render_mode``), created at ``reset`` /
    ``restore_state`` and updated around each ``step``; stepping costs one adjacency copy.
    """

    def __init__(self, env: Any) -> None:
        adjacency = np.asarray(env._adjacency())
        self.start_adjacency = adjacency.astype(bool)
        self.previous_adjacency: np.ndarray | None = None
        self.selected = np.zeros(adjacency.shape[0], dtype=bool)
        self.reward: float | None = None
        self.episode_return = 0.0
        self.terminated = False
        self.truncated = False
        self.info: dict[str, Any] = {}

    def before_step(self, env: Any) -> None:
        """Remember the adjacency the coming step starts from."""
        self.previous_adjacency = np.asarray(env._adjacency()).astype(bool)

    def after_step(
        self,
        env: Any,
        action: Any,
        valid: bool,
        reward: float,
        terminated: bool,
        truncated: bool,
        info: dict[str, Any],
    ) -> None:
        """Record the step's action (if valid), reward, end flags and info."""
        self.selected = (
            np.asarray(env.action_to_nodes(action)).astype(bool)
            if valid
            else np.zeros_like(self.selected)
        )
        self.reward = float(reward)
        self.episode_return += float(reward)
        self.terminated, self.truncated, self.info = bool(terminated), bool(truncated), info


def viewer_of(env: Any) -> Any | None:
    """The env's viewer module, or ``None`` (then :func:`default_style` draws the mask).

    The class attribute ``viewer_module`` (a module name, ``None``: no viewer) if the class
    sets it, else ``graphwm_envs.<env>.viewer`` for the package's own envs. An env of your
    own has no viewer unless it names one (docs/own-env.md), so a class defined in a
    top-level module or ``__main__`` renders too.
    """
    cls = type(env)
    name = getattr(cls, "viewer_module", None)
    if name is None:
        package = cls.__module__.rpartition(".")[0]
        if not package.startswith("graphwm_envs."):
            return None
        name = f"{package}.viewer"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        return None


def default_style(env: Any) -> NodeStyle:
    """Fallback: the action mask as a two-valued categorical feature."""
    return NodeStyle(
        values=np.asarray(env._mask(), dtype=np.int64),
        label="action mask",
        categories=(("not selectable", "#bdbdbd"), ("selectable", "#3182bd")),
    )


def outcome_text(trace: EpisodeTrace, env: Any = None) -> str:
    """``running``, ``terminated`` or ``truncated``, with the reason: the env's
    ``info["outcome"]``, else its viewer's ``end_reason(env)`` for a termination."""
    if not (trace.terminated or trace.truncated):
        return "running"
    text = "terminated" if trace.terminated else "truncated"
    outcome = trace.info.get("outcome")
    outcome = None if outcome == "none" else outcome  # SAR's value for "no outcome"
    viewer = viewer_of(env) if env is not None else None
    if not outcome and trace.terminated and viewer is not None and hasattr(viewer, "end_reason"):
        outcome = viewer.end_reason(env)
    return f"{text}: {str(outcome).replace('_', ' ')}" if outcome else text


def frame_title(env: Any) -> str:
    """Two lines: env, step (of the limit), last reward, return; outcome and env status."""
    trace = env._render_trace if env._render_trace is not None else EpisodeTrace(env)
    viewer = viewer_of(env)
    status = viewer.status(env, trace.info) if viewer is not None else ""
    max_steps = env._max_steps()
    step = f"step {env.elapsed_steps}" + (f"/{max_steps}" if max_steps is not None else "")
    reward = "-" if trace.reward is None else f"{trace.reward:+.3g}"
    return (
        f"{type(env).__name__.removesuffix('Env')}   {step}   reward {reward}   "
        f"return {trace.episode_return:+.3g}\n{outcome_text(trace, env)}"
        + (f"   |   {status}" if status else "")
    )


def render_env(env: Any) -> np.ndarray:
    """An (H, W, 3) uint8 frame of ``env``'s current state (see the module docstring)."""
    viewer = viewer_of(env)
    if env._layout_cache is None:
        positions = env._node_positions()
        env._layout_cache = positions if positions is not None else env._computed_layout()
    trace = env._render_trace if env._render_trace is not None else EpisodeTrace(env)
    style = viewer.node_style(env) if viewer is not None else default_style(env)
    events = getattr(viewer, "EDGE_EVENTS", ("added", "removed"))
    return draw_frame(
        np.asarray(env._adjacency()).astype(bool),
        env._layout_cache,
        style,
        frame_title(env),
        previous_adjacency=trace.previous_adjacency,
        start_adjacency=trace.start_adjacency if "added earlier" in events else None,
        selected=trace.selected,
        edge_events=events,
    )


def draw_frame(
    adjacency: np.ndarray,
    positions: np.ndarray,
    style: NodeStyle,
    title: str,
    *,
    previous_adjacency: np.ndarray | None = None,
    start_adjacency: np.ndarray | None = None,
    selected: np.ndarray | None = None,
    edge_events: tuple[str, ...] = ("added", "removed"),
) -> np.ndarray:
    """Draw one frame; returns an (H, W, 3) uint8 array (Agg backend, no display needed).

    Args:
        adjacency: (N, N) current adjacency.
        positions: (N, 2) node coordinates.
        style: the node colouring.
        title: the figure title (may hold a newline).
        previous_adjacency: the adjacency before the last step: edges it lacks are drawn as
            added, edges it has and ``adjacency`` lacks as removed.
        start_adjacency: the adjacency at the start of the episode: current edges it lacks
            (and not added by the last step) are drawn as added earlier.
        selected: (N,) bool, the nodes the last action selected (ringed).
        edge_events: the edge kinds listed in the legend.
    """
    from matplotlib import colormaps
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.cm import ScalarMappable
    from matplotlib.collections import LineCollection
    from matplotlib.colors import Normalize
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    adjacency = np.asarray(adjacency, dtype=bool)
    n = len(positions)
    width, height = FIGURE_PX
    fig = Figure(figsize=(width / _DPI, height / _DPI), dpi=_DPI)
    canvas = FigureCanvasAgg(fig)
    ax = fig.add_axes((0.01, 0.01, 0.68, 0.86))
    upper = np.triu(np.ones_like(adjacency), k=1)
    now = adjacency & upper
    added = now & ~previous_adjacency if previous_adjacency is not None else np.zeros_like(now)
    removed = (
        np.asarray(previous_adjacency, dtype=bool) & upper & ~adjacency
        if previous_adjacency is not None
        else np.zeros_like(now)
    )
    earlier = (
        now & ~np.asarray(start_adjacency, dtype=bool) & ~added
        if start_adjacency is not None
        else np.zeros_like(now)
    )
    plain = now & ~added & ~earlier
    for edges, colour, width_pt, style_ls, z in (
        (plain, EDGE_COLOUR, 0.8, "solid", 1),
        (earlier, EARLIER_COLOUR, 2.0, "solid", 2),
        (removed, REMOVED_COLOUR, 1.6, (0, (3, 2)), 3),
        (added, ADDED_COLOUR, 3.0, "solid", 3),
    ):
        rows, cols = np.nonzero(edges)
        if rows.size:
            segments = np.stack([positions[rows], positions[cols]], axis=1)
            ax.add_collection(
                LineCollection(
                    list(segments),
                    colors=colour,
                    linewidths=width_pt,
                    linestyles=style_ls,
                    zorder=z,
                )
            )

    area = (max(4.0, 75.0 / np.sqrt(max(n, 1)))) ** 2
    sizes = area * (np.asarray(style.sizes, dtype=float) if style.sizes is not None else np.ones(n))
    markers = np.asarray(style.markers) if style.markers is not None else np.full(n, "o")
    muted = np.asarray(style.muted, dtype=bool) if style.muted is not None else np.zeros(n, bool)
    handles: list = []
    if style.categories:
        colours = np.array([entry[1] for entry in style.categories], dtype=object)
        face = list(colours[np.asarray(style.values, dtype=np.int64)])
        handles += [
            Line2D(
                [],
                [],
                marker=entry[2] if len(entry) > 2 else "o",
                ls="",
                markerfacecolor=entry[1],
                markeredgecolor="k",
                markersize=8,
                label=entry[0],
            )
            for entry in style.categories
        ]
    else:
        norm = Normalize(style.vmin, style.vmax)
        cmap = colormaps[style.cmap]
        face = list(cmap(norm(np.asarray(style.values, dtype=float))))
        mappable = ScalarMappable(norm=norm, cmap=cmap)
        cax = fig.add_axes((0.74, 0.06, 0.03, 0.36))
        # values beyond the scale take its end colours; the bar itself never changes
        fig.colorbar(mappable, cax=cax)
        cax.set_title(style.label, fontsize=8, loc="left", pad=6)
        cax.tick_params(labelsize=7)
    for v in np.flatnonzero(muted):
        face[v] = MUTED_COLOUR
    if muted.any() or style.muted_label:
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                ls="",
                markerfacecolor=MUTED_COLOUR,
                markeredgecolor="k",
                markersize=5,
                label=style.muted_label,
            )
        )
    for marker in np.unique(markers):
        group = np.flatnonzero(markers == marker)
        xs, ys = positions[group].T
        ax.scatter(
            xs,
            ys,
            c=[face[v] for v in group],
            s=sizes[group],
            marker=marker,
            zorder=4,
            edgecolors="k",
            linewidths=0.5,
        )
    if selected is not None and np.any(selected):
        xs, ys = positions[np.asarray(selected, dtype=bool)].T
        ax.scatter(
            xs,
            ys,
            s=sizes.max() * 2.6,
            facecolors="none",
            edgecolors=SELECTED_COLOUR,
            linewidths=2.0,
            zorder=5,
        )
    handles.append(
        Line2D(
            [],
            [],
            marker="o",
            ls="",
            markerfacecolor="none",
            markeredgecolor=SELECTED_COLOUR,
            markeredgewidth=2,
            markersize=10,
            label="last action",
        )
    )
    edge_legend = {
        "added": (ADDED_COLOUR, "solid", 3.0, "edge added this step"),
        "added earlier": (EARLIER_COLOUR, "solid", 2.0, "edge added earlier"),
        "removed": (REMOVED_COLOUR, (0, (3, 2)), 1.6, "edge removed this step"),
    }
    for event in edge_events:
        colour, ls, lw, name = edge_legend[event]
        handles.append(Line2D([], [], color=colour, ls=ls, lw=lw, label=name))
    fig.legend(
        handles=handles,
        loc="upper left",
        bbox_to_anchor=(0.71, 0.86),
        fontsize=8,
        title=style.label if style.categories else None,
        title_fontsize=8,
        frameon=False,
        alignment="left",
    )
    if style.note:
        fig.text(
            0.72,
            0.5 if not style.categories else 0.04,
            style.note,
            fontsize=7,
            va="bottom",
            wrap=True,
        )
    fig.suptitle(title, fontsize=9, x=0.02, y=0.985, ha="left", va="top")
    ax.set_aspect("equal")
    ax.autoscale_view()
    ax.margins(0.04)
    ax.set_axis_off()
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()
