"""Feature schema and sample-set validation for the Graph Distribution Distance.

A *schema* is the plain, JSON-able dict shared by the workspace (docs/contract.md)::

    {"node_continuous": ["stability"],
     "node_categorical": {"survivor_present": 2, "exit_node": 2},
     "graph_continuous": ["k"],
     "graph_categorical": {"escorting": 2},
     "ranges": {...}}                      # optional, ignored here

The order of names is the order of the feature columns. Absent feature types are ``[]`` /
``{}`` (or missing keys). Other keys (``"ranges"`` ...) are ignored; a misspelt key is still
caught, because the array widths then disagree with the schema.

A *sample set* is a dict of numpy arrays with a leading sample axis ``S``: ``adjacency``
``(S, N, N)``, ``node_continuous`` ``(S, N, Fnc)``, ``node_categorical`` ``(S, N, Fnk)``,
``graph_continuous`` ``(S, Fgc)``, ``graph_categorical`` ``(S, Fgk)``. Other keys (e.g.
``action_mask``) are ignored. A feature-type key may be omitted only when the schema has no
feature of that type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "FEATURE_TYPES",
    "Schema",
    "SampleSet",
    "normalise_schema",
    "validate_samples",
    "check_same_nodes",
    "select_features",
]

#: The four feature types of an attributed graph (paper, section "Graph Distribution Distance").
FEATURE_TYPES = ("node_continuous", "node_categorical", "graph_continuous", "graph_categorical")


@dataclass(frozen=True)
class Schema:
    """A validated, normalised schema.

    Continuous features are tuples of names; categorical features are tuples of
    ``(name, cardinality)`` pairs. Names are unique across all four types, because bandwidths
    are looked up by name.
    """

    node_continuous: tuple[str, ...] = ()
    node_categorical: tuple[tuple[str, int], ...] = ()
    graph_continuous: tuple[str, ...] = ()
    graph_categorical: tuple[tuple[str, int], ...] = ()

    @property
    def continuous_names(self) -> tuple[str, ...]:
        """Names of all continuous features (node first, then graph)."""
        return self.node_continuous + self.graph_continuous

    @property
    def categorical_names(self) -> tuple[str, ...]:
        """Names of all categorical features (node first, then graph)."""
        return tuple(n for n, _ in self.node_categorical + self.graph_categorical)

    def width(self, feature_type: str) -> int:
        """Number of columns of ``feature_type``."""
        return len(getattr(self, feature_type))

    def to_dict(self) -> dict:
        """The plain-dict form (inverse of :func:`normalise_schema`)."""
        return {
            "node_continuous": list(self.node_continuous),
            "node_categorical": dict(self.node_categorical),
            "graph_continuous": list(self.graph_continuous),
            "graph_categorical": dict(self.graph_categorical),
        }


def _names(value: object, key: str) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise TypeError(f"schema[{key!r}] must be a list of feature names, got {value!r}")
    for name in value:
        if not isinstance(name, str) or not name:
            raise TypeError(f"schema[{key!r}] contains a non-string or empty name: {name!r}")
    return tuple(value)


def _cardinalities(value: object, key: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, Mapping):
        raise TypeError(f"schema[{key!r}] must be a dict name -> cardinality, got {value!r}")
    out = []
    for name, card in value.items():
        if not isinstance(name, str) or not name:
            raise TypeError(f"schema[{key!r}] contains a non-string or empty name: {name!r}")
        if isinstance(card, bool) or not isinstance(card, int | np.integer) or card < 1:
            raise ValueError(
                f"schema[{key!r}][{name!r}] must be a positive integer cardinality, got {card!r}"
            )
        if card > _MAX_CARDINALITY:
            raise ValueError(
                f"schema[{key!r}][{name!r}]: cardinality {card} exceeds {_MAX_CARDINALITY} "
                "(codes are int64 arrays, so no code could reach it)"
            )
        out.append((name, int(card)))
    return tuple(out)


#: the largest cardinality int64 codes can express (the metric sizes its one-hot products by
#: the codes present, not by the cardinality: grams.compact_codes)
_MAX_CARDINALITY = int(np.iinfo(np.int64).max)


def normalise_schema(schema: Mapping | Schema) -> Schema:
    """Validate a schema dict and return a :class:`Schema`.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: a cardinality is not a positive integer, or a name is used twice.
    """
    if isinstance(schema, Schema):
        return schema
    if not isinstance(schema, Mapping):
        raise TypeError(f"schema must be a dict, got {type(schema).__name__}")
    result = Schema(
        node_continuous=_names(schema.get("node_continuous", []), "node_continuous"),
        node_categorical=_cardinalities(schema.get("node_categorical", {}), "node_categorical"),
        graph_continuous=_names(schema.get("graph_continuous", []), "graph_continuous"),
        graph_categorical=_cardinalities(schema.get("graph_categorical", {}), "graph_categorical"),
    )
    seen: set[str] = set()
    for name in result.continuous_names + result.categorical_names:
        if name in seen:
            raise ValueError(f"schema uses the feature name {name!r} twice; names must be unique")
        seen.add(name)
    return result


@dataclass(frozen=True)
class SampleSet:
    """A validated sample set (see the module docstring for the input format).

    ``support`` is the union over samples of the adjacency's non-zero pattern, shape (N, N)
    bool; it is computed during validation and reused by the Jaccard kernel.
    """

    adjacency: np.ndarray  # (S, N, N), 0/1, symmetric, zero diagonal (original dtype)
    node_continuous: np.ndarray  # (S, N, Fnc) float64
    node_categorical: np.ndarray  # (S, N, Fnk) int64
    graph_continuous: np.ndarray  # (S, Fgc) float64
    graph_categorical: np.ndarray  # (S, Fgk) int64
    support: np.ndarray  # (N, N) bool

    @property
    def num_samples(self) -> int:
        return self.adjacency.shape[0]

    @property
    def num_nodes(self) -> int:
        return self.adjacency.shape[1]


def _check_adjacency(adj: object, name: str) -> tuple[np.ndarray, np.ndarray]:
    adj = np.asarray(adj)
    if adj.ndim != 3 or adj.shape[1] != adj.shape[2]:
        raise ValueError(f"{name}['adjacency'] must have shape (S, N, N), got {adj.shape}")
    if not (adj.dtype == np.bool_ or np.issubdtype(adj.dtype, np.number)):
        raise TypeError(f"{name}['adjacency'] must be numeric or bool, got dtype {adj.dtype}")
    if np.issubdtype(adj.dtype, np.complexfloating):
        raise TypeError(f"{name}['adjacency'] must be real, got dtype {adj.dtype}")
    if adj.shape[0] == 0:
        raise ValueError(f"{name} is an empty sample set (S = 0)")
    s, n, _ = adj.shape
    if n == 0:
        return adj, np.zeros((0, 0), dtype=bool)
    if adj.dtype == np.bool_ or np.issubdtype(adj.dtype, np.integer):
        # integer sets (the envs' int8, sampled models): whole-array reductions accept a valid
        # set at a fraction of the gathers below; a failing set goes on to them, which name
        # the first problem
        zero_one = adj.dtype == np.bool_ or (int(adj.min()) >= 0 and int(adj.max()) <= 1)
        if (
            zero_one
            and not np.diagonal(adj, axis1=1, axis2=2).any()
            and np.array_equal(adj, adj.transpose(0, 2, 1))
        ):
            return adj, np.asarray(adj.any(axis=0))
    # Every entry outside the union support is 0, so value and symmetry checks only need the
    # support (one cheap reduction over the samples instead of a full transpose).
    support: np.ndarray = np.asarray(adj.any(axis=0))  # non-zero (or NaN) anywhere in the set
    flat = np.flatnonzero(support)
    if flat.size:
        rows, cols = np.divmod(flat, n)
        if np.any(rows == cols):
            v = int(rows[rows == cols][0])
            raise ValueError(f"{name}['adjacency'] has a self-loop at node {v}: diagonal must be 0")
        values = adj.reshape(s, n * n)[:, flat]
        if adj.dtype != np.bool_ and not np.all((values == 0) | (values == 1)):
            bad = values[(values != 0) & (values != 1)][0]
            raise ValueError(f"{name}['adjacency'] must contain only 0 and 1, found {bad.item()!r}")
        mirrored = adj.reshape(s, n * n)[:, cols * n + rows]
        if not np.array_equal(values != 0, mirrored != 0):
            k = int(np.argwhere((values != 0) != (mirrored != 0))[0, 0])
            raise ValueError(
                f"{name}['adjacency'] is not symmetric (sample {k}); graphs must be undirected"
            )
    return adj, support


def _feature_array(
    samples: Mapping, key: str, shape: tuple[int, ...], name: str, continuous: bool
) -> np.ndarray:
    if key not in samples:
        if shape[-1] == 0:
            return np.zeros(shape, dtype=np.float64 if continuous else np.int64)
        raise KeyError(f"{name} lacks the key {key!r} required by the schema")
    arr = np.asarray(samples[key])
    if arr.shape != shape:
        what = "(S, N, F)" if key.startswith("node") else "(S, F)"
        raise ValueError(
            f"{name}[{key!r}] must have shape {what} = {shape} (S samples, N nodes, F schema "
            f"features), got {arr.shape}"
        )
    if continuous:
        if not (np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)):
            raise TypeError(f"{name}[{key!r}] must be a real array, got dtype {arr.dtype}")
        arr = arr.astype(np.float64, copy=False)
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}[{key!r}] contains NaN or inf")
        return arr
    # Categorical codes keep their dtype here: the range check runs on the original values
    # (a uint64 code above 2**63 would wrap to a negative int64), then validate_samples casts.
    if arr.dtype == np.bool_:
        return arr.astype(np.int64)
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)):
            raise ValueError(f"{name}[{key!r}] contains NaN or inf")
        if not np.all(arr == np.round(arr)):
            raise ValueError(f"{name}[{key!r}] must hold integer category codes")
    elif not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"{name}[{key!r}] must be an integer array, got dtype {arr.dtype}")
    return arr


def _check_categories(
    arr: np.ndarray, specs: Sequence[tuple[str, int]], key: str, name: str
) -> None:
    for f, (feat, card) in enumerate(specs):
        col = arr[..., f]
        if col.size and (col.min() < 0 or col.max() >= card):
            bad = col[(col < 0) | (col >= card)].flat[0]
            raise ValueError(
                f"{name}[{key!r}] feature {feat!r} has value {bad.item()!r} outside its "
                f"cardinality {card} (valid: 0..{card - 1})"
            )


def validate_samples(
    samples: Mapping, schema: Mapping | Schema, name: str = "samples"
) -> SampleSet:
    """Validate one sample set against ``schema``; return a :class:`SampleSet`.

    Raises:
        TypeError / KeyError / ValueError naming the problem: wrong shape or dtype, widths that
        disagree with the schema, node-count mismatch between arrays, NaN/inf, category codes
        outside the cardinality, an empty sample set, non-0/1, self-looped or asymmetric
        adjacency.
    """
    if isinstance(samples, SampleSet):
        return samples
    schema = normalise_schema(schema)
    if not isinstance(samples, Mapping):
        raise TypeError(f"{name} must be a dict of arrays, got {type(samples).__name__}")
    if "adjacency" not in samples:
        raise KeyError(f"{name} lacks the key 'adjacency' (use shape (S, 0, 0) for no nodes)")
    adj, support = _check_adjacency(samples["adjacency"], name)
    s, n = adj.shape[0], adj.shape[1]
    ncont = _feature_array(
        samples, "node_continuous", (s, n, schema.width("node_continuous")), name, True
    )
    ncat = _feature_array(
        samples, "node_categorical", (s, n, schema.width("node_categorical")), name, False
    )
    gcont = _feature_array(
        samples, "graph_continuous", (s, schema.width("graph_continuous")), name, True
    )
    gcat = _feature_array(
        samples, "graph_categorical", (s, schema.width("graph_categorical")), name, False
    )
    _check_categories(ncat, schema.node_categorical, "node_categorical", name)
    _check_categories(gcat, schema.graph_categorical, "graph_categorical", name)
    ncat = ncat.astype(np.int64, copy=False)  # codes are now known to lie in [0, card)
    gcat = gcat.astype(np.int64, copy=False)
    return SampleSet(adj, ncont, ncat, gcont, gcat, support)


def check_same_nodes(pred: SampleSet, true: SampleSet) -> None:
    """Raise ``ValueError`` unless both sets live on the same (aligned) node set."""
    if pred.num_nodes != true.num_nodes:
        raise ValueError(
            f"mismatched node counts: pred has N = {pred.num_nodes}, true has "
            f"N = {true.num_nodes}; GDD compares graphs on the same aligned node set"
        )


def select_features(
    samples: Mapping,
    schema: Mapping | Schema,
    features: Sequence[str],
    *,
    keep_nodes: bool = True,
) -> tuple[dict, dict]:
    """Restrict a sample set and its schema to the named features.

    Args:
        samples: a sample set (dict of arrays with a leading sample axis).
        schema: its schema.
        features: names of the features to keep (any of the four types).
        keep_nodes: if ``False`` the node set is dropped (adjacency becomes ``(S, 0, 0)``), so
            topology and node terms are exactly 0 in the GDD -- the convention for terminal
            transitions, which are scored on graph features only. Node features may then not
            be selected.

    Returns:
        ``(samples, schema)`` restricted, ready for :func:`gdd_metric.gdd`.
    """
    sch = normalise_schema(schema)
    known = set(sch.continuous_names + sch.categorical_names)
    unknown = [f for f in features if f not in known]
    if unknown:
        raise KeyError(f"features not in the schema: {unknown}")
    keep = set(features)
    out_schema: dict = {}
    out: dict = {}
    adj = np.asarray(samples["adjacency"])
    s = adj.shape[0]
    for key in FEATURE_TYPES:
        specs = getattr(sch, key)
        names = [sp if isinstance(sp, str) else sp[0] for sp in specs]
        idx = [i for i, nm in enumerate(names) if nm in keep]
        if key.startswith("node") and not keep_nodes and idx:
            raise ValueError(
                f"keep_nodes=False drops the nodes, but node features were selected: "
                f"{[names[i] for i in idx]}"
            )
        if key.endswith("continuous"):
            out_schema[key] = [names[i] for i in idx]
        else:
            out_schema[key] = {specs[i][0]: specs[i][1] for i in idx}
        width = len(specs)
        default_shape = (s, adj.shape[1], width) if key.startswith("node") else (s, width)
        dtype = np.float64 if key.endswith("continuous") else np.int64
        arr = np.asarray(samples[key]) if key in samples else np.zeros(default_shape, dtype)
        arr = arr[..., idx]
        if key.startswith("node") and not keep_nodes:
            arr = arr[:, :0]
        out[key] = arr
    out["adjacency"] = adj if keep_nodes else np.zeros((s, 0, 0), dtype=adj.dtype)
    return out, out_schema
