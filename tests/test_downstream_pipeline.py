"""The downstream stage in the pipeline: the tiny preset runs it, `graphwm report` rebuilds
its table and figure from the stored records, `graphwm downstream` reruns nothing."""

from __future__ import annotations

import pytest
import torch

from graphwm.downstream.report import load_downstream
from graphwm.pipeline import PresetError, load_preset, preset_dict, reproduce

pytest.importorskip("sb3_contrib")


def test_tiny_preset_downstream_stage_and_report(tmp_path, capsys):
    from graphwm.cli import main

    torch.set_num_threads(1)
    preset = preset_dict("tiny")
    assert preset["downstream"]["envs"] == ["SAR"]
    preset.update(envs=["SAR"])  # the downstream env only (RGC is covered by test_pipeline)
    report = reproduce(preset, tmp_path, progress=False)
    records = load_downstream(tmp_path)
    assert {r.agent for r in records} == {
        "dream:gdm",
        "dream:vanilla-gwm",
        "dream:gdm:no-h-plus",
        "real",
        "random",
        "greedy",
    }
    assert all(r.num_nodes == 7 and r.episodes == 2 for r in records)
    table = (report / "downstream.md").read_text()
    for r in records:  # every agent has a row; dream rows carry their model's GDDs
        cells = next(line for line in table.splitlines() if f"| {r.agent} |" in line).split("|")
        single, multi = cells[-3].strip(), cells[-2].strip()
        if r.model is None:
            assert single == multi == "-"
        else:
            assert float(single) > 0  # every trained model has a single-step GDD
            # multi-step GDD exists for the preset's models, not for ablations
            assert (multi != "-") == (r.model in preset["models"]), cells
    assert (report / "downstream.png").stat().st_size > 5000
    assert "downstream.png" in (report / "report.md").read_text()

    # `graphwm report` rebuilds table and figure from the stored records alone
    (report / "downstream.md").unlink()
    (report / "downstream.png").unlink()
    assert main(["report", str(tmp_path)]) == 0
    assert (report / "downstream.md").read_text() == table
    assert (report / "downstream.png").exists()

    # `graphwm downstream` finds every job finished: the stored records do not change
    before = {p.name: p.read_text() for p in (tmp_path / "downstream").glob("*.json")}
    assert (
        main(["downstream", "--preset", "tiny", "--envs", "SAR", "--out", str(tmp_path), "--quiet"])
        == 0
    )
    after = {p.name: p.read_text() for p in (tmp_path / "downstream").glob("*.json")}
    assert before == after and len(after) == 6
    capsys.readouterr()


def test_bad_downstream_section_is_a_preset_error(tmp_path):
    with pytest.raises(PresetError, match="downstream.budget"):
        load_preset("tiny", {"downstream": {"budget": 0}})
    preset = preset_dict("tiny", {"downstream": {"budget": 8, "envs": ["CF"]}})
    with pytest.raises(PresetError, match=r"downstream.envs\[0\]"):
        reproduce(preset, tmp_path / "run", progress=False)
    assert not (tmp_path / "run").exists()  # refused before any work
