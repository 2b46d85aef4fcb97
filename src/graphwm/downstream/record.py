"""The downstream record (one agent evaluated in the real env) and the agent names."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from graphwm.store.fields import Where
from graphwm.store.records import Record, register_record

#: the agent of a job: trained in a world model's dream env (its record's agent is
#: ``"dream:<model>"``) or in the real env, or a yardstick (random policy, greedy heuristic)
DREAM, REAL, RANDOM, GREEDY = "dream", "real", "random", "greedy"
YARDSTICKS = (RANDOM, GREEDY)
#: the run directory's folder of downstream records (and the agents' TensorBoard files)
STORE_DIR = "downstream"


@dataclass(frozen=True)
class DownstreamRecord(Record):
    """One agent evaluated in the real env (stored as ``kind = "downstream"``).

    Attributes:
        env: short env name (``"SAR"``).
        num_nodes: N of the training and evaluation episodes.
        agent: ``"dream:<model>"`` (trained in the model's dream env), ``"real"`` (trained in
            the real env), ``"random"`` or ``"greedy"`` (``graphwm_envs.heuristics`` yardsticks).
        model: the world model (registry name) of a dream agent, else ``None``.
        seed: seed of the world model's training run (dream agents) / of the agent.
        budget: env steps of agent training (0 for the yardsticks).
        mean_return: mean undiscounted real-env return over ``episodes`` episodes.
        se_return: its standard error, ``std(ddof=1) / sqrt(episodes)``.
        episodes: evaluation episodes.
        gdd_single: the model's single-step GDD (``None`` where not applicable / unknown).
        gdd_multi: the model's multi-step GDD (mean over the horizon), or ``None``.
        seconds: wall time of training plus evaluation.
        policy: the trained agent's policy (``"graph"`` or ``"mlp"``); ``None`` for the
            yardsticks and in records written before the key existed (those were ``"mlp"``).
        num_envs: parallel envs the agent trained on (``None``: yardsticks, older records).
        policy_hidden_dim, policy_num_layers: the graph policy's width and depth (``None``:
            the MLP policy, the yardsticks, and records written before the keys existed).
    """

    env: str
    num_nodes: int
    agent: str
    model: str | None
    seed: int
    budget: int
    mean_return: float
    se_return: float
    episodes: int
    gdd_single: float | None = None
    gdd_multi: float | None = None
    seconds: float = 0.0
    policy: str | None = None
    num_envs: int | None = None
    policy_hidden_dim: int | None = None
    policy_num_layers: int | None = None
    kind: str = "downstream"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (with ``kind = "downstream"``; ``None`` fields kept as null)."""
        return asdict(self)

    KIND: ClassVar[str] = "downstream"

    @classmethod
    def _precheck(cls, raw: Mapping[str, Any], where: Where, key: str) -> None:
        if raw.get("kind", "downstream") != "downstream":
            raise where.say(f"{where.prefix}not a downstream record (kind {raw.get('kind')!r})")


register_record("downstream", DownstreamRecord)
