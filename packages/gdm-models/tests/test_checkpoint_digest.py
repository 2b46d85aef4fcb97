"""The checkpoint digest covers weights, model name, config, scaler and sealed trainer state."""

from __future__ import annotations

import json

import pytest
from gdm_models import EpisodeDataset, TrainConfig, train
from gdm_models.synthetic import SYNTHETIC_SCHEMA
from gdm_models.training.checkpoint import (
    CheckpointError,
    checkpoint_digest,
    load_checkpoint,
    seal_checkpoint,
    verify_checkpoint,
)


def _edit_manifest(path, edit):
    mf = path / "checkpoint.json"
    manifest = json.loads(mf.read_text())
    edit(manifest)
    mf.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["scaler"].update(reward_std=123.0),
        lambda m: m["config"].update(beta_rep=0.5),
        lambda m: m.update(model_name="gdm:no-h-plus"),
        lambda m: m.update(weights_sha256="0" * 64),
    ],
    ids=["scaler", "config", "model_name", "weights_hash"],
)
def test_manifest_edits_break_the_digest(make_tiny, tmp_path, edit):
    path = make_tiny().save(tmp_path / "ck")
    verify_checkpoint(path)
    _edit_manifest(path, edit)
    with pytest.raises(CheckpointError, match="digest"):
        load_checkpoint(path)


def test_sealed_files_are_covered(make_tiny, tmp_path):
    path = make_tiny().save(tmp_path / "ck")
    before = checkpoint_digest(path)
    (path / "state.json").write_text('{"step": 4}')
    after = seal_checkpoint(path, ("state.json",))
    assert after != before and checkpoint_digest(path) == after
    (path / "state.json").write_text('{"step": 2}')
    with pytest.raises(CheckpointError, match=r"state\.json does not match"):
        verify_checkpoint(path)
    (path / "state.json").unlink()
    with pytest.raises(CheckpointError, match=r"state\.json is missing"):
        verify_checkpoint(path)


def test_trainer_state_is_sealed_into_latest(make_tiny, episodes, tmp_path):
    model = make_tiny()
    dataset = EpisodeDataset(episodes, SYNTHETIC_SCHEMA, seq_len=5)

    def run(steps):
        cfg = TrainConfig(steps=steps, batch_size=2, seq_len=5)
        train(model, dataset, cfg, checkpoint_dir=tmp_path, progress=False)

    run(2)
    latest = tmp_path / "latest"
    manifest = verify_checkpoint(latest)
    assert set(manifest["files"]) == {"trainer_state.pt", "trainer_state.json"}
    state = json.loads((latest / "trainer_state.json").read_text())
    state["step"] = 1
    (latest / "trainer_state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match="trainer_state.json"):
        run(3)


def test_model_name_is_checked(make_tiny, tmp_path):
    path = make_tiny("gdm").save(tmp_path / "ck")
    assert load_checkpoint(path, model_name="gdm").model_name == "gdm"
    with pytest.raises(CheckpointError, match="holds model 'gdm', expected 'vanilla-gwm'"):
        load_checkpoint(path, model_name="vanilla-gwm")


def test_weights_that_are_not_safetensors_raise_checkpoint_error(make_tiny, tmp_path):
    """A pickle under the safetensors name (digest resealed) names the file, not the parser."""
    import torch
    from gdm_models.training import checkpoint as ck

    model = make_tiny()
    path = model.save(tmp_path / "ck")
    weights = path / ck.WEIGHTS_FILE
    torch.save(model.state_dict(), weights)
    manifest = ck.read_manifest(path)
    manifest["weights_sha256"] = ck._sha256(weights)
    ck._write_manifest(path, manifest)
    verify_checkpoint(path)  # the files match the manifest: only the format is wrong
    with pytest.raises(CheckpointError, match=r"weights\.safetensors are not a safetensors"):
        load_checkpoint(path)
