"""The survey preset (issue 49): every axis the paper reports, sized for this 2-core CPU; its
comment's sizing agrees with what it sets and with the 2.5-hour budget."""

from __future__ import annotations

import re
from importlib import resources

import pytest

from graphwm import jobs
from graphwm.checks import parse_checked
from graphwm.config import PresetError
from graphwm.pipeline import preset_dict
from graphwm.stages.ensemble import EnsembleJob

BUDGET_MIN = 150
TEXT = resources.files("graphwm.presets").joinpath("survey.toml").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def survey():
    return parse_checked(preset_dict("survey"))


def test_the_survey_covers_every_axis_of_the_paper(survey):
    paper = parse_checked(preset_dict("paper"))
    assert survey.envs == ("RGC", "OD", "SAR", "CF") and set(survey.models) == set(paper.models)
    assert survey.seeds == (0, 1, 2) and survey.train.ensemble == 3
    assert survey.collect.train_sizes == paper.collect.train_sizes
    assert survey.collect.train_episodes == paper.collect.train_episodes
    assert survey.collect.test_sizes == (20, 50, 100, 200) and survey.test_sizes("RGC") == (
        20, 50, 100, 200,
    )  # fmt: skip
    assert survey.train.model_overrides == {}  # the paper's hyperparameters
    assert survey.multi_step is not None
    assert (survey.multi_step.size, survey.multi_step.horizon) == (50, 5)
    # the paper's eight ablations, on OD only, evaluated at N = 20 and 50 only
    assert survey.ablations == paper.ablations and len(survey.ablations) == 8
    assert survey.ablation_envs == ("OD",) and survey.ablation_sizes == (20, 50)
    evals = jobs.evaluation_jobs(survey)
    single = [j for j in evals if j.kind == "single_step"]
    ablated = {(j.env, j.size) for j in single if j.model not in survey.models}
    assert ablated == {("OD", 20), ("OD", 50)}
    assert len([j for j in single if j.model not in survey.models]) == 8 * 3 * 2
    assert len([j for j in single if j.model in survey.models]) == 4 * 4 * 3 * 4
    assert len([j for j in evals if j.kind == "multi_step"]) == 4 * 4 * 3  # no ablations


def test_the_survey_fits_its_sizing_and_the_budget(survey):
    units = jobs.training_units(survey)
    assert len(units) == 4 * 4 + 8
    assert all(isinstance(u, EnsembleJob) and u.seeds == survey.seeds for u in units)
    sizing = dict(re.findall(r"^#\s+sizing ([\w-]+) = (\d+)$", TEXT, flags=re.MULTILINE))
    per_unit = [
        (env, model, int(ms))
        for env, model, ms in re.findall(r"^#\s+sizing (\w+) ([\w:+-]+) = (\d+)$", TEXT, re.M)
    ]
    # one ensemble step per training unit, in the order the pool takes them
    assert [(e, m) for e, m, _ in per_unit] == [(u.env, u.model) for u in units]
    assert int(sizing["steps"]) == survey.train.steps
    free = [0, 0]  # 2 one-thread workers (the 2-core CPU), each taking the next unit when free
    for _, _, ms in per_unit:
        free[free.index(min(free))] += ms
    sec_per_step = max(free) / 1000
    assert f"after {sec_per_step:.1f} s per step" in TEXT
    train_min = survey.train.steps * sec_per_step / 60
    assert train_min <= int(sizing["training"])
    assert f"{survey.train.steps} x {sec_per_step:.1f} s = {round(train_min)} min" in TEXT
    spent = int(sizing["training"]) + int(sizing["overhead"]) + int(sizing["evaluation"])
    assert spent <= BUDGET_MIN
    assert survey.train.eval_every == 0  # no GDD curve in the budget


def test_ablation_sizes_must_be_test_sizes():
    raw = preset_dict("survey")
    what = r"'ablation_sizes\[1\]': must be one of 'collect.test_sizes'.*got 30"
    with pytest.raises(PresetError, match=what):
        parse_checked({**raw, "ablation_sizes": [20, 30]})
    # unset: every test size, as before the key existed
    every = parse_checked({k: v for k, v in raw.items() if k != "ablation_sizes"})
    assert every.eval_sizes("OD", "gdm:no-h-plus") == (20, 50, 100, 200)


def test_the_permutation_work_counts_the_ablations_at_their_sizes_only(survey):
    from graphwm.work_bounds import reference_transitions

    single = [j for j in jobs.evaluation_jobs(survey) if j.kind == "single_step"]
    per_job = survey.evaluate.reference_transitions * survey.collect.test_episodes
    assert reference_transitions(survey) == len(single) * per_job
