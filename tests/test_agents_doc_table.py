"""docs/agents.md's yardstick table is the one the committed raw results give."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
BENCH = ROOT / "packages" / "graph-envs" / "benchmarks"


def _bench():
    spec = importlib.util.spec_from_file_location("graph_agent_bench_doc", BENCH / "graph_agent.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["graph_agent_bench_doc"] = module
    spec.loader.exec_module(module)
    return module


def _results_and_report() -> tuple[list[dict], str]:
    """The committed raw results and the report the bench makes of them (as ``--from-raw``)."""
    raw = BENCH / "results" / "graph_agent_raw.jsonl"
    results = [json.loads(line) for line in raw.read_text().splitlines()]
    steps = max(r.get("steps", 0) for r in results if r["kind"] == "train")
    return results, _bench().format_report(results, steps, 100)


def test_doc_table_rows_are_regenerated_from_the_committed_raw_results():
    results, report = _results_and_report()
    rows = [line for line in report.splitlines() if line.startswith("| ") and "---" not in line]
    doc = (ROOT / "docs" / "agents.md").read_text()
    # every (env, N) row of both tables: returns, z-scores and throughput ratios
    assert len(rows) >= 8 + 1 + 4
    missing = [row for row in rows if row not in doc]
    assert not missing, f"docs/agents.md lacks rows the raw results give: {missing}"
    # three training seeds at each size and env, as the table claims
    for env in ("RGC", "OD", "SAR", "CF"):
        for n in (20, 50):
            seeds = {
                r["seed"]
                for r in results
                if r["kind"] == "train" and r["env"] == env and r["train_nodes"] == n
            }
            assert seeds == {0, 1, 2}, (env, n, seeds)


def test_published_returns_in_envs_md_hold_the_graph_agent_of_the_raw_results():
    """docs/envs.md's graph-agent column quotes the same mean ± s.e. as the yardstick table."""
    _, report = _results_and_report()
    envs_md = (ROOT / "docs" / "envs.md").read_text().splitlines()
    checked = 0
    for row in report.splitlines():
        cells = [c.strip() for c in row.strip("|").split("|")]
        if len(cells) < 9 or cells[0] not in ("RGC", "OD", "SAR", "CF"):
            continue
        env, n = cells[0], cells[1]
        (line,) = [x for x in envs_md if x.startswith(f"| {env} | {n} |")]
        in_size = cells[5].split(" (")[0]  # the graph agent trained at N
        assert in_size in line, (env, n, in_size, line)
        if n == "50":
            transfer = cells[8].split(" (")[0]  # trained at N = 20, evaluated at 50
            assert f"trained at N = 20: {transfer}" in line, (env, transfer, line)
        checked += 1
    assert checked == 8
