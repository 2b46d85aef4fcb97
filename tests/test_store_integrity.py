"""Store integrity without running the pipeline: result and downstream records carry a digest,
every path read from a store file stays inside the run directory, and an artefact the report
needs is never silently left out."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphwm.cli import main
from graphwm.downstream.report import load_downstream
from graphwm.report.build import build_report, load_results
from graphwm.report.training_logs import load_training_logs
from graphwm.stages.collect import load_episodes
from graphwm.stages.fit import load_fitted
from graphwm.store.files import CorruptFileError
from graphwm.store.records import ResultsFormatError, SingleStepRecord, seal


def _single(env: str, model: str, size: int, seed: int) -> dict:
    """A single-step result in its stored form, built by the record type the stage writes."""
    record = SingleStepRecord(
        kind="single_step",
        env=env,
        model=model,
        seed=seed,
        size=size,
        gdd=0.25 + seed,
        components={"node": 0.1, "graph": 0.2, "edge": 0.3, "joint": 0.01},
        factor_metrics={"adjacency_bce": 0.05, "features": {"reward": 0.1}},
    )
    return record.to_dict()


def _write(run: Path, name: str, obj: dict) -> None:
    (run / "results").mkdir(parents=True, exist_ok=True)
    (run / "results" / f"{name}.json").write_text(json.dumps(seal(obj)))


def _write_log(run: Path, env: str, model: str, seed: int, terms: list[str], n: int) -> None:
    folder = run / "train" / env / model / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    rows = [",".join(["step", "total", *terms])]
    rows += [",".join([str(i), str(1.0 / (i + 1))] + ["0.5"] * len(terms)) for i in range(n)]
    (folder / "log.csv").write_text("\n".join(rows) + "\n")


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    _write(run, "a", _single("SAR", "gdm", 20, 0))
    return run


# ---------------------------------------------------------------------------------------------
# digests: a hand-edited record is refused, not reported
# ---------------------------------------------------------------------------------------------
def test_edited_result_record_is_refused_by_the_report(tmp_path, capsys):
    run = _run(tmp_path)
    path = run / "results" / "a.json"
    assert load_results(run)[0]["gdd"] == _single("SAR", "gdm", 20, 0)["gdd"]
    data = json.loads(path.read_text())
    data["gdd"] = 0.0  # a better-looking number, digest unchanged
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptFileError, match=r"a\.json: its content differs from its digest"):
        load_results(run)
    assert main(["report", str(run)]) == 2
    assert "differs from its digest" in capsys.readouterr().err


def test_record_without_digest_is_refused(tmp_path):
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    (run / "results" / "a.json").write_text(json.dumps(_single("SAR", "gdm", 20, 0)))
    with pytest.raises(CorruptFileError, match="carries no digest"):
        load_results(run)


def test_edited_downstream_record_is_refused(tmp_path):
    from graphwm.downstream.record import DownstreamRecord

    rec = DownstreamRecord("SAR", 8, "random", None, 0, 0, -3.0, 0.5, 2)
    (tmp_path / "downstream").mkdir()
    path = tmp_path / "downstream" / "r.json"
    path.write_text(json.dumps(seal(rec.to_dict())))
    assert load_downstream(tmp_path) == [rec]
    path.write_text(json.dumps({**seal(rec.to_dict()), "mean_return": 9.0}))
    with pytest.raises(CorruptFileError, match="differs from its digest"):
        load_downstream(tmp_path)


# ---------------------------------------------------------------------------------------------
# missing artefacts the report needs: an error, never a silent omission
# ---------------------------------------------------------------------------------------------
def test_deleted_training_log_is_an_error_not_a_missing_curve(tmp_path):
    run = _run(tmp_path)
    _write_log(run, "SAR", "gdm", 0, ["pred"], 5)
    _write_log(run, "SAR", "gdm", 1, ["pred"], 5)
    train = [
        {"env": "SAR", "model": "gdm", "seed": s, "key": f"k{s}", "dir": f"train/SAR/gdm/seed{s}"}
        for s in (0, 1)
    ]
    (run / "run.json").write_text(json.dumps({"results": ["results/a.json"], "train": train}))
    assert len(load_training_logs(run)) == 2
    (run / "train" / "SAR" / "gdm" / "seed1" / "log.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"seed1/log\.csv of SAR/gdm/seed 1"):
        build_report(run)


def test_deleted_downstream_record_is_an_error_not_a_missing_row(tmp_path):
    from graphwm.downstream.record import DownstreamRecord

    run = _run(tmp_path)
    (run / "downstream").mkdir()
    for i in range(2):
        rec = DownstreamRecord("SAR", 8, "random", None, i, 0, -3.0, 0.5, 2)
        (run / "downstream" / f"d{i}.json").write_text(json.dumps(seal(rec.to_dict())))
    listed = {
        "results": ["results/a.json"],
        "downstream": ["downstream/d0.json", "downstream/d1.json"],
    }
    (run / "run.json").write_text(json.dumps(listed))
    assert len(load_downstream(run)) == 2
    (run / "downstream" / "d1.json").unlink()
    with pytest.raises(ResultsFormatError, match=r"missing downstream record.*d1\.json"):
        build_report(run)


# ---------------------------------------------------------------------------------------------
# paths read from store files stay inside the run directory
# ---------------------------------------------------------------------------------------------
def test_run_json_result_outside_the_run_dir_is_refused(tmp_path):
    run = _run(tmp_path)
    outside = tmp_path / "x.json"
    outside.write_text(json.dumps(seal(_single("SAR", "g-rssm", 20, 0))))
    (run / "run.json").write_text(json.dumps({"results": ["results/a.json", "../x.json"]}))
    with pytest.raises(CorruptFileError, match=r"run\.json.*'\.\./x\.json' leads outside"):
        load_results(run)


def test_run_json_symlink_escape_is_refused(tmp_path):
    run = _run(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "x.json").write_text(
        json.dumps(seal(_single("SAR", "ea-gwm", 20, 0)))
    )
    (run / "results" / "link").symlink_to(tmp_path / "elsewhere")
    (run / "run.json").write_text(
        json.dumps({"results": ["results/a.json", "results/link/x.json"]})
    )
    with pytest.raises(CorruptFileError, match="leads outside"):
        load_results(run)


def test_run_json_training_dir_outside_is_refused(tmp_path):
    run = _run(tmp_path)
    _write_log(tmp_path / "other", "SAR", "gdm", 0, ["pred"], 3)
    train = [
        {"env": "SAR", "model": "gdm", "seed": 0, "key": "k", "dir": "../other/train/SAR/gdm/seed0"}
    ]
    (run / "run.json").write_text(json.dumps({"train": train}))
    with pytest.raises(CorruptFileError, match="leads outside"):
        load_training_logs(run)


def test_run_json_downstream_outside_is_refused(tmp_path):
    run = _run(tmp_path)
    (run / "run.json").write_text(json.dumps({"downstream": ["../../etc/passwd"]}))
    with pytest.raises(CorruptFileError, match="leads outside"):
        load_downstream(run)


def test_bandwidths_file_holding_a_path_is_not_followed(tmp_path):
    """gdd_metric's Bandwidths.from_json reads a string as a path; the store never passes one."""
    from gdd_metric import Bandwidths

    good = Bandwidths.from_dict({"sigma": {"node": 1.0}, "lambda": {"node": 1.0}})
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(good.to_json())
    fit = tmp_path / "run" / "fit" / "SAR" / "k"
    fit.mkdir(parents=True)
    (fit / "bandwidths.json").write_text(json.dumps(str(elsewhere)))
    (fit / "scaler.json").write_text("{}")
    with pytest.raises(CorruptFileError, match="bandwidths.json holds a JSON str"):
        load_fitted(fit)


def test_npz_member_of_raw_pickle_bytes_is_a_corrupt_file(tmp_path):
    import pickle
    import zipfile

    path = tmp_path / "d.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("lengths.npy", pickle.dumps(np.arange(3)))
        zf.writestr("seeds.npy", pickle.dumps(np.arange(3)))
    with pytest.raises(CorruptFileError, match=r"d\.npz: not a readable npz"):
        load_episodes(path)
