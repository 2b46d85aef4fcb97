"""``BandsEnv``: a plain ``gymnasium.Env`` from docs/contract.md with every key an RL library
may meet: :class:`~example_envs.edgeflip.EdgeFlipEnv` plus a categorical graph feature
(``graph_categorical``, a ``MultiDiscrete``: the edge density's band) and step ``info`` values
of each Python type (``bool``, ``int``, ``float``, ``str``). Used by the RL-library tests
(tests/test_rl_*.py) as the user-written env next to the paper's four.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from example_envs.edgeflip import EdgeFlipEnv, Schema

#: density bands: sparse (< 1/3), medium, dense (>= 2/3)
BANDS = 3


class BandsSchema(Schema):
    """EdgeFlip's schema with the categorical graph feature ``band``."""

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "graph_categorical": {"band": BANDS}}


class BandsEnv(EdgeFlipEnv):
    """EdgeFlip with ``graph_categorical`` (the density band) and a step ``info``:
    ``invalid_action`` (the node had no edge), ``cut`` (edges removed), ``density`` and
    ``band_name``."""

    def __init__(self, num_nodes: int = 8, horizon: int = 6) -> None:
        super().__init__(num_nodes, horizon)
        self.schema = BandsSchema()
        self.observation_space = spaces.Dict(
            {**self.observation_space.spaces, "graph_categorical": spaces.MultiDiscrete([BANDS])}
        )

    def _obs(self) -> dict[str, np.ndarray]:
        obs = super()._obs()
        band = min(int(obs["graph_continuous"][1] * BANDS), BANDS - 1)
        return {**obs, "graph_categorical": np.array([band], np.int64)}

    def step(self, action):
        node = int(action)
        degree = int(self.adjacency[node].sum())
        obs, reward, terminated, truncated, _ = super().step(action)
        band = int(obs["graph_categorical"][0])
        info = {
            "invalid_action": degree == 0,
            "cut": degree,
            "density": float(obs["graph_continuous"][1]),
            "band_name": ("sparse", "medium", "dense")[band],
        }
        return obs, reward, terminated, truncated, info
