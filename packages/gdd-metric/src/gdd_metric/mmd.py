"""The Graph Distribution Distance: MMD with the factorised graph kernel.

Paper, section "Graph Distribution Distance": GDD(P, Q) = MMD_K(P, Q) with
K = w_n K_add^n + w_g K_add^g + w_e K_J + eps K_joint, so that
GDD^2 = w_n MMD^2_{K_add^n} + w_g MMD^2_{K_add^g} + w_e MMD^2_{K_J} + eps MMD^2_{K_joint}.
The default estimator is the biased V-statistic of section "Maximum Mean Discrepancy"
(eqn. mmd_estimate); the unbiased U-statistic drops the diagonal of the within-set blocks.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TypedDict, Unpack

import numpy as np

from .backend import Backend, get_backend
from .bandwidths import Bandwidths, as_bandwidths
from .grams import ComponentGrams, component_grams, jaccard_gram
from .schema import SampleSet, Schema, check_same_nodes, normalise_schema, validate_samples

__all__ = [
    "GDDOptions",
    "GDDResult",
    "KernelOptions",
    "gdd",
    "gdd_many",
    "DEFAULT_WEIGHTS",
    "DEFAULT_EPSILON",
    "DEFAULT_MULTIPLIERS",
    "ESTIMATORS",
]

#: w_n, w_g, w_e (paper: 1/3 each).
DEFAULT_WEIGHTS = (1 / 3, 1 / 3, 1 / 3)
#: eps (paper: 1).
DEFAULT_EPSILON = 1.0
#: The bandwidth multiplier set M (paper, appendix "Bandwidth Fitting").
DEFAULT_MULTIPLIERS = (0.1, 0.5, 1.0, 2.0, 16.0)
ESTIMATORS = ("biased", "unbiased")

# Peak bytes of the stacked feature arrays of one batch in gdd_many.
_BATCH_BYTES = 64 * 2**20


@dataclass(frozen=True)
class GDDResult:
    """Result of one GDD evaluation.

    Attributes:
        gdd: the GDD, sqrt(max(mmd2, 0)).
        mmd2: the estimated squared MMD under the full kernel K. With the biased estimator
            it is >= 0 mathematically, and float round-off negatives are clamped to 0; with the
            unbiased estimator it may be genuinely negative and is reported as is.
        node, graph, edge, joint: squared-MMD estimates under K_add^n, K_add^g, K_J and
            K_joint, so that mmd2 = w_n node + w_g graph + w_e edge + eps joint up to
            round-off (biased: each clamped at 0 like mmd2).
        weights: (w_n, w_g, w_e) used; epsilon: eps used; estimator: "biased"/"unbiased".
        n_pred, n_true: the sample-set sizes.
    """

    gdd: float
    mmd2: float
    node: float
    graph: float
    edge: float
    joint: float
    weights: tuple[float, float, float]
    epsilon: float
    estimator: str
    n_pred: int
    n_true: int

    def as_dict(self) -> dict:
        """A JSON-able dict of all fields."""
        d = asdict(self)
        d["weights"] = list(self.weights)
        return d


# ----------------------------------------------------------------------------- arguments


@dataclass(frozen=True)
class Options:
    """Validated arguments shared by :func:`gdd`, :func:`gdd_many` and the permutation test."""

    schema: Schema
    bandwidths: Bandwidths
    weights: tuple[float, float, float]
    epsilon: float
    multipliers: np.ndarray
    estimator: str
    backend: Backend

    def kernel_arrays(self) -> dict:
        """Per-column bandwidths, weights and cardinalities in the schema's column order."""
        s, bw = self.schema, self.bandwidths
        return {
            "sigma_node": np.array([bw.sigma[f] for f in s.node_continuous], dtype=np.float64),
            "sigma_graph": np.array([bw.sigma[f] for f in s.graph_continuous], dtype=np.float64),
            "lam_node": np.array([bw.lam[f] for f, _ in s.node_categorical], dtype=np.float64),
            "lam_graph": np.array([bw.lam[f] for f, _ in s.graph_categorical], dtype=np.float64),
            "cards_node": [c for _, c in s.node_categorical],
            "multipliers": self.multipliers,
        }


