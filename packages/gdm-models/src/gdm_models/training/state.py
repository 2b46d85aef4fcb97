"""A training run's state on disk: the ``latest/`` folder of
:func:`~gdm_models.training.trainer.train` (model checkpoint + ``trainer_state.pt`` +
``trainer_state.json``, sealed into the checkpoint's digest), written atomically, verified and read
back; shared by the single run and the members of
:func:`~gdm_models.training.ensemble.train_ensemble`."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from ..world_model import WorldModel
from .checkpoint import (
    WEIGHTS_FILE,
    CheckpointError,
    save_checkpoint,
    seal_checkpoint,
    verify_checkpoint,
)

__all__ = [
    "TRAINER_STATE_FILES",
    "TrainerState",
    "read_trainer_state",
    "replacing_dir",
    "verify_trainer_state",
    "write_trainer_state",
]

TRAINER_STATE_FILES = ("trainer_state.pt", "trainer_state.json")


def write_trainer_state(
    path: Path,
    model: WorldModel,
    opt_state: Mapping[str, Any],
    gen_state: torch.Tensor,
    sampler_state: Mapping[str, Any],
    step: int,
    args: Mapping[str, Any],
) -> None:
    """Write a full trainer state into the new directory ``path``: the model checkpoint plus
    ``trainer_state.pt`` (optimizer and generator states) and ``trainer_state.json`` (step,
    sampler state, training arguments), sealed into the checkpoint's digest."""
    save_checkpoint(model, path)
    torch.save({"optimizer": opt_state, "generator": gen_state.cpu()}, path / "trainer_state.pt")
    (path / "trainer_state.json").write_text(
        json.dumps({"step": step, "sampler": dict(sampler_state), "args": dict(args)})
    )
    seal_checkpoint(path, TRAINER_STATE_FILES)  # the digest covers the trainer state too


def _replace_dir(tmp: Path, target: Path) -> None:
    """Move the finished directory ``tmp`` to ``target``, replacing it; the previous one is
    kept as ``.<name>_old`` until the new one is in place (a cut-short save leaves it)."""
    old = target.parent / f".{target.name}_old"
    if old.exists():
        shutil.rmtree(old)
    if target.exists():
        os.replace(target, old)
    os.replace(tmp, target)
    if old.exists():
        shutil.rmtree(old)


@contextlib.contextmanager
def replacing_dir(target: Path) -> Iterator[Path]:
    """Yield a fresh empty ``.<name>_tmp`` next to ``target``; once the body has written it,
    it replaces ``target`` (:func:`_replace_dir`). A save killed midway leaves ``target``
    untouched (or, between the two renames, only ``.<name>_old``), never a half-written one."""
    tmp = target.parent / f".{target.name}_tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    yield tmp
    _replace_dir(tmp, target)


def verify_trainer_state(path: str | Path) -> dict[str, Any]:
    """Check that ``path`` is a complete, intact trainer state; return its
    ``trainer_state.json`` (step, sampler state, training arguments).

    The checkpoint must verify (:func:`~gdm_models.training.checkpoint.verify_checkpoint`: weights,
    manifest and the sealed trainer state), hold both trainer-state files, and they must load
    as resuming loads them (``trainer_state.pt`` with ``weights_only=True``, so a pickle is
    refused).

    Raises:
        CheckpointError: naming the checkpoint and what is wrong with it.
    """
    path = Path(path)
    manifest = verify_checkpoint(path)
    for name in TRAINER_STATE_FILES:
        if name not in manifest["files"]:
            raise CheckpointError(f"checkpoint {path} holds no trainer state ({name})")
    try:
        torch.load(path / "trainer_state.pt", map_location="cpu", weights_only=True)
        meta = json.loads((path / "trainer_state.json").read_text(encoding="utf-8"))
        step = int(meta["step"])
    except Exception as err:  # any failure to load is a corrupt state
        raise CheckpointError(
            f"trainer state in {path} does not load ({type(err).__name__}: {err})"
        ) from None
    if not isinstance(meta.get("args"), dict) or step < 0:
        raise CheckpointError(f"trainer state in {path} holds no step or arguments")
    return meta


@dataclass
class TrainerState:
    """A trainer state read back by :func:`read_trainer_state` (weights on the model's
    device)."""

    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    generator: torch.Tensor
    sampler: dict[str, Any]
    step: int


def read_trainer_state(latest: Path, model: WorldModel, args: Mapping[str, Any]) -> TrainerState:
    """Verify and read the trainer state in ``latest`` for ``model`` trained with ``args``."""
    manifest = verify_checkpoint(latest)  # weights, config, scaler and trainer state
    if manifest["model_name"] != model.model_name or manifest["config"] != model.config_dict():
        raise CheckpointError(
            f"cannot resume from {latest}: it holds a different model "
            f"({manifest['model_name']!r}) or config"
        )
    if manifest["schema"] != model.schema.to_dict():
        raise CheckpointError(f"cannot resume from {latest}: schema differs")
    meta = json.loads((latest / "trainer_state.json").read_text())
    saved_args = meta.get("args", {})
    for k in args:  # every hyperparameter the state holds (older states hold fewer)
        if k in saved_args and saved_args[k] != args[k]:
            raise CheckpointError(
                f"cannot resume from {latest}: {k}={args[k]!r} differs from the checkpoint's "
                f"{saved_args[k]!r} (train with the checkpoint's {k}, or start a new run)"
            )
    weights = load_file(str(latest / WEIGHTS_FILE), device=str(model.device))
    ts = torch.load(latest / "trainer_state.pt", map_location=model.device, weights_only=True)
    return TrainerState(
        weights, ts["optimizer"], ts["generator"].cpu(), meta["sampler"], int(meta["step"])
    )
