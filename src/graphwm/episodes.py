"""Random-policy episodes as episode dicts, and the seed scheme of the collected files.

The collect stage (:mod:`graphwm.stages.collect`) stores these episodes; the cost estimate
(and the tests' tiny models, ``tests/tiny_models.py``) record them directly. Each split and
size owns :data:`SEEDS_PER_SIZE` disjoint seeds (docs/architecture.md, contract 7).
"""

from __future__ import annotations

import numpy as np
from gdm_models.data import OBS_KEYS, complete_observation

from graphwm.envs import make_env, sample_valid_action

SPLIT_SEED_BASE = {"train": 0, "val": 100_000_000, "test": 200_000_000}
SEEDS_PER_SIZE = 10_000


def episode_seed(split: str, num_nodes: int, index: int) -> int:
    """Disjoint, recorded seed ranges per split and size (docs/architecture.md, contract 7)."""
    if split not in SPLIT_SEED_BASE:
        raise ValueError(f"unknown split {split!r}")
    if not 0 <= index < SEEDS_PER_SIZE:
        raise ValueError(f"episode index {index} outside [0, {SEEDS_PER_SIZE})")
    if not 0 < num_nodes < 10_000:
        raise ValueError(f"num_nodes {num_nodes} outside the seed scheme's range")
    return SPLIT_SEED_BASE[split] + num_nodes * SEEDS_PER_SIZE + index


def record_episode(
    env_name: str, num_nodes: int, seed: int, *, store_observations: bool = True
) -> dict[str, np.ndarray]:
    """One random-policy episode (uniform over valid actions) as an episode dict."""
    env = make_env(env_name, num_nodes)
    policy_rng = np.random.default_rng([seed, 1])
    obs, _ = env.reset(seed=seed)
    frames = [complete_observation(obs)] if store_observations else []
    actions, nodes, rewards, terms, truncs = [], [], [], [], []
    done = False
    while not done:
        action = sample_valid_action(env, obs, policy_rng)
        nodes.append(env.action_to_nodes(action))
        obs, reward, terminated, truncated, _ = env.step(action)
        actions.append(np.atleast_1d(np.asarray(action, dtype=np.int64)))
        rewards.append(reward)
        terms.append(terminated)
        truncs.append(truncated)
        if store_observations:
            frames.append(complete_observation(obs))  # absent feature keys -> zero-width
        done = terminated or truncated
    episode: dict[str, np.ndarray] = {
        "actions": np.stack(actions),
        "action_nodes": np.stack(nodes).astype(np.int8),
        "reward": np.asarray(rewards, dtype=np.float32),
        "terminated": np.asarray(terms, dtype=bool),
        "truncated": np.asarray(truncs, dtype=bool),
    }
    if store_observations:
        for key in OBS_KEYS:
            episode[key] = np.stack([f[key] for f in frames])
    return episode
