"""The report's figures drawn on a worker pool beside the driver (issue 48: the report stage
ran on one core while the run's other worker idled) are the files a serial build writes."""

from __future__ import annotations

import multiprocessing as mp
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest
from test_report import make_run

from graphwm.report.build import build_report
from graphwm.store import executors


def _files(report_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(report_dir.iterdir())}


@pytest.fixture(scope="module")
def serial(tmp_path_factory):
    """The report of a one-env run built in this process alone."""
    return build_report(make_run(tmp_path_factory.mktemp("serial"), envs=("SAR",)))


def test_figures_on_the_shared_pool_match_a_serial_build(tmp_path, serial):
    run = make_run(tmp_path / "pooled", envs=("SAR",))
    assert executors.active_pool() is None  # outside a shared_pool block: serial
    with executors.shared_pool():
        assert executors.active_pool() is None  # no parallel stage has started one yet
        # what a parallel stage does (run_jobs): start the block's pool of 1 worker
        scope = executors._SHARED.get()
        assert scope is not None
        pool = scope.get(1)
        assert executors.active_pool() is pool
        submitted: list[Future] = []
        submit = pool.submit

        def counting_submit(fn, *args, **kwargs):
            submitted.append(submit(fn, *args, **kwargs))
            return submitted[-1]

        pool.submit = counting_submit  # type: ignore[method-assign]
        pooled = build_report(run)  # no pool given: the block's
    assert len(submitted) >= 1  # the worker drew figures beside the driver
    assert list(pooled.figures) == list(serial.figures)
    assert _files(pooled.report_dir) == _files(serial.report_dir)
    assert all(f.done() and f.exception() is None for f in submitted)


def test_an_explicit_spawn_pool_gives_the_same_files(tmp_path, serial):
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        pooled = build_report(make_run(tmp_path / "pooled", envs=("SAR",)), pool=pool)
    assert _files(pooled.report_dir) == _files(serial.report_dir)


class _BrokenPool(Executor):
    """A pool whose worker died: every job it was given fails with BrokenProcessPool."""

    def submit(self, fn, /, *args, **kwargs):
        future: Future = Future()
        future.set_running_or_notify_cancel()  # the worker had taken it: no cancelling
        future.set_exception(BrokenProcessPool("a worker died"))
        return future


def test_a_broken_pool_leaves_its_figures_to_the_driver(tmp_path, serial):
    pooled = build_report(make_run(tmp_path / "pooled", envs=("SAR",)), pool=_BrokenPool())
    assert list(pooled.figures) == list(serial.figures)
    assert _files(pooled.report_dir) == _files(serial.report_dir)


def _named(path: Path) -> Path | None:
    return path if path.name != "none" else None


def _fails(path: Path) -> Path:
    raise ValueError(f"cannot draw {path.name}")


def test_draw_figures_keeps_the_order_and_raises_a_figures_error():
    from concurrent.futures import ThreadPoolExecutor

    from graphwm.report.figures import draw_figures

    jobs = [(n, _named, (Path(n),)) for n in ("gdd_vs_size", "none", "factor_metrics", "x")]
    with ThreadPoolExecutor(2) as pool:
        drawn, first = draw_figures(jobs, pool, lambda: "mine")
    assert list(drawn) == ["gdd_vs_size", "factor_metrics", "x"] and first == "mine"
    # a figure that fails, on the pool or here, raises its own error to the caller
    with ThreadPoolExecutor(1) as pool, pytest.raises(ValueError, match="factor_metrics"):
        draw_figures([*jobs, ("factor_metrics", _fails, (Path("factor_metrics"),))], pool)
