"""Feature schema: names, categorical cardinalities and value ranges of an env's observation.

The schema is the contract between the envs, the models and the metric. Other packages never
import :mod:`graphwm_envs`; they receive :meth:`FeatureSchema.to_dict`, a plain JSON-able dict::

    {
        "node_continuous": ["stability"],
        "node_categorical": {"survivor_present": 2, "exit_node": 2, "current_location": 2},
        "graph_continuous": ["k"],
        "graph_categorical": {"escorting": 2},
        "ranges": {"stability": [0.0, 1.0], "k": [1.0, 1.0]},
    }

The order of names is the order of the columns in the observation arrays. A feature type that
an env lacks is an empty list / dict, and its key is absent from the observation (consumers
read an absent key as a zero-width array).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

FEATURE_KEYS = ("node_continuous", "node_categorical", "graph_continuous", "graph_categorical")


@dataclass(frozen=True)
class FeatureSchema:
    """Names and value spaces of an env's node and graph features.

    Args:
        node_continuous: names of the continuous node features (columns of ``node_continuous``).
        node_categorical: name -> number of categories, for ``node_categorical`` columns.
        graph_continuous: names of the continuous graph features.
        graph_categorical: name -> number of categories, for ``graph_categorical`` entries.
        ranges: name -> (low, high) for continuous features (``-inf``/``inf`` if unbounded).
    """

    node_continuous: tuple[str, ...] = ()
    node_categorical: tuple[tuple[str, int], ...] = ()
    graph_continuous: tuple[str, ...] = ()
    graph_categorical: tuple[tuple[str, int], ...] = ()
    ranges: tuple[tuple[str, tuple[float, float]], ...] = field(default=())

    @classmethod
    def build(
        cls,
        *,
        node_continuous: Sequence[str] = (),
        node_categorical: Mapping[str, int] | None = None,
        graph_continuous: Sequence[str] = (),
        graph_categorical: Mapping[str, int] | None = None,
        ranges: Mapping[str, tuple[float, float]] | None = None,
    ) -> FeatureSchema:
        """Build a schema from plain sequences and mappings, validating names and sizes."""
        schema = cls(
            node_continuous=tuple(node_continuous),
            node_categorical=tuple((node_categorical or {}).items()),
            graph_continuous=tuple(graph_continuous),
            graph_categorical=tuple((graph_categorical or {}).items()),
            ranges=tuple((k, (float(v[0]), float(v[1]))) for k, v in (ranges or {}).items()),
        )
        schema.validate()
        return schema

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSchema:
        """Inverse of :meth:`to_dict`."""
        unknown = set(data) - set(FEATURE_KEYS) - {"ranges"}
        if unknown:
            raise ValueError(f"unknown schema keys: {sorted(unknown)}")
        return cls.build(
            node_continuous=data.get("node_continuous", []),
            node_categorical=data.get("node_categorical", {}),
            graph_continuous=data.get("graph_continuous", []),
            graph_categorical=data.get("graph_categorical", {}),
            ranges={k: tuple(v) for k, v in data.get("ranges", {}).items()},
        )

    def validate(self) -> None:
        """Raise ``ValueError`` on duplicate names, bad cardinalities or bad ranges."""
        names = self.all_names()
        if len(set(names)) != len(names):
            raise ValueError(f"feature names must be unique across the schema, got {names}")
        for name, card in self.node_categorical + self.graph_categorical:
            if not isinstance(card, int) or card < 2:
                raise ValueError(f"categorical feature {name!r} needs an int cardinality >= 2")
        for name, (lo, hi) in self.ranges:
            if name not in names:
                raise ValueError(f"range given for unknown feature {name!r}")
            if math.isnan(lo) or math.isnan(hi) or lo > hi:
                raise ValueError(f"invalid range for {name!r}: ({lo}, {hi})")

    def all_names(self) -> list[str]:
        """Every feature name, in the order node_cont, node_cat, graph_cont, graph_cat."""
        return [
            *self.node_continuous,
            *(n for n, _ in self.node_categorical),
            *self.graph_continuous,
            *(n for n, _ in self.graph_categorical),
        ]

    def range_of(self, name: str) -> tuple[float, float]:
        """Value range of a continuous feature (unbounded if none was declared)."""
        return dict(self.ranges).get(name, (-math.inf, math.inf))

    @property
    def sizes(self) -> dict[str, int]:
        """Number of columns per feature key."""
        return {key: len(getattr(self, key)) for key in FEATURE_KEYS}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (the form the other packages accept)."""
        # continuous: a list of names; categorical: {name: cardinality}
        data: dict[str, Any] = {
            key: (dict if key.endswith("_categorical") else list)(getattr(self, key))
            for key in FEATURE_KEYS
        }
        data["ranges"] = {k: [lo, hi] for k, (lo, hi) in self.ranges}
        return data
