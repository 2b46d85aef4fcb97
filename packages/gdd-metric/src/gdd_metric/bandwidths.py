"""Kernel bandwidths sigma_f and categorical weights lambda_f, and their fitting.

Paper, appendix "Bandwidth Fitting": for every continuous feature the base bandwidth is the
median non-zero absolute one-step change (node features pooled over nodes); if the feature
never changes, the median non-zero absolute value; if it is identically zero, the minimum
bandwidth 1e-8. For every categorical feature, lambda_f = 1 / E_t[rho_{t,f}], where rho_{t,f}
is the fraction of entries of transition t whose value changes; lambda_f = 1 when nothing
changes.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from .schema import Schema, normalise_schema

__all__ = ["Bandwidths", "fit_bandwidths", "MIN_BANDWIDTH"]

#: The minimum bandwidth (paper, appendix "Bandwidth Fitting").
MIN_BANDWIDTH = 1e-8

_FORMAT = "gdd-metric/bandwidths"


def _positive_dict(values: Mapping, what: str) -> dict[str, float]:
    if not isinstance(values, Mapping):
        raise TypeError(f"{what} must be a dict name -> value, got {type(values).__name__}")
    out = {}
    for name, value in values.items():
        if not isinstance(name, str):
            raise TypeError(f"{what} keys must be feature names (str), got {name!r}")
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{what}[{name!r}] must be a number, got {value!r}") from None
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"{what}[{name!r}] must be finite and > 0, got {value!r}")
        out[name] = v
    return out


@dataclass(frozen=True)
class Bandwidths:
    """Per-feature kernel parameters, looked up by feature name.

    Attributes:
        sigma: sigma_f > 0 for every continuous feature (node or graph level).
        lam: lambda_f > 0 for every categorical feature (node or graph level).

    Entries for features absent from a schema are ignored, so one ``Bandwidths`` serves any
    sub-schema.
    """

    sigma: dict[str, float] = field(default_factory=dict)
    lam: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sigma", _positive_dict(self.sigma, "sigma"))
        object.__setattr__(self, "lam", _positive_dict(self.lam, "lambda"))

    def check(self, schema: Mapping | Schema) -> None:
        """Raise ``KeyError`` if a feature of ``schema`` has no bandwidth / weight."""
        schema = normalise_schema(schema)
        missing = [f for f in schema.continuous_names if f not in self.sigma]
        if missing:
            raise KeyError(f"no bandwidth sigma_f for continuous feature(s) {missing}")
        missing = [f for f in schema.categorical_names if f not in self.lam]
        if missing:
            raise KeyError(f"no weight lambda_f for categorical feature(s) {missing}")

    def to_dict(self) -> dict:
        """A JSON-able dict ``{"format", "version", "sigma", "lambda"}``."""
        return {
            "format": _FORMAT,
            "version": 1,
            "sigma": dict(self.sigma),
            "lambda": dict(self.lam),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Bandwidths:
        """Inverse of :meth:`to_dict` (``format``/``version`` optional)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"bandwidths must be a dict, got {type(data).__name__}")
        if data.get("format", _FORMAT) != _FORMAT:
            raise ValueError(f"not a bandwidths file: format {data.get('format')!r}")
        if data.get("version", 1) != 1:
            raise ValueError(f"unsupported bandwidths version {data.get('version')!r}")
        unknown = set(data) - {"format", "version", "sigma", "lambda"}
        if unknown:
            raise ValueError(f"unknown keys in bandwidths: {sorted(unknown)}")
        return cls(sigma=data.get("sigma", {}), lam=data.get("lambda", {}))

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """Serialise to a JSON string; also write it to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
        return text

    @classmethod
    def from_json(cls, source: str | os.PathLike) -> Bandwidths:
        """Load from a JSON string or from a path to a JSON file."""
        text = os.fspath(source)
        if not text.lstrip().startswith("{"):
            with open(text, encoding="utf-8") as fh:
                text = fh.read()
        return cls.from_dict(json.loads(text))


def as_bandwidths(value: Bandwidths | Mapping) -> Bandwidths:
    """Accept a :class:`Bandwidths` or its dict form."""
    if isinstance(value, Bandwidths):
        return value
    return Bandwidths.from_dict(value)


# ----------------------------------------------------------------------------- fitting


def _split(obs: Mapping, key: str, width: int, node: bool, lead: tuple[int, ...], n: int):
    """Return the feature array of one observation (stacked or single) with validated shape."""
    shape = (*lead, n, width) if node else (*lead, width)
    if key not in obs:
        if width == 0:
            return np.zeros(shape)
        raise KeyError(f"transition observation lacks the key {key!r} required by the schema")
    arr = np.asarray(obs[key])
    if arr.shape != shape:
        raise ValueError(
            f"transition observation[{key!r}] must have shape {shape}, got {arr.shape}"
        )
    if np.issubdtype(arr.dtype, np.floating) and not np.all(np.isfinite(arr)):
        raise ValueError(f"transition observation[{key!r}] contains NaN or inf")
    return arr


def _lead_and_nodes(obs: Mapping, index: int) -> tuple[tuple[int, ...], int]:
    if not isinstance(obs, Mapping) or "adjacency" not in obs:
        raise TypeError(f"transition {index}: each observation must be a dict with 'adjacency'")
    adj = np.shape(obs["adjacency"])
    if len(adj) == 2:
        return (), adj[0]
    if len(adj) == 3:
        return (adj[0],), adj[1]
    raise ValueError(f"transition {index}: adjacency must be (N, N) or (T, N, N), got {adj}")


def fit_bandwidths(transitions: Iterable, schema: Mapping | Schema) -> Bandwidths:
    """Fit sigma_f and lambda_f with the paper's median heuristic (appendix "Bandwidth Fitting").

    Args:
        transitions: an iterable of ``(obs_t, obs_t1)`` pairs. Each observation is a dict in
            the workspace observation format for one graph (``adjacency`` (N, N),
            ``node_continuous`` (N, Fnc), ``node_categorical`` (N, Fnk), ``graph_continuous``
            (Fgc,), ``graph_categorical`` (Fgk,)), or the same arrays stacked over T
            transitions (``adjacency`` (T, N, N), ...; both members of the pair stacked
            alike). N may differ between pairs. Within a pair the node counts must agree,
            except that one side may have zero nodes (a terminal metric graph): node
            features are then skipped for that transition.
        schema: which features to fit (any schema, e.g. one extended with reward,
            continuation and action mask).

    Returns:
        :class:`Bandwidths` with ``sigma_f = max(b_f, 1e-8)`` for every continuous feature and
        ``lambda_f`` for every categorical one. A feature with no observed values at all
        gets sigma_f = 1e-8 / lambda_f = 1 and a warning.
    """
    sch = normalise_schema(schema)
    cont_specs = [(f, i, True) for i, f in enumerate(sch.node_continuous)] + [
        (f, i, False) for i, f in enumerate(sch.graph_continuous)
    ]
    cat_specs = [(f, i, True, c) for i, (f, c) in enumerate(sch.node_categorical)] + [
        (f, i, False, c) for i, (f, c) in enumerate(sch.graph_categorical)
    ]
    changes: dict[str, list[np.ndarray]] = {f: [] for f, _, _ in cont_specs}
    values: dict[str, list[np.ndarray]] = {f: [] for f, _, _ in cont_specs}
    rates: dict[str, list[np.ndarray]] = {f: [] for f, *_ in cat_specs}
    count = 0
    for index, pair in enumerate(transitions):
        try:
            obs_t, obs_t1 = pair
        except (TypeError, ValueError):
            raise TypeError(f"transition {index} must be a pair (obs_t, obs_t1)") from None
        lead0, n0 = _lead_and_nodes(obs_t, index)
        lead1, n1 = _lead_and_nodes(obs_t1, index)
        if lead0 != lead1:
            raise ValueError(
                f"transition {index}: obs_t and obs_t1 must both be single graphs or stacked "
                f"alike, got leading shapes {lead0} and {lead1}"
            )
        if n0 != n1 and n0 > 0 and n1 > 0:
            raise ValueError(
                f"transition {index}: mismatched node counts {n0} -> {n1} within a transition"
            )
        nodes_valid = n0 == n1 and n0 > 0
        count += 1
        arrays = []
        for obs, n in ((obs_t, n0), (obs_t1, n1)):
            arrays.append(
                {
                    key: _split(obs, key, sch.width(key), key.startswith("node"), lead0, n)
                    for key in ("node_continuous", "node_categorical")
                }
                | {
                    key: _split(obs, key, sch.width(key), False, lead0, n)
                    for key in ("graph_continuous", "graph_categorical")
                }
            )
        a0, a1 = arrays
        for f, i, node in cont_specs:
            key = "node_continuous" if node else "graph_continuous"
            x0 = np.asarray(a0[key][..., i], dtype=np.float64)
            x1 = np.asarray(a1[key][..., i], dtype=np.float64)
            values[f] += [x0.ravel(), x1.ravel()]
            if node and not nodes_valid:
                continue
            delta = np.abs(x1 - x0).ravel()  # |x_{t+1,f} - x_{t,f}|, pooled over nodes
            changes[f].append(delta[delta > 0])
        for f, i, node, card in cat_specs:
            key = "node_categorical" if node else "graph_categorical"
            x0, x1 = a0[key][..., i], a1[key][..., i]
            for x in (x0, x1):
                if x.size and (np.min(x) < 0 or np.max(x) >= card):
                    raise ValueError(
                        f"transition {index}: categorical feature {f!r} outside its "
                        f"cardinality {card}"
                    )
            if node and not nodes_valid:
                continue
            changed = (x0 != x1).astype(np.float64)
            # rho_{t,f}: the fraction of entries that change, one value per transition
            rates[f].append(np.atleast_1d(changed.mean(axis=-1) if node else changed))
    if count == 0:
        raise ValueError("fit_bandwidths needs at least one transition")

    sigma: dict[str, float] = {}
    for f, _, _ in cont_specs:
        delta = np.concatenate(changes[f]) if changes[f] else np.zeros(0)
        if delta.size:
            b = float(np.median(delta))  # b_f = median(Delta_f)
        else:
            vals = np.abs(np.concatenate(values[f])) if values[f] else np.zeros(0)
            vals = vals[vals > 0]
            if vals.size:
                b = float(np.median(vals))  # fallback: median non-zero absolute value
            else:
                if not values[f] or not np.concatenate(values[f]).size:
                    warnings.warn(
                        f"fit_bandwidths: no values observed for {f!r}; using sigma = 1e-8",
                        stacklevel=2,
                    )
                b = MIN_BANDWIDTH
        sigma[f] = max(b, MIN_BANDWIDTH)
    lam: dict[str, float] = {}
    for f, *_ in cat_specs:
        rho = np.concatenate(rates[f]) if rates[f] else np.zeros(0)
        if not rho.size:
            warnings.warn(
                f"fit_bandwidths: no transitions with entries for {f!r}; using lambda = 1",
                stacklevel=2,
            )
        mean_rate = float(rho.mean()) if rho.size else 0.0
        lam[f] = 1.0 / mean_rate if mean_rate > 0 else 1.0  # lambda_f = 1 / E_t[rho_{t,f}]
    return Bandwidths(sigma=sigma, lam=lam)
