"""The ensemble's ``latest/`` folder (see :mod:`gdm_models.training.ensemble`): every member's
trainer state (:mod:`gdm_models.training.state`) beside ``ensemble.json`` (step, seeds,
training arguments, failed members); written atomically (:func:`save_ensemble_state`),
verified (:func:`verify_ensemble_state`), checked to be this ensemble's and read back
(:func:`load_ensemble_state`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from ..data import EpochSampler
from ..world_model import WorldModel
from .checkpoint import CheckpointError
from .members import OptState
from .state import read_trainer_state, replacing_dir, verify_trainer_state, write_trainer_state

__all__ = [
    "ENSEMBLE_FILE",
    "ENSEMBLE_FORMAT",
    "load_ensemble_state",
    "save_ensemble_state",
    "verify_ensemble_state",
]

ENSEMBLE_FORMAT = "gdm-models-ensemble/1"
ENSEMBLE_FILE = "ensemble.json"


class _Exporter(Protocol):
    def export(self, k: int) -> tuple[WorldModel, OptState]: ...


def save_ensemble_state(
    root: Path,
    step: int,
    seeds: list[int],
    alive: list[int],
    failed: Mapping[int, Mapping[str, Any]],
    engine: _Exporter,
    samplers: list[EpochSampler],
    gens: list[torch.Generator],
    member_args: list[dict[str, Any]],
) -> None:
    """Write ``root/latest`` atomically: every live member's train() state at ``step``; a
    failed member keeps its last state from before the failure (if it had one)."""
    old = root / "latest"
    with replacing_dir(old) as tmp:
        for k, s in enumerate(seeds):
            sub = f"seed{s}"
            if k in alive:
                model_k, opt_state = engine.export(k)
                write_trainer_state(
                    tmp / sub,
                    model_k,
                    opt_state,
                    gens[k].get_state(),
                    samplers[k].state_dict(),
                    step,
                    member_args[k],
                )
            elif (old / sub).is_dir():
                shutil.copytree(old / sub, tmp / sub)
        meta = {
            "format": ENSEMBLE_FORMAT,
            "step": step,
            "seeds": seeds,
            "args": {k: v for k, v in member_args[0].items() if k != "seed"},
            "failed": {str(seeds[k]): dict(v) for k, v in failed.items()},
        }
        (tmp / ENSEMBLE_FILE).write_text(json.dumps(meta, indent=1))


def _read_meta(latest: Path) -> dict[str, Any]:
    """``latest/ensemble.json``, checked for its fields; else :class:`CheckpointError`."""
    path = latest / ENSEMBLE_FILE
    if not path.is_file():
        raise CheckpointError(f"no ensemble state at {path}")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"ensemble state {path} is not valid JSON: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != ENSEMBLE_FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else meta
        raise CheckpointError(
            f"{path}: unknown format {found!r} (this version reads {ENSEMBLE_FORMAT!r})"
        )
    seeds, failed = meta.get("seeds"), meta.get("failed")
    ok = (
        isinstance(meta.get("step"), int)
        and isinstance(meta.get("args"), dict)
        and isinstance(seeds, list)
        and all(isinstance(s, int) for s in seeds)
        and isinstance(failed, dict)
        and all(
            isinstance(v, dict) and isinstance(v.get("step"), int) and s.lstrip("-").isdigit()
            for s, v in failed.items()
        )
    )
    if not ok:
        raise CheckpointError(f"{path} lacks a field of an ensemble state or has a wrong type")
    return meta


def verify_ensemble_state(latest: str | Path) -> dict[str, Any]:
    """Check that ``latest`` is a complete, intact ensemble state; return its
    ``ensemble.json``.

    ``ensemble.json`` must read, and every member it lists must be a complete trainer state
    (:func:`~gdm_models.training.trainer.verify_trainer_state`), except a failed member that had no
    checkpoint before it failed. This checks integrity only (what a cut-short or damaged save
    breaks); whether the state fits the ensemble asked for (seeds, steps, arguments) is
    checked when resuming, which refuses a state that does not.

    Raises:
        CheckpointError: naming the file or member folder that is missing or corrupt.
    """
    latest = Path(latest)
    meta = _read_meta(latest)
    for s in meta["seeds"]:
        member = latest / f"seed{s}"
        if str(s) in meta["failed"] and not member.exists():
            continue
        if not member.is_dir():
            raise CheckpointError(f"ensemble state {latest} lacks the folder of member seed{s}")
        verify_trainer_state(member)
    return meta


def _check_members(
    latest: Path, meta: Mapping[str, Any], seeds: list[int], args: Mapping[str, Any]
) -> None:
    """Refuse (:class:`CheckpointError` naming ``latest``) a verified ensemble state that is
    not this ensemble's: other seeds or K, member folders it should not hold, a member folder
    holding another seed's state, other batch arguments, or members at different steps."""
    held = [int(s) for s in meta["seeds"]]
    if held != seeds:
        raise CheckpointError(
            f"cannot resume from {latest}: it holds K={len(held)} members (seeds {held}), this "
            f"ensemble has K={len(seeds)} (seeds {seeds})"
        )
    for name in (k for k in args if k != "seed"):  # every hyperparameter (old states: those held)
        if name in meta["args"] and meta["args"][name] != args[name]:
            raise CheckpointError(
                f"cannot resume from {latest}: {name}={args[name]} differs from the "
                f"checkpoint's {meta['args'].get(name)}"
            )
    expected = {f"seed{s}" for s in seeds}
    extra = sorted(p.name for p in latest.iterdir() if p.is_dir() and p.name not in expected)
    if extra:
        raise CheckpointError(
            f"cannot resume from {latest}: it holds member folders {extra} that are not among "
            f"its seeds {seeds}"
        )
    failed = {int(s): v for s, v in meta["failed"].items()}
    if not set(failed) <= set(seeds):
        raise CheckpointError(
            f"cannot resume from {latest}: failed members {sorted(failed)} are not among its "
            f"seeds {seeds}"
        )
    steps: dict[str, int] = {ENSEMBLE_FILE: int(meta["step"])}
    for s in seeds:
        member = latest / f"seed{s}"
        if not member.exists():
            continue  # a failed member without a checkpoint (verify_ensemble_state)
        state = json.loads((member / "trainer_state.json").read_text(encoding="utf-8"))
        if state["args"].get("seed", s) != s:
            raise CheckpointError(
                f"cannot resume from {latest}: its folder seed{s} holds the state of seed "
                f"{state['args']['seed']}"
            )
        if s in failed:
            if int(state["step"]) >= int(failed[s]["step"]):
                raise CheckpointError(
                    f"cannot resume from {latest}: failed member seed{s} holds a state at step "
                    f"{state['step']}, not before its failure at step {failed[s]['step']}"
                )
            continue
        steps[f"seed{s}"] = int(state["step"])
    if len(set(steps.values())) > 1:
        listed = ", ".join(f"{k}: {v}" for k, v in steps.items())
        raise CheckpointError(
            f"cannot resume from {latest}: its members disagree on the step ({listed})"
        )


def load_ensemble_state(
    latest: Path,
    seeds: list[int],
    models: list[WorldModel],
    samplers: list[EpochSampler],
    gens: list[torch.Generator],
    member_args: list[dict[str, Any]],
) -> tuple[int, dict[int, dict[str, Any]], dict[int, dict[str, Any]]]:
    """Restore the live members from ``latest``; returns (step, failed, Adam states).

    The state must verify (:func:`verify_ensemble_state`) and be this ensemble's
    (:func:`_check_members`), else :class:`CheckpointError` naming ``latest``."""
    meta = verify_ensemble_state(latest)
    _check_members(latest, meta, seeds, member_args[0])
    step = int(meta["step"])
    by_seed = {int(s): v for s, v in meta["failed"].items()}
    failed = {k: dict(by_seed[s]) for k, s in enumerate(seeds) if s in by_seed}
    opt_states = {}
    for k, s in enumerate(seeds):
        if k in failed:
            continue
        st = read_trainer_state(latest / f"seed{s}", models[k], member_args[k])
        models[k].load_state_dict(st.weights, strict=True)
        opt_states[k] = st.optimizer
        gens[k].set_state(st.generator)
        samplers[k].load_state_dict(st.sampler)
    return step, failed, opt_states
