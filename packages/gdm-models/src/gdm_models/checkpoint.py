"""Model checkpoints: safetensors weights + a JSON manifest.

A checkpoint is a directory with two files:

* ``weights.safetensors`` - the model's ``state_dict`` (loaded without pickle);
* ``checkpoint.json`` - ``{"format": ..., "model_name", "config", "schema", "scaler",
  "weights_sha256"}``.

Loading verifies the SHA-256 of the weights file against the manifest (a tampered or
truncated weights file is refused), optionally checks the schema against an expected one, and
rebuilds the model through the registry before loading the weights strictly.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from .scaling import FeatureScaler
from .schema import Schema

if TYPE_CHECKING:
    from .api import WorldModel

__all__ = ["CheckpointError", "save_checkpoint", "load_checkpoint", "read_manifest"]

FORMAT = "gdm-models-checkpoint/1"
WEIGHTS_FILE = "weights.safetensors"
MANIFEST_FILE = "checkpoint.json"


class CheckpointError(ValueError):
    """Raised for missing, tampered or incompatible checkpoints."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=path.suffix)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def save_checkpoint(model: WorldModel, path: str | Path) -> Path:
    """Write ``model`` to the directory ``path`` (created if needed); return the path."""
    if not model.model_name:
        raise CheckpointError(
            "model has no model_name; build it with gdm_models.registry.make_model"
        )
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    fd, tmp = tempfile.mkstemp(dir=path, prefix=".tmp_", suffix=".safetensors")
    os.close(fd)
    save_file(tensors, tmp)
    os.replace(tmp, path / WEIGHTS_FILE)
    manifest = {
        "format": FORMAT,
        "model_name": model.model_name,
        "config": model.config_dict(),
        "schema": model.schema.to_dict(),
        "scaler": model.scaler.to_dict(),
        "weights_sha256": _sha256(path / WEIGHTS_FILE),
    }
    # no sort_keys: the order of the schema's names is the order of the columns
    _atomic_write_text(path / MANIFEST_FILE, json.dumps(manifest, indent=2))
    return path


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and sanity-check the JSON manifest of a checkpoint directory."""
    path = Path(path)
    mf = path / MANIFEST_FILE
    if not mf.is_file():
        raise CheckpointError(f"no checkpoint manifest at {mf}")
    try:
        manifest = json.loads(mf.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"checkpoint manifest {mf} is not valid JSON: {e}") from None
    if manifest.get("format") != FORMAT:
        raise CheckpointError(f"unknown checkpoint format {manifest.get('format')!r} in {mf}")
    for key in ("model_name", "config", "schema", "scaler", "weights_sha256"):
        if key not in manifest:
            raise CheckpointError(f"checkpoint manifest {mf} is missing {key!r}")
    return manifest


def load_checkpoint(
    path: str | Path,
    *,
    schema: Mapping[str, Any] | Schema | None = None,
    device: torch.device | str = "cpu",
) -> WorldModel:
    """Load a model saved by :func:`save_checkpoint`.

    Args:
        path: checkpoint directory.
        schema: if given, the checkpoint's schema must have the same features, else
            :class:`CheckpointError` is raised.
        device: device to place the model on.
    """
    from .registry import make_model

    path = Path(path)
    manifest = read_manifest(path)
    wf = path / WEIGHTS_FILE
    if not wf.is_file():
        raise CheckpointError(f"checkpoint weights {wf} are missing")
    digest = _sha256(wf)
    if digest != manifest["weights_sha256"]:
        raise CheckpointError(
            f"checkpoint weights {wf} do not match the manifest's SHA-256 "
            f"(expected {manifest['weights_sha256'][:12]}..., found {digest[:12]}...): "
            "the file was modified or corrupted; refusing to load"
        )
    ck_schema = Schema.from_dict(manifest["schema"])
    if schema is not None:
        want = Schema.from_dict(schema)
        if not ck_schema.same_features(want):
            raise CheckpointError(
                "checkpoint schema does not match the expected schema:\n"
                f"  checkpoint: {ck_schema.to_dict()}\n  expected:   {want.to_dict()}"
            )
    scaler = FeatureScaler.from_dict(manifest["scaler"])
    model = make_model(manifest["model_name"], ck_schema, scaler, **manifest["config"])
    state = load_file(str(wf), device="cpu")
    expected = model.state_dict()
    missing = sorted(set(expected) - set(state))
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint weights do not fit the model {manifest['model_name']!r}: "
            f"missing {missing[:5]}, unexpected {unexpected[:5]}"
        )
    for k, v in state.items():
        if v.shape != expected[k].shape:
            raise CheckpointError(
                f"weight {k!r} has shape {tuple(v.shape)} in the checkpoint, model expects "
                f"{tuple(expected[k].shape)}"
            )
    model.load_state_dict(state, strict=True)
    return model.to(device)
