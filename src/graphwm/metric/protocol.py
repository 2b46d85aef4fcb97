"""The GDD evaluation protocol (paper appendix "Evaluation Details"; docs/architecture.md,
contract 4-6).

For a reference episode (a random-policy rollout replayed from its seed and actions):

* 20 reference transitions, evenly spaced, first and last included (:func:`reference_indices`);
* environment samples: restore the reference state with a fresh seed and step the reference
  action, kappa times (:func:`env_samples`);
* model samples: the model's own kappa predictions for the same state and action
  (see :mod:`graphwm.stages.evaluate`);
* the transition GDD between the two sample sets of metric graphs (:func:`transition_gdd`).

An evaluation job builds one :class:`EvalContext` (env, size, the extended schema, the
terminal schema, the bandwidths and one env instance) and passes it down: every transition of
the job uses it, instead of rebuilding the schema and an env per transition. The free
functions are the same steps for one-off use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gdm_models.data import complete_observation

from graphwm.envs import env_schema, make_env
from graphwm.metric.graph import (
    extend_schema,
    metric_graph,
    terminal_schema,
    terminal_view,
)

# Independent sample streams of one reference transition (seeded via SeedSequence).
STREAM_ENV = 0
STREAM_SELF = 1
STREAM_MODEL = 2
STREAM_POSTERIOR = 3  # the model's posterior pass over a whole reference episode
STREAM_PERMUTATION = 4  # the relabelings of the indistinguishability test


def reference_indices(num_transitions: int, count: int = 20) -> np.ndarray:
    """Evenly spaced transition indices, first and last included (fewer if T < count)."""
    if num_transitions <= 0:
        raise ValueError("an episode needs at least one transition")
    count = min(count, num_transitions)
    return np.unique(np.round(np.linspace(0, num_transitions - 1, count)).astype(int))


def sample_seeds(episode_seed: int, t: int, stream: int, num: int, repeat: int = 0) -> list[int]:
    """``num`` reproducible, independent seeds for one reference transition and stream.

    ``repeat`` > 0: the seeds of evaluation repeat ``repeat`` (:mod:`graphwm.noise`), an
    independent draw of the same stream; repeat 0 is the evaluation itself (the same seeds
    as without it, so stored results stay what they are).
    """
    if repeat < 0:
        raise ValueError(f"repeat must be >= 0, got {repeat}")
    entropy = [episode_seed, t, stream, *([repeat] if repeat else [])]
    return [int(s) for s in np.random.SeedSequence(entropy).generate_state(num)]


@dataclass
class ReplayedEpisode:
    """A reference episode replayed in the env: snapshots before the chosen steps."""

    env_name: str
    num_nodes: int
    seed: int
    actions: np.ndarray
    action_nodes: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    snapshots: dict[int, Any] = field(default_factory=dict)
    observations: list[dict[str, np.ndarray]] | None = None


def replay_episode(
    env_name: str,
    num_nodes: int,
    seed: int,
    actions: np.ndarray,
    capture: Sequence[int] | np.ndarray,
    keep_observations: bool = False,
    check: Mapping[str, np.ndarray] | None = None,
    *,
    env: Any = None,
) -> ReplayedEpisode:
    """Replay a recorded episode exactly and snapshot the state before each step in ``capture``.

    ``check`` (the recorded ``reward`` array) verifies the replay reproduces the recording.
    ``env``: an instance of ``env_name`` at ``num_nodes`` to reuse (reset here); else a new one.
    """
    env = make_env(env_name, num_nodes) if env is None else env
    obs, _ = env.reset(seed=seed)
    observations = [complete_observation(obs)] if keep_observations else None
    capture_set = set(int(t) for t in capture)
    snaps, nodes, rewards, terms = {}, [], [], []
    for t, action in enumerate(actions):
        if t in capture_set:
            snaps[t] = env.clone_state()
        act = _as_env_action(env, action)
        nodes.append(env.action_to_nodes(act))
        obs, reward, terminated, truncated, _ = env.step(act)
        rewards.append(reward)
        terms.append(terminated)
        if observations is not None:
            observations.append(complete_observation(obs))
    rewards_arr = np.asarray(rewards, dtype=np.float32)
    if check is not None and not np.allclose(rewards_arr, check["reward"], atol=1e-6):
        raise RuntimeError(f"replay of {env_name} seed {seed} does not match its recording")
    return ReplayedEpisode(
        env_name,
        num_nodes,
        seed,
        np.asarray(actions),
        np.stack(nodes).astype(np.int8),
        rewards_arr,
        np.asarray(terms, dtype=bool),
        snaps,
        observations,
    )


def _as_env_action(env, action: np.ndarray):
    if env.action_space.shape == ():
        return int(np.atleast_1d(action)[0])
    return np.asarray(action, dtype=np.int64)


def env_samples(
    env_name: str,
    num_nodes: int,
    snapshot: Any,
    actions: np.ndarray,
    seeds: Sequence[int],
    *,
    env: Any = None,
) -> tuple[list[list[dict]], np.ndarray]:
    """Environment rollouts from ``snapshot`` along ``actions`` (one per seed).

    Returns ``(graphs, invalid)``: ``graphs[h][i]`` is sample i's metric graph after step h+1,
    ``invalid`` (H, S) bool says whether step h of sample i was an invalid-action noop. After a
    sample terminates it stays in its terminal state: later steps repeat its terminal metric
    graph with reward 0. ``env``: an instance to reuse (every sample restores the snapshot
    with its own seed, so earlier use does not matter); else a new one.
    """
    env = make_env(env_name, num_nodes) if env is None else env
    horizon = len(actions)
    graphs: list[list[dict]] = [[] for _ in range(horizon)]
    invalid = np.zeros((horizon, len(seeds)), dtype=bool)
    for i, seed in enumerate(seeds):
        obs = env.restore_state(snapshot, seed=int(seed))
        done_graph = None
        for h, action in enumerate(actions):
            if done_graph is not None:
                graphs[h].append(done_graph)
                continue
            act = _as_env_action(env, action)
            # an env without info["invalid_action"]: an action selecting a node outside the mask
            outside = np.asarray(env.action_to_nodes(act)).astype(bool) & ~np.asarray(
                obs["action_mask"]
            ).astype(bool)
            obs, reward, terminated, truncated, info = env.step(act)
            invalid[h, i] = bool(info.get("invalid_action", outside.any()))
            graph = metric_graph(obs, reward, terminated)
            graphs[h].append(graph)
            if terminated or truncated:
                done_graph = {**graph, "graph_continuous": graph["graph_continuous"].copy()}
                done_graph["graph_continuous"][-1] = 0.0
    return graphs, invalid


@dataclass
class EvalContext:
    """What one evaluation job holds constant, built once (:meth:`build`) and passed down.

    Attributes:
        env_name, num_nodes: the env and graph size of the reference episodes.
        metric_schema: the env schema extended with reward, continuation and action mask
            (:func:`~graphwm.metric.graph.extend_schema`).
        terminal_schema: reward and continuation only (a terminal reference transition).
        bandwidths: the fitted GDD bandwidths of the env.
        env: one env instance for every replay and every env sample of the job.
    """

    env_name: str
    num_nodes: int
    metric_schema: dict[str, Any]
    terminal_schema: dict[str, Any]
    bandwidths: Any
    env: Any = field(default=None, repr=False)

    @classmethod
    def build(
        cls,
        env_name: str,
        num_nodes: int,
        bandwidths: Any,
        schema: Mapping[str, Any] | None = None,
    ) -> EvalContext:
        """The context of ``env_name`` at ``num_nodes``; ``schema``: the env schema (read
        from the env when omitted)."""
        schema = env_schema(env_name) if schema is None else schema
        return cls(env_name, num_nodes, extend_schema(schema), terminal_schema(), bandwidths)

    def _env(self) -> Any:
        if self.env is None:
            self.env = make_env(self.env_name, self.num_nodes)
        return self.env

    def replay(
        self,
        seed: int,
        actions: np.ndarray,
        capture: Sequence[int] | np.ndarray,
        keep_observations: bool = False,
        check: Mapping[str, np.ndarray] | None = None,
    ) -> ReplayedEpisode:
        """:func:`replay_episode` in this context's env."""
        return replay_episode(
            self.env_name,
            self.num_nodes,
            seed,
            actions,
            capture,
            keep_observations,
            check,
            env=self._env(),
        )

    def samples(
        self, snapshot: Any, actions: np.ndarray, seeds: Sequence[int]
    ) -> tuple[list[list[dict]], np.ndarray]:
        """:func:`env_samples` in this context's env."""
        return env_samples(self.env_name, self.num_nodes, snapshot, actions, seeds, env=self._env())

    def view(
        self, model_set: Mapping[str, np.ndarray], env_set: Mapping[str, np.ndarray], terminal: bool
    ) -> tuple[Mapping[str, np.ndarray], Mapping[str, np.ndarray], dict[str, Any]]:
        """The two sets and the schema a transition is scored on (terminal: reward and
        continuation only)."""
        if terminal:
            return terminal_view(model_set), terminal_view(env_set), self.terminal_schema
        return model_set, env_set, self.metric_schema

    def gdd(
        self,
        model_set: Mapping[str, np.ndarray],
        env_set: Mapping[str, np.ndarray],
        terminal: bool,
        estimator: str = "biased",
    ):
        """GDD between model and environment metric sample sets of one transition.

        ``estimator``: "biased" (the paper's V-statistic) or "unbiased" (U-statistic).
        """
        from gdd_metric import gdd

        return gdd(*self.view(model_set, env_set, terminal), self.bandwidths, estimator=estimator)

    def gdd_and_p_value(
        self,
        model_set: Mapping[str, np.ndarray],
        env_set: Mapping[str, np.ndarray],
        terminal: bool,
        num_permutations: int,
        seed: int,
    ):
        """``(self.gdd(...), self.p_value(...))`` from one Gram computation (gdd-metric's
        :func:`~gdd_metric.gdd_and_permutation_test`): the same numbers, about half the cost."""
        from gdd_metric import gdd_and_permutation_test

        rng = np.random.default_rng(seed)
        view = self.view(model_set, env_set, terminal)
        return gdd_and_permutation_test(*view, self.bandwidths, num_permutations, rng)

    def gdd_both(
        self,
        model_set: Mapping[str, np.ndarray],
        env_set: Mapping[str, np.ndarray],
        terminal: bool,
        num_permutations: int = 0,
        seed: int | None = None,
    ) -> tuple[Any, float, float | None]:
        """The biased GDD result, the unbiased GDD and (with ``num_permutations`` > 0) the
        permutation test's p-value of one transition, from one Gram computation
        (gdd-metric's :func:`~gdd_metric.gdd_estimates`): the result is :meth:`gdd`'s, the
        p-value :meth:`gdd_and_p_value`'s (seeded by ``seed``), bit for bit.

        The unbiased GDD is the signed square root of the unbiased (U-statistic) MMD^2: it
        may be negative, so averaged over transitions noise shows on both sides of 0.
        """
        from gdd_metric import gdd_estimates

        view = self.view(model_set, env_set, terminal)
        rng = np.random.default_rng(seed) if num_permutations else None
        results, p = gdd_estimates(
            *view, self.bandwidths, num_permutations=num_permutations, rng=rng
        )
        return results["biased"], signed_sqrt(results["unbiased"].mmd2), p

    def p_value(
        self,
        model_set: Mapping[str, np.ndarray],
        env_set: Mapping[str, np.ndarray],
        terminal: bool,
        num_permutations: int,
        seed: int,
    ) -> float:
        """p-value of gdd-metric's permutation test (GDD statistic, the view of :meth:`gdd`)
        of "model and env samples come from one distribution"."""
        from gdd_metric import permutation_test

        rng = np.random.default_rng(seed)
        view = self.view(model_set, env_set, terminal)
        return permutation_test(*view, self.bandwidths, num_permutations, rng)[1]


