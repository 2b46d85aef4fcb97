"""Presets of an env the paper did not tune (issue 35): the modal value of the paper's four
tuned presets per hyperparameter, with the env's schema; any env id may be registered."""

from __future__ import annotations

import pytest
from gdm_models import default_preset, get_preset, make_model, register_preset
from gdm_models.hyperparameters import ENV_IDS, PRESETS

SCHEMA = {"node_continuous": ["x"], "graph_continuous": ["k"], "node_categorical": {"c": 3}}


@pytest.mark.parametrize("model", sorted(PRESETS))
def test_each_default_is_the_value_most_paper_presets_share(model):
    preset = default_preset(model, SCHEMA)
    for part in ("model", "train"):
        for key, value in preset[part].items():
            values = [PRESETS[model][e][part][key] for e in ENV_IDS]
            top = max(values.count(v) for v in values)
            assert values.count(value) == top  # modal
            assert value == min(v for v in values if values.count(v) == top)  # ties: smaller
    make_model(model, SCHEMA, None, **preset["model"])  # the defaults build a model


def test_an_untuned_env_needs_its_schema_and_any_env_id_registers():
    with pytest.raises(KeyError, match="pass the env's schema"):
        get_preset("gdm", "mypkg/MyEnv-v0")
    assert get_preset("gdm:no-h-plus", "mypkg/MyEnv-v0", SCHEMA) == default_preset("gdm", SCHEMA)
    with pytest.raises(ValueError, match="schema must be a schema dict"):
        get_preset("gdm", "mypkg/MyEnv-v0", {"nodes": 3})
    register_preset("g-rssm", "mypkg/MyEnv-v0", {"model": {"mp_layers": 2}})
    try:
        assert get_preset("g-rssm", "mypkg/MyEnv-v0", SCHEMA)["model"] == {"mp_layers": 2}
    finally:
        del PRESETS["g-rssm"]["mypkg/MyEnv-v0"]
    with pytest.raises(ValueError, match="non-empty string"):
        register_preset("gdm", "", {})
