"""Check that an observation dict honours the data contract (used by tests and the soak run)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from graphwm_envs.core.schema import FeatureSchema
from graphwm_envs.core.spaces import observation_keys

OBS_DTYPES = {
    "adjacency": np.int8,
    "node_continuous": np.float32,
    "node_categorical": np.int64,
    "graph_continuous": np.float32,
    "graph_categorical": np.int64,
    "action_mask": np.int8,
}


def observation_shapes(sizes: Mapping[str, int], num_nodes: int) -> dict[str, tuple[int, ...]]:
    """The contract's shape of each observation key on ``num_nodes`` nodes, given the column
    count of each feature key (``FeatureSchema.sizes``)."""
    n = num_nodes
    return {
        "adjacency": (n, n),
        "node_continuous": (n, sizes["node_continuous"]),
        "node_categorical": (n, sizes["node_categorical"]),
        "graph_continuous": (sizes["graph_continuous"],),
        "graph_categorical": (sizes["graph_categorical"],),
        "action_mask": (n,),
    }


def _zero_one(arr: np.ndarray) -> bool:
    """Every entry of an integer array is 0 or 1."""
    return arr.size == 0 or (int(arr.min()) >= 0 and int(arr.max()) <= 1)


def validate_observation(
    obs: Mapping[str, np.ndarray], schema: FeatureSchema, num_nodes: int
) -> None:
    """Raise ``ValueError`` naming the first violation of the observation contract.

    Checks keys (a feature type the schema lacks must be absent), shapes, dtypes, a symmetric
    0/1 adjacency with zero diagonal, a non-empty 0/1 action mask, finite continuous values
    inside the declared ranges and categorical values inside their cardinalities.
    """
    keys = observation_keys(schema)
    if set(obs) != set(keys):
        raise ValueError(f"observation keys {sorted(obs)} != contract keys {sorted(keys)}")
    shapes = observation_shapes(schema.sizes, num_nodes)
    for key in keys:
        dtype = OBS_DTYPES[key]
        arr = obs[key]
        if not isinstance(arr, np.ndarray):
            raise ValueError(f"{key} must be a numpy array, got {type(arr).__name__}")
        if arr.dtype != dtype:
            raise ValueError(f"{key} has dtype {arr.dtype}, expected {np.dtype(dtype)}")
        if arr.shape != shapes[key]:
            raise ValueError(f"{key} has shape {arr.shape}, expected {shapes[key]}")
    adj = obs["adjacency"]
    # int8 here (checked above), so 0/1 <=> 0 <= a <= 1: two reductions, not a set lookup per
    # entry (restore_state validates every snapshot: 30 of them per evaluated transition)
    if not _zero_one(adj):
        raise ValueError("adjacency has entries other than 0/1")
    if not np.array_equal(adj, adj.T):
        raise ValueError("adjacency is not symmetric")
    if np.any(np.diagonal(adj)):
        raise ValueError("adjacency has self-loops")
    if not _zero_one(obs["action_mask"]):
        raise ValueError("action_mask has entries other than 0/1")
    if not obs["action_mask"].any():
        raise ValueError("action_mask is all zero (the contract's mask always has a valid node)")
    for key in ("node_continuous", "graph_continuous", "node_categorical", "graph_categorical"):
        if key in obs:  # a feature type the schema lacks is absent (checked above)
            _check_values(obs[key], key, schema)


def _check_values(arr: np.ndarray, key: str, schema: FeatureSchema) -> None:
    """Continuous columns finite and inside their ranges, categorical codes inside
    ``[0, card)``; raise ``ValueError`` naming the first feature that is not."""
    if key.endswith("_continuous"):
        if not np.isfinite(arr).all():
            raise ValueError(f"{key} has NaN or inf")
        for col, name in enumerate(getattr(schema, key)):
            lo, hi = schema.range_of(name)
            values = arr[..., col]
            if values.size and (values.min() < lo or values.max() > hi):
                raise ValueError(
                    f"{name} out of its range [{lo}, {hi}]: [{values.min()}, {values.max()}]"
                )
        return
    for col, (name, card) in enumerate(getattr(schema, key)):
        values = arr[..., col]
        if values.size and (values.min() < 0 or values.max() >= card):
            raise ValueError(f"{name} outside [0, {card - 1}]: {np.unique(values)}")
