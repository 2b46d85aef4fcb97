"""The evaluation-noise band of a GDD: a bootstrap over reference transitions.

An evaluation's GDD is the mean over test episodes of the mean over each episode's reference
transitions (paper appendix "Evaluation Details"). Its evaluation noise is what a second
evaluation of the same checkpoint would change: the kappa model samples and env samples drawn
at each transition (measured directly by ``graphwm noise``, :mod:`graphwm.noise`, which
evaluates a checkpoint R times with independent sample seeds).

The band here costs no evaluation: it resamples, within each episode, the stored per-transition
GDDs (``gdd_transitions`` of a record) with replacement and recomputes the estimator
(stratified by episode, so every draw keeps the episodes' weights). It measures how much the
GDD depends on which transitions were scored, sample noise included; docs/reproducing.md,
"Evaluation noise", compares it with the repeated evaluation's SD.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["BOOTSTRAP_DRAWS", "BOOTSTRAP_SEED", "bootstrap_sd", "mean_noise_sd", "record_noise"]

#: bootstrap draws of one record's band: the SD estimate's own relative error is about
#: 1 / sqrt(2 * draws), 2% here
BOOTSTRAP_DRAWS = 1000
#: the bootstrap's seed: the band of a record is a pure function of the record
BOOTSTRAP_SEED = 0


def bootstrap_sd(
    gdd_transitions: Sequence[Sequence[float]],
    draws: int = BOOTSTRAP_DRAWS,
    seed: int = BOOTSTRAP_SEED,
) -> float:
    """SD of the evaluation's GDD (mean over episodes of the mean over transitions) over
    ``draws`` bootstrap resamples of the transitions within each episode.

    NaN when no episode has two transitions (one transition has no spread to resample).

    Raises:
        ValueError: ``draws`` < 2, or an episode without transitions.
    """
    if draws < 2:
        raise ValueError(f"bootstrap_sd needs draws >= 2, got {draws}")
    episodes = [np.asarray(g, dtype=np.float64) for g in gdd_transitions]
    if not episodes or any(g.size == 0 for g in episodes):
        raise ValueError("bootstrap_sd needs at least one transition in every episode")
    if all(g.size < 2 for g in episodes):
        return math.nan
    rng = np.random.default_rng(seed)
    means = np.zeros(draws)
    for g in episodes:
        picks = rng.integers(0, g.size, size=(draws, g.size))
        means += g[picks].mean(axis=1)
    return float(np.std(means / len(episodes), ddof=1))


def record_noise(record: dict) -> float | None:
    """The bootstrap SD of one record's GDD; None for a record without ``gdd_transitions``
    (records of older runs), without two transitions in any episode (no spread to resample)
    or with a non-finite GDD among them."""
    transitions = record.get("gdd_transitions")
    if not transitions:
        return None
    sd = bootstrap_sd(transitions)
    return sd if math.isfinite(sd) else None


def mean_noise_sd(sds: Iterable[float | None]) -> float | None:
    """Evaluation-noise SD of a mean over seeds whose evaluations have SDs ``sds``
    (independent evaluations: ``sqrt(sum sd^2) / n``); None when any seed's is unknown."""
    values = list(sds)
    if not values or any(v is None for v in values):
        return None
    return float(math.sqrt(sum(v * v for v in values if v is not None)) / len(values))
