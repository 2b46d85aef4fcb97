"""One failing job never stops a run (issue 38, class 3; issue 37): with the sequential
executor every other job still runs, the failure is recorded with its cause, the jobs that
need its output are left out, the report marks the missing seed and computes intervals over
the seeds that finished, the CLI names the failure and the commands that resume, and a rerun
does not retrain a deterministically failed job unless ``--retry-failed``."""

from __future__ import annotations

import json
from pathlib import Path

import gdm_models
import pytest

from graphwm.cli import main
from graphwm.pipeline import RunFailed, RunPaths, preset_dict, reproduce_report, stage_train
from graphwm.store.executors import run_jobs
from graphwm.store.outcomes import JobsFailed
from graphwm.store.results import ResultStore


def _diverging(calls: list, model_name: str):
    """gdm_models.train that diverges for ``model_name`` (as EA-GWM at lr = 10 does)."""
    real = gdm_models.train

    def train(model, dataset, config, **kw):
        calls.append(model.model_name)
        if model.model_name == model_name:
            raise FloatingPointError("non-finite loss (nan) at step 3")
        return real(model, dataset, config, **kw)

    return train


ARGS = ["--preset", "tiny", "--envs", "SAR", "--models", "gdm", "vanilla-gwm", "--quiet"]


def test_a_failed_job_is_recorded_the_others_run_and_the_report_marks_it(
    tmp_path, monkeypatch, capsys
):
    calls: list[str] = []
    monkeypatch.setattr(gdm_models, "train", _diverging(calls, "gdm"))
    out = tmp_path / "run"
    # the sequential executor (the tiny preset's workers = 1): gdm fails first, the rest runs
    assert main(["reproduce", *ARGS, "--out", str(out)]) == 1
    err = capsys.readouterr()
    assert "graphwm: error: 1 job(s) failed; every other job ran:" in err.err
    assert "FloatingPointError: non-finite loss (nan) at step 3" in err.err
    assert f"graphwm reproduce {' '.join(ARGS)} --out {out} --retry-failed" in err.err
    assert "gdd_single_step" in err.out  # the report was built and printed
    assert calls.count("vanilla-gwm") == 1 and "gdm" in calls  # (the ablation trains too)

    run = json.loads((out / "run.json").read_text())
    (failed,) = run["failed"]
    assert failed["model"] == "gdm" and failed["seed"] == 0 and failed["kind"] == "train"
    assert failed["cause"].startswith("FloatingPointError")
    assert all(t["model"] != "gdm" for t in run["train"])
    key = failed["key"]
    assert "FloatingPointError" in (out / "jobs" / f"{key}.failure").read_text()
    assert "Traceback" in (out / "jobs" / f"{key}.log").read_text()
    # every job that did not need the failed one finished: vanilla-gwm and the ablation
    results = [json.loads(p.read_text()) for p in (out / "results").glob("*.json")]
    models = {r.get("model") for r in results if r["kind"] == "single_step"}
    assert models == {"vanilla-gwm", "gdm:no-h-plus"}
    table = (out / "report" / "gdd_single_step.md").read_text()
    assert "Missing: SAR GDM seed 0 (train failed: FloatingPointError" in table
    assert "over the seeds that finished" in table
    lines = [json.loads(x) for x in (out / "jobs.log").read_text().splitlines()]
    assert {ln["status"] for ln in lines if ln["key"] == key} == {"failed"}
    jobs = [ln for ln in lines if ln["kind"] not in ("collect", "fit")]  # (driver-side steps)
    assert all({"host", "threads", "device"} <= set(ln) for ln in jobs)
    assert {ln["threads"] for ln in jobs} == {1}

    # a rerun does not train the deterministically failed job again ...
    calls.clear()
    preset = preset_dict("tiny", {"envs": ["SAR"], "models": ["gdm", "vanilla-gwm"]})
    with pytest.raises(RunFailed, match="recorded by an earlier run") as info:
        reproduce_report(preset, out, progress=False)
    assert calls == [] and info.value.report is not None
    # ... unless asked: with the cause gone, it trains, its evaluations run, nothing is missing
    monkeypatch.undo()
    report = reproduce_report(preset, out, progress=False, retry_failed=True)
    assert not (out / "jobs" / f"{key}.failure").exists()
    assert json.loads((out / "run.json").read_text())["failed"] == []
    assert "Missing" not in (report.report_dir / "gdd_single_step.md").read_text()
    assert "GDM" in report.main_table


def _boom(job, run_dir):
    if job.key == "bad":
        raise ValueError("bad job")
    from graphwm.store.records import COMPONENTS, SelfGddRecord

    return SelfGddRecord(
        kind="self_gdd",
        env="SAR",
        seed=0,
        size=7,
        gdd=0.5,
        components=dict.fromkeys(COMPONENTS, 0.0),
    )


class _Job:
    kind = "self_gdd"
    env = "SAR"

    def __init__(self, key: str) -> None:
        self.key = key

    def describe(self) -> dict:
        return {"key": self.key}


def test_run_jobs_runs_every_job_after_a_failure(tmp_path):
    """The sequential executor: the failure is raised after every other job stored its
    record."""
    store = ResultStore(tmp_path / "results")
    jobs = [_Job("bad"), _Job("good-1"), _Job("good-2")]
    with pytest.raises(JobsFailed, match="bad job") as info:
        run_jobs(_boom, jobs, store, tmp_path, max_workers=1, progress=False)
    assert info.value.records[0] is None and all(info.value.records[1:])
    assert store.has(jobs[1]) and store.has(jobs[2]) and not store.has(jobs[0])
    assert (tmp_path / "results" / "bad.failure").exists()
    assert Path(tmp_path / "jobs" / "good-1.log").exists()


def test_stage_train_raises_after_the_other_jobs(tmp_path, monkeypatch):
    calls: list[str] = []
    # the pool starts the longest job first: the GDM's, then Vanilla GWM's
    monkeypatch.setattr(gdm_models, "train", _diverging(calls, "gdm"))
    preset = preset_dict("tiny", {"envs": ["SAR"], "models": ["vanilla-gwm", "gdm"],
                                  "ablations": [], "downstream": None})  # fmt: skip
    with pytest.raises(JobsFailed) as info:
        stage_train(preset, RunPaths(tmp_path), progress=False)
    assert calls == ["gdm", "vanilla-gwm"]  # the job queued after the failure ran
    # records come back in the preset's job order (vanilla-gwm, gdm): the GDM's failed
    assert [r is None for r in info.value.records] == [False, True]
