"""The fixed cost of one training job in a worker that keeps its device context (issue 27, 4).

The local executor's workers (and Ray's, ``max_calls=0``) run job after job in one process, so
only a worker's first job pays the process's start-up (imports, the CUDA context); the later
ones pay the fixed cost of a job alone (reading the data, building the model, writing the
checkpoints and the record). This script trains the tiny preset's GDM on SAR for ``--jobs``
seeds, 4 steps each, on ``--workers`` worker processes, and reads each job's wall time from the
run's ``jobs.log`` (the executor's own timing, one line per job with its worker's pid):

    uv run python benchmarks/job_overhead.py --device cuda --jobs 8 --workers 2

It prints the first job of each worker (cold) against the median of the others (warm),
their difference (the device context a worker creates once), and the stage's time outside any
job (spawning the workers, their imports). The tiny model's 4 steps take milliseconds, so a
warm job's time is its fixed cost. Runs on the CPU as well (the same code path).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from graphwm import pipeline


def job_times(run_dir: Path) -> dict[int, list[float]]:
    """Seconds of each finished training job in ``run_dir/jobs.log``, per worker pid, in the
    order the worker ran them."""
    by_pid: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for line in (run_dir / "jobs.log").read_text().splitlines():
        row = json.loads(line)
        if row["kind"] == "train" and row["status"] == "done":
            by_pid[int(row["pid"])].append((float(row["started"]), float(row["seconds"])))
    return {pid: [s for _, s in sorted(rows)] for pid, rows in by_pid.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default: cpu)")
    parser.add_argument("--jobs", type=int, default=6, help="training jobs (seeds; default 6)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    args = parser.parse_args(argv)
    if args.jobs < 2 * args.workers:
        parser.error("--jobs must be at least twice --workers (a cold and a warm job each)")
    overrides = {
        "device": args.device,
        "envs": ["SAR"],
        "models": ["gdm"],
        "ablations": [],
        "seeds": list(range(args.jobs)),
        "workers": args.workers,
    }
    preset = pipeline.preset_dict("tiny", overrides)
    with tempfile.TemporaryDirectory() as tmp:
        paths = pipeline.RunPaths(Path(tmp) / "run")
        pipeline.stage_collect(preset, paths, progress=False)
        pipeline.stage_fit(preset, paths)
        started = time.perf_counter()
        pipeline.stage_train(preset, paths, progress=False)
        wall = time.perf_counter() - started
        times = job_times(paths.root)
    cold = [t[0] for t in times.values()]
    warm = [s for t in times.values() for s in t[1:]]
    print(f"device {args.device}: {args.jobs} training jobs (tiny GDM, SAR, 4 steps each) on "
          f"{len(times)} worker process(es), stage wall time {wall:.2f} s")  # fmt: skip
    print(f"  first job of a worker (cold):  {statistics.median(cold):.3f} s (median of "
          f"{len(cold)})")  # fmt: skip
    if warm:
        fixed = statistics.median(warm)
        print(f"  later jobs (warm, fixed cost): {fixed:.3f} s (median of {len(warm)})")
        print(f"  a worker's first job pays once: {statistics.median(cold) - fixed:.3f} s more")
    # what no job's clock sees: spawning the workers and their imports (the stage's wall time
    # beyond the busiest worker's jobs)
    outside = wall - max(sum(t) for t in times.values())
    print(f"  outside the jobs (spawn, imports, store): {outside:.3f} s per stage")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
