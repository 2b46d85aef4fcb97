"""Ensemble training: K seeds of one configuration in one process, one step per iteration.

The paper's tables are means and 95% intervals over 10 training seeds. One seed's training
step leaves a GPU idle (tens of thousands of small kernels), so :func:`train_ensemble` trains
the K members together (:mod:`gdm_models.training.engines`: one member model whose layers
hold the K members' parameters on a leading axis, running the members' batches folded into one
batch; or a per-member loop).

Member k *is* the single run ``train(model_k, dataset, replace(config, seed=seeds[k]), ...)``
of a model built as ``torch.manual_seed(seeds[k]); make_model(...)`` (the convention of
graphwm's training stage): its own initialisation, data sampler stream and model-noise
generator (both seeded from ``seeds[k]`` as :func:`~gdm_models.training.trainer.train` seeds
them), its own gradient-norm clipping and Adam state. With the per-member loop it is the same
computation; with the member engine the same up to float rounding (batched kernels, and batches
padded to the ensemble's largest node count - padded nodes are masked out of every loss term; each
member's noise is drawn at its own node count, then padded).

Layout of ``out_dir``::

    latest/                    ensemble trainer state, every member at the same step:
        ensemble.json          step, seeds, training arguments, failed members
        seed<s>/               member with seed s: a complete train() ``latest/`` checkpoint
                               (model checkpoint + trainer_state.pt/.json, sealed)
    seed<s>/log.csv            the member's CSV log (the columns of train()'s)
    seed<s>/final/             the member's final model checkpoint (load_checkpoint)
    seed<s>/step_000100/       with ``config.keep_every``: its model checkpoint of every k-th step
                               (beside ``final/``, wherever ``member_finals`` puts that)

(``member_logs`` / ``member_finals`` put the logs and final checkpoints elsewhere, e.g. one folder
per seed in a pipeline.) Resuming (``resume=True`` and ``out_dir/latest`` present) restores every
member's weights, Adam state, sampler and generator, so an interrupted ensemble ends with the same
weights bit for bit as an uninterrupted one; the logs are truncated to the resumed step. ``latest/``
is written to ``.latest_tmp`` and replaced atomically, as :func:`~gdm_models.training.trainer.train`
replaces its own (a save cut short between its two renames leaves the previous state as
``.latest_old``, which resuming picks up). Resuming refuses, with a
:class:`~gdm_models.training.checkpoint.CheckpointError` naming the folder, a ``latest/`` that does
not verify (:func:`verify_ensemble_state`: a damaged or missing file) or is not this ensemble's
(other seeds or K, extra member folders, members at different steps). A member's ``latest/seed<s>``
folder is also a valid ``latest/`` for :func:`~gdm_models.training.trainer.train` with that seed.

Diverged members: a member whose loss is non-finite is detected as train() detects it (on the
device, reported at the next logged or checkpoint step) and fails as train() would fail: its
result holds a :class:`FloatingPointError` (``error``) and the step it was detected at, it is
dropped from training (no further log rows, no ``final/``), and its ``latest/seed<s>`` keeps
its last checkpoint from before the failure. The other members are unaffected: every
operation is per member (losses, gradients, clipping norms, Adam), so a NaN, an infinity or a
huge gradient in one member changes no other member's numbers.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Unpack

import torch

from ..data import EpisodeDataset
from ..registry import make_model
from ..scaling import FeatureScaler
from ..world_model import WorldModel
from .callbacks import EnsembleCheckpoints
from .config import TrainConfig
from .ensemble_state import ENSEMBLE_FORMAT, verify_ensemble_state
from .loop import TrainResult
from .session import RunOptions, check_call, run_members
from .setup import STRATEGIES, setup_run

__all__ = [
    "train_ensemble",
    "TrainConfig",
    "verify_ensemble_state",
    "EnsembleResult",
    "MemberResult",
    "STRATEGIES",
    "ENSEMBLE_FORMAT",
]


@dataclass(kw_only=True)
class MemberResult(TrainResult):
    """Outcome of one member (the fields of :class:`~gdm_models.training.loop.TrainResult`
    plus its seed, its failure if it diverged, and where its outputs are)."""

    seed: int
    error: FloatingPointError | None = None
    failed_step: int | None = None
    final_checkpoint: Path | None = None
    log_csv: Path | None = None

    @property
    def ok(self) -> bool:
        """Whether the member trained to the end (no non-finite loss)."""
        return self.error is None


@dataclass
class EnsembleResult:
    """Outcome of :func:`train_ensemble`: one :class:`MemberResult` per seed, in seed order."""

    members: list[MemberResult]
    steps: int
    resumed_from: int
    strategy: str
    #: the member models, in seed order (the trained weights, except for failed members)
    models: list[WorldModel] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.members)

    def __iter__(self) -> Iterator[MemberResult]:
        return iter(self.members)

    def __getitem__(self, k: int) -> MemberResult:
        return self.members[k]

    @property
    def failed(self) -> list[MemberResult]:
        """The members that diverged."""
        return [m for m in self.members if not m.ok]


def _build_members(
    model: str | Callable[[], WorldModel],
    seeds: Sequence[int],
    dataset: EpisodeDataset,
    scaler: FeatureScaler | None,
    model_config: Mapping[str, Any] | None,
) -> list[WorldModel]:
    """Member k: ``torch.manual_seed(seeds[k])`` then the model (the single-run convention)."""
    out: list[WorldModel] = []
    for s in seeds:
        torch.manual_seed(int(s))
        if isinstance(model, str):
            m = make_model(model, dataset.schema, scaler, **dict(model_config or {}))
        else:
            if model_config:
                raise ValueError("model_config is for a model name; a factory sets its own")
            m = model()
        if not isinstance(m, WorldModel):
            raise TypeError(f"the model factory returned {type(m).__name__}, not a WorldModel")
        out.append(m)
    first = out[0]
    for m in out[1:]:
        if type(m) is not type(first) or m.config_dict() != first.config_dict():
            raise ValueError("ensemble members must share one model class and config")
        if m.model_name != first.model_name:
            raise ValueError("ensemble members must share one model name")
    if not dataset.schema.same_features(first.schema):
        raise ValueError("dataset schema does not match the model schema")
    return out


def _check_seeds(seeds: Sequence[int]) -> list[int]:
    out = [int(s) for s in seeds]
    if not out:
        raise ValueError("seeds must name at least one member")
    if len(set(out)) != len(out):
        raise ValueError(f"seeds must be distinct, got {out}")
    return out


def _member_paths(
    kind: str, given: Sequence[str | Path] | None, root: Path | None, seeds: list[int], name: str
) -> list[Path] | None:
    """The paths ``given`` (one per seed), else ``root/seed<s>/<name>``, else ``None``."""
    if given is not None:
        if len(given) != len(seeds):
            raise ValueError(f"{kind} needs one path per seed ({len(seeds)}), got {len(given)}")
        return [Path(p) for p in given]
    return None if root is None else [root / f"seed{s}" / name for s in seeds]


def train_ensemble(
    model: str | Callable[[], WorldModel],
    seeds: Sequence[int],
    dataset: EpisodeDataset,
    config: TrainConfig | None = None,
    *,
    scaler: FeatureScaler | None = None,
    model_config: Mapping[str, Any] | None = None,
    out_dir: str | Path | None = None,
    member_logs: Sequence[str | Path] | None = None,
    member_finals: Sequence[str | Path] | None = None,
    **options: Unpack[RunOptions],
) -> EnsembleResult:
    """Train one model configuration with K seeds together (see the module docstring).

    Member k equals ``torch.manual_seed(seeds[k]); m = <model>; train(m, dataset,
    replace(config, seed=seeds[k]), ...)`` (``config.seed`` itself is not used).

    Args:
        model: a registry name (``"gdm"``, ``"gdm:<ablation>"``, ``"vanilla-gwm"``,
            ``"ea-gwm"``, ``"g-rssm"``, ...), built as ``make_model(model, dataset.schema,
            scaler, **model_config)``; or a factory ``() -> WorldModel``. Either is called
            once per member right after ``torch.manual_seed(seed)``.
        seeds: one distinct seed per member.
        dataset: the training episodes (shared by the members; each samples its own stream).
        config: every hyperparameter, as for :func:`~gdm_models.training.trainer.train`, for
            every member; besides ``config.strategy``: "members", "loop" or "auto"
            (:data:`STRATEGIES`): "members" trains the K members as one member model
            (:class:`~gdm_models.training.engines.MemberEngine`, about the ops of one single
            step; for a model whose class inherits :class:`~gdm_models.member_layers.MemberModel`),
            "loop" one single step per member; "auto" the member engine for a ``MemberModel``
            (unless ``config.compile``), else the loop. With ``config.capture`` member k equals
            ``train`` with ``capture=True`` of its seed (the noise drawn at the static shape):
            bit for bit with the loop, up to float rounding with the member engine.
            ``config.keep_every`` keeps every live member's model checkpoint of each multiple
            beside its final checkpoint (needs ``out_dir`` or ``member_finals``).
        scaler, model_config: for a model name (e.g. ``get_hyperparameters(name, env)["model"]``).
        out_dir: ensemble state (``latest/``) and, unless given below, ``seed<s>/log.csv``
            and ``seed<s>/final/``; ``None`` writes nothing.
        member_logs, member_finals: per-seed CSV log paths / final checkpoint directories.
        **options: as for ``train`` (:class:`~gdm_models.training.session.RunOptions`):
            ``resume`` from ``out_dir/latest``, ``progress``, ``keep_history``,
            ``tensorboard_dir`` (member ``seed<s>`` into ``tensorboard_dir/seed<s>/``, one
            TensorBoard run per member) and ``callbacks`` (the hooks see every member: a
            callback that stops the run stops all of them).

    Returns:
        :class:`EnsembleResult` with one :class:`MemberResult` per seed.
    """
    usage = "train_ensemble(model, seeds, dataset, TrainConfig(steps=...))"
    opts = check_call("train_ensemble", config, options, usage)
    assert config is not None  # checked
    seeds = _check_seeds(seeds)
    models = _build_members(model, seeds, dataset, scaler, model_config)
    run = setup_run(models, seeds, dataset, config, config.strategy)
    root = Path(out_dir) if out_dir is not None else None
    logs = _member_paths("member_logs", member_logs, root, seeds, "log.csv")
    finals = _member_paths("member_finals", member_finals, root, seeds, "final")
    ckpts = EnsembleCheckpoints(root, finals, run)
    results = [MemberResult(0, 0, seed=s, log_csv=logs[k] if logs else None)
               for k, s in enumerate(seeds)]  # fmt: skip
    alive = run_members(run, results, ckpts, logs, opts, single=False)
    for k, f in ckpts.failed.items():
        results[k].steps = results[k].failed_step = f["step"]
        results[k].error = FloatingPointError(f["error"])
    for k in alive:
        results[k].final_checkpoint = finals[k] if finals is not None else None
    start = results[0].resumed_from
    steps_done = max((r.steps for r in results if r.ok), default=start)
    return EnsembleResult(results, steps_done, start, run.strategy, models)
