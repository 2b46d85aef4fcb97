"""Batched stepping (``WorldModel.start`` / ``step`` / ``state_from_latent`` /
``replace_rows``): draw for draw what ``observe`` + ``imagine_multi`` draw, and a state whose
rows are independent rollouts that can be replaced without knowing the model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import OBS_KEYS, PREDICTION_KEYS, WorldModel, make_model, predictions_to_numpy
from gdm_models.data import observation_to_tensors
from gdm_models.synthetic import SYNTHETIC_SCHEMA

from .conftest import TINY

OVERRIDES = {
    "gdm": TINY,
    "gdm:no-recurrent-adj": TINY,
    "gdm:no-graph-state+no-h-plus": TINY,
    "vanilla-gwm": {"hidden_dim": 8},
    "ea-gwm": {"hidden_dim": 8},
    "g-rssm": {"embed_dim": 8, "hidden_dim": 8, "latent_groups": 2, "latent_classes": 3},
}


def _model(name: str, scaler) -> WorldModel:
    torch.manual_seed(0)
    return make_model(name, SYNTHETIC_SCHEMA, scaler, **OVERRIDES[name]).eval()


def _stacked(observations: list[dict]) -> dict[str, torch.Tensor]:
    stacked = {k: np.stack([o[k] for o in observations]) for k in OBS_KEYS}
    return observation_to_tensors(stacked, torch.device("cpu"))


@pytest.mark.parametrize("name", list(OVERRIDES))
def test_start_and_steps_draw_what_observe_and_imagine_multi_draw(name, scaler, episodes):
    model = _model(name, scaler)
    ep = episodes[0]
    obs0 = {k: ep[k][0] for k in OBS_KEYS}
    actions = ep["action_nodes"][:4]
    g = torch.Generator().manual_seed(3)
    expected = model.imagine_multi(model.observe(obs0, None, generator=g), actions, 1, generator=g)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        state = model.start(_stacked([obs0]), g)
        for k, a in enumerate(actions):
            pred, state = model.step(state, torch.as_tensor(a[None], dtype=torch.float32), g)
            assert set(pred) == set(PREDICTION_KEYS)
            got = predictions_to_numpy(pred)
            for key in PREDICTION_KEYS:
                np.testing.assert_array_equal(got[key], expected[k][key], err_msg=key)


@pytest.mark.parametrize("name", list(OVERRIDES))
def test_state_rows_are_rollouts_that_can_be_replaced(name, scaler, episodes):
    """Every state tensor has the batch axis first and keeps its shape over steps, so a caller
    can replace rows (autoreset); a row replaced by a fresh start equals that start."""
    model = _model(name, scaler)
    eps = [e for e in episodes if e["adjacency"].shape[-1] == episodes[0]["adjacency"].shape[-1]]
    n = eps[0]["adjacency"].shape[-1]
    starts = [{k: e[k][0] for k in OBS_KEYS} for e in (eps * 3)[:3]]
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        state = model.start(_stacked(starts), g)
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        assert all(s[0] == 3 for s in shapes.values()), shapes
        actions = torch.zeros(3, n)
        actions[:, 1] = 1.0
        _, state = model.step(state, actions, g)
        assert {k: tuple(v.shape) for k, v in state.items()} == shapes
        fresh = model.start(_stacked([starts[2]]), g)
        replaced = WorldModel.replace_rows(state, torch.tensor([1]), fresh)
    for k, v in replaced.items():
        torch.testing.assert_close(v[1], fresh[k][0], rtol=0, atol=0, msg=k)
        torch.testing.assert_close(v[[0, 2]], state[k][[0, 2]], rtol=0, atol=0, msg=k)


def test_state_from_latent_repeats_the_latent_per_rollout(scaler, episodes):
    """S rollouts from one GDM latent start from S copies of it (no randomness used)."""
    model = _model("gdm", scaler)
    ep = episodes[0]
    latent = model.observe({k: ep[k][:3] for k in OBS_KEYS}, ep["action_nodes"][:2], generator=0)
    g = torch.Generator().manual_seed(0)
    before = g.get_state()
    state = model.state_from_latent(latent, 4, g)
    assert torch.equal(g.get_state(), before)
    for k, v in state.items():
        assert v.shape[0] == 4
        torch.testing.assert_close(v, getattr(latent, k).expand_as(v), rtol=0, atol=0)
    with pytest.raises(TypeError, match="GDMLatent"):
        model.state_from_latent({"adjacency": np.zeros((3, 3))}, 2, g)


@pytest.mark.parametrize("name", ["gdm", "gdm:no-recurrent-adj", "vanilla-gwm"])
def test_imagine_batch_draws_what_each_imagine_multi_draws(name, scaler, episodes):
    """Several latents imagined as one batch (the GDM: each latent's noise from its own
    generator, in its own shape) give the samples of one imagine_multi per latent."""
    model = _model(name, scaler)
    ep = episodes[0]
    obs = {k: ep[k][:6] for k in OBS_KEYS}
    latents = model.observe_at(obs, ep["action_nodes"][:5], [1, 3, 5], generator=2)
    actions = [ep["action_nodes"][t : t + 2] for t in (1, 3, 5)]
    got = model.imagine_batch(latents, actions, 4, [11, 12, 13])
    for latent, acts, seed, rollout in zip(latents, actions, (11, 12, 13), got, strict=True):
        want = model.imagine_multi(latent, acts, 4, generator=seed)
        assert len(rollout) == len(want) == 2
        for w, g in zip(want, rollout, strict=True):
            for key in PREDICTION_KEYS:
                np.testing.assert_array_equal(g[key], w[key], err_msg=key)
