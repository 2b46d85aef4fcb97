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
import numbers
import os
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .schema import Schema, _check_adjacency, normalise_schema

__all__ = ["Bandwidths", "fit_bandwidths", "MIN_BANDWIDTH"]

#: The minimum bandwidth (paper, appendix "Bandwidth Fitting").
MIN_BANDWIDTH = 1e-8

_FORMAT = "gdd-metric/bandwidths"
_SHAPE = '{"sigma": {name: sigma_f}, "lambda": {name: lambda_f}}'


def _parameter_dict(values: Mapping, what: str, minimum: float, why: str) -> dict[str, float]:
    """Validate ``{feature name: value}`` with every value finite and >= ``minimum`` (> 0)."""
    if not isinstance(values, Mapping):
        raise TypeError(f"{what} must be a dict name -> value, got {type(values).__name__}")
    out = {}
    for name, value in values.items():
        if not isinstance(name, str):
            raise TypeError(f"{what} keys must be feature names (str), got {name!r}")
        # a real number only: float() would read "0.5" and True as numbers
        if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
            raise TypeError(f"{what}[{name!r}] must be a number, got {value!r}")
        v = float(value)
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"{what}[{name!r}] must be finite and > 0, got {value!r}")
        if v < minimum:
            raise ValueError(
                f"{what}[{name!r}] = {value!r} is below the minimum {minimum:g} ({why}); "
                f"valid range: [{minimum:g}, inf)"
            )
        out[name] = v
    return out


