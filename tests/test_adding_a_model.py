"""Adding a model is one module plus one registry line (docs/models.md, "Adding a model"): a toy
model written against the public ``WorldModel`` API only is trained, checkpointed, dreamed in
(graphwm.dream) and evaluated (graphwm.stages.evaluate's sampler and GDD) like the built-in models.

The toy model predicts that nothing changes: the next observation is the current one, the
reward a learned constant, the continuation a learned Bernoulli. That makes its behaviour in
the dream env and in the evaluation known exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from gdm_models import (
    OBS_KEYS,
    EpisodeDataset,
    FeatureScaler,
    TrainConfig,
    WorldModel,
    load_checkpoint,
    make_model,
    register_model,
    train,
)
from gdm_models.data import observation_to_tensors, validate_observation

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ---------------------------------------------------------------------- the model's module
@dataclass
class PersistenceConfig:
    """Every hyperparameter (here one)."""

    continuation_init: float = 3.0


class Persistence(WorldModel):
    """Predicts no change: next observation = current one, reward and continuation learned."""

    def __init__(self, schema, scaler, config: PersistenceConfig) -> None:
        super().__init__(schema, scaler, config)
        self.reward = torch.nn.Parameter(torch.zeros(()))
        self.cont_logit = torch.nn.Parameter(torch.tensor(float(config.continuation_init)))

    def training_loss(self, batch, generator=None):
        w = batch.step_mask.to(batch.reward.dtype)
        reward = ((batch.reward - self.reward) ** 2 * w).sum() / w.sum()
        logit = self.cont_logit.expand_as(batch.continuation)
        cont = F.binary_cross_entropy_with_logits(logit, batch.continuation, weight=w) * (
            w.numel() / w.sum()
        )
        total = reward + cont
        return total, {"reward": reward.detach(), "continuation": cont.detach()}

    def _observe_at(self, obs, actions, steps, generator):
        return [{k: obs[k][t].cpu().numpy() for k in OBS_KEYS} for t in steps]

    def _latent_num_nodes(self, latent: Any) -> int:
        if not isinstance(latent, Mapping):
            raise TypeError("a Persistence latent is an observation dict")
        return validate_observation(latent, self.schema)

    def start(self, obs, generator):
        return {k: obs[k] for k in OBS_KEYS}

    def state_from_latent(self, latent, num_samples, generator):
        obs = observation_to_tensors(latent, self.device)
        return {k: v[None].expand(num_samples, *v.shape).contiguous() for k, v in obs.items()}

    def _step(self, state, actions, generator):  # one imagined transition of B rows
        b = actions.shape[0]
        u = torch.rand(b, generator=generator, device=self.device)
        pred = {
            **state,
            "reward": self.reward.detach().expand(b),
            "continuation": (u < torch.sigmoid(self.cont_logit.detach())).long(),
        }
        return pred, dict(state)


def build_persistence(schema, scaler=None, *, variant=None, **overrides) -> Persistence:
    """The factory: ``factory(schema, scaler, **config overrides)``."""
    if variant:
        raise ValueError(f"persistence has no variants (got {variant!r})")
    return Persistence(schema, scaler, PersistenceConfig(**overrides))


# ---------------------------------------------------------------------- its registry line
register_model("toy-persistence", build_persistence, overwrite=True)

ENV, N = "SAR", 8


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The toy model trained a few steps by the package's trainer, through a checkpoint."""
    from tiny_models import random_policy_episodes

    from graphwm.envs import env_schema

    eps = random_policy_episodes(ENV, N, 3)
    schema = env_schema(ENV)
    model = make_model("toy-persistence", schema, FeatureScaler.fit(eps, schema))
    before = model.reward.item()
    train(
        model,
        EpisodeDataset(eps, schema, seq_len=5),
        TrainConfig(steps=20, batch_size=2, seq_len=5, lr=0.05, device="cpu"),
        progress=False,
    )
    assert model.reward.item() != before  # the trainer trained it
    path = model.save(tmp_path_factory.mktemp("ck") / "persistence")
    loaded = load_checkpoint(path, schema=schema, model_name="toy-persistence")
    assert isinstance(loaded, Persistence) and loaded.reward.item() == model.reward.item()
    return loaded.eval(), eps


def test_the_dream_env_runs_the_new_model(trained):
    from graphwm.dream import DreamEnv, DreamVectorEnv
    from graphwm.envs import make_env

    model, _ = trained
    env = DreamEnv(model, make_env(ENV, N), seed=0)
    obs0, _ = env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(5):
        obs, reward, terminated, truncated, _ = env.step(
            int(rng.choice(np.flatnonzero(env.action_masks())))
        )
        # a persistence model dreams the start graph forever, with its learned reward
        np.testing.assert_array_equal(obs["adjacency"], obs0["adjacency"])
        np.testing.assert_allclose(obs["node_continuous"], obs0["node_continuous"])
        assert reward == pytest.approx(model.reward.item())
        if terminated or truncated:
            break
    vec = DreamVectorEnv(model, make_env(ENV, N), 3, seed=0)
    first, _ = vec.reset(seed=0)
    for _ in range(4):  # autoreset replaces rows through WorldModel.replace_rows
        obs, *_ = vec.step(np.array([np.flatnonzero(m)[0] for m in vec.action_masks()]))
        assert vec.observation_space.contains(obs)


def test_the_evaluation_samples_and_scores_the_new_model(trained):
    from gdd_metric import fit_bandwidths

    from graphwm.envs import env_schema
    from graphwm.metric.graph import extend_schema, stack_graphs
    from graphwm.metric.protocol import env_samples, replay_episode, transition_gdd
    from graphwm.stages.evaluate import ModelSampler, ReferencePoint
    from graphwm.stages.fit import bandwidth_transitions

    model, eps = trained
    schema = env_schema(ENV)
    bandwidths = fit_bandwidths(
        bandwidth_transitions(eps, 5, np.random.default_rng(0)), extend_schema(schema)
    )
    ep, seed, t = eps[0], 0, 2
    replay = replay_episode(ENV, N, seed, ep["actions"], [t], keep_observations=True, check=ep)
    graphs, invalid = env_samples(ENV, N, replay.snapshots[t], ep["actions"][t : t + 1], [1, 2, 3])
    point = ReferencePoint(0, seed, t, replay, [stack_graphs(graphs[0])], invalid, [False])
    model_set = ModelSampler(model, 4)(point)[0]
    # the model's samples are the reference observation at t, unchanged
    np.testing.assert_array_equal(
        model_set["adjacency"], np.broadcast_to(ep["adjacency"][t], (4, N, N))
    )
    result = transition_gdd(model_set, point.env_sets[0], schema, bandwidths, terminal=False)
    assert np.isfinite(result.gdd) and result.gdd >= 0
    same = transition_gdd(model_set, model_set, schema, bandwidths, terminal=False)
    assert same.gdd == pytest.approx(0.0, abs=1e-9)