def _real(value: object, name: str) -> float:
    """``value`` as a float if it is a real number (a Python or numpy int or float; never a
    bool or a string, which ``float()`` would silently accept). Raises ``TypeError``."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    return float(value)


class KernelOptions(TypedDict, total=False):
    """The keyword options of :func:`gdd_estimates`: :class:`GDDOptions` but the estimator."""

    weights: Sequence[float]
    epsilon: float
    multipliers: Sequence[float]
    backend: str | Backend
    device: str | None


class GDDOptions(KernelOptions, total=False):
    """The keyword options of :func:`gdd`, :func:`gdd_many` and the permutation test, each
    optional; the defaults are :func:`resolve_options`'s.

    Attributes:
        weights: (w_n, w_g, w_e) >= 0 (default :data:`DEFAULT_WEIGHTS`).
        epsilon: weight of the joint kernel (default :data:`DEFAULT_EPSILON`; paper: 1).
        multipliers: the bandwidth multiplier set M (default :data:`DEFAULT_MULTIPLIERS`).
        estimator: "biased" (default; the paper's V-statistic) or "unbiased" (U-statistic,
            needs >= 2 samples per set).
        backend: "numpy" (default) or "torch" (optional extra; the heavy kernel work runs on
            ``device``, e.g. "cuda"), or a :class:`gdd_metric.Backend` instance.
        device: the torch device (numpy: None / "cpu").
    """

    estimator: str


def resolve_options(
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    *,
    weights: Sequence[float] = DEFAULT_WEIGHTS,
    epsilon: float = DEFAULT_EPSILON,
    multipliers: Sequence[float] = DEFAULT_MULTIPLIERS,
    estimator: str = "biased",
    backend: str | Backend = "numpy",
    device: str | None = None,
) -> Options:
    """Validate the schema, bandwidths and :class:`GDDOptions` (see :func:`gdd`) into an
    :class:`Options`; an unknown option is a ``TypeError`` naming it."""
    sch = normalise_schema(schema)
    bw = as_bandwidths(bandwidths)
    bw.check(sch)
    try:
        w = tuple(_real(x, "weights") for x in weights)
    except TypeError:
        raise TypeError(f"weights must be a triple (w_n, w_g, w_e), got {weights!r}") from None
    if len(w) != 3 or not all(math.isfinite(x) and x >= 0 for x in w):
        raise ValueError(
            f"weights must be three finite numbers >= 0 (w_n, w_g, w_e), got {weights!r}"
        )
    if not any(w):
        raise ValueError(
            f"weights (w_n, w_g, w_e) must not all be 0, got {weights!r}: the node, graph and "
            "edge kernels would drop out of the GDD"
        )
    eps = _real(epsilon, "epsilon")
    if not math.isfinite(eps) or eps < 0:
        raise ValueError(
            f"epsilon must be finite and >= 0 (the paper requires > 0), got {epsilon!r}"
        )
    try:
        mult = np.asarray([_real(r, "multipliers") for r in np.ravel(multipliers)], np.float64)
    except TypeError:
        raise TypeError(f"multipliers must be numbers r > 0, got {multipliers!r}") from None
    if mult.size == 0 or not np.all(np.isfinite(mult) & (mult > 0)):
        raise ValueError(
            f"multipliers must be a non-empty set of finite r > 0, got {multipliers!r}"
        )
    if estimator not in ESTIMATORS:
        raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
    return Options(sch, bw, w, eps, mult, estimator, get_backend(backend, device))


def validate_pair(
    pred: Mapping, true: Mapping, schema: Schema, estimator: str
) -> tuple[SampleSet, SampleSet]:
    """Validate both sample sets against ``schema`` and against each other."""
    p = validate_samples(pred, schema, "pred")
    t = validate_samples(true, schema, "true")
    check_same_nodes(p, t)
    if estimator == "unbiased" and min(p.num_samples, t.num_samples) < 2:
        raise ValueError("the unbiased estimator needs at least 2 samples in each set")
    return p, t


# ----------------------------------------------------------------------------- estimators


def mmd2_from_gram(gram: np.ndarray, n: int, estimator: str = "biased") -> np.ndarray:
    """Squared-MMD estimates from pooled Gram matrices.

    Args:
        gram: (..., T, T) Gram matrices over [X; Y], the first ``n`` rows being X.
        n: size of X (m = T - n).
        estimator: "biased" (V-statistic, paper eqn. mmd_estimate) or "unbiased" (U-statistic).

    Returns:
        (...,) estimates, not clamped.
    """
    m = gram.shape[-1] - n
    kxx = np.ascontiguousarray(gram[..., :n, :n]).sum(axis=(-2, -1))
    kyy = np.ascontiguousarray(gram[..., n:, n:]).sum(axis=(-2, -1))
    kxy = np.ascontiguousarray(gram[..., :n, n:]).sum(axis=(-2, -1))
    if estimator == "biased":
        return kxx / n**2 + kyy / m**2 - 2.0 * kxy / (n * m)
    tr_x = np.trace(gram[..., :n, :n], axis1=-2, axis2=-1)
    tr_y = np.trace(gram[..., n:, n:], axis1=-2, axis2=-1)
    return (kxx - tr_x) / (n * (n - 1)) + (kyy - tr_y) / (m * (m - 1)) - 2.0 * kxy / (n * m)


def _results(grams: ComponentGrams, n: int, m: int, params: Options) -> list[GDDResult]:
    est = params.estimator
    comps = {
        name: mmd2_from_gram(getattr(grams, name), n, est)
        for name in ("node", "graph", "edge", "joint")
    }
    total = mmd2_from_gram(grams.total(params.weights, params.epsilon), n, est)
    return [
        result_of(float(total[b]), {k: float(v[b]) for k, v in comps.items()}, n, m, params)
        for b in range(total.shape[0])
    ]


def result_of(
    mmd2: float, components: Mapping[str, float], n: int, m: int, params: Options
) -> GDDResult:
    """The :class:`GDDResult` of the squared-MMD estimates ``mmd2`` (kernel K) and
    ``components`` (node, graph, edge, joint) of an ``n`` vs ``m`` comparison; the biased
    estimator's are clamped at 0 (>= 0 mathematically: the clamp removes float round-off)."""
    vals = dict(components)
    if params.estimator == "biased":
        vals = {k: max(v, 0.0) for k, v in vals.items()}
        mmd2 = max(mmd2, 0.0)
    return GDDResult(
        gdd=math.sqrt(max(mmd2, 0.0)),
        mmd2=mmd2,
        weights=params.weights,
        epsilon=params.epsilon,
        estimator=params.estimator,
        n_pred=n,
        n_true=m,
        **vals,
    )