@dataclass(frozen=True, init=False)
class Bandwidths:
    """Per-feature kernel parameters, looked up by feature name.

    Attributes:
        sigma: sigma_f for every continuous feature (node or graph level), each in
            ``[MIN_BANDWIDTH, inf)`` (1e-8, the paper's minimum bandwidth; below it
            ``1 / sigma^2`` would leave the range of floats).
        lam: lambda_f > 0 for every categorical feature (node or graph level).

    The categorical weights may be passed as ``lam=`` or, as in the JSON form and the paper,
    as ``lambda`` (``Bandwidths(**{"lambda": {...}})``); the attribute is ``lam``.
    Entries for features absent from a schema are ignored, so one ``Bandwidths`` serves any
    sub-schema.

    Example:
        >>> bw = Bandwidths(sigma={"stability": 0.3}, lam={"survivor": 2.0})
        >>> Bandwidths.from_dict({"sigma": {"stability": 0.3}, "lam": {"survivor": 2.0}}) == bw
        True
    """

    sigma: dict[str, float]
    lam: dict[str, float]

    def __init__(
        self,
        sigma: Mapping[str, float] | None = None,
        lam: Mapping[str, float] | None = None,
        **aliases: Mapping[str, float],
    ) -> None:
        unknown = set(aliases) - {"lambda"}
        if unknown:
            raise TypeError(
                f"unknown Bandwidths argument(s) {sorted(unknown)}; expected sigma= and lam= "
                "(or 'lambda')"
            )
        if "lambda" in aliases:
            if lam is not None:
                raise TypeError("pass the categorical weights once: as lam= or as 'lambda'")
            lam = aliases["lambda"]
        object.__setattr__(
            self,
            "sigma",
            _parameter_dict(
                {} if sigma is None else sigma, "sigma", MIN_BANDWIDTH, "the minimum bandwidth"
            ),
        )
        object.__setattr__(
            self, "lam", _parameter_dict({} if lam is None else lam, "lambda", 0.0, "")
        )

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
        """Inverse of :meth:`to_dict` (``format``/``version`` optional; the weights may be
        under ``"lambda"``, as written by :meth:`to_dict`, or ``"lam"``, not both)."""
        if not isinstance(data, Mapping):
            raise TypeError(f"bandwidths must be a dict {_SHAPE}, got {type(data).__name__}")
        if data.get("format", _FORMAT) != _FORMAT:
            raise ValueError(f"not a bandwidths file: format {data.get('format')!r}")
        if data.get("version", 1) != 1:
            raise ValueError(f"unsupported bandwidths version {data.get('version')!r}")
        unknown = set(data) - {"format", "version", "sigma", "lambda", "lam"}
        if unknown:
            raise ValueError(f"unknown keys in bandwidths: {sorted(unknown)}; expected {_SHAPE}")
        if "lambda" in data and "lam" in data:
            raise ValueError("bandwidths has both 'lambda' and 'lam'; give the weights once")
        return cls(sigma=data.get("sigma", {}), lam=data.get("lambda", data.get("lam", {})))

    def to_json(self, path: str | os.PathLike | None = None) -> str:
        """Serialise to a JSON string; also write it to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=False)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text + "\n")
        return text

    @classmethod
    def from_json(cls, source: str | os.PathLike) -> Bandwidths:
        """Load from a JSON string or from a path to a JSON file.

        A ``str`` whose first non-blank character is ``{`` or ``[`` is read as JSON text;
        any other ``str`` or ``os.PathLike`` is a path. The JSON must be an object
        ``{"sigma": {...}, "lambda": {...}}`` (the form :meth:`to_json` writes).
        """
        if isinstance(source, str) and source.lstrip()[:1] in ("{", "["):
            text, origin = source, "JSON text"
        else:
            path = os.fspath(source)
            try:
                with open(path, encoding="utf-8") as fh:
                    text = fh.read()
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"Bandwidths.from_json: no file {path!r}; pass a path to a bandwidths "
                    f"JSON file or the JSON text itself, an object {_SHAPE}"
                ) from None
            origin = f"file {path!r}"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"Bandwidths.from_json: {origin} is not valid JSON ({err})") from None
        except RecursionError:
            raise ValueError(
                f"Bandwidths.from_json: {origin} nests arrays or objects too deeply to be "
                f"bandwidths {_SHAPE}"
            ) from None
        if not isinstance(data, dict):
            raise ValueError(
                f"Bandwidths.from_json: {origin} holds a JSON {type(data).__name__}, but "
                f"bandwidths are a JSON object {_SHAPE}"
            )
        return cls.from_dict(data)


def as_bandwidths(value: Bandwidths | Mapping) -> Bandwidths:
    """Accept a :class:`Bandwidths` or its dict form."""
    if isinstance(value, Bandwidths):
        return value
    return Bandwidths.from_dict(value)


# ----------------------------------------------------------------------------- fitting
# fit_bandwidths runs in three phases (the update/compute shape of torchmetrics):
# _validated_pair checks one transition, _Accumulator.update collects its statistics and
# _Accumulator.compute reduces them to the bandwidths.

_FEATURE_KEYS = ("node_continuous", "node_categorical", "graph_continuous", "graph_categorical")


def _split(
    obs: Mapping, key: str, width: int, node: bool, lead: tuple[int, ...], n: int
) -> np.ndarray:
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


def _validated_pair(pair: object, index: int, sch: Schema) -> tuple[dict, dict, bool]:
    """Phase 1: the feature arrays of ``obs_t`` and ``obs_t1``, and whether their node
    features are comparable (same N > 0; a zero-node side is a terminal metric graph)."""
    obs_t: Mapping
    obs_t1: Mapping
    try:
        obs_t, obs_t1 = pair  # type: ignore[misc]
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
    # the adjacency is held to what gdd() accepts (0/1, symmetric, zero diagonal): bandwidths
    # fitted on graphs the metric would refuse are not fitted on the metric's data
    for side, obs, n in (("obs_t", obs_t, n0), ("obs_t1", obs_t1, n1)):
        adj = np.asarray(obs["adjacency"])
        if n > 0 and adj.size:  # a zero-node side (a terminal metric graph) has no edges
            _check_adjacency(adj.reshape((-1, n, n)), f"transition {index} {side}")
    arrays = []
    for obs, n in ((obs_t, n0), (obs_t1, n1)):
        arrays.append(
            {
                key: _split(obs, key, sch.width(key), key.startswith("node"), lead0, n)
                for key in _FEATURE_KEYS
            }
        )
        for key in ("node_categorical", "graph_categorical"):
            for (f, card), x in zip(
                getattr(sch, key), np.moveaxis(arrays[-1][key], -1, 0), strict=True
            ):
                if x.size and (np.min(x) < 0 or np.max(x) >= card):
                    raise ValueError(
                        f"transition {index}: categorical feature {f!r} outside its "
                        f"cardinality {card}"
                    )
    return arrays[0], arrays[1], n0 == n1 and n0 > 0


class _Accumulator:
    """Phases 2 and 3: per-feature statistics over transitions, reduced to bandwidths."""

    def __init__(self, sch: Schema) -> None:
        self.cont_specs = [(f, i, True) for i, f in enumerate(sch.node_continuous)] + [
            (f, i, False) for i, f in enumerate(sch.graph_continuous)
        ]
        self.cat_specs = [(f, i, True) for i, (f, _) in enumerate(sch.node_categorical)] + [
            (f, i, False) for i, (f, _) in enumerate(sch.graph_categorical)
        ]
        self.changes: dict[str, list[np.ndarray]] = {f: [] for f, _, _ in self.cont_specs}
        self.values: dict[str, list[np.ndarray]] = {f: [] for f, _, _ in self.cont_specs}
        self.rates: dict[str, list[np.ndarray]] = {f: [] for f, _, _ in self.cat_specs}
        self.count = 0

    def update(self, a0: Mapping, a1: Mapping, nodes_valid: bool) -> None:
        """Add one validated transition (single or stacked)."""
        self.count += 1
        for f, i, node in self.cont_specs:
            key = "node_continuous" if node else "graph_continuous"
            x0 = np.asarray(a0[key][..., i], dtype=np.float64)
            x1 = np.asarray(a1[key][..., i], dtype=np.float64)
            self.values[f] += [x0.ravel(), x1.ravel()]
            if node and not nodes_valid:
                continue
            delta = np.abs(x1 - x0).ravel()  # |x_{t+1,f} - x_{t,f}|, pooled over nodes
            self.changes[f].append(delta[delta > 0])
        for f, i, node in self.cat_specs:
            if node and not nodes_valid:
                continue
            key = "node_categorical" if node else "graph_categorical"
            changed = (a0[key][..., i] != a1[key][..., i]).astype(np.float64)
            # rho_{t,f}: the fraction of entries that change, one value per transition
            self.rates[f].append(np.atleast_1d(changed.mean(axis=-1) if node else changed))

    def compute(self) -> Bandwidths:
        """The paper's median heuristic (appendix "Bandwidth Fitting") on what was added."""
        if self.count == 0:
            raise ValueError("fit_bandwidths needs at least one transition")
        # plain loops, not comprehensions: the warnings' stacklevel counts frames up to the
        # caller of fit_bandwidths (_sigma -> compute -> fit_bandwidths -> caller)
        sigma, lam = {}, {}
        for f, _, _ in self.cont_specs:
            sigma[f] = self._sigma(f)
        for f, _, _ in self.cat_specs:
            lam[f] = self._lambda(f)
        return Bandwidths(sigma=sigma, lam=lam)

    def _sigma(self, f: str) -> float:
        delta = np.concatenate(self.changes[f]) if self.changes[f] else np.zeros(0)
        if delta.size:
            return max(float(np.median(delta)), MIN_BANDWIDTH)  # b_f = median(Delta_f)
        values = np.concatenate(self.values[f]) if self.values[f] else np.zeros(0)
        nonzero = np.abs(values[values != 0])
        if nonzero.size:  # fallback: median non-zero absolute value
            return max(float(np.median(nonzero)), MIN_BANDWIDTH)
        if not values.size:
            warnings.warn(
                f"fit_bandwidths: no values observed for {f!r}; using sigma = 1e-8",
                stacklevel=4,
            )
        return MIN_BANDWIDTH  # identically zero

    def _lambda(self, f: str) -> float:
        rho = np.concatenate(self.rates[f]) if self.rates[f] else np.zeros(0)
        if not rho.size:
            warnings.warn(
                f"fit_bandwidths: no transitions with entries for {f!r}; using lambda = 1",
                stacklevel=4,
            )
        mean_rate = float(rho.mean()) if rho.size else 0.0
        return 1.0 / mean_rate if mean_rate > 0 else 1.0  # lambda_f = 1 / E_t[rho_{t,f}]


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

    Example:
        >>> import numpy as np
        >>> def graph(x):  # two nodes, one continuous node feature
        ...     return {"adjacency": np.zeros((2, 2)), "node_continuous": np.array(x)[:, None]}
        >>> bw = fit_bandwidths([(graph([0.0, 1.0]), graph([0.5, 1.0]))],
        ...                     {"node_continuous": ["x"]})
        >>> bw.sigma["x"]  # the median non-zero one-step change
        0.5
    """
    sch = normalise_schema(schema)
    acc = _Accumulator(sch)
    for index, pair in enumerate(transitions):
        acc.update(*_validated_pair(pair, index, sch))
    return acc.compute()
