"""The package installs into a fresh venv with numpy only (docs examples: tests/test_docs.py)."""

from __future__ import annotations

import math
import shutil
import subprocess
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]
REPO = PACKAGE.parents[1]

SCRIPT = """
import importlib.util, numpy as np
import gdd_metric
assert importlib.util.find_spec("torch") is None, "torch must not be required"
schema = {"graph_continuous": ["r"]}
x = {"adjacency": np.zeros((3, 0, 0)), "graph_continuous": np.zeros((3, 1))}
y = {"adjacency": np.zeros((2, 0, 0)), "graph_continuous": np.ones((2, 1))}
r = gdd_metric.gdd(x, y, schema, gdd_metric.Bandwidths(sigma={"r": 1.0}))
print(round(r.gdd, 6))
"""


def test_installs_and_runs_in_fresh_venv_without_torch(tmp_path):
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv not available")
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", "3.11", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(python), str(PACKAGE)],
        check=True,
        timeout=300,
    )
    out = subprocess.run(
        [str(python), "-c", SCRIPT], check=True, capture_output=True, text=True, cwd=tmp_path
    )
    # one graph feature, 0 vs 1, sigma 1, default multipliers; no nodes -> graph and joint only
    k = sum(math.exp(-1 / (2 * r**2)) for r in (0.1, 0.5, 1, 2, 16)) / 5
    mmd2 = (1 / 3 + 1) * (1 + 1 - 2 * k)
    assert float(out.stdout) == pytest.approx(math.sqrt(mmd2), abs=1e-6)
