"""Learning test: one edge toggling with a known probability (issue 5, Tests)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import OBS_KEYS, EpisodeDataset, TrainConfig, make_model, train
from gdm_models.synthetic import toggle_edge_episodes, toggle_schema

P_TOGGLE = 0.3


def _toggle_rate(model, test) -> list[float]:
    """The imagined toggle rate of the edge (0, 1) after each test episode (500 samples)."""
    model.eval()
    rates = []
    for k, ep in enumerate(test):
        lat = model.observe({key: ep[key] for key in OBS_KEYS}, ep["action_nodes"], generator=k)
        out = model.imagine(lat, np.zeros(4, np.int8), 500, generator=k)
        rates.append(float((out["adjacency"][:, 0, 1] != ep["adjacency"][-1][0, 1]).mean()))
    return rates


def _train_toggle(tiny, rng, steps: int, test=None):
    """A tiny GDM trained ``steps`` steps on 400 toggle-edge episodes: (model, result, its
    toggle rate on ``test`` before training, if given)."""
    eps = toggle_edge_episodes(400, 16, 4, P_TOGGLE, rng)
    ds = EpisodeDataset(eps, toggle_schema(4), seq_len=6)
    torch.manual_seed(0)
    model = make_model("gdm", toggle_schema(4), None, **tiny)
    before = None if test is None else np.mean(_toggle_rate(model, test))
    model.train()
    config = TrainConfig(steps=steps, batch_size=8, seq_len=6, lr=1e-2, seed=0, device="cpu")
    return model, train(model, ds, config, progress=False, keep_history=True), before


def test_toggle_edge_probability_moves_towards_the_data_in_300_steps(tiny):
    """The default run's short version of the slow test below: 300 steps move the imagined
    toggle rate from the edge MLP's initial 1.8 % (bias -4) well towards the data's 30 %
    (measured at seed 0: see the assertion); an untrained model stays near 2 %."""
    rng = np.random.default_rng(0)
    test = toggle_edge_episodes(4, 6, 4, P_TOGGLE, np.random.default_rng(1))
    model, res, before = _train_toggle(tiny, rng, 300, test)
    first = np.mean([r["kl_adj"] for r in res.history[:10]])
    assert np.mean([r["kl_adj"] for r in res.history[-20:]]) < first
    after = np.mean(_toggle_rate(model, test))
    print(f"toggle rate before {before:.3f}, after 300 steps {after:.3f}")
    assert before < 0.05
    assert after > 0.08


@pytest.mark.slow
def test_toggle_edge_probability_is_learned(tiny):
    rng = np.random.default_rng(0)
    # 400 episodes (no memorising of training windows) and 2000 steps: the edge MLP starts
    # at a 1.8 % update probability (bias -4) and needs that long to reach the data's rate.
    # Measured over training seeds 0-5 (model init and noise): mean learned rate 0.26, 0.33,
    # 0.36, 0.36, 0.27, 0.36, every test episode within 0.11 of 0.3; at 300 steps and 24
    # episodes it ranged from 0.09 to 0.33 (slow convergence, not a bias of the model).
    model, res, _ = _train_toggle(tiny, rng, 2000)
    first = np.mean([r["kl_adj"] for r in res.history[:10]])
    last = np.mean([r["kl_adj"] for r in res.history[-20:]])
    assert last < 0.7 * first
    first_total = np.mean([r["loss"] for r in res.history[:10]])
    assert np.mean([r["loss"] for r in res.history[-20:]]) < first_total

    test = toggle_edge_episodes(8, 6, 4, P_TOGGLE, np.random.default_rng(1))
    model.eval()
    freqs = []
    for k, ep in enumerate(test):
        lat = model.observe({key: ep[key] for key in OBS_KEYS}, ep["action_nodes"], generator=k)
        out = model.imagine(lat, np.zeros(4, np.int8), 500, generator=k)
        prev = ep["adjacency"][-1]
        toggled = (out["adjacency"][:, 0, 1] != prev[0, 1]).mean()
        assert abs(toggled - P_TOGGLE) < 0.15, (k, toggled)
        freqs.append(toggled)
        # the static path edges and non-edges stay (almost) unchanged
        static = out["adjacency"][:, 1:, 1:] == prev[None, 1:, 1:]
        assert static.mean() > 0.95
    assert abs(np.mean(freqs) - P_TOGGLE) < 0.1
