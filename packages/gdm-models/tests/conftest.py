"""Shared fixtures for the gdm-models tests (tiny models, synthetic episodes)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gdm_models import EpisodeDataset, FeatureScaler, make_model
from gdm_models.synthetic import SYNTHETIC_SCHEMA, TINY_GDM_CONFIG, random_episode


@pytest.fixture(autouse=True)
def _single_thread():
    """Tiny models: small ops are much slower with several threads on a busy 2-core machine."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


TINY = dict(TINY_GDM_CONFIG)


@pytest.fixture
def tiny() -> dict:
    """Tiny GDM config overrides."""
    return dict(TINY)


@pytest.fixture(scope="session")
def episodes() -> list[dict[str, np.ndarray]]:
    """Synthetic episodes with 5-9 nodes, one of them short and terminated."""
    rng = np.random.default_rng(0)
    eps = [random_episode(int(rng.integers(5, 10)), 12, rng) for _ in range(6)]
    eps.append(random_episode(6, 3, rng, terminate=True))
    return eps


@pytest.fixture(scope="session")
def scaler(episodes) -> FeatureScaler:
    return FeatureScaler.fit(episodes, SYNTHETIC_SCHEMA)


@pytest.fixture(scope="session")
def dataset(episodes) -> EpisodeDataset:
    return EpisodeDataset(episodes, SYNTHETIC_SCHEMA, seq_len=5)


@pytest.fixture
def make_tiny(scaler):
    """Factory: make_tiny(name="gdm", seed=0, **overrides) -> tiny model."""

    def _make(name: str = "gdm", seed: int = 0, **overrides):
        torch.manual_seed(seed)
        return make_model(name, SYNTHETIC_SCHEMA, scaler, **{**TINY, **overrides})

    return _make
