"""The published short agent row reruns bit for bit (issue 29): RGC, trained at N = 20, seed 0,
1,024 env steps, 5 evaluation episodes at N = 20 and at N = 50, with the command docs/agents.md
gives. Its raw rows (every episode return and the training curve) are committed in
``benchmarks/results/graph_agent_short_raw.jsonl``; a change of the envs, the policy, the
script or the locked versions that moves any of these numbers fails here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch_geometric")
pytest.importorskip("sb3_contrib")

BENCH = Path(__file__).parents[1] / "benchmarks"
PUBLISHED = BENCH / "results" / "graph_agent_short_raw.jsonl"
#: the command of docs/agents.md ("How exact the numbers are"), without --out-dir
COMMAND = [
    "--envs", "RGC", "--steps", "512", "--seeds", "1", "--seeds-50", "0", "--episodes", "5",
    "--throughput-steps", "0", "--no-random",
]  # fmt: skip


def _rows(path: Path) -> list[dict]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    for row in rows:
        row.pop("train_seconds", None)  # wall time: the one field that may differ
    return rows


def test_the_short_published_row_reruns_exactly(tmp_path):
    res = subprocess.run(
        [sys.executable, str(BENCH / "graph_agent.py"), *COMMAND, "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    got, want = _rows(tmp_path / "raw.jsonl"), _rows(PUBLISHED)
    assert [r["kind"] for r in got] == ["train", "transfer"]
    assert got == want  # every return and curve point, exactly