# ----------------------------------------------------------------------------- evaluation


def pooled_grams(pairs: Sequence[tuple[SampleSet, SampleSet]], params: Options) -> ComponentGrams:
    """Component Gram matrices (B, T, T) for validated pairs that share (n, m, N)."""
    pooled = {
        key: np.stack([np.concatenate([getattr(p, key), getattr(t, key)]) for p, t in pairs])
        for key in ("node_continuous", "node_categorical", "graph_continuous", "graph_categorical")
    }
    edge = np.stack(
        [
            jaccard_gram([p.adjacency, t.adjacency], [p.support, t.support], params.backend)
            for p, t in pairs
        ]
    )
    return component_grams(
        pooled["node_continuous"],
        pooled["node_categorical"],
        pooled["graph_continuous"],
        pooled["graph_categorical"],
        edge,
        backend=params.backend,
        **params.kernel_arrays(),
    )


def gdd(
    pred: Mapping,
    true: Mapping,
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    **options: Unpack[GDDOptions],
) -> GDDResult:
    """Graph Distribution Distance between two sample sets of attributed graphs.

    Args:
        pred: predicted samples, dict of arrays with a leading sample axis: ``adjacency``
            (S, N, N) 0/1 symmetric with zero diagonal, ``node_continuous`` (S, N, Fnc),
            ``node_categorical`` (S, N, Fnk) integer codes, ``graph_continuous`` (S, Fgc),
            ``graph_categorical`` (S, Fgk). Zero nodes ((S, 0, 0) adjacency) is allowed.
        true: reference samples, same format and N; the sample count may differ.
        schema: feature names and categorical cardinalities (see :mod:`gdd_metric.schema`);
            array widths must match it. Pass a restricted schema (and arrays) to score only
            some features, e.g. with :func:`gdd_metric.select_features`.
        bandwidths: sigma_f / lambda_f for every feature of the schema.
        options: ``weights``, ``epsilon``, ``multipliers``, ``estimator``, ``backend``,
            ``device``, each optional (see :class:`GDDOptions`).

    Returns:
        :class:`GDDResult` with the GDD, MMD^2 and the four squared components.

    Example (no nodes, one graph feature: only the graph and joint kernels vary):
        >>> import numpy as np
        >>> schema = {"graph_continuous": ["reward"]}
        >>> pred = {"adjacency": np.zeros((3, 0, 0)), "graph_continuous": np.zeros((3, 1))}
        >>> true = {"adjacency": np.zeros((2, 0, 0)), "graph_continuous": np.ones((2, 1))}
        >>> bw = Bandwidths(sigma={"reward": 1.0})
        >>> res = gdd(pred, true, schema, bw)
        >>> k = np.mean([np.exp(-1 / (2 * r**2)) for r in DEFAULT_MULTIPLIERS])
        >>> bool(np.isclose(res.mmd2, (1 / 3 + 1) * (2 - 2 * k)))  # w_g K_add^g + eps K_joint
        True
        >>> gdd(pred, pred, schema, bw).gdd
        0.0
    """
    params = resolve_options(schema, bandwidths, **options)
    p, t = validate_pair(pred, true, params.schema, params.estimator)
    return _results(pooled_grams([(p, t)], params), p.num_samples, t.num_samples, params)[0]


