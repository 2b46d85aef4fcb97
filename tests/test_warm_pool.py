"""The local pool starts with the run (``graphwm.store.executors.warm_pool``): its worker
imports the jobs' modules while the driver checks, collects and fits, so that ``--workers 2``
is not slower than ``--workers 1`` on the tiny preset (issue 48, 1; benchmarks/pool_overhead.py
times it)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import os, sys
from graphwm.store.executors import active_pool, shared_pool, warm_pool

NAMES = ("colorsys", "no_such_module_xyz")  # a module nothing else imports, a missing one


def loaded(names):
    return os.getpid(), [n for n in names if n in sys.modules]


if __name__ == "__main__":
    with shared_pool():
        assert active_pool() is None  # no pool before a stage or warm_pool asks for one
        warm_pool(2, NAMES)
        pool = active_pool()
        pid, seen = pool.submit(loaded, NAMES).result(timeout=600)
        print(pid != os.getpid(), seen)
    with shared_pool():
        warm_pool(1, NAMES)  # one worker: the driver alone, no pool
        print(active_pool())
    print(warm_pool(2, NAMES))  # outside a block: nothing
"""


def test_warm_pool_starts_the_worker_with_the_modules_imported(tmp_path):
    script = tmp_path / "warm_probe.py"
    script.write_text(PROBE)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=900, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["True ['colorsys']", "None", "None"]
