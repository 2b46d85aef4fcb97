"""Hyperparameters of every model per environment (paper, appendix "Final
Hyperparameters"), as plain data: this module imports nothing from the package, so any layer
may read it.

A model's hyperparameters on an env are ``{"model": {config overrides}, "train": {trainer
kwargs}}`` (not to be confused with graphwm's experiment presets, the TOML files). The paper's
environment ids: ``"RGC"``, ``"OD"``, ``"SAR"``, ``"CF"``. Unsearched parameters marked * in the
paper's table are included as well. Models or envs added outside the package may add theirs
with :func:`register_hyperparameters` (any env id).

An env the paper never tuned (one of your own) gets :func:`default_hyperparameters`: per
hyperparameter, the value most of the paper's four tuned sets of that model share (ties: the
smaller value, the cheaper model); pass the env's schema to :func:`get_hyperparameters` to fall
back on it. The
defaults do not depend on the schema's contents (the paper gives no rule that would); the
schema is checked to be one, so a caller cannot fall back by accident. Override any value as
usual (``make_model(..., **overrides)``; graphwm: ``train.model_overrides``).

Usage::

    p = get_hyperparameters("gdm", "OD")
    model = make_model("gdm", schema, scaler, **p["model"])
    train(model, dataset, lr=p["train"]["lr"], ...)
    get_hyperparameters("gdm", "mypkg/MyEnv-v0", schema=schema)  # not tuned: the defaults
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections import Counter
from collections.abc import Mapping
from typing import Any

__all__ = [
    "ENV_IDS",
    "HYPERPARAMETERS",
    "default_hyperparameters",
    "get_hyperparameters",
    "register_hyperparameters",
]

ENV_IDS: tuple[str, ...] = ("RGC", "OD", "SAR", "CF")


def _train(lr: float) -> dict[str, Any]:
    # Adam, batch 8, sequence length 20 (paper, appendix "Training Details")
    return {"lr": lr, "batch_size": 8, "seq_len": 20}


def _gdm(
    lr: float,
    dim: int,
    zn_groups: int,
    zn_classes: int,
    beta_rep: float,
    free_bits: float,
    grssm_encoder_layers: int,
) -> dict[str, Any]:
    return {
        "model": {
            "mp_layers": 1,  # L
            "embed_dim": dim,  # dim(e)
            "hidden_dim": dim,  # dim(h)
            "node_latent_groups": zn_groups,  # dim(z_n) = groups x classes
            "node_latent_classes": zn_classes,
            "graph_latent_groups": 8,  # dim(z_g) = 8 x 8 *
            "graph_latent_classes": 8,
            "beta_adj": 1.0,
            "beta_dyn": 1.0,
            "beta_rep": beta_rep,
            "beta_pred": 1.0,
            "beta_n": 1.0,
            "beta_g": 1.0,
            "beta_h": 1.0,
            "free_bits": free_bits,
            # Hard Concrete parameters, shared across environments
            "hc_beta": 2.0 / 3.0,
            "hc_gamma": -0.1,
            "hc_zeta": 1.1,
            # ablation "no-recurrent-adj" only: observed-adjacency GNN depth of the encoder,
            # G-RSSM's "Encoder L" of the environment
            "encoder_gnn_layers": grssm_encoder_layers,
        },
        "train": _train(lr),
    }


def _gwm(lr: float, layers: int, dim: int, beta_adj: float) -> dict[str, Any]:
    return {
        "model": {"mp_layers": layers, "hidden_dim": dim, "beta_adj": beta_adj},
        "train": _train(lr),
    }


def _grssm(layers: int, enc_layers: int, beta_adj: float, free_bits: float) -> dict[str, Any]:
    return {
        "model": {
            "mp_layers": layers,  # L: rounds of recurrent all-pairs message passing
            "encoder_layers": enc_layers,  # Encoder L
            "embed_dim": 128,  # dim(e) *
            "hidden_dim": 128,  # dim(h) *
            "latent_groups": 8,  # dim(z) = 8 x 8 *
            "latent_classes": 8,
            "beta_adj": beta_adj,
            "beta_dyn": 1.0,  # *
            "beta_rep": 0.1,  # *
            "beta_pred": 1.0,  # *
            "free_bits": free_bits,  # *
            # the experiments reproduce the paper's exact decoder logit (no learned bias)
            "adj_bias": False,
        },
        "train": _train(1e-3),
    }


#: model base name -> environment id -> hyperparameters; * = unsearched in the paper's table
HYPERPARAMETERS: dict[str, dict[str, dict[str, Any]]] = {
    "gdm": {
        "RGC": _gdm(1e-4, 64, 32, 32, 0.1, 0.0, 1),
        "OD": _gdm(5e-4, 128, 16, 16, 0.05, 0.01, 1),
        "SAR": _gdm(5e-4, 128, 16, 16, 0.1, 0.01, 2),
        "CF": _gdm(5e-4, 128, 16, 16, 0.1, 0.01, 1),
    },
    "ea-gwm": {
        "RGC": _gwm(1e-3, 2, 64, 1.0),
        "OD": _gwm(1e-4, 4, 64, 1.0),
        "SAR": _gwm(5e-4, 2, 128, 1.0),
        "CF": _gwm(1e-4, 4, 128, 1.0),
    },
    "vanilla-gwm": {
        "RGC": _gwm(5e-4, 2, 64, 0.1),
        "OD": _gwm(1e-4, 4, 128, 0.1),
        "SAR": _gwm(1e-4, 2, 128, 0.1),
        "CF": _gwm(1e-4, 1, 128, 0.1),
    },
    "g-rssm": {
        "RGC": _grssm(3, 1, 10.0, 0.0),
        "OD": _grssm(1, 1, 1.0, 0.01),
        "SAR": _grssm(1, 2, 10.0, 0.01),
        "CF": _grssm(1, 1, 0.1, 0.01),
    },
}


def register_hyperparameters(model: str, env_id: str, values: dict[str, Any]) -> None:
    """Add or replace the hyperparameters of ``model`` (base name, e.g. ``"g-rssm"``) for
    ``env_id`` (one of the paper's ids or any other env's, e.g. ``"mypkg/MyEnv-v0"``)."""
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"env_id must be a non-empty string, got {env_id!r}")
    if not isinstance(values, Mapping) or set(values) - {"model", "train"}:
        raise ValueError("hyperparameters have only the keys 'model' and 'train'")
    HYPERPARAMETERS.setdefault(model, {})[env_id] = {
        "model": dict(values.get("model", {})),
        "train": dict(values.get("train", {})),
    }


def _modal(values: list[Any]) -> Any:
    """The value most tuned sets share; ties: the smallest (the cheaper model, the smaller step)."""
    counts = Counter(values)
    top = max(counts.values())
    tied = [v for v in counts if counts[v] == top]
    try:
        return min(tied)
    except TypeError:  # values that do not order (never in the paper's tables): the first
        return tied[0]


_SCHEMA_KEYS = {
    "node_continuous",
    "node_categorical",
    "graph_continuous",
    "graph_categorical",
    "ranges",
}


def default_hyperparameters(model: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """The hyperparameters of ``model`` for an env the paper did not tune, with ``schema``.

    Per hyperparameter the modal value of the paper's tuned sets of ``model`` (ties: the
    smaller value); a key only some sets have is left out. For the paper's models this is:
    GDM the OD/CF/SAR sizes (lr 5e-4, dim 128, z_n 16 x 16, beta_rep 0.1, free bits 0.01),
    Vanilla-GWM lr 1e-4, 2 layers, dim 128; EA-GWM lr 1e-4, 2 layers, dim 64; G-RSSM 1 layer,
    1 encoder layer, beta_adj 10, free bits 0.01 (docs/own-env.md lists them).

    Raises:
        KeyError: ``model`` has no hyperparameters at all.
        ValueError: ``schema`` is not a schema dict.
    """
    if not isinstance(schema, Mapping) or set(schema) - _SCHEMA_KEYS:
        raise ValueError(
            f"schema must be a schema dict (keys among {sorted(_SCHEMA_KEYS)}), got {schema!r}"
        )
    base = model.split(":", 1)[0]
    if base not in HYPERPARAMETERS:
        raise KeyError(f"no hyperparameters for model {model!r}; known: {sorted(HYPERPARAMETERS)}")
    tuned = [HYPERPARAMETERS[base][e] for e in ENV_IDS if e in HYPERPARAMETERS[base]]
    tuned = tuned or list(HYPERPARAMETERS[base].values())
    out: dict[str, Any] = {"model": {}, "train": {}}
    for part in ("model", "train"):
        keys = [k for k in tuned[0][part] if all(k in p[part] for p in tuned)]
        out[part] = {k: _modal([p[part][k] for p in tuned]) for k in keys}
    return out


def get_hyperparameters(
    model: str, env_id: str, schema: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """A deep copy of the hyperparameters of ``model`` on ``env_id`` (``"gdm:<ablation>"``
    uses the GDM's). An env without them gets :func:`default_hyperparameters` when its
    ``schema`` is given, else ``KeyError``.
    """
    base = model.split(":", 1)[0]
    if base not in HYPERPARAMETERS:
        raise KeyError(f"no hyperparameters for model {model!r}; known: {sorted(HYPERPARAMETERS)}")
    if env_id not in HYPERPARAMETERS[base]:
        if schema is not None:
            return default_hyperparameters(model, schema)
        known = sorted(HYPERPARAMETERS[base])
        raise KeyError(
            f"no {base!r} hyperparameters for environment {env_id!r}; known: {known} "
            "(pass the env's schema for the defaults of an env the paper did not tune)"
        )
    return copy.deepcopy(HYPERPARAMETERS[base][env_id])


def _renamed(function: Any, old: str) -> Any:
    """``function`` under its old name, with a DeprecationWarning at each call (0.x)."""

    @functools.wraps(function)
    def old_name(*args: Any, **kwargs: Any) -> Any:
        said = f"gdm_models.{old} is renamed gdm_models.{function.__name__}"
        warnings.warn(said, DeprecationWarning, stacklevel=2)
        return function(*args, **kwargs)

    return old_name


#: the names before the per-model "presets" became hyperparameters (graphwm's presets are the
#: experiment TOML files): deprecated
get_preset = _renamed(get_hyperparameters, "get_preset")
register_preset = _renamed(register_hyperparameters, "register_preset")
default_preset = _renamed(default_hyperparameters, "default_preset")
