"""What the local executor's worker pool costs a whole run (issue 48, 1).

Runs ``graphwm reproduce --preset PRESET --workers N --quiet`` into a fresh temporary run
directory for each ``--workers`` value, with the ``graphwm`` of ``--tree`` (a checkout with
its own ``.venv``: this one by default, or another worktree to compare against), and prints
each run's wall time (the whole process: start-up, every stage, the report). From the run's
``jobs.log`` it also prints how many worker processes ran jobs and the time between the
stages (from the last job of one stage to the first job of the next: where a pool started
per stage spawns its workers and imports torch again)::

    uv run python benchmarks/pool_overhead.py --workers 1 2
    uv run python benchmarks/pool_overhead.py --tree /path/to/old/checkout --workers 1 2

Only the standard library is imported, so any Python runs it. One invocation with one
``--workers`` value is one run, which a whole-process timer can time from outside,
alternating two trees (old, new, old, new, ...; at least three pairs, quoting the median of
the per-pair ratios), e.g. ``/usr/bin/time -f %e`` around::

    python3 benchmarks/pool_overhead.py --tree /path/to/old/checkout --preset smoke --workers 2
    python3 benchmarks/pool_overhead.py --preset smoke --workers 2

``--timeline`` adds each run's per-stage table (:func:`timeline`: jobs, job seconds, span,
idle worker share, the driver's gap before the stage, the longest job);
``--timeline-of RUN_DIR --workers N`` prints that table for a finished run.

A timing needs an idle machine; this script asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
#: jobs.log kinds in the order a run reaches them (collect and fit run in the driver)
STAGES = ("train", "self_gdd", "single_step", "multi_step", "curve", "downstream")


def graphwm_command(tree: Path) -> list[str]:
    """The command that runs ``tree``'s graphwm CLI with ``tree``'s own environment."""
    python = tree / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{tree} has no .venv/bin/python (run `uv sync --all-packages` there)")
    return [str(python), "-m", "graphwm.cli"]


def stage_summary(jobs_log: Path) -> tuple[int, list[tuple[str, float]]]:
    """From a run's ``jobs.log``: how many processes ran its pool stages' jobs, and for each
    stage after the first the seconds from the previous stage's last job end to its first
    job start."""
    spans, pids = _spans(jobs_log)
    order = [k for k in STAGES if k in spans]
    gaps = [(k, spans[k][0] - spans[p][1]) for p, k in zip(order, order[1:], strict=False)]
    return len(pids), gaps


def busy_summary(jobs_log: Path, started: float) -> tuple[float, float, float]:
    """From a run's ``jobs.log`` and the command's start (``time.time()``): when its first
    pool-stage job started (seconds after the command), the seconds of all its jobs, and
    those of the busiest process."""
    spans, pids = _spans(jobs_log)
    first = min(lo for lo, _ in spans.values()) - started
    return first, sum(pids.values()), max(pids.values())


def _spans(jobs_log: Path) -> tuple[dict[str, list[float]], dict[int, float]]:
    """Each stage's [first start, last end], and each process's job seconds."""
    spans: dict[str, list[float]] = {}
    pids: dict[int, float] = {}
    for line in jobs_log.read_text().splitlines():
        row = json.loads(line)
        kind = row.get("kind")
        if kind not in STAGES or row.get("status") != "done":
            continue
        start, end = float(row["started"]), float(row["started"]) + float(row["seconds"])
        lo, hi = spans.get(kind, [start, end])
        spans[kind] = [min(lo, start), max(hi, end)]
        pids[int(row["pid"])] = pids.get(int(row["pid"]), 0.0) + float(row["seconds"])
    return spans, pids


def timeline(jobs_log: Path, workers: int) -> list[dict]:
    """Per stage of a run's ``jobs.log`` (in run order, the driver-side collect and fit
    included): its jobs, their seconds (CPU time: one thread each), its span from first start
    to last end, the idle worker seconds within that span (``workers`` x span - busy), the
    gap since the previous stage ended (the driver's own work between stages) and its longest
    job."""
    rows = [json.loads(line) for line in jobs_log.read_text().splitlines() if line.strip()]
    stages: dict[str, list[dict]] = {}
    for row in rows:
        if row.get("status") == "done":
            stages.setdefault(str(row["kind"]), []).append(row)
    out, previous = [], None
    for kind, group in sorted(stages.items(), key=lambda kv: min(r["started"] for r in kv[1])):
        lo = min(float(r["started"]) for r in group)
        hi = max(float(r["started"]) + float(r["seconds"]) for r in group)
        busy = sum(float(r["seconds"]) for r in group)
        longest = max(group, key=lambda r: float(r["seconds"]))
        out.append({
            "stage": kind, "jobs": len(group), "busy": busy, "span": hi - lo,
            "idle": max(0.0, workers * (hi - lo) - busy),
            "gap": 0.0 if previous is None else lo - previous,
            "longest": (float(longest["seconds"]),
                        " ".join(str(longest.get(k)) for k in ("env", "model") if longest.get(k))),
            "processes": len({r["pid"] for r in group}),
        })  # fmt: skip
        previous = hi
    return out


def print_timeline(jobs_log: Path, workers: int) -> None:
    """:func:`timeline` as a table, with the totals."""
    rows = timeline(jobs_log, workers)
    print(f"{'stage':12} {'jobs':>4} {'busy s':>8} {'span s':>8} {'idle %':>6} {'gap s':>6}  "
          "longest job")  # fmt: skip
    for r in rows:
        idle = 100 * r["idle"] / (workers * r["span"]) if r["span"] else 0.0
        print(f"{r['stage']:12} {r['jobs']:4d} {r['busy']:8.1f} {r['span']:8.1f} {idle:6.0f} "
              f"{r['gap']:6.1f}  {r['longest'][0]:.1f} s {r['longest'][1]}")  # fmt: skip
    span = sum(r["span"] + r["gap"] for r in rows)
    busy = sum(r["busy"] for r in rows)
    print(f"all: {busy:.1f} job seconds over {span:.1f} s from the first job to the last "
          f"({busy / span:.2f} of {workers} workers busy)")  # fmt: skip


def run_once(
    tree: Path, preset: str, workers: int, extra: list[str], timeline_too: bool = False
) -> float:
    """Wall seconds of one ``graphwm reproduce`` into a fresh run directory (printed with
    the stage gaps its ``jobs.log`` shows)."""
    with tempfile.TemporaryDirectory(prefix="pool-overhead-") as tmp:
        out = Path(tmp) / "run"
        cmd = [*graphwm_command(tree), "reproduce", "--preset", preset, "--workers",
               str(workers), "--quiet", "--out", str(out), *extra]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        started, clock = time.perf_counter(), time.time()
        done = subprocess.run(cmd, cwd=tmp, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-3000:])
            raise SystemExit(f"graphwm reproduce failed (exit {done.returncode}): {cmd}")
        processes, gaps = stage_summary(out / "jobs.log")
        first, total, busiest = busy_summary(out / "jobs.log", clock)
        if timeline_too:
            print_timeline(out / "jobs.log", workers)
    between = ", ".join(f"{k} {s:.1f} s" for k, s in gaps) or "none"
    print(f"{tree}: --preset {preset} --workers {workers}: {wall:.1f} s wall; jobs ran in "
          f"{processes} process(es); gap before each stage: {between}; first training job "
          f"at {first:.1f} s; job seconds {total:.1f} in all, {busiest:.1f} in the busiest "
          "process", flush=True)  # fmt: skip
    return wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, default=HERE,
                        help="checkout whose .venv runs graphwm (default: this one)")  # fmt: skip
    parser.add_argument("--preset", default="tiny", help="preset name or file (default tiny)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2],
                        help="worker counts, one run each (default: 1 2)")  # fmt: skip
    parser.add_argument("--repeat", type=int, default=1, help="runs per worker count")
    parser.add_argument("--timeline", action="store_true",
                        help="also print each run's per-stage timeline")  # fmt: skip
    parser.add_argument("--timeline-of", type=Path, metavar="RUN_DIR",
                        help="only print the timeline of a finished run (--workers: its one "
                        "worker count)")  # fmt: skip
    parser.add_argument("extra", nargs="*", help="more reproduce arguments (after --)")
    args = parser.parse_args(argv)
    if args.repeat < 1 or any(w < 1 for w in args.workers):
        parser.error("--repeat and every --workers value must be >= 1")
    if args.timeline_of is not None:
        if not (args.timeline_of / "jobs.log").is_file():
            parser.error(f"{args.timeline_of} has no jobs.log")
        print_timeline(args.timeline_of / "jobs.log", args.workers[0])
        return 0
    tree = args.tree.resolve()
    walls: dict[int, list[float]] = {}
    for _ in range(args.repeat):
        for workers in args.workers:  # alternated: a drifting machine affects both alike
            wall = run_once(tree, args.preset, workers, args.extra, args.timeline)
            walls.setdefault(workers, []).append(wall)
    if len(walls) > 1 or args.repeat > 1:
        for workers, times in walls.items():
            ordered = sorted(times)
            print(f"--workers {workers}: median {ordered[len(ordered) // 2]:.1f} s over "
                  f"{len(times)} run(s)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
