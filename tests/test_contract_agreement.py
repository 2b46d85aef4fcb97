"""The data contract, restated in each package by design, agrees across the packages (issue 14).

graphwm_envs, gdm_models and gdd_metric never import each other; each reads the plain schema
dict and observation arrays of docs/contract.md with its own code. For every registered env:
the schema reads the same through the three schema APIs (names, column order, cardinalities,
widths), a real observation passes each package's validation, and the dtype tables (the env's
observation space, graphwm_envs, gdm_models and the contract page) agree.
"""

from __future__ import annotations

import re
from pathlib import Path

import gdd_metric
import gdm_models
import graphwm_envs  # noqa: F401  (registers graphenv/*)
import gymnasium as gym
import numpy as np
import pytest
from gdm_models.data import OBS_KEYS, complete_observation, validate_observation
from gdm_models.world_model import NP_DTYPES
from graphwm_envs.core.schema import FEATURE_KEYS, FeatureSchema
from graphwm_envs.core.validation import OBS_DTYPES

CONTRACT = Path(__file__).resolve().parents[1] / "docs" / "contract.md"
ENV_IDS = sorted(env_id for env_id in gym.registry if env_id.startswith("graphenv/"))


def _columns(schema) -> dict[str, tuple]:
    """(name, cardinality or None) per column, per feature type, from any of the schemas."""
    out = {}
    for key in FEATURE_KEYS:
        cols = getattr(schema, key)
        out[key] = tuple((c, None) if isinstance(c, str) else (c[0], int(c[1])) for c in cols)
    return out


def _contract_spaces() -> dict[str, str]:
    """key -> Gymnasium space class from the observation table of docs/contract.md."""
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| \w+ \| `(\w+)\(", CONTRACT.read_text(), flags=re.M)
    return dict(rows)


def _contract_table() -> dict[str, str]:
    """key -> dtype from the observation table of docs/contract.md."""
    rows = re.findall(r"^\| `(\w+)` \| [^|]+ \| (\w+) \|", CONTRACT.read_text(), flags=re.M)
    return dict(rows)


def test_envs_are_registered():
    assert {"graphenv/SAR-v0", "graphenv/RGC-v0", "graphenv/OD-v0", "graphenv/CF-v0"} <= set(
        ENV_IDS
    )


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_schema_reads_the_same_in_every_package(env_id):
    env = gym.make(env_id, num_nodes=8).unwrapped
    d = env.schema.to_dict()
    envs_view = FeatureSchema.from_dict(d)
    models_view = gdm_models.parse_schema(d)
    metric_view = gdd_metric.normalise_schema(d)
    want = _columns(env.schema)
    assert _columns(envs_view) == want
    assert _columns(models_view) == want
    assert _columns(metric_view) == want
    # widths, as each package counts them
    widths = {k: len(v) for k, v in want.items()}
    assert env.schema.sizes == widths
    assert {k: metric_view.width(k) for k in FEATURE_KEYS} == widths
    assert (
        models_view.num_node_continuous,
        models_view.num_node_categorical,
        models_view.num_graph_continuous,
        models_view.num_graph_categorical,
    ) == tuple(widths[k] for k in FEATURE_KEYS)
    # and each package writes back the same four feature types
    for view in (models_view, metric_view):
        back = view.to_dict()
        assert {k: back[k] for k in FEATURE_KEYS} == {k: d[k] for k in FEATURE_KEYS}


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_an_observation_passes_every_package(env_id):
    env = gym.make(env_id, num_nodes=8).unwrapped
    d = env.schema.to_dict()
    obs, _ = env.reset(seed=0)
    obs, *_ = env.step(env.sample_valid_action(np.random.default_rng(0)))
    n = obs["adjacency"].shape[0]
    # gdm_models: one observation (absent feature types read as zero-width)
    full = complete_observation(obs)
    assert validate_observation(full, gdm_models.parse_schema(d)) == n
    # gdd_metric: a sample set of two observations (sample axis first)
    samples = {k: np.stack([v, v]) for k, v in obs.items()}
    checked = gdd_metric.validate_samples(samples, d, "env")
    assert checked.num_nodes == n and checked.num_samples == 2
    for key in FEATURE_KEYS:
        width = len(d[key])
        assert getattr(checked, key).shape[-1] == width, key
        if key in obs:
            np.testing.assert_array_equal(getattr(checked, key)[0], obs[key], err_msg=key)
        else:  # a feature type the env lacks: absent, and only then
            assert width == 0, key


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_dtype_tables_agree(env_id):
    env = gym.make(env_id, num_nodes=8).unwrapped
    obs, _ = env.reset(seed=1)
    contract = _contract_table()
    assert set(contract) == set(OBS_KEYS) == set(OBS_DTYPES)
    for key in OBS_KEYS:
        want = np.dtype(contract[key])
        assert np.dtype(OBS_DTYPES[key]) == want, key  # graphwm_envs' table
        assert np.dtype(NP_DTYPES[key]) == want, key  # gdm_models' table (model samples)
        if key in obs:  # the env's actual arrays and its declared observation space
            assert obs[key].dtype == want, key
            assert env.observation_space[key].dtype == want, key


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_space_types_agree_with_the_contract(env_id):
    """docs/contract.md's space column is the env's space; the 0/1 arrays are int8 Box(0, 1)
    (issue 35: torchrl and skrl read no MultiBinary)."""
    env = gym.make(env_id, num_nodes=8).unwrapped
    spaces = _contract_spaces()
    assert set(spaces) == set(OBS_KEYS)
    for key, space in env.observation_space.spaces.items():
        assert type(space).__name__ == spaces[key], key
    for key in ("adjacency", "action_mask"):
        space = env.observation_space[key]
        assert space.dtype == np.int8 and (space.low == 0).all() and (space.high == 1).all()
