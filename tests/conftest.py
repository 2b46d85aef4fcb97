"""Shared fixtures of the cross-package tests: a tiny collected-and-fitted data set; this
folder on ``sys.path`` for the tests' helper module ``tiny_models`` (tiny trained world models)."""

from __future__ import annotations

import os

# tianshou's numba kernels (test_rl_tianshou.py) compile for tens of seconds on first use; the
# tests' tiny buffers run them as Python. Numba reads this when first imported, which must
# come after it (torch_geometric imports numba when present): so here, before any import.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

import copy  # noqa: E402
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from graphwm.pipeline import RunPaths, preset_dict, stage_collect, stage_fit

# the tests' helper modules (``import tiny_models``): --import-mode=importlib adds no test
# folder to sys.path by itself
sys.path.insert(0, str(Path(__file__).resolve().parent))


def tiny_preset(**overrides) -> dict:
    """The tiny preset (two envs, two models) with overrides."""
    preset = preset_dict("tiny")
    preset.update(overrides)
    return preset


def _with_key(preset: dict, key: str, value) -> dict:
    """A deep copy of ``preset`` with the dotted ``key`` ("train.steps") set to ``value``."""
    preset = copy.deepcopy(preset)
    *parents, leaf = key.split(".")
    table = preset
    for p in parents:
        table = table.setdefault(p, {})
    table[leaf] = value
    return preset


@pytest.fixture
def preset_with() -> Callable[[dict, str, object], dict]:
    """``preset_with(preset, "train.steps", 5)``: a changed deep copy of a preset."""
    return _with_key


@pytest.fixture(scope="session")
def all_envs_run(tmp_path_factory) -> tuple[dict, RunPaths]:
    """Collected and fitted data of all four envs at tiny sizes (shared by several tests)."""
    preset = tiny_preset(envs=["RGC", "OD", "SAR", "CF"])
    preset["collect"] = {**preset["collect"], "test_sizes": [8, 20], "test_episodes": 2}
    paths = RunPaths(Path(tmp_path_factory.mktemp("all_envs")))
    stage_collect(preset, paths, progress=False)
    stage_fit(preset, paths)
    return preset, paths


@pytest.fixture
def one_torch_thread():
    """Tiny models run fastest on one thread (and the test machine's cores are shared)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)
