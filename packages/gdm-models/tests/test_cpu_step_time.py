"""benchmarks/cpu_step_time.py: the step it times is a real training step on any tree."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cpu_step_time.py"


def _load():
    spec = importlib.util.spec_from_file_location("cpu_step_time", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_timed_step_trains_and_bad_counts_are_refused(monkeypatch):
    bench = _load()
    threads = torch.get_num_threads()
    steps_seen = []
    real = torch.optim.Adam.step

    def counting_step(self, *args, **kwargs):  # every timed step is an optimiser step
        steps_seen.append(1)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.Adam, "step", counting_step)
    try:
        ms = bench.step_ms("vanilla-gwm", steps=2, warmup=1)
    finally:
        torch.set_num_threads(threads)
    assert ms > 0 and len(steps_seen) == 3
    with pytest.raises(ValueError, match="steps >= 1"):
        bench.step_ms("vanilla-gwm", steps=0, warmup=0)
