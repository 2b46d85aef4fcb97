"""The store's guards (issue 30): nothing is written through a symbolic link inside the run
directory, a FIFO or folder where a store file belongs is an error (never a hang), oversized
store files are refused before they are read, and the report never advises an option it lacks.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from graphwm.cli import main
from graphwm.report.build import build_report
from graphwm.store.files import (
    LOCK_NAME,
    MAX_JSON_BYTES,
    CorruptFileError,
    find_links,
    open_log,
    read_json,
    refuse_links,
    run_lock,
    sha256_file,
)
from graphwm.store.paths import RunPaths
from graphwm.store.records import SingleStepRecord, seal


def _result_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "results").mkdir(parents=True)
    record = SingleStepRecord(
        kind="single_step",
        env="SAR",
        model="gdm",
        seed=0,
        size=20,
        gdd=0.25,
        components={"node": 0.1, "graph": 0.2, "edge": 0.3, "joint": 0.01},
        factor_metrics={"adjacency_bce": 0.05, "features": {"reward": 0.1}},
    )
    (run / "results" / "a.json").write_text(json.dumps(seal(record.to_dict())))
    return run


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*"))


# ---------------------------------------------------------------------------------------------
# links
# ---------------------------------------------------------------------------------------------
def test_report_never_writes_through_a_linked_report_folder(tmp_path, capsys):
    run = _result_run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (run / "report").symlink_to(outside)
    with pytest.raises(CorruptFileError, match=r"report: is a symbolic link \(to "):
        build_report(run)
    assert _files(outside) == []
    assert main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "is a symbolic link" in err and "graphwm report only reads" in err
    assert "(rerun with --redo-corrupt" not in err
    assert _files(outside) == []


@pytest.mark.parametrize("folder", ["results", "quarantine", "jobs", "data", "train"])
def test_a_linked_run_folder_is_refused_before_any_write(tmp_path, folder):
    run = _result_run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    if (run / folder).exists():
        (run / folder).rename(tmp_path / "moved")
    (run / folder).symlink_to(outside)
    with pytest.raises(CorruptFileError, match=rf"{folder}: is a symbolic link"), run_lock(run):
        pytest.fail("the lock let work start in a run holding a link")
    assert _files(outside) == []


def test_a_nested_link_is_found_and_redo_corrupt_moves_the_link_not_its_target(tmp_path):
    run = _result_run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "keep.txt").write_text("mine")
    (run / "train" / "SAR").mkdir(parents=True)
    (run / "train" / "SAR" / "gdm").symlink_to(outside)
    assert find_links(run) == [run / "train" / "SAR" / "gdm"]
    with pytest.raises(CorruptFileError, match="gdm: is a symbolic link"):
        refuse_links(run)
    with run_lock(RunPaths(run, redo_corrupt=True)):
        assert find_links(run) == []  # quarantined (a quarantined link is never written to)
    assert (outside / "keep.txt").read_text() == "mine"
    assert not (run / "train" / "SAR" / "gdm").exists()
    assert list((run / "quarantine").rglob("gdm.*"))
    refuse_links(run)  # the quarantined link does not count


def test_a_linked_quarantine_is_refused_even_with_redo_corrupt(tmp_path):
    run = _result_run(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (run / "quarantine").symlink_to(outside)
    with pytest.raises(CorruptFileError, match="quarantine: is a symbolic link"):
        refuse_links(run, redo_corrupt=True)
    assert _files(outside) == []


def test_the_run_directory_itself_may_be_a_link(tmp_path):
    run = _result_run(tmp_path)
    link = tmp_path / "link"
    link.symlink_to(run)
    with run_lock(link):
        pass
    assert build_report(link).index.is_file()


# ---------------------------------------------------------------------------------------------
# FIFOs, folders and oversized files: an error, never a hang
# ---------------------------------------------------------------------------------------------
def test_a_fifo_as_a_json_file_is_refused_without_opening_it(tmp_path):
    fifo = tmp_path / "x.json"
    os.mkfifo(fifo)
    with pytest.raises(CorruptFileError, match=r"x\.json: is not a regular file \(a FIFO\)"):
        read_json(fifo)
    with pytest.raises(CorruptFileError, match="FIFO"):
        sha256_file(fifo)


def test_a_fifo_as_jobs_log_is_refused_not_blocked_on(tmp_path):
    os.mkfifo(tmp_path / "jobs.log")
    with pytest.raises(CorruptFileError, match=r"jobs\.log: is not a regular file \(a FIFO\)"):
        open_log(tmp_path / "jobs.log")
    paths = RunPaths(tmp_path, redo_corrupt=True)
    paths.check_logs()  # quarantined
    assert not (tmp_path / "jobs.log").exists()
    os.close(open_log(tmp_path / "jobs.log"))


def test_a_listed_result_that_is_a_fifo_fails_the_report(tmp_path):
    run = _result_run(tmp_path)
    os.mkfifo(run / "results" / "b.json")
    with pytest.raises(Exception, match=r"b\.json.*not a regular file"):
        build_report(run)


def test_an_oversized_json_file_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(MAX_JSON_BYTES + 1)  # sparse: no disk used
    with pytest.raises(CorruptFileError, match="bytes, more than"):
        read_json(big)


def test_a_lock_that_is_a_folder_is_recoverable(tmp_path):
    (tmp_path / LOCK_NAME).mkdir()
    with pytest.raises(CorruptFileError, match="is a directory"), run_lock(tmp_path):
        pass
    with run_lock(RunPaths(tmp_path, redo_corrupt=True)):
        assert (tmp_path / LOCK_NAME).is_file()
    assert list((tmp_path / "quarantine").glob(f"{LOCK_NAME}.*"))


def test_results_that_is_a_file_is_recoverable(tmp_path):
    (tmp_path / "results").write_text("not a folder")
    with pytest.raises(CorruptFileError, match=r"results: is not a directory \(a regular file\)"):
        with run_lock(tmp_path):
            pass
    with run_lock(RunPaths(tmp_path, redo_corrupt=True)):
        assert not (tmp_path / "results").exists()
    assert list((tmp_path / "quarantine").glob("results.*"))


def test_an_npz_member_of_objects_is_caught_where_redo_corrupt_can_quarantine_it(tmp_path):
    """The evaluate job refused it, but nothing quarantined it: the reuse check (collect's
    verify, under --redo-corrupt's recovery) now reads every member's header."""
    import numpy as np

    from graphwm.stages.collect import check_npz_members

    good = tmp_path / "good.npz"
    np.savez(good, lengths=np.array([2]), seeds=np.array([7]), reward=np.zeros(2))
    check_npz_members(good)
    bad = tmp_path / "bad.npz"
    np.savez(bad, lengths=np.array([2]), seeds=np.array([7]), reward=np.array([{}], dtype=object))
    with pytest.raises(CorruptFileError, match=r"member 'reward.npy' holds object values"):
        check_npz_members(bad)
