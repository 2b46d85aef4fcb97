"""Issue 38, classes 2 and 4: a checkpoint never passes NaN off as a model, never allocates
what its config would need before checking it fits, and every load failure is a
CheckpointError naming the file and the field (manifests below carry a recomputed digest, so
only the content is wrong)."""

from __future__ import annotations

import pytest
import torch
from gdm_models.training import checkpoint as ck
from gdm_models.training.checkpoint import CheckpointError, load_checkpoint


def _resigned(path, edit) -> None:
    """Edit the manifest and recompute its digest (a forged but self-consistent manifest)."""
    manifest = ck.read_manifest(path)
    edit(manifest)
    ck._write_manifest(path, manifest)


def test_nan_weights_are_refused_on_save(make_tiny, tmp_path):
    model = make_tiny()
    with torch.no_grad():
        next(model.parameters())[0] = float("nan")
    with pytest.raises(CheckpointError, match=r"weight '.*' holds NaN or inf"):
        model.save(tmp_path / "ck")
    assert not (tmp_path / "ck").exists()  # nothing written


def test_nan_weights_are_refused_on_load(make_tiny, tmp_path):
    from safetensors.torch import load_file, save_file

    path = make_tiny().save(tmp_path / "ck")
    weights = path / ck.WEIGHTS_FILE
    state = load_file(str(weights))
    first = next(k for k, v in state.items() if v.is_floating_point())
    state[first][...] = float("inf")
    save_file(state, str(weights))
    _resigned(path, lambda m: m.update(weights_sha256=ck._sha256(weights)))
    with pytest.raises(CheckpointError, match=rf"weight '{first}' holds NaN or inf"):
        load_checkpoint(path)


def test_the_meta_device_is_refused(make_tiny, tmp_path):
    path = make_tiny().save(tmp_path / "ck")
    with pytest.raises(CheckpointError, match="meta"):
        load_checkpoint(path, device="meta")


def test_a_config_too_large_for_this_machine_is_refused_before_allocating(make_tiny, tmp_path):
    path = make_tiny().save(tmp_path / "ck")
    _resigned(path, lambda m: m["config"].update(hidden_dim=200_000, mlp_hidden=200_000))
    with pytest.raises(CheckpointError, match=r"checkpoint\.json: field 'config'.*GiB"):
        load_checkpoint(path)


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda m: m["config"].update(hidden_dim="wide"), "config"),
        (lambda m: m["config"].update(no_such_field=1), "config"),
        (lambda m: m.update(config=[1, 2]), "config"),
        (lambda m: m.update(schema={"node_continuous": 5}), "schema"),
        (lambda m: m.update(scaler={"kind": "nope"}), "scaler"),
    ],
    ids=["config-type", "config-key", "config-not-object", "schema", "scaler"],
)
def test_a_forged_manifest_field_is_a_checkpoint_error_naming_it(make_tiny, tmp_path, edit, field):
    path = make_tiny().save(tmp_path / "ck")
    _resigned(path, edit)
    with pytest.raises(CheckpointError, match=rf"checkpoint\.json.*'?{field}'?"):
        load_checkpoint(path)


def test_a_manifest_that_is_not_utf8_is_a_checkpoint_error(make_tiny, tmp_path):
    path = make_tiny().save(tmp_path / "ck")
    mf = path / ck.MANIFEST_FILE
    mf.write_bytes(b'{"format": "\xff\xfe"}')
    with pytest.raises(CheckpointError, match="not UTF-8"):
        load_checkpoint(path)