def signed_sqrt(x: float) -> float:
    """sign(x) sqrt(|x|): the GDD scale of an unbiased MMD^2, which may be negative."""
    return float(np.sign(x) * np.sqrt(abs(x)))


def _one_off(schema: Mapping[str, Any], bandwidths: Any) -> EvalContext:
    return EvalContext("", 0, extend_schema(schema), terminal_schema(), bandwidths)


def transition_gdd(
    model_set: Mapping[str, np.ndarray],
    env_set: Mapping[str, np.ndarray],
    schema: Mapping[str, Any],
    bandwidths: Any,
    terminal: bool,
    estimator: str = "biased",
):
    """GDD between model and environment metric sample sets of one transition.

    ``schema`` is the env schema; it is extended with reward/continuation/action mask here
    (a job scores many transitions through one :class:`EvalContext` instead). A terminal
    reference transition is scored on reward and continuation only. ``estimator``: "biased"
    (the paper's V-statistic) or "unbiased" (U-statistic).
    """
    return _one_off(schema, bandwidths).gdd(model_set, env_set, terminal, estimator)


def transition_p_value(
    model_set: Mapping[str, np.ndarray],
    env_set: Mapping[str, np.ndarray],
    schema: Mapping[str, Any],
    bandwidths: Any,
    terminal: bool,
    num_permutations: int,
    seed: int,
) -> float:
    """p-value of gdd-metric's permutation test (GDD statistic, same view as
    :func:`transition_gdd`) of "model and env samples come from one distribution"."""
    return _one_off(schema, bandwidths).p_value(
        model_set, env_set, terminal, num_permutations, seed
    )
