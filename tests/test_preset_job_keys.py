"""The data, fit and training job keys of the shipped presets stay what they were.

Another issue resumes stored runs by these keys, so a change to evaluation records (issue 49:
``gdd_unbiased``) or to a preset's evaluation settings must not retrain, recollect or refit.
``fixtures/preset_job_keys.json`` holds the keys computed on main before issue 49 (commit
9518244), per preset: ``data`` (env/split/size), ``fit`` (env) and ``train``
(env/model/seed). Only their values are compared, so a relabelled env still passes.
The ``survey`` entry was added at commit 2f9c37c, when the survey's first run started, so a
later tree resumes that run without retraining.

The paper preset gained the eighth ablation (``gdm:bernoulli-adj+all-pairs-mp``), so its
training keys may grow but every earlier one must remain.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from graphwm import jobs
from graphwm.checks import parse_checked
from graphwm.pipeline import preset_dict

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "preset_job_keys.json"
EXPECTED = json.loads(FIXTURE.read_text(encoding="utf-8"))
#: presets whose job list may only grow (new jobs added since the fixture was written)
GROWS = {"paper": {"train"}}


def job_keys(name: str) -> dict[str, set[str]]:
    """The data, fit and training job keys of shipped preset ``name``."""
    preset = parse_checked(preset_dict(name))
    keys: dict[str, set[str]] = {"data": set(), "fit": set(), "train": set()}
    for env in preset.envs:
        for refs in jobs.data_refs(preset, env).values():
            keys["data"].update(r.key for r in refs)
        keys["fit"].add(jobs.fit_job(preset, env).key)
    keys["train"].update(t.key for t in jobs.training_jobs(preset))
    return keys


def test_fixture_covers_the_presets():
    assert set(EXPECTED) == {"tiny", "smoke", "medium", "long", "paper", "survey"}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_job_keys_unchanged(name):
    current = job_keys(name)
    for kind in ("data", "fit", "train"):
        expected = set(EXPECTED[name][kind].values())
        missing = expected - current[kind]
        assert not missing, f"{name}: {len(missing)} {kind} job keys changed or vanished"
        if kind not in GROWS.get(name, set()):
            assert current[kind] == expected, f"{name}: new {kind} jobs"
