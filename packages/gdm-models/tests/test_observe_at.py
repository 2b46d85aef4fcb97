"""observe_at: one pass over a trajectory gives the same latents as observing each prefix."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import DataError, make_model
from gdm_models.data import OBS_KEYS
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode

from .conftest import TINY

SIZES = {
    "gdm": TINY,
    "vanilla-gwm": {"hidden_dim": 16},
    "ea-gwm": {"hidden_dim": 16},
    "g-rssm": {"hidden_dim": 16, "embed_dim": 16, "latent_groups": 2, "latent_classes": 4},
}
OBS = OBS_KEYS


@pytest.mark.parametrize("name", sorted(SIZES))
def test_observe_at_equals_observe_of_each_prefix(name, scaler):
    torch.manual_seed(0)
    model = make_model(name, SYNTHETIC_SCHEMA, scaler, **SIZES[name]).eval()
    ep = random_episode(7, 9, np.random.default_rng(3))
    obs = {k: ep[k] for k in OBS}
    steps = [0, 4, 9]
    with torch.no_grad():
        latents = model.observe_at(obs, ep["action_nodes"], steps, generator=11)
        for t, latent in zip(steps, latents, strict=True):
            prefix = {k: v[: t + 1] for k, v in obs.items()}
            alone = model.observe(prefix, ep["action_nodes"][:t], generator=11)
            # compare through the model's own predictions from both latents, same noise
            a = model.imagine(latent, ep["action_nodes"][min(t, 8)], 4, generator=5)
            b = model.imagine(alone, ep["action_nodes"][min(t, 8)], 4, generator=5)
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{name} {key} t={t}")


def test_observe_at_rejects_out_of_range_steps(make_tiny):
    model = make_tiny()
    ep = random_episode(6, 3, np.random.default_rng(0))
    with pytest.raises(DataError, match="outside"):
        model.observe_at({k: ep[k] for k in OBS}, ep["action_nodes"], [4])


@pytest.mark.parametrize("name", sorted(SIZES))
def test_inference_builds_no_autograd_graph(name, scaler):
    """observe and observe_at run without gradient tracking (no graph kept alive per latent)."""
    torch.manual_seed(0)
    model = make_model(name, SYNTHETIC_SCHEMA, scaler, **SIZES[name])
    ep = random_episode(6, 4, np.random.default_rng(2))
    obs = {k: ep[k] for k in OBS}
    latents = [model.observe(obs, ep["action_nodes"], generator=1)]
    latents += model.observe_at(obs, ep["action_nodes"], [1, 4], generator=1)
    for latent in latents:
        parts = vars(latent).values() if hasattr(latent, "__dict__") else latent.values()
        tensors = [p for p in parts if isinstance(p, torch.Tensor)]
        assert tensors or name.endswith("gwm")  # a GWM's state is the observation (numpy)
        assert not any(t.requires_grad for t in tensors)
