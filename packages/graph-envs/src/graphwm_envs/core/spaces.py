"""Gymnasium observation space of the data contract.

Every env's observation is a ``spaces.Dict`` with these keys and shapes for N nodes:

========================  ====================================  ==========
key                       space                                 dtype
========================  ====================================  ==========
``adjacency``             ``Box(0, 1, (N, N))``                 int8
``node_continuous``       ``Box((N, Fnc))`` with feature ranges float32
``node_categorical``      ``Box((N, Fnk))``, ``[0, card-1]``    int64
``graph_continuous``      ``Box((Fgc,))`` with feature ranges   float32
``graph_categorical``     ``MultiDiscrete(cards)``              int64
``action_mask``           ``Box(0, 1, (N,))``                   int8
========================  ====================================  ==========

The 0/1 arrays and the node categorical features are integer ``Box`` spaces, the one space
type every RL library reads: torchrl cannot convert a 2-D ``MultiBinary`` (its spec converter
takes ``MultiBinary.n`` as an int), skrl refuses ``MultiBinary`` altogether, and SB3's
``check_env`` accepts a 2-D ``MultiDiscrete`` whose policies then fail to build. An int8
``Box(0, 1)`` holds the same arrays as ``MultiBinary`` (same dtype, same values), so recorded
data and trained agents are unaffected (SB3 preprocesses both as ``obs.float()``). A constant
continuous feature's upper bound is widened by one float32 ulp (Gymnasium warns about a Box
whose low equals its high).

A feature type an env lacks (RGC's node features, OD's graph categorical features, ...) is
**absent** from both the space and the observation: a zero-width array would break SB3's
``predict`` and its terminal-observation handling (``obs.reshape((-1, N, 0))`` is ambiguous for
an empty array). Consumers read an absent feature key as a zero-width array
(:func:`observation_keys` lists the keys an env emits).
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from graphwm_envs.core.schema import FEATURE_KEYS, FeatureSchema


def _continuous_box(schema: FeatureSchema, names: tuple[str, ...], shape: tuple[int, ...]):
    lows = np.array([schema.range_of(n)[0] for n in names], dtype=np.float32)
    highs = np.array([schema.range_of(n)[1] for n in names], dtype=np.float32)
    # A constant feature (e.g. k) has low == high; Gymnasium's checker flags such a degenerate
    # Box, so its upper bound is widened by one float32 ulp (the schema keeps the exact range).
    highs = np.where(lows == highs, np.nextafter(highs, np.float32(np.inf)), highs)
    return spaces.Box(
        low=np.broadcast_to(lows, shape).copy(),
        high=np.broadcast_to(highs, shape).copy(),
        shape=shape,
        dtype=np.float32,
    )


def binary_box(shape: tuple[int, ...]) -> spaces.Box:
    """The int8 ``Box(0, 1, shape)`` of ``adjacency`` and ``action_mask``."""
    return spaces.Box(low=0, high=1, shape=shape, dtype=np.int8)


def _categorical_box(cards: list[int], shape: tuple[int, ...]) -> spaces.Box:
    high = np.broadcast_to(np.array(cards, dtype=np.int64) - 1, shape).copy()
    return spaces.Box(low=0, high=high, shape=shape, dtype=np.int64)


def observation_keys(schema: FeatureSchema) -> tuple[str, ...]:
    """The keys of an observation under ``schema``: adjacency, the feature types the schema
    has (in contract order) and action_mask."""
    sizes = schema.sizes
    return ("adjacency", *(k for k in FEATURE_KEYS if sizes[k]), "action_mask")


def build_observation_space(schema: FeatureSchema, num_nodes: int) -> spaces.Dict:
    """The ``spaces.Dict`` observation space for ``schema`` on a graph of ``num_nodes`` nodes.

    Feature types without features are left out (see the module docstring).
    """
    n = num_nodes
    node_cards = [c for _, c in schema.node_categorical]
    graph_cards = [c for _, c in schema.graph_categorical]
    candidates: dict[str, spaces.Space] = {"adjacency": binary_box((n, n))}
    if schema.node_continuous:
        candidates["node_continuous"] = _continuous_box(
            schema, schema.node_continuous, (n, len(schema.node_continuous))
        )
    if node_cards:
        candidates["node_categorical"] = _categorical_box(node_cards, (n, len(node_cards)))
    if schema.graph_continuous:
        candidates["graph_continuous"] = _continuous_box(
            schema, schema.graph_continuous, (len(schema.graph_continuous),)
        )
    if graph_cards:
        candidates["graph_categorical"] = spaces.MultiDiscrete(
            np.array(graph_cards), dtype=np.int64
        )
    candidates["action_mask"] = binary_box((n,))
    return spaces.Dict(candidates)
