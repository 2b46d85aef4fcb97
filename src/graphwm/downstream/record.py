"""The downstream record: one agent evaluated in the real env."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any

from graphwm.store.records import Record, ResultsFormatError, register_record


@dataclass(frozen=True)
class DownstreamRecord(Record):
    """One agent evaluated in the real env (stored as ``kind = "downstream"``).

    Attributes:
        env: short env name (``"SAR"``).
        num_nodes: N of the training and evaluation episodes.
        agent: ``"dream:<model>"`` (trained in the model's dream env), ``"real"`` (trained in
            the real env), ``"random"`` or ``"greedy"`` (graphwm_envs.policies yardsticks).
        model: the world model (registry name) of a dream agent, else ``None``.
        seed: seed of the world model's training run (dream agents) / of the agent.
        budget: env steps of agent training (0 for the yardsticks).
        mean_return: mean undiscounted real-env return over ``episodes`` episodes.
        se_return: its standard error, ``std(ddof=1) / sqrt(episodes)``.
        episodes: evaluation episodes.
        gdd_single: the model's single-step GDD (``None`` where not applicable / unknown).
        gdd_multi: the model's multi-step GDD (mean over the horizon), or ``None``.
        seconds: wall time of training plus evaluation.
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
    kind: str = "downstream"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (with ``kind = "downstream"``; ``None`` fields kept as null)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: Any = None) -> DownstreamRecord:
        """Inverse of :meth:`to_dict`; unknown keys (e.g. the stored job) are ignored, a
        missing or mistyped field raises ``ResultsFormatError`` (a ``ValueError``) naming it
        (and ``path``)."""
        where = f"{path}: " if path is not None else ""
        names = {f.name for f in fields(cls)}
        required = {f.name for f in fields(cls) if f.default is MISSING}
        missing = sorted(required - set(d))
        if missing:
            raise ResultsFormatError(f"{where}downstream record lacks {missing}")
        if d.get("kind", "downstream") != "downstream":
            raise ResultsFormatError(f"{where}not a downstream record (kind {d.get('kind')!r})")
        for key in ("mean_return", "se_return"):
            if d[key] is not None and not isinstance(d[key], int | float):
                raise ResultsFormatError(f"{where}{key} must be a number, got {d[key]!r}")
        out = {k: v for k, v in d.items() if k in names}
        out["se_return"] = math.nan if out["se_return"] is None else out["se_return"]
        return cls(**out)


register_record("downstream", DownstreamRecord)
