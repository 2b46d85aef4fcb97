"""benchmarks/bench_ensemble.py's thread-scaling evidence: the alternation of thread counts
and the ratio and bound it prints (fake step functions and timings: no timing is asserted)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_ensemble.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_ensemble", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_ensemble"] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules["bench_ensemble"]


def test_time_alternates_thread_counts_and_restores_the_callers(bench):
    seen: list[int] = []
    before = torch.get_num_threads()  # 1 (the package's conftest)

    def step():
        seen.append(torch.get_num_threads())

    bench._time([step, step], torch.device("cpu"), 3, threads=[1, 2])
    # two warm-up calls each, then one call each per timed step, alternating
    assert seen == [1, 1, 2, 2] + [1, 2] * 3
    assert torch.get_num_threads() == before

    def broken():
        if torch.get_num_threads() == 2:
            raise RuntimeError("step failed")

    with pytest.raises(RuntimeError, match="step failed"):
        bench._time([broken, broken], torch.device("cpu"), 1, threads=[1, 2])
    assert torch.get_num_threads() == before


def test_thread_scaling_prints_the_ratio_and_the_least_ensemble_step(bench, monkeypatch, capsys):
    """The lead's idle 2-core GDM numbers: 431 ms at 1 thread, 303 ms at 2: r = 1.42, and a
    K-member step costs at least K * r / n = 2.84 single steps at K = 4."""
    calls = []

    def fake_time(fns, dev, steps, threads=None):
        calls.append(threads)
        return [431.0, 303.0]

    monkeypatch.setattr(bench, "_time", fake_time)
    monkeypatch.setattr(bench, "core_count", lambda: 2)
    r = bench.thread_scaling("gdm", lambda: None, torch.device("cpu"), 5, [1, 4, 10])
    assert r == pytest.approx(431 / 303) and calls == [[1, 2]]
    out = capsys.readouterr().out
    assert "r = x1.42 of the ideal x2" in out
    assert "K=4: >= x2.84, K=10: >= x7.11" in out and "K=1:" not in out


def test_thread_scaling_is_for_the_cpu(bench):
    with pytest.raises(SystemExit):
        bench.main(["--device", "cuda", "--thread-scaling"])


def test_batch_scaling_times_k_times_the_batch_against_the_batch(bench, monkeypatch, capsys):
    """One model on K x B windows against B, for each K > 1 (the lead's idle 2-core GDM
    numbers at K = 4: 303 ms on B = 8, 998 ms on B = 32)."""
    made: list[int] = []
    timed: list[list[int]] = []

    def make_single(b):
        made.append(b)
        return lambda: b

    def fake_time(fns, dev, steps, threads=None):
        sizes = [fn() for fn in fns]
        timed.append(sizes)
        return [303.0, 998.0 * sizes[1] / (4 * bench.B)]

    monkeypatch.setattr(bench, "_time", fake_time)
    ratios = bench.batch_scaling("gdm", make_single, torch.device("cpu"), 5, [1, 4, 10])
    b = bench.B
    assert made == [b, 4 * b, 10 * b]
    assert timed == [[b, 4 * b], [b, 10 * b]]  # each against the B-window step, no K = 1
    assert ratios == pytest.approx({4: 998 / 303, 10: 2495 / 303})
    out = capsys.readouterr().out
    assert f"K x B = {4 * b} windows: 998.0 ms = x3.29" in out
    assert "the least a K=10 ensemble step can cost" in out


def test_batch_scaling_step_trains_the_model_on_k_times_the_windows(bench, monkeypatch):
    """In ``bench(..., batching=True)`` the K x B step is the single model's training step on
    K x B windows (so the ratio measures K-fold arithmetic, not the same batch again)."""
    sizes: list[int] = []
    real_to_device = bench.batch_to_device

    def spy_to_device(batch, dev):  # each single step moves its batch, then trains on it
        sizes.append(batch.batch_size)
        return real_to_device(batch, dev)

    def call_once(fns, dev, steps, threads=None):
        for fn in fns:
            fn()
        return [1.0] * len(fns)

    monkeypatch.setattr(bench, "batch_to_device", spy_to_device)
    monkeypatch.setattr(bench, "_time", call_once)
    # K = 10: 80 windows, more than the 32 episodes of the ensemble rows' data
    bench.bench("vanilla-gwm", torch.device("cpu"), [10], 1, False, batching=True, ensembles=False)
    assert sizes == [bench.B, 10 * bench.B]


def test_scaling_only_needs_a_scaling_row(bench):
    with pytest.raises(SystemExit):
        bench.main(["--device", "cpu", "--scaling-only"])


def test_op_counts_count_each_aten_call(bench):
    a, b = torch.ones(3), torch.ones(3)

    def adds(n):
        return lambda: [torch.add(a, b) for _ in range(n)]

    cpu = torch.device("cpu")
    none, ten = bench.op_counts(adds(0), cpu), bench.op_counts(adds(10), cpu)
    assert set(ten) == {"aten_ops"}  # no CUDA kernels counted on the CPU
    assert ten["aten_ops"] - none["aten_ops"] == 10
    text = bench._counts_text(
        {"aten_ops": 150, "cuda_kernels": 30}, {"aten_ops": 100, "cuda_kernels": 20}
    )
    assert text == "150 aten ops (x1.50), 30 cuda kernels (x1.50)"


def test_a_compile_fallback_is_named_in_its_row(bench, monkeypatch, capsys):
    """A compiled row that fell back to eager says so (else it would pass eager times off as
    compiled ones); the other rows do not."""
    import warnings

    from gdm_models.compiling import CompileFallbackWarning

    calls = []

    def fake_time(fns, dev, steps, threads=None):
        calls.append(len(calls))
        if len(calls) == 3:  # rows in order: members, loop, loop+compile
            msg = "torch.compile unavailable for X (boom); running eager"
            warnings.warn(msg, CompileFallbackWarning, stacklevel=2)
        return [10.0, 20.0]

    monkeypatch.setattr(bench, "_time", fake_time)
    bench.bench("vanilla-gwm", torch.device("cpu"), [1], 1, True)
    rows = [line for line in capsys.readouterr().out.splitlines() if "K= 1" in line]
    assert len(rows) == 3 and "loop+compile" in rows[2] and "members" in rows[0]
    assert "FELL BACK TO EAGER: torch.compile unavailable for X (boom)" in rows[2]
    assert not any("FELL BACK" in r for r in rows[:2])


class _Runner:
    """A GraphRunner's outward state: warm-up calls, then a graph (or a fallback reason)."""

    def __init__(self, warmup: int, fails: bool = False) -> None:
        self.warmup, self.calls, self.fails = warmup, 0, fails
        self.graph: object | None = None
        self.fallback_reason: str | None = None

    def __call__(self) -> None:
        self.calls += 1
        if self.calls > self.warmup:
            if self.fails:
                self.fallback_reason = "HostSyncError: .item()"
            else:
                self.graph = object()


