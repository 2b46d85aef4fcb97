"""Model checkpoints: safetensors weights + a JSON manifest.

A checkpoint is a directory with

* ``weights.safetensors`` - the model's ``state_dict`` (loaded without pickle);
* ``checkpoint.json`` - ``{"format": ..., "model_name", "config", "schema", "scaler",
  "weights_sha256", "files", "digest"}``;
* optionally more files sealed into it with :func:`seal_checkpoint` (the trainer's
  ``trainer_state.pt`` / ``trainer_state.json``), listed in ``files`` with their SHA-256.

``digest`` is the SHA-256 of the canonical JSON of everything else in the manifest, so it
covers the weights (through their SHA-256), the model name, config, schema, scaler and every
sealed file: :func:`verify_checkpoint` refuses a checkpoint where any of them was edited,
truncated or removed. Loading verifies, optionally checks the schema and the model name against
expected ones, and rebuilds the model through the registry before loading the weights strictly.
``WorldModel.save`` / ``WorldModel.load`` call these functions through the hook the package's
``__init__`` binds (:func:`gdm_models.world_model.bind_checkpoint_io`), because the base class
sits below the registry.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..registry import make_model
from ..scaling import FeatureScaler
from ..schema import Schema
from ..world_model import WorldModel

__all__ = [
    "CheckpointError",
    "Checkpointable",
    "checkpoint_digest",
    "kept_checkpoint_dir",
    "load_checkpoint",
    "read_manifest",
    "save_checkpoint",
    "seal_checkpoint",
    "verify_checkpoint",
]

FORMAT = "gdm-models-checkpoint/2"
WEIGHTS_FILE = "weights.safetensors"
MANIFEST_FILE = "checkpoint.json"


def kept_checkpoint_dir(folder: str | Path, step: int) -> Path:
    """Where the trainers' ``keep_every`` keeps the model checkpoint of ``step``:
    ``folder/step_<step, 6 digits>`` (``folder``: the one holding the ``final/`` checkpoint)."""
    return Path(folder) / f"step_{int(step):06d}"


class CheckpointError(ValueError):
    """Raised for missing, tampered or incompatible checkpoints."""


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _atomic_write_text(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=path.suffix)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


class Checkpointable(Protocol):
    """What :func:`save_checkpoint` needs of a model (every ``WorldModel`` has it)."""

    model_name: str
    schema: Schema
    scaler: FeatureScaler

    def config_dict(self) -> dict[str, Any]: ...

    def state_dict(self) -> Mapping[str, torch.Tensor]: ...


def _manifest_digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the manifest without its ``digest`` entry."""
    body = {k: v for k, v in manifest.items() if k != "digest"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    manifest["digest"] = _manifest_digest(manifest)
    # no sort_keys: the order of the schema's names is the order of the columns
    _atomic_write_text(path / MANIFEST_FILE, json.dumps(manifest, indent=2))


def save_checkpoint(model: Checkpointable, path: str | Path) -> Path:
    """Write ``model`` to the directory ``path`` (created if needed); return the path."""
    if not model.model_name:
        raise CheckpointError(
            "model has no model_name; build it with gdm_models.registry.make_model"
        )
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    _check_finite_weights(tensors, f"model {model.model_name!r}")  # before anything is written
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
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
        "files": {},
    }
    _write_manifest(path, manifest)
    return path


