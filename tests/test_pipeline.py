"""End-to-end: the tiny preset through every stage, resumption after SIGKILL, the smoke preset."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from graphwm.pipeline import (
    RunPaths,
    preset_dict,
    reproduce,
    stage_collect,
    stage_fit,
    training_jobs,
)
from graphwm.report.build import build_report, load_results


def _finite_numbers_in(text: str) -> list[float]:
    import re

    return [float(x) for x in re.findall(r"-?\d+\.\d+(?:e-?\d+)?", text)]


def test_tiny_preset_end_to_end(tmp_path, capsys, monkeypatch):
    import graphwm.pipeline
    import graphwm.report.build
    from graphwm.stages.ensemble import train_unit
    from graphwm.store import executors

    calls = {"train": 0, "report": 0}
    pools = []  # the shared worker pool block each executor call runs in (issue 48, 1)

    def counted(name, fn, when=lambda *args: True):
        def wrapper(*args, **kwargs):
            calls[name] += when(*args)
            pools.append(executors._SHARED.get())
            return fn(*args, **kwargs)

        return wrapper

    # the training stage is the executor's run of train_unit jobs
    monkeypatch.setattr(
        graphwm.pipeline,
        "run_jobs",
        counted("train", graphwm.pipeline.run_jobs, lambda fn, *rest: fn is train_unit),
    )
    monkeypatch.setattr(
        graphwm.report.build, "build_report", counted("report", graphwm.report.build.build_report)
    )
    preset = preset_dict("tiny")
    report_dir = reproduce(preset, tmp_path, progress=False)
    # one pass: training (the tiny preset has a [downstream] section) and the report run once
    assert calls == {"train": 1, "report": 1}
    # every stage (and the report) ran inside one block: one worker pool for the whole run
    assert len(pools) > 2 and pools[0] is not None and all(p is pools[0] for p in pools)
    monkeypatch.undo()
    results = load_results(tmp_path)
    kinds = {r["kind"] for r in results}
    assert kinds == {"single_step", "multi_step", "self_gdd"}
    single = [r for r in results if r["kind"] == "single_step"]
    # 2 envs x 2 models + 1 ablation on SAR, one test size, one seed
    assert {(r["env"], r["model"]) for r in single} == {
        ("SAR", "gdm"),
        ("SAR", "vanilla-gwm"),
        ("RGC", "gdm"),
        ("RGC", "vanilla-gwm"),
        ("SAR", "gdm:no-h-plus"),
    }
    for r in results:
        values = r["gdd"] if isinstance(r["gdd"], list) else [r["gdd"]]
        assert all(math.isfinite(v) and v >= 0 for v in values), r
    assert [r for r in results if r["kind"] == "self_gdd" and r["env"] == "RGC"][0]["gdd"] == 0
    paths = build_report(tmp_path)
    assert paths.report_dir == report_dir
    for path in paths.files():
        assert path.exists() and path.stat().st_size > 0, path
    main_table = (report_dir / "gdd_single_step.md").read_text()
    numbers = _finite_numbers_in(main_table)
    assert numbers and all(math.isfinite(x) for x in numbers)
    assert "nan" not in main_table.lower()
    # one seed: no interval; the indistinguishability column and both self-GDD estimators
    assert "±" not in main_table and "Values of one seed: no confidence interval" in main_table
    assert "| Indist. |" in main_table
    shares = [r["indistinguishable"] for r in single]
    assert all(0.0 <= s <= 1.0 for s in shares)
    self_table = (report_dir / "self_gdd.md").read_text()
    assert "biased (paper)" in self_table and "unbiased" in self_table
    for r in results:
        if r["kind"] == "self_gdd":
            assert r["gdd_unbiased"] <= r["gdd"]
    # `graphwm report RUN_DIR` rebuilds from stored results and prints the main table
    from graphwm.cli import main

    capsys.readouterr()
    assert main(["report", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert main_table.strip() in printed
    # and says exactly which tables it did not print, and where they are
    others = [p.stem for p in sorted(report_dir.glob("*.md")) if p.stem not in ("report",)]
    (line,) = [ln for ln in printed.splitlines() if ln.startswith("not printed")]
    assert sorted(line.split(": ", 1)[1].split(", ")) == sorted(
        o for o in others if o != "gdd_single_step"
    )
    # rerunning is idempotent: every job is found finished, nothing changes
    before = {p.name: p.read_text() for p in (tmp_path / "results").glob("*.json")}
    reproduce(preset, tmp_path, progress=False)
    after = {p.name: p.read_text() for p in (tmp_path / "results").glob("*.json")}
    assert before == after


RESUME_SCRIPT = """
import json, sys
from graphwm.pipeline import RunPaths, stage_train
preset = json.loads(open(sys.argv[1]).read())
for r in stage_train(preset, RunPaths(sys.argv[2]), progress=False):
    print(r.checkpoint)
"""


def _resume_preset(tmp_path: Path) -> tuple[dict, Path]:
    preset = preset_dict("tiny")
    preset.update(envs=["SAR"], models=["gdm"], ablations=[])
    preset = preset_dict(preset, {"models": preset["models"]})  # their overrides only
    preset["train"] = {**preset["train"], "steps": 40, "checkpoint_every": 5}
    path = tmp_path / "preset.json"
    path.write_text(json.dumps(preset))
    return preset, path


def _copy_data(src: RunPaths, dst: Path) -> RunPaths:
    shutil.copytree(src.data, dst / "data")
    shutil.copytree(src.root / "fit", dst / "fit")
    return RunPaths(dst)


def test_sigkilled_training_resumes_to_identical_result(tmp_path):
    preset, preset_file = _resume_preset(tmp_path)
    base = RunPaths(tmp_path / "base")
    stage_collect(preset, base, progress=False)
    stage_fit(preset, base)
    killed = _copy_data(base, tmp_path / "killed")
    clean = _copy_data(base, tmp_path / "clean")
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-c", RESUME_SCRIPT, str(preset_file)]
    proc = subprocess.Popen([*cmd, str(killed.root)], env=env, start_new_session=True)
    (job,) = training_jobs(preset)
    latest = job.dir(killed.root) / "ckpt" / "latest"
    deadline = time.time() + 240
    while not (latest / "trainer_state.json").exists():
        assert proc.poll() is None, "training finished or died before its first checkpoint"
        assert time.time() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    final = job.checkpoint(killed.root)
    assert not final.exists(), "killed too late: the run had already finished"
    resumed = subprocess.run([*cmd, str(killed.root)], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    uninterrupted = subprocess.run([*cmd, str(clean.root)], env=env, capture_output=True, text=True)
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    jobs = [json.loads(p.read_text()) for p in (killed.root / "jobs").glob("*.json")]
    assert jobs[0]["resumed_from"] > 0
    manifests = [
        json.loads((job.checkpoint(r.root) / "checkpoint.json").read_text())
        for r in (killed, clean)
    ]
    assert manifests[0]["weights_sha256"] == manifests[1]["weights_sha256"]
    logs = [(job.dir(r.root) / "log.csv").read_text() for r in (killed, clean)]
    assert logs[0] == logs[1]


@pytest.mark.slow
def test_full_smoke_preset(tmp_path):
    preset = preset_dict("smoke")
    reproduce(preset, tmp_path, progress=False)
    results = load_results(tmp_path)
    single = [r for r in results if r["kind"] == "single_step"]
    assert {r["env"] for r in single} == {"RGC", "OD", "SAR", "CF"}
    assert {r["model"] for r in single} >= {"gdm", "vanilla-gwm", "ea-gwm", "g-rssm"}
    assert all(np.isfinite(r["gdd"]) for r in single)
