"""Feature schema: parse and validate the plain schema dict shared with the environments.

The schema is a JSON-able dict (see docs/architecture.md, contract 2)::

    {"node_continuous": ["stability"],
     "node_categorical": {"survivor_present": 2, "exit_node": 2},
     "graph_continuous": ["k"],
     "graph_categorical": {"escorting": 2},
     "ranges": {"stability": [0.0, 1.0]}}        # optional

The order of names is the order of columns in the observation arrays. Absent feature types are
``[]`` / ``{}`` (a missing key is accepted and read as empty); their observation key is absent
too, read as a zero-width array (:func:`gdm_models.data.complete_observation`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Schema", "SchemaError", "parse_schema"]

_LIST_KEYS = ("node_continuous", "graph_continuous")
_DICT_KEYS = ("node_categorical", "graph_categorical")
_KNOWN_KEYS = set(_LIST_KEYS) | set(_DICT_KEYS) | {"ranges"}


#: the largest cardinality int64 codes can express
_MAX_CARDINALITY = 2**63 - 1


class SchemaError(ValueError):
    """Raised when a schema dict is malformed."""


@dataclass(frozen=True)
class Schema:
    """Validated, immutable view of a feature schema.

    Attributes:
        node_continuous: names of the continuous node features (columns of ``node_continuous``).
        node_categorical: ``(name, cardinality)`` pairs (columns of ``node_categorical``).
        graph_continuous: names of the continuous graph features.
        graph_categorical: ``(name, cardinality)`` pairs for the graph categorical features.
        ranges: optional ``{name: (low, high)}`` value ranges (informational only).
    """

    node_continuous: tuple[str, ...] = ()
    node_categorical: tuple[tuple[str, int], ...] = ()
    graph_continuous: tuple[str, ...] = ()
    graph_categorical: tuple[tuple[str, int], ...] = ()
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    # ----------------------------------------------------------------- construction
    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | Schema) -> Schema:
        """Parse and validate a plain schema dict (or return a ``Schema`` unchanged)."""
        if isinstance(d, Schema):
            return d
        if not isinstance(d, Mapping):
            raise SchemaError(f"schema must be a dict, got {type(d).__name__}")
        unknown = set(d) - _KNOWN_KEYS
        if unknown:
            raise SchemaError(
                f"unknown schema keys {sorted(unknown)}; allowed: {sorted(_KNOWN_KEYS)}"
            )
        lists = {}
        for key in _LIST_KEYS:
            names = d.get(key, [])
            if isinstance(names, str | bytes) or not isinstance(names, list | tuple):
                raise SchemaError(f"schema[{key!r}] must be a list of names, got {names!r}")
            for n in names:
                if not isinstance(n, str) or not n:
                    raise SchemaError(f"schema[{key!r}] contains an invalid name {n!r}")
            if len(set(names)) != len(names):
                raise SchemaError(f"schema[{key!r}] has duplicate names: {list(names)}")
            lists[key] = tuple(names)
        dicts = {}
        for key in _DICT_KEYS:
            cats = d.get(key, {})
            if not isinstance(cats, Mapping):
                raise SchemaError(
                    f"schema[{key!r}] must be a dict name -> cardinality, got {cats!r}"
                )
            pairs = []
            for n, k in cats.items():
                if not isinstance(n, str) or not n:
                    raise SchemaError(f"schema[{key!r}] contains an invalid name {n!r}")
                if isinstance(k, bool) or not isinstance(k, int) or k < 2:
                    raise SchemaError(
                        f"schema[{key!r}][{n!r}] must be an integer cardinality >= 2, got {k!r}"
                    )
                if k > _MAX_CARDINALITY:  # before torch sees it (an overflow TypeError there)
                    raise SchemaError(
                        f"schema[{key!r}][{n!r}]: cardinality {k} exceeds {_MAX_CARDINALITY} "
                        "(codes are int64)"
                    )
                pairs.append((n, int(k)))
            dicts[key] = tuple(pairs)
        ranges_in = d.get("ranges", {}) or {}
        if not isinstance(ranges_in, Mapping):
            raise SchemaError(f"schema['ranges'] must be a dict, got {ranges_in!r}")
        ranges = {}
        for n, r in ranges_in.items():
            if not isinstance(r, list | tuple) or len(r) != 2:
                raise SchemaError(f"schema['ranges'][{n!r}] must be [low, high], got {r!r}")
            lo, hi = float(r[0]), float(r[1])
            if math.isnan(lo) or math.isnan(hi) or lo > hi:
                raise SchemaError(f"schema['ranges'][{n!r}] is not a valid interval: {r!r}")
            ranges[str(n)] = (lo, hi)
        return cls(
            node_continuous=lists["node_continuous"],
            node_categorical=dicts["node_categorical"],
            graph_continuous=lists["graph_continuous"],
            graph_categorical=dicts["graph_categorical"],
            ranges=ranges,
        )

    def to_dict(self) -> dict[str, Any]:
        """Return the plain JSON-able dict form (inverse of :meth:`from_dict`)."""
        d: dict[str, Any] = {
            "node_continuous": list(self.node_continuous),
            "node_categorical": dict(self.node_categorical),
            "graph_continuous": list(self.graph_continuous),
            "graph_categorical": dict(self.graph_categorical),
        }
        if self.ranges:
            d["ranges"] = {k: [v[0], v[1]] for k, v in self.ranges.items()}
        return d

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Schema):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    def __hash__(self) -> int:
        return hash(repr(self.to_dict()))

    def same_features(self, other: Schema) -> bool:
        """True if both schemas have the same features (``ranges`` ignored)."""
        a, b = self.to_dict(), other.to_dict()
        a.pop("ranges", None)
        b.pop("ranges", None)
        return a == b

    # ----------------------------------------------------------------- sizes
    @property
    def num_node_continuous(self) -> int:
        """Number of continuous node features (Fnc)."""
        return len(self.node_continuous)

    @property
    def num_node_categorical(self) -> int:
        """Number of categorical node features (Fnk)."""
        return len(self.node_categorical)

    @property
    def num_graph_continuous(self) -> int:
        """Number of continuous graph features (Fgc)."""
        return len(self.graph_continuous)

    @property
    def num_graph_categorical(self) -> int:
        """Number of categorical graph features (Fgk)."""
        return len(self.graph_categorical)

    @property
    def node_cardinalities(self) -> tuple[int, ...]:
        """Cardinalities of the categorical node features, in column order."""
        return tuple(k for _, k in self.node_categorical)

    @property
    def graph_cardinalities(self) -> tuple[int, ...]:
        """Cardinalities of the categorical graph features, in column order."""
        return tuple(k for _, k in self.graph_categorical)

    @property
    def num_node_features(self) -> int:
        """|F_n|: number of node features (continuous + categorical)."""
        return self.num_node_continuous + self.num_node_categorical

    @property
    def num_graph_features(self) -> int:
        """|F_g|: number of graph features (continuous + categorical)."""
        return self.num_graph_continuous + self.num_graph_categorical


def parse_schema(d: Mapping[str, Any] | Schema) -> Schema:
    """Parse and validate a plain schema dict; see :meth:`Schema.from_dict`."""
    return Schema.from_dict(d)
