"""Ensemble training: K seeds of one configuration in one process, one step per iteration.

The paper's tables are means and 95% intervals over 10 training seeds. One seed's training
step leaves a GPU idle (tens of thousands of small kernels), so :func:`train_ensemble` trains
the K members together (:mod:`gdm_models.training.engines`: one member model whose layers
hold the K members' parameters on a leading axis, running the members' batches folded into one
batch; or a per-member loop).

Member k *is* the single run ``train(model_k, dataset, seed=seeds[k], ...)`` of a model built
as ``torch.manual_seed(seeds[k]); make_model(...)`` (the convention of graphwm's training
stage): its own initialisation, data sampler stream and model-noise generator (both seeded
from ``seeds[k]`` as :func:`~gdm_models.training.trainer.train` seeds them), its own gradient-norm
clipping and Adam state. With the per-member loop it is the same computation; with the member
engine the same up to float rounding (batched kernels, and batches padded to the ensemble's
largest node count - padded nodes are masked out of every loss term; each member's noise is
drawn at its own node count, then padded).

Layout of ``out_dir``::

    latest/                    ensemble trainer state, every member at the same step:
        ensemble.json          step, seeds, training arguments, failed members
        seed<s>/               member with seed s: a complete train() ``latest/`` checkpoint
                               (model checkpoint + trainer_state.pt/.json, sealed)
    seed<s>/log.csv            the member's CSV log (the columns of train()'s)
    seed<s>/final/             the member's final model checkpoint (load_checkpoint)
    seed<s>/step_000100/       with ``keep_every``: its model checkpoint of every k-th step
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

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..data import EpisodeDataset, EpochSampler
from ..registry import make_model
from ..scaling import FeatureScaler
from ..world_model import WorldModel
from .checkpoint import kept_checkpoint_dir, save_checkpoint
from .engines import DEFAULT_GRAD_CLIP, make_engine
from .ensemble_state import (
    ENSEMBLE_FILE,
    ENSEMBLE_FORMAT,
    load_ensemble_state,
    save_ensemble_state,
    verify_ensemble_state,
)
from .loop import TrainResult, run_loop
from .step import check_train_args, default_device, run_seeds
from .tensorboard_log import tee_members
from .trainer import CsvLog

__all__ = [
    "train_ensemble",
    "verify_ensemble_state",
    "EnsembleResult",
    "MemberResult",
    "STRATEGIES",
    "ENSEMBLE_FORMAT",
]

#: ``strategy`` values: "auto" = "members" for a model that supports it
#: (:attr:`~gdm_models.world_model.WorldModel.supports_members`) unless ``compile`` is asked
#: for, else "loop"
STRATEGIES = ("auto", "members", "loop")


@dataclass
class MemberResult(TrainResult):
    """Outcome of one member (the fields of :class:`~gdm_models.training.loop.TrainResult`
    plus its seed, its failure if it diverged, and where its outputs are)."""

    seed: int = 0
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
    kind: str, given: Sequence[str | Path] | None, default: Callable[[int], Path] | None, k: int
) -> list[Path] | None:
    if given is not None:
        if len(given) != k:
            raise ValueError(f"{kind} needs one path per seed ({k}), got {len(given)}")
        return [Path(p) for p in given]
    if default is None:
        return None
    return [default(i) for i in range(k)]


def train_ensemble(
    model: str | Callable[[], WorldModel],
    seeds: Sequence[int],
    dataset: EpisodeDataset,
    *,
    scaler: FeatureScaler | None = None,
    model_config: Mapping[str, Any] | None = None,
    steps: int | None = None,
    epochs: int | None = None,
    batch_size: int = 8,
    seq_len: int = 20,
    lr: float = 1e-3,
    grad_clip: float | None = DEFAULT_GRAD_CLIP,
    device: torch.device | str | None = None,
    out_dir: str | Path | None = None,
    member_logs: Sequence[str | Path] | None = None,
    member_finals: Sequence[str | Path] | None = None,
    checkpoint_every: int = 1000,
    resume: bool = True,
    progress: bool = True,
    keep_history: bool = False,
    precision: str = "fp32",
    compile: bool = False,
    log_every: int = 1,
    strategy: str = "auto",
    capture: bool | None = None,
    tensorboard_dir: str | Path | None = None,
    keep_every: int | None = None,
) -> EnsembleResult:
    """Train one model configuration with K seeds together (see the module docstring).

    Member k equals ``torch.manual_seed(seeds[k]); m = <model>; train(m, dataset,
    seed=seeds[k], ...)`` with the same arguments.

    Args:
        model: a registry name (``"gdm"``, ``"gdm:<ablation>"``, ``"vanilla-gwm"``,
            ``"ea-gwm"``, ``"g-rssm"``, ...), built as ``make_model(model, dataset.schema,
            scaler, **model_config)``; or a factory ``() -> WorldModel``. Either is called
            once per member right after ``torch.manual_seed(seed)``.
        seeds: one distinct seed per member.
        dataset: the training episodes (shared by the members; each samples its own stream).
        scaler, model_config: for a model name (e.g. ``get_preset(name, env)["model"]``).
        steps / epochs, batch_size, seq_len, lr, grad_clip, device, checkpoint_every,
            progress, keep_history, precision, log_every: as in
            :func:`~gdm_models.training.trainer.train`, for every member.
        out_dir: ensemble state (``latest/``) and, unless given below, ``seed<s>/log.csv``
            and ``seed<s>/final/``; ``None`` writes nothing.
        member_logs, member_finals: per-seed CSV log paths / final checkpoint directories.
        resume: continue from ``out_dir/latest`` if present.
        compile: the loop strategy only: each member's ``enable_compile`` (as
            ``train(compile=True)``); "auto" then picks the loop.
        strategy: "members", "loop" or "auto" (:data:`STRATEGIES`): "members" trains the K
            members as one member model (:class:`~gdm_models.training.engines.MemberEngine`,
            about the ops of one single step), "loop" one single step per member.
        capture: batches padded to one static shape, fused Adam, and on CUDA the whole
            step captured as one CUDA graph (:mod:`gdm_models.training.capture`). ``None``
            (default): on CUDA unless ``compile``; ``True`` on a CPU runs the static step eagerly.
            Member k then equals ``train(..., capture=True)`` of its seed (the noise drawn at the
            static shape, as there): bit for bit with the loop, up to float rounding with the member
            engine.
        tensorboard_dir: also write each member's logged rows as TensorBoard scalars into
            ``tensorboard_dir/seed<s>/`` (one TensorBoard run per member; see ``train``).
        keep_every: as in :func:`~gdm_models.training.trainer.train`: every live member's model
            checkpoint of each multiple of ``keep_every``, kept beside its final checkpoint
            (``kept_checkpoint_dir(final.parent, step)``); needs ``out_dir`` or
            ``member_finals``.

    Returns:
        :class:`EnsembleResult` with one :class:`MemberResult` per seed.
    """
    seeds = _check_seeds(seeds)
    K = len(seeds)
    check_train_args(dataset, steps, epochs, precision, log_every, checkpoint_every, keep_every)
    if strategy == "vmap":
        raise ValueError(
            "strategy 'vmap' was replaced by 'members' (issue 27: the K members as one model "
            "with member-dimension layers, the same numbers at a fraction of the ops); use "
            "strategy='members' or 'auto'"
        )
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    device = default_device() if device is None else torch.device(device)
    models = _build_members(model, seeds, dataset, scaler, model_config)
    for m in models:
        m.to(device)
        m.train()
    stackable = models[0].supports_members
    if strategy == "auto":
        strategy = "members" if stackable and not compile else "loop"
    if strategy == "members" and not stackable:
        raise ValueError(
            f"strategy 'members': model {models[0].model_name!r} ({type(models[0]).__name__}) "
            "does not train as a member model (supports_members is False); use "
            "strategy='loop' or 'auto'"
        )
    if strategy == "members" and compile:
        raise ValueError("compile is for strategy 'loop'; 'members' runs eager or captured")

    samplers, gens = [], []
    for s in seeds:
        data_seed, noise_seed = run_seeds(s)  # exactly as train() seeds a single run
        samplers.append(EpochSampler(dataset, batch_size, seq_len, seed=data_seed))
        g = torch.Generator(device=device)
        g.manual_seed(noise_seed)
        gens.append(g)
    if steps is not None:
        total = int(steps)
    else:
        assert epochs is not None  # exactly one of steps / epochs, checked above
        total = int(epochs) * samplers[0].batches_per_epoch
    if total < 0:
        raise ValueError("steps/epochs must be non-negative")
    member_args = [
        {"batch_size": batch_size, "seq_len": seq_len, "seed": s, "lr": lr} for s in seeds
    ]

    root = Path(out_dir) if out_dir is not None else None
    logs = _member_paths(
        "member_logs",
        member_logs,
        (lambda i: root / f"seed{seeds[i]}" / "log.csv") if root else None,
        K,
    )
    finals = _member_paths(
        "member_finals",
        member_finals,
        (lambda i: root / f"seed{seeds[i]}" / "final") if root else None,
        K,
    )
    engine = make_engine(
        models, dataset, batch_size=batch_size, seq_len=seq_len, lr=lr, grad_clip=grad_clip,
        precision=precision, compile=compile, capture=capture, strategy=strategy,
    )  # fmt: skip

    # ---- resume
    start = 0
    failed: dict[int, dict[str, Any]] = {}
    opt_states = None
    if root is not None:
        root.mkdir(parents=True, exist_ok=True)
        latest, previous = root / "latest", root / ".latest_old"
        if resume and not latest.exists() and (previous / ENSEMBLE_FILE).is_file():
            os.replace(previous, latest)  # a save cut short between its two renames
        if resume and (latest / ENSEMBLE_FILE).is_file():
            start, failed, opt_states = load_ensemble_state(
                latest, seeds, models, samplers, gens, member_args
            )
    alive = [k for k in range(K) if k not in failed]
    engine.build(alive, opt_states)

    results = [
        MemberResult(
            steps=failed[k]["step"] if k in failed else start,
            resumed_from=start,
            seed=seeds[k],
            error=FloatingPointError(failed[k]["error"]) if k in failed else None,
            failed_step=failed[k]["step"] if k in failed else None,
            log_csv=logs[k] if logs else None,
        )
        for k in range(K)
    ]
    csvs = tee_members(
        [CsvLog(p, start, log_every) for p in logs] if logs else None,
        tensorboard_dir,
        [f"seed{s}" for s in seeds],
        start,
    )

    def on_failure(k: int, step: int, msg: str) -> None:
        failed[k] = {"step": step, "error": msg}
        results[k].error = FloatingPointError(msg)
        results[k].failed_step = step

    def save(step: int, alive: list[int]) -> None:
        assert root is not None
        save_ensemble_state(root, step, seeds, alive, failed, engine, samplers, gens, member_args)

    def keep(step: int, alive: list[int]) -> None:
        assert finals is not None
        for k in alive:
            save_checkpoint(engine.export(k)[0], kept_checkpoint_dir(finals[k].parent, step))

    alive = run_loop(
        engine, samplers, gens, results, alive,
        start=start, total=total, log_every=log_every,
        checkpoint_every=checkpoint_every if root is not None else None,
        save=save if root is not None else None, logs=csvs, keep_history=keep_history,
        keep_every=keep_every if finals is not None else None, keep=keep,
        progress=progress, desc=f"train x{K}", on_failure=on_failure,
        labels=[f"seed {s}: " for s in seeds], device=device,
    )  # fmt: skip
    if finals is not None:
        for k in alive:
            model_k, _ = engine.export(k)
            save_checkpoint(model_k, finals[k])
            results[k].final_checkpoint = finals[k]
    else:
        for k in alive:
            engine.export(k)  # the returned models hold the trained weights
    steps_done = max((r.steps for r in results if r.ok), default=start)
    return EnsembleResult(
        members=results,
        steps=steps_done,
        resumed_from=start,
        strategy=strategy,
        models=models,
    )
