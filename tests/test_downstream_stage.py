"""The downstream stage: content-keyed jobs, stored records, report table and figure."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from graphwm.downstream.config import DownstreamConfig
from graphwm.downstream.record import DownstreamRecord
from graphwm.dream.tiny import tiny_trained_model
from graphwm.stages.downstream import (
    build_downstream_report,
    downstream_jobs,
    execute_downstream_job,
    load_downstream,
)
from graphwm.store.executors import run_jobs
from graphwm.store.records import seal
from graphwm.store.results import ResultStore

pytest.importorskip("sb3_contrib")


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def run_stage_jobs(jobs, run):
    """The downstream jobs in this process, stored under ``run/downstream``."""
    return run_jobs(
        execute_downstream_job,
        jobs,
        ResultStore(run / "downstream"),
        run,
        max_workers=1,
        progress=False,
    )


def test_stage_runs_stores_and_reports(tmp_path):
    run = tmp_path / "run"
    reldir = "train/SAR/gdm/seed0-abc"
    tiny_trained_model("gdm", "SAR").save(run / reldir / "ckpt" / "final")
    trained = [SimpleNamespace(env="SAR", model="gdm", seed=0, key="train-abc", reldir=reldir)]
    section = DownstreamConfig.parse({"budget": 64, "episodes": 2, "num_nodes": 8})
    jobs = downstream_jobs(section, ["SAR"], trained)
    assert [dict(j.config)["agent"] for j in jobs] == ["dream", "real", "random", "greedy"]
    assert jobs[0].describe()["train"] == "train-abc" and "checkpoint" not in jobs[0].describe()
    # the key ignores where the run lives and the thread count, not the settings
    moved = downstream_jobs(
        section, ["SAR"], [SimpleNamespace(**{**vars(trained[0]), "reldir": "x"})], threads=2
    )
    assert moved[0].key == jobs[0].key
    other = downstream_jobs(
        DownstreamConfig.parse({"budget": 65, "episodes": 2, "num_nodes": 8}), ["SAR"], trained
    )
    assert other[0].key != jobs[0].key

    records = run_stage_jobs(jobs, run)
    assert [r.agent for r in records] == ["dream:gdm", "real", "random", "greedy"]
    assert len(load_downstream(run)) == 4
    results = [
        {"kind": "single_step", "env": "SAR", "model": "gdm", "seed": 0, "size": 8, "gdd": 0.25},
        {
            "kind": "multi_step",
            "env": "SAR",
            "model": "gdm",
            "seed": 0,
            "size": 8,
            "gdd": [0.5, 0.7],
        },
    ]
    out = build_downstream_report(run, run / "report", results)
    table = out["table"].read_text()
    assert "dream:gdm" in table and "0.2500" in table and "0.6000" in table
    assert out["figure"].stat().st_size > 5000
    # a rerun finds every job finished (the stored records come back unchanged)
    again = run_stage_jobs(jobs, run)
    assert again == records
    # run.json scopes the report to the last preset run
    (run / "run.json").write_text(json.dumps({"downstream": []}))
    assert build_downstream_report(run, run / "report", results) == {}
    assert not (run / "report" / "downstream.md").exists()


def test_stored_record_must_be_valid(tmp_path):
    (tmp_path / "downstream").mkdir()
    (tmp_path / "downstream" / "bad.json").write_text(json.dumps({"kind": "downstream"}))
    with pytest.raises(ValueError, match="bad.json.*lacks"):
        load_downstream(tmp_path)
    rec = DownstreamRecord("SAR", 8, "random", None, 0, 0, -3.0, 0.5, 2)
    (tmp_path / "downstream" / "bad.json").write_text(json.dumps(seal(rec.to_dict())))
    assert load_downstream(tmp_path) == [rec]
