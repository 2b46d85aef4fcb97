"""``example/Spread-v0``: an epidemic on a contact graph, a small ``GraphEnv`` subclass.

Not one of the paper's envs: the example of docs/own-env.md. Each step the agent isolates one
node (removes its contacts and vaccinates it); then every infected node infects each healthy,
unvaccinated neighbour with probability ``p_infect``, and two random nodes meet (a new
contact) with probability ``p_meet``. Reward: minus the newly infected nodes over N. The
episode terminates when no healthy unvaccinated node has an infected neighbour, and is
truncated after N steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from graphwm_envs import FeatureSchema, GraphEnv
from gymnasium import spaces


@dataclass
class SpreadState:
    adjacency: np.ndarray  # (N, N) bool, symmetric, no self-loops
    infected: np.ndarray  # (N,) bool
    vaccinated: np.ndarray  # (N,) bool


class SpreadEnv(GraphEnv):
    """Isolate one node per step to stop an epidemic."""

    max_nodes = 200
    max_nodes_reason = "an example env: small graphs only"
    p_infect = 0.3
    p_meet = 0.5

    @classmethod
    def feature_schema(cls, params: Any = None) -> FeatureSchema:
        return FeatureSchema.build(
            node_continuous=["exposure"],  # fraction of a node's contacts that are infected
            node_categorical={"infected": 2, "vaccinated": 2},
            graph_continuous=["k", "infected_fraction"],
            ranges={"exposure": (0.0, 1.0), "k": (1.0, 1.0), "infected_fraction": (0.0, 1.0)},
        )

    def _make_action_space(self) -> spaces.Space:
        return spaces.Discrete(self.num_nodes)

    def _initial_state(self, rng: np.random.Generator) -> SpreadState:
        n = self.num_nodes
        upper = np.triu(rng.random((n, n)) < 3.0 / n, 1)
        infected = np.zeros(n, bool)
        infected[rng.integers(n)] = True
        return SpreadState(upper | upper.T, infected, np.zeros(n, bool))

    def _transition(self, action: Any | None, rng: np.random.Generator) -> tuple[float, bool, dict]:
        s, n = self._state, self.num_nodes
        if action is not None:  # None: an action the mask forbids (a noop)
            s.adjacency[action, :] = s.adjacency[:, action] = False
            s.vaccinated[action] = True
        exposed = s.adjacency[s.infected].any(axis=0) & ~s.infected & ~s.vaccinated
        new = exposed & (rng.random(n) < self.p_infect)
        s.infected |= new
        if rng.random() < self.p_meet:
            i, j = rng.choice(n, size=2, replace=False)
            if not (s.vaccinated[i] or s.vaccinated[j]):
                s.adjacency[i, j] = s.adjacency[j, i] = True
        at_risk = s.adjacency[s.infected].any(axis=0) & ~s.infected & ~s.vaccinated
        return -float(new.sum()) / n, not bool(at_risk.any()), {}

    def _node_features(self) -> tuple[np.ndarray, np.ndarray]:
        s = self._state
        degree = s.adjacency.sum(axis=1)
        infected_contacts = s.adjacency[:, s.infected].sum(axis=1)
        exposure = np.where(degree > 0, infected_contacts / np.maximum(degree, 1), 0.0)
        categorical = np.stack([s.infected, s.vaccinated], axis=1)
        return exposure[:, None].astype(np.float32), categorical.astype(np.int64)

    def _graph_features(self) -> tuple[np.ndarray, np.ndarray]:
        fraction = self._state.infected.mean()
        return np.array([1.0, fraction], np.float32), np.zeros(0, np.int64)

    def _mask(self) -> np.ndarray:
        return ~self._state.vaccinated  # any node not yet isolated

    def action_to_nodes(self, action: Any) -> np.ndarray:
        nodes = np.zeros(self.num_nodes, np.int8)
        nodes[int(action)] = 1
        return nodes

    def _max_steps(self) -> int | None:
        return self.num_nodes
