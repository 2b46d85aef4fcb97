"""Serial time of a run outside its jobs (issue 48, 1): package imports and the report stage.

Each import is timed in a fresh process of the tree's ``.venv`` (``--tree``: this checkout by
default, or another worktree to compare against), ``--repeat`` times, and the median printed,
with whether ``torch_geometric`` and other heavy libraries ended up imported (a driver and
every spawned pool worker pay these imports)::

    python3 benchmarks/startup.py --imports
    python3 benchmarks/startup.py --tree /path/to/old/checkout --imports

``--report RUN_DIR`` times ``build_report`` (the report stage) on a copy of a finished run
(its ``report/`` removed, so every file is written), in a fresh process, import excluded;
``--report-workers N`` (N > 1) draws the figures on a spawned pool of N - 1 workers beside
the driver, as ``graphwm reproduce`` does on its own workers (a tree whose ``build_report``
takes no ``pool`` is timed serially and says so)::

    uv run graphwm reproduce --preset smoke --out /tmp/smoke   # once
    python3 benchmarks/startup.py --report /tmp/smoke --report-workers 1 2
    python3 benchmarks/startup.py --tree /path/to/old/checkout --report /tmp/smoke

Only the standard library is imported here, so any Python runs it. A timing needs an idle
machine (alternate the trees: old, new, old, new, ...); this script asserts nothing about
speed.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
MODULES = ("gdm_models", "graphwm_envs", "gdd_metric", "graphwm.cli", "graphwm.pipeline")
#: libraries a command may not need: reported when an import brought them in
HEAVY = ("torch_geometric", "torch._dynamo", "matplotlib", "ray", "stable_baselines3", "scipy")

_IMPORT = """
import sys, time
t = time.perf_counter()
import {module}
dt = time.perf_counter() - t
heavy = [m for m in {heavy!r} if m in sys.modules]
print(f"{{dt:.3f}} {{','.join(heavy) or '-'}}")
"""

_REPORT = """
import inspect, multiprocessing as mp, sys, time
from concurrent.futures import ProcessPoolExecutor
from graphwm.report.build import build_report
run, workers = sys.argv[1], int(sys.argv[2])
pooled = workers > 1 and "pool" in inspect.signature(build_report).parameters
t = time.perf_counter()
if pooled:
    with ProcessPoolExecutor(workers - 1, mp_context=mp.get_context("spawn")) as pool:
        build_report(run, pool=pool)
else:
    build_report(run)
print(f"{time.perf_counter() - t:.3f} {'pool' if pooled else 'serial'}")
"""


def python_of(tree: Path) -> Path:
    """The interpreter of ``tree``'s virtual environment."""
    python = tree / ".venv" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{tree} has no .venv/bin/python (run `uv sync --all-packages` there)")
    return python


def time_import(python: Path, module: str, repeat: int) -> tuple[float, str]:
    """Median seconds of ``import module`` in a fresh process; the heavy libraries it loaded."""
    times, heavy = [], ""
    for _ in range(repeat):
        code = _IMPORT.format(module=module, heavy=HEAVY)
        out = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
        times.append(float(out[0]))
        heavy = out[1]
    return statistics.median(times), heavy


def time_report(python: Path, run_dir: Path, workers: int, repeat: int) -> tuple[float, str]:
    """Median seconds of ``build_report`` on a fresh copy of ``run_dir`` (report removed)."""
    times, how = [], ""
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="graphwm-startup-") as tmp:
            copy = Path(tmp) / "run"
            shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("report"))
            out = subprocess.run(
                [str(python), "-c", _REPORT, str(copy), str(workers)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
        times.append(float(out[-2]))
        how = out[-1]
    return statistics.median(times), how


def main(argv: list[str] | None = None) -> int:
    """Print the import and report times (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", type=Path, default=HERE, help="checkout with its own .venv")
    p.add_argument("--imports", action="store_true", help="time each package import")
    p.add_argument("--modules", nargs="+", default=list(MODULES), help="modules to import")
    p.add_argument("--report", type=Path, metavar="RUN_DIR", help="time the report of a run")
    p.add_argument("--report-workers", type=int, nargs="+", default=[1])
    p.add_argument("--repeat", type=int, default=3, help="runs per timing (median printed)")
    args = p.parse_args(argv)
    if args.repeat < 1 or min(args.report_workers) < 1:
        p.error("--repeat and --report-workers must be >= 1")
    if args.report is not None and not (args.report / "run.json").exists():
        p.error(f"--report {args.report}: not a finished run (no run.json)")
    if not args.imports and args.report is None:
        p.error("nothing to time: give --imports and/or --report RUN_DIR")
    python = python_of(args.tree.resolve())
    print(f"tree {args.tree.resolve()}, median of {args.repeat}")
    if args.imports:
        for module in args.modules:
            seconds, heavy = time_import(python, module, args.repeat)
            print(f"import {module:<20} {seconds:8.3f} s   loaded: {heavy}")
    if args.report is not None:
        for workers in args.report_workers:
            seconds, how = time_report(python, args.report, workers, args.repeat)
            print(f"report workers={workers} ({how}) {seconds:8.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
