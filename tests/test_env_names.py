"""Env names in the store and the report (issue 48 item 4): a preset's ``env_labels`` label
the tables and figures; no file or folder the store writes has a character Windows refuses
(a ``module:id`` env gets ``module__id``), while the shipped presets' folders stay as they
were; a run written under the old folder names is refused with the rename that makes it load.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import graphwm
from graphwm.config import PresetError
from graphwm.pipeline import (
    RunPaths,
    data_refs,
    fit_job,
    load_preset,
    preset_dict,
    reproduce,
    stage_collect,
    training_jobs,
)
from graphwm.store.files import CorruptFileError
from graphwm.store.paths import REFUSED_CHARS, safe_name

ENV = "example_envs:example/EdgeFlip-v0"  # the module:id form (tests/example_envs)


def test_safe_name_is_the_identity_without_refused_characters():
    for name in ("SAR", "RGC", "graphenv/SAR-v0", "mypkg/MyEnv-v0", "my.pkg_env-1"):
        assert safe_name(name) == name
    assert safe_name("mymodule:mine/Env-v0") == "mymodule__mine/Env-v0"
    assert safe_name("gdm:no-h-plus") == "gdm__no-h-plus"  # the model folders' old rule
    assert not set(safe_name('a*b?c"d<e>f|g:h')) & set(REFUSED_CHARS)


@pytest.mark.parametrize("name", ["tiny", "smoke", "medium", "long", "paper"])
def test_the_shipped_presets_write_the_folders_they_wrote_before(name):
    """The folders are the env and model names as they are (what every earlier run holds)."""
    preset = preset_dict(name, {"device": "cpu"})  # the folders do not depend on the device
    for env in preset["envs"]:
        assert all(r.relpath.startswith(f"data/{env}/") for refs in data_refs(preset, env).values()
                   for r in refs)  # fmt: skip
        assert fit_job(preset, env).reldir.startswith(f"fit/{env}/")
    for job in training_jobs(preset):
        assert job.reldir.startswith(f"train/{job.env}/{job.model.replace(':', '__')}/")


def test_labels_must_name_the_presets_envs_and_differ():
    with pytest.raises(PresetError, match=r"'env_labels.XX': 'XX' is not one of the preset's"):
        load_preset("tiny", {"env_labels": {"XX": "x"}})
    with pytest.raises(PresetError, match="two envs would share the label 'RGC'"):
        load_preset("tiny", {"env_labels": {"SAR": "RGC"}})
    with pytest.raises(PresetError, match="without leading or trailing spaces, got ' Rescue'"):
        load_preset("tiny", {"env_labels": {"SAR": " Rescue"}})


@pytest.fixture(scope="module")
def own_env_run(tmp_path_factory):
    """The tiny preset on the example env named as ``module:id``, labelled ``EdgeFlip``."""
    preset = preset_dict(
        "tiny",
        {"envs": [ENV], "models": ["vanilla-gwm"], "ablations": [],
         "env_labels": {ENV: "EdgeFlip"}},
    )  # fmt: skip
    preset.pop("downstream")
    preset.pop("search", None)
    root = tmp_path_factory.mktemp("names") / "run"
    reproduce(preset, root, progress=False)
    return preset, root


def test_no_name_in_the_store_has_a_character_windows_refuses(own_env_run):
    _, root = own_env_run
    names = [p.relative_to(root).as_posix() for p in root.rglob("*")]
    assert any(n.startswith("train/example_envs__example/EdgeFlip-v0/") for n in names)
    assert [n for n in names if set(n) & set(REFUSED_CHARS)] == []


def test_tables_and_figures_use_the_label(own_env_run):
    _, root = own_env_run
    report = root / "report"
    single = (report / "gdd_single_step.md").read_text()
    assert "EdgeFlip" in single and "example_envs" not in single
    assert ENV not in (report / "report.md").read_text()
    # the run still names the env itself: the label is the report's only
    assert graphwm.open_run(root).models[0].env == ENV


def test_a_run_under_the_old_folder_names_is_refused_with_the_rename(own_env_run, tmp_path):
    preset, root = own_env_run
    old = tmp_path / "old"
    shutil.copytree(root, old)
    for top in ("data", "fit", "train"):  # as the store wrote them before: the name as it is
        (old / top / "example_envs:example").parent.mkdir(exist_ok=True)
        (old / top / "example_envs__example").rename(old / top / "example_envs:example")
    with pytest.raises(CorruptFileError, match=r"rename data/example_envs:example/EdgeFlip-v0 "
                       r"to data/example_envs__example/EdgeFlip-v0"):  # fmt: skip
        stage_collect(preset, RunPaths(old), progress=False)
    assert not (old / "data" / "example_envs__example").exists()  # refused before any work
    for top in ("data", "fit", "train"):  # the rename the message names: the run loads again
        (old / top / "example_envs:example").rename(old / top / "example_envs__example")
    stage_collect(preset, RunPaths(old), progress=False)
    assert Path(old / "data" / "example_envs__example" / "EdgeFlip-v0").is_dir()
