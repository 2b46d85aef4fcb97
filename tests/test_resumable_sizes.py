"""Issue 30: a resumable ``latest/`` state whose weights header claims bytes the file lacks
(resealed, so its digests agree) is quarantined before resuming, for a single job and for an
ensemble's member, and training restarts instead of failing inside the loader."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from gdm_models import EpisodeDataset, FeatureScaler, TrainConfig, make_model, train, train_ensemble
from gdm_models.synthetic import SYNTHETIC_SCHEMA, TINY_GDM_CONFIG, random_episode
from gdm_models.training.checkpoint import MANIFEST_FILE, CheckpointError, _manifest_digest, _sha256

from graphwm.stages.train import verify_resumable, verify_resumable_ensemble
from graphwm.store.checkpoints import recover_latest


def _claim_impossible_bytes(ckpt: Path) -> None:
    """Rewrite the weights header's length to 2**40 and reseal the manifest."""
    weights = ckpt / "weights.safetensors"
    data = bytearray(weights.read_bytes())
    data[:8] = struct.pack("<Q", 2**40)
    weights.write_bytes(bytes(data))
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    manifest["weights_sha256"] = _sha256(weights)
    manifest["digest"] = _manifest_digest(manifest)
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    eps = [random_episode(6, 6, rng) for _ in range(3)]
    return EpisodeDataset(eps, SYNTHETIC_SCHEMA, seq_len=3), FeatureScaler.fit(
        eps, SYNTHETIC_SCHEMA
    )


KW = TrainConfig(steps=2, batch_size=2, seq_len=3, checkpoint_every=1, device="cpu")


def test_a_single_jobs_latest_with_an_impossible_header_is_quarantined(data, tmp_path):
    dataset, scaler = data
    torch.manual_seed(0)
    model = make_model("gdm", SYNTHETIC_SCHEMA, scaler, **TINY_GDM_CONFIG)
    train(model, dataset, KW, checkpoint_dir=tmp_path / "ckpt", progress=False)
    latest = tmp_path / "ckpt" / "latest"
    verify_resumable(latest)  # sound
    _claim_impossible_bytes(latest)
    with pytest.raises(CheckpointError, match="header claims"):
        verify_resumable(latest)
    recover_latest(tmp_path, tmp_path / "ckpt", verify_resumable)
    assert not latest.exists() and any((tmp_path / "quarantine").rglob("weights.safetensors"))


def test_an_ensemble_members_impossible_header_is_refused(data, tmp_path):
    dataset, scaler = data
    out = tmp_path / "ens"
    train_ensemble(
        "gdm",
        [0, 1],
        dataset,
        KW,
        scaler=scaler,
        model_config=TINY_GDM_CONFIG,
        out_dir=out,
        progress=False,
    )
    verify_resumable_ensemble(out / "latest")
    _claim_impossible_bytes(out / "latest" / "seed1")
    with pytest.raises(CheckpointError, match="seed1.*header claims"):
        verify_resumable_ensemble(out / "latest")
