"""Issue 38, class 1: a model's inputs are checked where they enter, for every model, with
dtype and value checks after any cast and messages naming the key, the problem and the value
(the third probe's cases: each was accepted or crashed deep inside before)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import DataError, make_model
from gdm_models.data import OBS_KEYS
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode

from .test_observe_at import SIZES


@pytest.fixture(scope="module")
def trajectory() -> tuple[dict, np.ndarray]:
    ep = random_episode(6, 3, np.random.default_rng(1))
    return {k: ep[k] for k in OBS_KEYS}, ep["action_nodes"]


@pytest.fixture(scope="module", params=sorted(SIZES))
def model(request, scaler):
    torch.manual_seed(0)
    return make_model(request.param, SYNTHETIC_SCHEMA, scaler, **SIZES[request.param]).eval()


def _changed(obs: dict, key: str, index: tuple, value, dtype=None) -> dict:
    out = {k: np.array(v) for k, v in obs.items()}
    arr = out[key].astype(dtype) if dtype is not None else out[key].astype(np.float64)
    arr[index] = value
    if key == "adjacency":  # keep it symmetric, so the value is the only problem
        arr[(index[0], index[2], index[1])] = value
    out[key] = arr
    return out


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("adjacency", 0.5, r"adjacency must contain only 0/1 values, found 0\.5"),
        ("adjacency", np.nan, r"adjacency contains NaN"),  # was "must be symmetric"
        ("action_mask", 0.5, r"action_mask must contain only 0/1 values, found 0\.5"),
        ("node_continuous", 1e39, r"node_continuous contains 1e\+39, beyond float32"),
        ("node_continuous", np.inf, r"node_continuous contains inf"),
        ("graph_continuous", np.nan, r"graph_continuous contains NaN"),
    ],
)
def test_observe_refuses_bad_values_naming_key_and_value(model, trajectory, key, value, match):
    obs, actions = trajectory
    if key == "adjacency":
        index = (0, 0, 1)
    elif key.startswith("node"):
        index = (0, 0, 0)
    elif key == "action_mask":
        index = (0, 0)
    else:
        index = (0, 0)
    if obs[key].shape[-1] == 0:
        pytest.skip(f"the synthetic schema has no {key}")
    with pytest.raises(DataError, match=match):
        model.observe(_changed(obs, key, index, value), actions, generator=0)


def test_observe_refuses_complex_features(model, trajectory):
    obs, actions = trajectory
    bad = dict(obs, graph_continuous=obs["graph_continuous"].astype(np.complex128) + 1j)
    with pytest.raises(DataError, match=r"graph_continuous must be a real numeric array.*complex"):
        model.observe(bad, actions, generator=0)


@pytest.mark.parametrize(
    ("value", "match"),
    [(0.5, r"found 0\.5"), (np.inf, "contains inf"), (np.nan, "contains NaN"), (2.0, "found 2")],
)
def test_actions_must_be_exactly_0_or_1(model, trajectory, value, match):
    obs, actions = trajectory
    bad = actions.astype(np.float64)
    bad[0, 0] = value
    with pytest.raises(DataError, match=rf"action_nodes .*{match}"):
        model.observe(obs, bad, generator=0)
    latent = model.observe(obs, actions, generator=0)
    with pytest.raises(DataError, match=rf"action_nodes .*{match}"):
        model.imagine(latent, bad[0], 2, generator=0)


def test_a_zero_node_graph_is_a_clear_error(model):
    schema = model.schema
    empty = {
        "adjacency": np.zeros((1, 0, 0), np.int8),
        "node_continuous": np.zeros((1, 0, schema.num_node_continuous), np.float32),
        "node_categorical": np.zeros((1, 0, schema.num_node_categorical), np.int64),
        "graph_continuous": np.zeros((1, schema.num_graph_continuous), np.float32),
        "graph_categorical": np.zeros((1, schema.num_graph_categorical), np.int64),
        "action_mask": np.zeros((1, 0), np.int8),
    }
    with pytest.raises(DataError, match="0 nodes"):
        model.observe(empty, None, generator=0)


@pytest.mark.parametrize(
    ("seed", "error", "match"),
    [
        (2**64, ValueError, r"\[0, 2\*\*64 - 1\]"),
        (-1, ValueError, r"\[0, 2\*\*64 - 1\]"),
        (1.5, TypeError, "integer seed"),
        ("7", TypeError, "integer seed"),
        (True, TypeError, "integer seed"),
        (np.random.default_rng(0), TypeError, "integer seed"),
    ],
)
def test_generator_seeds_are_checked_not_coerced(model, trajectory, seed, error, match):
    obs, actions = trajectory
    with pytest.raises(error, match=match):
        model.observe(obs, actions, generator=seed)
    model.observe(obs, actions, generator=np.uint64(2**64 - 1))  # the largest seed


def test_observe_at_steps_must_be_integers(model, trajectory):
    obs, actions = trajectory
    with pytest.raises(DataError, match=r"steps must be integers.*1\.5"):
        model.observe_at(obs, actions, [1.5], generator=0)
    assert len(model.observe_at(obs, actions, [np.int64(1)], generator=0)) == 1


@pytest.mark.parametrize("name", sorted(SIZES))
@pytest.mark.parametrize(
    ("field", "value"), [("hidden_dim", 8.5), ("hidden_dim", True), ("unimix", "0.1")]
)
def test_make_model_names_a_hyperparameter_of_the_wrong_type(name, field, value):
    if field == "unimix" and "gwm" in name:
        field = "beta_adj"  # the GWMs have no unimix
    with pytest.raises(TypeError, match=rf"Config\.{field} must be (int|float), got {value!r}"):
        make_model(name, SYNTHETIC_SCHEMA, **{**SIZES[name], field: value})


@pytest.mark.parametrize("name", sorted(SIZES))
def test_a_schema_whose_model_cannot_fit_is_refused_before_allocating(name):
    schema = {"node_continuous": ["x"], "node_categorical": {"kind": 10**9}}
    with pytest.raises(ValueError, match=r"weights \(.* GiB as float32\).*cardinalities"):
        make_model(name, schema, **SIZES[name])


def test_step_checks_its_actions(model, trajectory):
    from gdm_models.data import observation_to_tensors

    obs, _ = trajectory
    start = observation_to_tensors({k: v[:2] for k, v in obs.items()})
    gen = torch.Generator().manual_seed(0)
    state = model.start(start, gen)
    good = torch.zeros(2, 6)
    good[:, 0] = 1
    model.step(state, good, gen)  # (B, N) = (2, 6)
    with pytest.raises(TypeError, match="torch.Tensor"):
        model.step(state, good.numpy(), gen)
    with pytest.raises(DataError, match=r"shape \(2, 8\), expected \(B, N\) = \(2, 6\)"):
        model.step(state, torch.zeros(2, 8), gen)
    for value in (2.0, float("nan"), float("inf"), 0.5):
        bad = good.clone()
        bad[1, 3] = value
        with pytest.raises(DataError, match="exactly 0 or 1"):
            model.step(state, bad, gen)


@pytest.mark.parametrize("name", ["gdm", "g-rssm"])
def test_a_latent_of_a_model_of_other_sizes_is_named(name, scaler, trajectory):
    obs, actions = trajectory
    small = make_model(name, SYNTHETIC_SCHEMA, scaler, **SIZES[name]).eval()
    wider = {**SIZES[name], "hidden_dim": 2 * SIZES[name].get("hidden_dim", 16)}
    if name == "gdm":
        wider["hidden_dim"] = 2 * small.config.hidden_dim
    large = make_model(name, SYNTHETIC_SCHEMA, scaler, **wider).eval()
    latent = small.observe(obs, actions, generator=0)
    with pytest.raises(DataError, match="the latent comes from a model of other sizes"):
        large.imagine(latent, actions[0], 2, generator=0)
    small.imagine(latent, actions[0], 2, generator=0)  # its own model takes it


def test_start_checks_its_observations(model, trajectory):
    from gdm_models.data import observation_to_tensors

    obs, _ = trajectory
    good = observation_to_tensors({k: v[:2] for k, v in obs.items()})
    gen = torch.Generator().manual_seed(0)
    model.start(good, gen)
    bad = {k: v.clone() for k, v in good.items()}
    bad["node_continuous"][0, 0, 0] = float("nan")
    with pytest.raises(DataError, match="node_continuous contains NaN"):
        model.start(bad, gen)
    bad = {k: v.clone() for k, v in good.items()}
    bad["adjacency"][1, 0, 1] = bad["adjacency"][1, 1, 0] = 0.5
    with pytest.raises(DataError, match="adjacency must contain only 0/1"):
        model.start(bad, gen)
    with pytest.raises(TypeError, match="dict of observation tensors"):
        model.start([good], gen)