class _Engine:
    def __init__(self, runner: _Runner | None) -> None:
        self.runner = runner

    def step(self) -> None:
        # like MemberEngine: the runner exists from the first static step on
        self._runner = self.runner
        if self.runner is not None:
            self.runner()


def test_warm_up_runs_past_the_capture_before_any_timed_call(bench):
    engine = _Engine(_Runner(warmup=3))
    assert bench.capture_status(engine) == "eager"  # no runner yet
    setup, peak = bench.warm_up(engine.step, engine, torch.device("cpu"))
    # warm-up calls, then the capture and its first replay: none left for the timed calls
    assert engine.runner.calls == engine.runner.warmup + 2
    assert engine.runner.graph is not None and setup >= 0 and peak == ""
    assert bench.capture_status(engine) == "captured"
    failed = _Engine(_Runner(warmup=3, fails=True))
    bench.warm_up(failed.step, failed, torch.device("cpu"))
    assert bench.capture_status(failed) == "static eager (FELL BACK: HostSyncError: .item())"


def test_a_failing_model_does_not_cost_the_later_models(bench, monkeypatch, capsys):
    ran: list[str] = []

    def fake_bench(name, *args, **kwargs):
        ran.append(name)
        if name == "gdm":
            raise RuntimeError("CUDA out of memory")

    monkeypatch.setattr(bench, "bench", fake_bench)
    with pytest.raises(SystemExit, match="failed: gdm"):
        bench.main(["--device", "cpu", "--models", "gdm", "vanilla-gwm"])
    assert ran == ["gdm", "vanilla-gwm"]
    out = capsys.readouterr().out
    assert "[gdm] FAILED" in out and "CUDA out of memory" in out