def gdd_many(
    pairs: Sequence[tuple[Mapping, Mapping]],
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    **options: Unpack[GDDOptions],
) -> list[GDDResult]:
    """GDD of many transitions at once: ``[gdd(pred, true, ...) for pred, true in pairs]``.

    Transitions with the same sample counts and node count are stacked on a batch axis and
    evaluated together (much faster than one call each for small graphs). All pairs share one
    schema; to score a terminal transition on graph features only, pass it with zero nodes
    (see :func:`gdd_metric.select_features`) -- zero-node pairs keep the full schema.

    Returns:
        one :class:`GDDResult` per pair, in input order.
    """
    params = resolve_options(schema, bandwidths, **options)
    validated = [validate_pair(p, t, params.schema, params.estimator) for p, t in _as_pairs(pairs)]
    groups: dict[tuple[int, int, int], list[int]] = {}
    for k, (p, t) in enumerate(validated):
        groups.setdefault((p.num_samples, t.num_samples, p.num_nodes), []).append(k)
    results: list[GDDResult | None] = [None] * len(validated)
    s = params.schema
    for (n, m, nodes), idx in groups.items():
        t_count = n + m
        # bytes per stacked item: node arrays, one one-hot block, ~16 (T, T) float matrices
        # (the per-pair temporaries of the continuous node terms are chunked separately)
        # (a cardinality above the codes present is relabelled: grams.compact_codes)
        max_card = min(max((c for _, c in s.node_categorical), default=0), t_count * nodes)
        width = len(s.node_continuous) + len(s.node_categorical) + max_card
        per_item = 8 * (t_count * nodes * width + 16 * t_count * t_count)
        chunk = max(1, _BATCH_BYTES // per_item)
        for start in range(0, len(idx), chunk):
            sub = idx[start : start + chunk]
            grams = pooled_grams([validated[k] for k in sub], params)
            for k, res in zip(sub, _results(grams, n, m, params), strict=True):
                results[k] = res
    return results  # type: ignore[return-value]


def _as_pairs(pairs: Sequence[tuple[Mapping, Mapping]]) -> list[tuple[Mapping, Mapping]]:
    out = []
    for k, pair in enumerate(pairs):
        try:
            p, t = pair
        except (TypeError, ValueError):
            raise TypeError(f"pairs[{k}] must be a (pred, true) pair of sample sets") from None
        out.append((p, t))
    return out


def gram_matrices(
    pred: Mapping,
    true: Mapping,
    schema: Mapping | Schema,
    bandwidths: Bandwidths | Mapping,
    *,
    multipliers: Sequence[float] = DEFAULT_MULTIPLIERS,
    backend: str | Backend = "numpy",
    device: str | None = None,
) -> ComponentGrams:
    """The four component Gram matrices over the pooled samples [pred; true], each (T, T)."""
    params = resolve_options(
        schema, bandwidths, multipliers=multipliers, backend=backend, device=device
    )
    p, t = validate_pair(pred, true, params.schema, "biased")
    g = pooled_grams([(p, t)], params)
    return ComponentGrams(node=g.node[0], graph=g.graph[0], edge=g.edge[0], joint=g.joint[0])
