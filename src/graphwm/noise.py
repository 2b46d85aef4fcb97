"""``graphwm noise``: the evaluation noise of a run's evaluations, measured by repeating them.

Each single-step evaluation (``--of final``) or GDD-curve point (``--of curve``) of a preset is
evaluated R times: repeat 0 is the stored evaluation itself (reused from ``RUN_DIR/results/``
when it is there), repeats 1..R-1 redraw the model's samples (the posterior pass and the
imagined samples; :func:`graphwm.metric.protocol.sample_seeds` with the repeat index) and,
with ``--env-samples``, the env's samples of each reference transition too. The reference
transitions themselves (which test episodes, which steps) stay the same: the spread is what a
re-evaluation of the same checkpoint gives.

Writes ``RUN_DIR/noise/<name>.json`` (one row per evaluation: the R GDDs, their mean and SD,
the SD of each squared-MMD component, and the bootstrap SD of repeat 0,
:mod:`graphwm.report.eval_noise`) and ``<name>.md`` (the table, plus the mean SD per env and
model); docs/reproducing.md, "Evaluation noise". The repeats are stored jobs
(``RUN_DIR/noise/results/``, content-keyed with their repeat index), so a rerun with more
repeats computes only the new ones.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphwm import pipeline
from graphwm.config import PresetError
from graphwm.report.eval_noise import record_bootstrap_noise
from graphwm.report.formatting import format_number
from graphwm.report.tables import COMPONENTS, model_display, order_envs, order_models
from graphwm.stages.curve import curve_job
from graphwm.stages.evaluate import EvalJob, single_step_job
from graphwm.store.executors import run_jobs
from graphwm.store.files import atomic_write_json, atomic_write_text, run_lock
from graphwm.store.paths import RunPaths
from graphwm.store.records import Record
from graphwm.store.results import ResultStore

__all__ = ["NOISE_DIR", "OF", "NoiseResult", "noise_jobs", "noise_rows", "noise_table", "run_noise"]

#: where ``graphwm noise`` writes, inside the run directory
NOISE_DIR = "noise"
#: which evaluations are repeated: the final single-step ones or the GDD curve's points
OF = ("final", "curve")


def repeat_jobs(job: EvalJob, repeats: int, env_samples: bool = False) -> list[EvalJob]:
    """``job`` (repeat 0) and ``repeats - 1`` redraws of it (repeat 1..R-1, no permutation
    test: only the GDD is compared)."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    again = [
        dataclasses.replace(job, repeat=r, repeat_env=env_samples, permutations=0)
        for r in range(1, repeats)
    ]
    return [job, *again]


def noise_jobs(
    preset: Any,
    of: str = "final",
    steps: Sequence[int] | None = None,
    episodes: int | None = None,
) -> list[EvalJob]:
    """The evaluations of ``preset`` whose noise is measured (repeat 0 of each).

    ``of``: ``"final"`` (every single-step job) or ``"curve"`` (every GDD-curve job;
    ``steps`` keeps only those steps). ``episodes`` replaces the number of test episodes each
    evaluates (the first ones), e.g. to size the curve's subset.

    Raises:
        PresetError: an unknown ``of``, a curve without ``train.eval_every``, steps the
            curve does not evaluate, or more episodes than the test files hold.
    """
    if of not in OF:
        raise PresetError(f"--of must be one of {list(OF)}, got {of!r}")
    if of == "final":
        jobs = [j for j in pipeline.evaluation_jobs(preset) if j.kind == "single_step"]
    else:
        jobs = pipeline.curve_jobs(preset)
        if not jobs:
            raise PresetError(
                "--of curve needs the GDD curve (train.eval_every > 0), and this preset has none"
            )
    if steps:
        if of != "curve":
            raise PresetError("--steps selects GDD-curve points: it needs --of curve")
        kept = {j.step for j in jobs if j.step is not None}
        unknown = sorted(set(steps) - kept)
        if unknown:
            raise PresetError(f"--steps {unknown}: the curve evaluates steps {sorted(kept)}")
        jobs = [j for j in jobs if j.step in set(steps)]
    if episodes is not None:
        held = min(j.data.episodes for j in jobs)
        if not 1 <= episodes <= held:
            raise PresetError(
                f"--episodes must be in [1, {held}] (the test files' episodes), got {episodes}"
            )
        jobs = [dataclasses.replace(j, max_episodes=episodes) for j in jobs]
    return jobs


@dataclass(frozen=True)
class NoiseResult:
    """What :func:`run_noise` wrote: the rows and the two files."""

    rows: list[dict]
    json_path: Path
    table_path: Path
    table: str


def _sd(values: Sequence[float]) -> float:
    return float(np.std(values, ddof=1)) if len(values) >= 2 else math.nan


