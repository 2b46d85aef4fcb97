"""Tiny world models trained in seconds on random-policy episodes: a helper of the tests
(``from tiny_models import ...``; ``tests/conftest.py`` puts this folder on ``sys.path``).

Not for experiments: the pipeline's ``train`` stage trains the real models.
"""

from __future__ import annotations

from gdm_models import TrainConfig

#: model sizes small enough to train in a second on a CPU
TINY_OVERRIDES = {
    # the GDM's node and graph latents: (groups, classes) each
    "gdm": dict(embed_dim=8, hidden_dim=8, node_latent_groups=2, node_latent_classes=4)
    | dict(graph_latent_groups=2, graph_latent_classes=2),
    "vanilla-gwm": dict(hidden_dim=8),
    "ea-gwm": dict(hidden_dim=8),
    "g-rssm": dict(embed_dim=8, hidden_dim=8, latent_groups=2, latent_classes=4),
}


def random_policy_episodes(env_name: str, num_nodes: int, count: int, seed: int = 0) -> list:
    """``count`` random-policy episodes (the contract's episode dicts), seeds ``seed + i``."""
    from graphwm.episodes import record_episode

    return [record_episode(env_name, num_nodes, seed + i) for i in range(count)]


def tiny_trained_model(
    model_name: str,
    env_name: str,
    *,
    num_nodes: int = 8,
    episodes: int = 3,
    steps: int = 3,
    seed: int = 0,
):
    """A small ``model_name`` (a registry name) trained ``steps`` steps on random episodes."""
    import torch
    from gdm_models import EpisodeDataset, FeatureScaler, make_model, train

    from graphwm.envs import env_schema

    base = model_name.split(":", 1)[0]
    eps = random_policy_episodes(env_name, num_nodes, episodes, seed)
    schema = env_schema(env_name)
    torch.manual_seed(seed)
    model = make_model(
        model_name, schema, FeatureScaler.fit(eps, schema), **TINY_OVERRIDES.get(base, {})
    )
    dataset = EpisodeDataset(eps, schema, seq_len=5)
    train(
        model,
        dataset,
        TrainConfig(steps=steps, batch_size=2, seq_len=5, seed=seed, device="cpu"),
        progress=False,
    )
    return model.eval()


def tiny_ending_model(env_name: str, *, num_nodes: int = 8, continuation_shift: float = 2.5):
    """:func:`tiny_trained_model` (the GDM) with its continuation logit shifted by
    ``continuation_shift``, so that imagined episodes end both by termination (the
    continuation head) and, with a short horizon, by truncation: a model for autoreset tests."""
    import copy

    import torch

    model = copy.deepcopy(tiny_trained_model("gdm", env_name, num_nodes=num_nodes))
    with torch.no_grad():
        model.get_submodule("cell.decoder.graph_heads.continuation").bias.add_(continuation_shift)
    return model


def short_start_states(env_name: str, num_nodes: int, horizon: int, episodes: int = 3) -> tuple:
    """Recorded start states of ``episodes`` random-policy episodes, each truncated after
    ``horizon`` imagined steps."""
    from graphwm.dream.core import StartState, stored_starts

    eps = random_policy_episodes(env_name, num_nodes, episodes)
    return tuple(StartState(s.observation, horizon) for s in stored_starts(eps))
