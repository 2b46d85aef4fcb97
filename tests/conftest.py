"""Shared fixtures of the cross-package tests: a tiny collected-and-fitted data set; this
folder on ``sys.path`` for the tests' helper module ``tiny_models`` (tiny trained world models)."""

from __future__ import annotations

import os

# tianshou's numba kernels (test_rl_tianshou.py) compile for tens of seconds on first use; the
# tests' tiny buffers run them as Python. Numba reads this when first imported, which must
# come after it (torch_geometric imports numba when present): so here, before any import.
os.environ.setdefault("NUMBA_DISABLE_JIT", "1")

import copy  # noqa: E402
import re
import sys
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import gymnasium as gym
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


def tiny_sar_preset(models: list[str], seeds: list[int], *, train: dict, evaluate: dict) -> dict:
    """The tiny preset cut to SAR, ``models`` and ``seeds``, no ablations and only the
    single-step stages (no ``multi_step``, ``downstream`` or ``search``), two test episodes;
    ``train`` updates its train table, ``evaluate`` replaces its evaluate table."""
    preset = tiny_preset(envs=["SAR"], models=models, ablations=[], seeds=seeds)
    for section in ("multi_step", "downstream", "search"):
        preset.pop(section, None)
    preset["collect"] = {**preset["collect"], "test_episodes": 2}
    preset["train"] = {**preset["train"], **train}
    preset["evaluate"] = evaluate
    return preset


class Sizing(NamedTuple):
    """The sizing comment of a shipped preset file (medium.toml, long.toml)."""

    text: str  # the whole file
    lines: dict[str, int]  # ``# sizing KEY = N`` (steps, training, overhead, curve minutes)
    per_unit: dict[tuple[str, str], int]  # ``# sizing ENV MODEL = ms``: one ensemble step
    sec_per_step: float  # the units on 2 one-thread workers, each taking the next when free


def preset_sizing(name: str) -> Sizing:
    """The sizing lines of the shipped preset ``name`` and the seconds per training step
    they imply on the 2-core CPU (two workers, each taking the next training unit when free,
    in the file's order: the order the pool takes them)."""
    text = resources.files("graphwm.presets").joinpath(f"{name}.toml").read_text()
    lines = {k: int(v) for k, v in re.findall(r"^#\s+sizing ([\w-]+) = (\d+)", text, re.M)}
    per_unit = {
        (env, model): int(ms)
        for env, model, ms in re.findall(r"^#\s+sizing (\w+) ([\w-]+) = (\d+)", text, re.M)
    }
    free = [0, 0]
    for ms in per_unit.values():
        free[free.index(min(free))] += ms
    return Sizing(text, lines, per_unit, max(free) / 1000)


def single_step_record(env: str, model: str, size: int, seed: int, gdd: float, **fields) -> dict:
    """A single-step result record as the evaluate stage writes it (``kind``, the job's env,
    model, seed and size, its GDD), with the other ``fields`` (components, factor metrics,
    ...): the report tests' made-up results."""
    return {
        "kind": "single_step",
        "env": env,
        "model": model,
        "seed": seed,
        "size": size,
        "gdd": gdd,
        **fields,
    }


class CountInvalid(gym.Wrapper):
    """Counts the steps, and those the env itself flags as invalid actions (the RL library
    tests: a masked policy must never pick one)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps = self.invalid = 0

    def step(self, action):
        out = super().step(action)
        self.steps += 1
        self.invalid += int(out[4]["invalid_action"])
        return out


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