def seal_checkpoint(path: str | Path, files: tuple[str, ...]) -> str:
    """Add ``files`` (names inside the checkpoint directory) to the manifest's digest.

    Call after writing extra state next to a checkpoint (the trainer seals its
    ``trainer_state.*``); returns the new digest.
    """
    path = Path(path)
    manifest = read_manifest(path)
    for name in files:
        if Path(name).name != name or name in (WEIGHTS_FILE, MANIFEST_FILE):
            raise CheckpointError(f"cannot seal {name!r}: give a plain extra file name")
        if not (path / name).is_file():
            raise CheckpointError(f"cannot seal {path / name}: no such file")
        manifest["files"][name] = _sha256(path / name)
    _write_manifest(path, manifest)
    return manifest["digest"]


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Check every file of a checkpoint against its manifest; return the manifest.

    Raises:
        CheckpointError: naming the file that is missing, unreadable or modified (weights,
            a sealed file, or the manifest itself: model name, config, schema, scaler).
    """
    path = Path(path)
    manifest = read_manifest(path)
    if _manifest_digest(manifest) != manifest["digest"]:
        raise CheckpointError(
            f"checkpoint manifest {path / MANIFEST_FILE} does not match its digest: its model "
            "name, config, schema, scaler or file list was modified; refusing to load"
        )
    expected = {WEIGHTS_FILE: manifest["weights_sha256"], **manifest["files"]}
    for name, digest in expected.items():
        file = path / name
        if not file.is_file():
            raise CheckpointError(f"checkpoint file {file} is missing")
        found = _sha256(file)
        if found != digest:
            raise CheckpointError(
                f"checkpoint file {file} does not match the manifest's SHA-256 "
                f"(expected {digest[:12]}..., found {found[:12]}...): "
                "the file was modified or corrupted; refusing to load"
            )
    return manifest


def checkpoint_digest(path: str | Path) -> str:
    """The verified digest of a checkpoint (covers weights, config, scaler, sealed files)."""
    return verify_checkpoint(path)["digest"]


def read_manifest(path: str | Path) -> dict[str, Any]:
    """Read and sanity-check the JSON manifest of a checkpoint directory."""
    path = Path(path)
    mf = path / MANIFEST_FILE
    if not mf.is_file():
        raise CheckpointError(f"no checkpoint manifest at {mf}")
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise CheckpointError(f"checkpoint manifest {mf} is not UTF-8 text: {e}") from None
    except json.JSONDecodeError as e:
        raise CheckpointError(f"checkpoint manifest {mf} is not valid JSON: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else manifest
        raise CheckpointError(
            f"unknown checkpoint format {found!r} in {mf} (this version reads {FORMAT!r})"
        )
    for key in ("model_name", "config", "schema", "scaler", "weights_sha256", "files", "digest"):
        if key not in manifest:
            raise CheckpointError(f"checkpoint manifest {mf} is missing {key!r}")
    # the types every reader relies on, checked once here (a forged field is named, not a
    # TypeError deep inside)
    for key, kind, what in _MANIFEST_TYPES:
        if not isinstance(manifest[key], kind):
            found = type(manifest[key]).__name__
            raise CheckpointError(f"checkpoint manifest {mf}: {key!r} must be {what}, got {found}")
    for name, digest in manifest["files"].items():
        if Path(name).name != name or name in (WEIGHTS_FILE, MANIFEST_FILE, ".", ".."):
            raise CheckpointError(
                f"checkpoint manifest {mf}: 'files' names {name!r}, not a plain extra file name"
            )
        if not isinstance(digest, str):
            raise CheckpointError(
                f"checkpoint manifest {mf}: 'files'[{name!r}] must be a SHA-256 string, "
                f"got {type(digest).__name__}"
            )
    return manifest


#: (key, type, description) of the manifest's fields
_MANIFEST_TYPES = (
    ("model_name", str, "a string"),
    ("config", dict, "a JSON object"),
    ("schema", dict, "a JSON object"),
    ("scaler", dict, "a JSON object"),
    ("weights_sha256", str, "a SHA-256 string"),
    ("files", dict, "a JSON object of file name -> SHA-256"),
    ("digest", str, "a SHA-256 string"),
)


def load_checkpoint(
    path: str | Path,
    *,
    schema: Mapping[str, Any] | Schema | None = None,
    model_name: str | None = None,
    device: torch.device | str = "cpu",
) -> WorldModel:
    """Load a model saved by :func:`save_checkpoint`.

    Args:
        path: checkpoint directory.
        schema: if given, the checkpoint's schema must have the same features, else
            :class:`CheckpointError` is raised.
        model_name: if given, the checkpoint must hold this model (e.g. ``"gdm:no-h-plus"``).
        device: device to place the model on.
    """
    if torch.device(device).type == "meta":
        raise CheckpointError("device 'meta' holds no data: a loaded model would have no weights")
    path = Path(path)
    manifest = verify_checkpoint(path)
    wf = path / WEIGHTS_FILE
    if model_name is not None and manifest["model_name"] != model_name:
        raise CheckpointError(
            f"checkpoint {path} holds model {manifest['model_name']!r}, expected {model_name!r}"
        )
    mf = path / MANIFEST_FILE
    ck_schema = _from_manifest(mf, "schema", lambda: Schema.from_dict(manifest["schema"]))
    if schema is not None:
        want = Schema.from_dict(schema)
        if not ck_schema.same_features(want):
            raise CheckpointError(
                "checkpoint schema does not match the expected schema:\n"
                f"  checkpoint: {ck_schema.to_dict()}\n  expected:   {want.to_dict()}"
            )
    scaler = _from_manifest(mf, "scaler", lambda: FeatureScaler.from_dict(manifest["scaler"]))
    config = manifest["config"]
    if not isinstance(config, Mapping):
        raise CheckpointError(f"checkpoint manifest {mf}: 'config' must be a JSON object")

    # make_model sizes the model on the meta device before allocating (a config edited to
    # hidden_dim 2e5, digest recomputed, is refused instead of allocating hundreds of GB)
    model = _from_manifest(
        mf, "config", lambda: make_model(manifest["model_name"], ck_schema, scaler, **config)
    )
    try:
        state = load_file(str(wf), device="cpu")
    except SafetensorError as err:  # e.g. a torch.save pickle under the safetensors name
        raise CheckpointError(f"checkpoint weights {wf} are not a safetensors file: {err}") from err
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
    _check_finite_weights(state, f"checkpoint weights {wf}")
    model.load_state_dict(state, strict=True)
    return model.to(device)


def _check_finite_weights(tensors: Mapping[str, torch.Tensor], what: str) -> None:
    """Refuse NaN or inf in floating weights: they are never data (a diverged model)."""
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{what}: weight {name!r} holds NaN or inf (a diverged model?)")


def _from_manifest(mf: Path, field: str, make: Any) -> Any:
    """``make()``, with any error of a manifest field's content turned into a
    :class:`CheckpointError` naming the file and the field."""
    try:
        return make()
    except CheckpointError:
        raise
    except (TypeError, ValueError, KeyError, AttributeError, OverflowError, RuntimeError) as e:
        raise CheckpointError(
            f"checkpoint manifest {mf}: field {field!r} is not valid: {type(e).__name__}: {e}"
        ) from None
