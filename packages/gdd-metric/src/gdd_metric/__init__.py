"""gdd-metric: the Graph Distribution Distance (GDD) between distributions of attributed graphs.

GDD is the MMD under a characteristic factorised graph kernel (paper "Beyond Static Graph World
Models", section "Graph Distribution Distance"). numpy is the only required dependency.

Public API:
    gdd, gdd_many, GDDResult        -- the metric (single transition / many at once)
    fit_bandwidths, Bandwidths      -- median-heuristic bandwidths, JSON round trip
    permutation_test                -- two-sample test with a caller-supplied Generator (stats)
    gdd_and_permutation_test        -- both from one Gram computation (evaluation's hot path)
    gdd_estimates                   -- the biased and unbiased GDD (and the test) from one Gram
    get_backend, Backend            -- the numpy / torch array backends
    normalise_schema, validate_samples, select_features -- input handling
"""

from .backend import BACKENDS, Backend, get_backend
from .bandwidths import MIN_BANDWIDTH, Bandwidths, fit_bandwidths
from .grams import ComponentGrams
from .mmd import (
    DEFAULT_EPSILON,
    DEFAULT_MULTIPLIERS,
    DEFAULT_WEIGHTS,
    GDDOptions,
    GDDResult,
    gdd,
    gdd_many,
    gram_matrices,
    mmd2_from_gram,
)
from .schema import Schema, normalise_schema, select_features, validate_samples
from .stats import gdd_and_permutation_test, gdd_estimates, permutation_test

__version__ = "0.1.0"

__all__ = [
    "BACKENDS",
    "Backend",
    "Bandwidths",
    "ComponentGrams",
    "DEFAULT_EPSILON",
    "DEFAULT_MULTIPLIERS",
    "DEFAULT_WEIGHTS",
    "GDDOptions",
    "GDDResult",
    "MIN_BANDWIDTH",
    "Schema",
    "fit_bandwidths",
    "gdd",
    "gdd_and_permutation_test",
    "gdd_estimates",
    "gdd_many",
    "get_backend",
    "gram_matrices",
    "mmd2_from_gram",
    "normalise_schema",
    "permutation_test",
    "select_features",
    "validate_samples",
]
