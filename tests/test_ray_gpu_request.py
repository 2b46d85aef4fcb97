"""Ray asks for a GPU per training job for any CUDA device string (issue 28: "cuda:1" got
none)."""

from __future__ import annotations

import pytest
from graphwm import pipeline
from graphwm.checks import parse_checked
from graphwm.config import read_preset


@pytest.mark.parametrize(
    ("device", "gpus"), [("cpu", 0.0), ("cuda", 1.0), ("cuda:0", 1.0), ("cuda:1", 1.0)]
)
def test_every_cuda_device_string_gets_a_gpu(device, gpus, monkeypatch):
    monkeypatch.setattr(pipeline, "check_machine", lambda preset: None)  # no GPU here
    preset = parse_checked({**read_preset("smoke"), "device": device, "executor": "ray"})
    assert pipeline.executor_args(preset, gpu=True)["num_gpus_per_job"] == gpus
    assert pipeline.executor_args(preset, gpu=False)["num_gpus_per_job"] == 0.0