def noise_rows(
    groups: Sequence[tuple[EvalJob, Sequence[Record]]], env_samples: bool = False
) -> list[dict]:
    """One row per evaluation from its R repeats' records (repeat 0 first): the GDDs, their
    mean and SD (ddof 1), each component's mean and SD, and repeat 0's bootstrap SD."""
    rows = []
    for job, records in groups:
        dicts = [r.to_dict() for r in records]
        gdds = [float(d["gdd"]) for d in dicts]
        comps = {c: [float(d["components"][c]) for d in dicts] for c in COMPONENTS}
        rows.append(
            {
                "env": job.env,
                "model": job.model,
                "seed": job.seed,
                "size": job.size,
                "step": job.step,
                "episodes": len(dicts[0].get("gdd_episodes") or []) or None,
                "repeats": len(gdds),
                "env_samples": env_samples,
                "gdd": gdds,
                "gdd_mean": float(np.mean(gdds)),
                "gdd_sd": _sd(gdds),
                "components_mean": {c: float(np.mean(v)) for c, v in comps.items()},
                "components_sd": {c: _sd(v) for c, v in comps.items()},
                "bootstrap_sd": record_bootstrap_noise(dicts[0]),
            }
        )
    return rows


def _fmt(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else format_number(x)


def noise_table(rows: Sequence[dict], title: str) -> str:
    """The Markdown table of :func:`noise_rows`, then the mean SD per env and model."""
    lines = [
        f"### {title}",
        "",
        "| Env | N | Model | Seed | Step | Episodes | R | GDD mean | GDD SD | bootstrap SD | "
        + " | ".join(f"{c} SD" for c in COMPONENTS)
        + " |",
        "|" + ":--|" * 3 + "--:|" * (9 + len(COMPONENTS) - 2),
    ]
    for r in rows:
        cells = [
            r["env"],
            str(r["size"]),
            model_display(r["model"]),
            str(r["seed"]),
            "final" if r["step"] is None else str(r["step"]),
            "—" if r["episodes"] is None else str(r["episodes"]),
            str(r["repeats"]),
            _fmt(r["gdd_mean"]),
            _fmt(r["gdd_sd"]),
            _fmt(r["bootstrap_sd"]),
            *(_fmt(r["components_sd"][c]) for c in COMPONENTS),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Mean over the rows of each env and model (root mean square of the SDs):", ""]
    lines += ["| Env | Model | GDD SD | bootstrap SD |", "|:--|:--|--:|--:|"]
    grouped: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        grouped[(r["env"], r["model"])].append(r)
    for env in order_envs(e for e, _ in grouped):
        for model in order_models(m for e, m in grouped if e == env):
            mine = grouped[(env, model)]
            sd = _rms([r["gdd_sd"] for r in mine])
            boot = _rms([r["bootstrap_sd"] for r in mine])
            lines.append(f"| {env} | {model_display(model)} | {_fmt(sd)} | {_fmt(boot)} |")
    lines += [
        "",
        "GDD SD: the SD (ddof 1) of the GDD over R evaluations of the same checkpoint with "
        "independent model samples (and env samples where the file's name says env); "
        "bootstrap SD: the band the report draws, from repeat 0 alone (a bootstrap over its "
        'reference transitions); docs/reproducing.md, "Evaluation noise".',
    ]
    return "\n".join(lines) + "\n"


def _rms(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return float(math.sqrt(np.mean(np.square(finite)))) if finite else None


def _name(of: str, episodes: int | None, env_samples: bool) -> str:
    return f"{of}" + (f"-episodes{episodes}" if episodes else "") + ("-env" if env_samples else "")


def run_noise(
    preset: Any,
    paths: RunPaths,
    repeats: int,
    of: str = "final",
    *,
    env_samples: bool = False,
    steps: Sequence[int] | None = None,
    episodes: int | None = None,
    progress: bool = True,
) -> NoiseResult:
    """Evaluate each of :func:`noise_jobs` ``repeats`` times and write the spread
    (``RUN_DIR/noise/<of>[-episodes<E>][-env].json`` and ``.md``); trains what is not
    trained yet first (a trained run reuses its checkpoints)."""
    if repeats < 2:
        raise PresetError(f"--repeats must be >= 2 (one evaluation has no spread), got {repeats}")
    base = noise_jobs(preset, of, steps, episodes)
    pipeline.stage_train(preset, paths, progress)
    fn = curve_job if of == "curve" else single_step_job
    final_store, store = ResultStore(paths.results), ResultStore(paths.root / NOISE_DIR / "results")
    with run_lock(paths):
        per_base = [repeat_jobs(job, repeats, env_samples) for job in base]
        stored = {j.key: final_store.load(j) for j in base if final_store.has(j)}
        todo = [j for group in per_base for j in group if j.key not in stored]
        records = run_jobs(
            fn, todo, store, paths, desc="noise", progress=progress,
            **pipeline.executor_args(preset),
        )  # fmt: skip
        by_key = {**stored, **dict(zip([j.key for j in todo], records, strict=True))}
        groups = [(job, [by_key[j.key] for j in group]) for job, group in
                  zip(base, per_base, strict=True)]  # fmt: skip
        rows = noise_rows(groups, env_samples)
        name = _name(of, episodes, env_samples)
        out = paths.root / NOISE_DIR
        out.mkdir(parents=True, exist_ok=True)
        title = (
            f"Evaluation noise ({of}): {repeats} evaluations of each checkpoint, model samples"
            + (" and env samples" if env_samples else "")
            + " redrawn"
        )
        table = noise_table(rows, title)
        json_path = atomic_write_json(out / f"{name}.json", {"of": of, "rows": rows})
        table_path = atomic_write_text(out / f"{name}.md", table)
    return NoiseResult(rows, json_path, table_path, table)
