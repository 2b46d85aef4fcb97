"""Ray asks for a GPU per training job for any CUDA device string (issue 28: "cuda:1" got
none), and for a fraction of one per evaluation or downstream job (issue 37: they asked for
none and saw every GPU of their node)."""

from __future__ import annotations

import pytest

from graphwm import pipeline
from graphwm.checks import parse_checked
from graphwm.config import read_preset


@pytest.mark.parametrize(
    ("device", "gpus"), [("cpu", 0.0), ("cuda", 1.0), ("cuda:0", 1.0), ("cuda:1", 1.0)]
)
def test_every_cuda_device_string_gets_a_gpu(device, gpus, monkeypatch):
    monkeypatch.setattr(pipeline, "check_device", lambda device: None)  # no GPU here
    preset = parse_checked({**read_preset("smoke"), "device": device, "executor": "ray"})
    assert pipeline.executor_args(preset, gpu=True)["num_gpus_per_job"] == gpus
    from graphwm.jobs import EVAL_GPU_FRACTION

    evaluation = pipeline.executor_args(preset, gpu=False)["num_gpus_per_job"]
    assert evaluation == (EVAL_GPU_FRACTION if gpus else 0.0) and 0 < EVAL_GPU_FRACTION < 1


def test_a_ray_worker_keeps_its_process_across_gpu_jobs():
    """Ray's default for a GPU task is a fresh worker process per call (max_calls=1), which
    pays CUDA's start-up (about 3 s) and the imports for every job; graphwm's jobs reuse
    their worker (max_calls=0: unlimited)."""
    ray = pytest.importorskip("ray")
    from graphwm.store.executors import ray_job_function

    assert ray.remote(num_gpus=1)(lambda: None)._default_options["max_calls"] == 1  # Ray's
    for gpus in (0.0, 1.0):
        assert ray_job_function(ray, gpus)._default_options["max_calls"] == 0
