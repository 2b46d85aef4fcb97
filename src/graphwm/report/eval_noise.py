"""The evaluation-noise band of a GDD: measured by re-evaluation where the run has it, else a
bootstrap over reference transitions.

An evaluation's GDD is the mean over test episodes of the mean over each episode's reference
transitions (paper appendix "Evaluation Details"). Its evaluation noise is what a second
evaluation of the same checkpoint would change: the kappa model samples and env samples drawn
at each transition (measured directly by ``graphwm noise``, :mod:`graphwm.noise`, which
evaluates a checkpoint R times with independent sample seeds).

The band here costs no evaluation: it resamples, within each episode, the stored per-transition
GDDs (``gdd_transitions`` of a record) with replacement and recomputes the estimator
(stratified by episode, so every draw keeps the episodes' weights). It measures how much the
GDD depends on which transitions were scored, sample noise included; docs/reproducing.md,
"Evaluation noise", compares it with the repeated evaluation's SD: at the medium preset it is
1.5-3x larger, because the reference transitions are the same in every evaluation of a run
(so they cancel in a comparison of checkpoints) while the bootstrap redraws them.

Where ``graphwm noise`` has measured an evaluation (``RUN_DIR/noise/*.json``), the report uses
that measured SD instead (:func:`load_measured_noise`, :func:`attach_measured_noise`):
:func:`record_noise` returns the measured SD when a record carries one, else the bootstrap.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from graphwm.store.records import ResultsFormatError

__all__ = [
    "BOOTSTRAP_DRAWS",
    "BOOTSTRAP_SEED",
    "MEASURED_KEY",
    "attach_measured_noise",
    "bootstrap_sd",
    "load_measured_noise",
    "mean_noise_sd",
    "record_bootstrap_noise",
    "record_noise",
]

#: bootstrap draws of one record's band: the SD estimate's own relative error is about
#: 1 / sqrt(2 * draws), 2% here
BOOTSTRAP_DRAWS = 1000
#: the bootstrap's seed: the band of a record is a pure function of the record
BOOTSTRAP_SEED = 0
#: the key of a report record's measured evaluation-noise SD (:func:`attach_measured_noise`)
MEASURED_KEY = "eval_sd_measured"


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
    """The evaluation-noise SD of one record's GDD: the SD measured by re-evaluation when the
    record carries one (:data:`MEASURED_KEY`), else :func:`record_bootstrap_noise`."""
    measured = record.get(MEASURED_KEY)
    return float(measured) if measured is not None else record_bootstrap_noise(record)


def record_bootstrap_noise(record: dict) -> float | None:
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


def _evaluation(env: str, size: int, model: str | None, seed: int, step, episodes) -> tuple:
    """What identifies one evaluation across the report's records and the noise rows."""
    return (env, int(size), model, int(seed), None if step is None else int(step), episodes)


def load_measured_noise(run_dir: Path | str) -> dict[tuple, float]:
    """The measured evaluation-noise SDs of a run: every row of ``RUN_DIR/noise/*.json``
    (written by ``graphwm noise``), keyed by (env, size, model, seed, step, episodes). Where
    several files measured one evaluation, the one that also redrew the env samples wins, then
    the one with more repeats. ``{}`` when the run has no noise measurement.

    Raises:
        ResultsFormatError: a noise file that is not JSON or lacks a row's keys (named).
    """
    best: dict[tuple, tuple[tuple[bool, int], float]] = {}
    for path in sorted((Path(run_dir) / "noise").glob("*.json")):
        try:
            rows = json.loads(path.read_text(encoding="utf-8"))["rows"]
            for row in rows:
                key = _evaluation(
                    row["env"], row["size"], row["model"], row["seed"], row["step"],
                    row["episodes"],
                )  # fmt: skip
                sd, rank = row["gdd_sd"], (bool(row["env_samples"]), int(row["repeats"]))
                if sd is None or not math.isfinite(sd):
                    continue
                if key not in best or rank > best[key][0]:
                    best[key] = (rank, float(sd))
        except (ValueError, KeyError, TypeError) as err:
            raise ResultsFormatError(
                f"noise file {path}: not a graphwm noise result ({err!r})"
            ) from err
    return {key: sd for key, (_, sd) in best.items()}


def attach_measured_noise(records: Iterable[dict], measured: dict[tuple, float]) -> int:
    """Set :data:`MEASURED_KEY` on each report record that ``measured``
    (:func:`load_measured_noise`) has: same env, size, model, seed, step (None: the final
    evaluation) and number of test episodes. Returns how many records got one."""
    count = 0
    for r in records:
        episodes = len(r.get("gdd_transitions") or []) or None
        key = _evaluation(r["env"], r["size"], r.get("model"), r["seed"], r.get("step"), episodes)
        if key in measured:
            r[MEASURED_KEY] = measured[key]
            count += 1
    return count
