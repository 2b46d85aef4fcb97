"""Hyperparameters of an env the paper did not tune (issue 35): the modal value of the paper's
four tuned sets per hyperparameter, with the env's schema; any env id may be registered."""

from __future__ import annotations

import pytest
from gdm_models import (
    default_hyperparameters,
    get_hyperparameters,
    make_model,
    register_hyperparameters,
)
from gdm_models.hyperparameters import ENV_IDS, HYPERPARAMETERS

SCHEMA = {"node_continuous": ["x"], "graph_continuous": ["k"], "node_categorical": {"c": 3}}


@pytest.mark.parametrize("model", sorted(HYPERPARAMETERS))
def test_each_default_is_the_value_most_paper_sets_share(model):
    defaults = default_hyperparameters(model, SCHEMA)
    for part in ("model", "train"):
        for key, value in defaults[part].items():
            values = [HYPERPARAMETERS[model][e][part][key] for e in ENV_IDS]
            top = max(values.count(v) for v in values)
            assert values.count(value) == top  # modal
            assert value == min(v for v in values if values.count(v) == top)  # ties: smaller
    make_model(model, SCHEMA, None, **defaults["model"])  # the defaults build a model


def test_an_untuned_env_needs_its_schema_and_any_env_id_registers():
    with pytest.raises(KeyError, match="pass the env's schema"):
        get_hyperparameters("gdm", "mypkg/MyEnv-v0")
    assert get_hyperparameters(
        "gdm:no-h-plus", "mypkg/MyEnv-v0", SCHEMA
    ) == default_hyperparameters("gdm", SCHEMA)
    with pytest.raises(ValueError, match="schema must be a schema dict"):
        get_hyperparameters("gdm", "mypkg/MyEnv-v0", {"nodes": 3})
    register_hyperparameters("g-rssm", "mypkg/MyEnv-v0", {"model": {"mp_layers": 2}})
    try:
        assert get_hyperparameters("g-rssm", "mypkg/MyEnv-v0", SCHEMA)["model"] == {"mp_layers": 2}
    finally:
        del HYPERPARAMETERS["g-rssm"]["mypkg/MyEnv-v0"]
    with pytest.raises(ValueError, match="non-empty string"):
        register_hyperparameters("gdm", "", {})


def test_the_old_preset_names_warn_and_give_the_same_values():
    """``get_preset``, ``register_preset`` and ``default_preset`` (before the per-model
    "presets" became hyperparameters) still work, with a DeprecationWarning naming the new."""
    import gdm_models

    with pytest.warns(DeprecationWarning, match="get_preset is renamed .*get_hyperparameters"):
        assert gdm_models.get_preset("gdm", "OD") == get_hyperparameters("gdm", "OD")
    with pytest.warns(DeprecationWarning, match="renamed gdm_models.default_hyperparameters"):
        old = gdm_models.default_preset("ea-gwm", SCHEMA)
    assert old == default_hyperparameters("ea-gwm", SCHEMA)
    with pytest.warns(DeprecationWarning, match="renamed gdm_models.register_hyperparameters"):
        gdm_models.register_preset("gdm", "mypkg/Old-v0", {"model": {"embed_dim": 8}})
    try:
        assert get_hyperparameters("gdm", "mypkg/Old-v0")["model"] == {"embed_dim": 8}
    finally:
        del HYPERPARAMETERS["gdm"]["mypkg/Old-v0"]
