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


def test_default_prefix_implementation_matches_the_single_pass(make_tiny):
    """The base class's prefix-by-prefix fallback gives the GDM's single-pass latents."""
    from gdm_models import WorldModel

    model = make_tiny().eval()
    ep = random_episode(6, 5, np.random.default_rng(1))
    obs, act = model.prepare_sequence({k: ep[k] for k in OBS}, ep["action_nodes"])
    with torch.no_grad():
        fast = model._observe_at(obs, act, [1, 5], model.make_generator(3))
        slow = WorldModel._observe_at(model, obs, act, [1, 5], model.make_generator(3))
        for a, b in zip(fast, slow, strict=True):
            pa = model.imagine(a, ep["action_nodes"][0], 3, generator=2)
            pb = model.imagine(b, ep["action_nodes"][0], 3, generator=2)
            for key in pa:
                np.testing.assert_array_equal(pa[key], pb[key])
