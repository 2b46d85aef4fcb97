"""Model registry: every world model of the package by name, one line per model.

Names: ``"gdm"`` and ``"gdm:<ablation>[+<ablation>...]"`` (see :data:`gdm_models.gdm.ABLATIONS`:
``no-graph-state``, ``no-beta-h``, ``no-h-plus``, ``bernoulli-adj``, ``all-pairs-mp``,
``no-recurrent-adj``), and the baselines ``"vanilla-gwm"``, ``"ea-gwm"`` and ``"g-rssm"``.
Adding a model is one module with its ``WorldModel`` subclass and factory, plus one line in
:data:`MODELS` (docs/models.md). Code outside the package may add a model at run time with
:func:`register_model`.

A factory has the signature ``factory(schema, scaler, **overrides) -> WorldModel`` where the
overrides are config-field values; :func:`make_model` sets ``model.model_name`` to the name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import torch

from .baselines.grssm import build_grssm
from .baselines.gwm import build_gwm
from .gdm import build_gdm
from .machine import memory_bytes
from .scaling import FeatureScaler
from .schema import Schema
from .world_model import WorldModel

__all__ = ["MODELS", "register_model", "make_model", "available_models", "UnknownModelError"]

Factory = Callable[..., WorldModel]

#: the package's models: name -> factory (a ``<base>:<variant>`` name calls the factory of
#: ``<base>`` with ``variant="<variant>"``)
MODELS: dict[str, Factory] = {
    "gdm": build_gdm,
    "vanilla-gwm": partial(build_gwm, ea=False),
    "ea-gwm": partial(build_gwm, ea=True),
    "g-rssm": build_grssm,
}

_FACTORIES: dict[str, Factory] = dict(MODELS)


class UnknownModelError(KeyError):
    """Raised for a model name that no factory is registered for."""


def register_model(name: str, factory: Factory, *, overwrite: bool = False) -> None:
    """Register ``factory`` under ``name`` at run time (for models defined outside the
    package; the package's own are the lines of :data:`MODELS`). A ``<base>:<variant>`` name
    may also be handled by registering only ``<base>`` and parsing the variant inside the
    factory via the ``variant`` keyword, see :func:`make_model`."""
    if not name or not isinstance(name, str):
        raise ValueError("model name must be a non-empty string")
    if name in _FACTORIES and not overwrite and _FACTORIES[name] is not factory:
        raise ValueError(f"a model named {name!r} is already registered")
    _FACTORIES[name] = factory


def available_models() -> list[str]:
    """Registered base names (ablation/variant suffixes not listed)."""
    return sorted(_FACTORIES)


def make_model(
    name: str,
    schema: Mapping[str, Any] | Schema,
    scaler: FeatureScaler | None = None,
    **overrides: Any,
) -> WorldModel:
    """Build a model by name.

    ``name`` is looked up exactly first; otherwise ``"<base>:<variant>"`` calls the factory of
    ``<base>`` with ``variant="<variant>"`` (the GDM uses this for its ablations).
    """
    schema = Schema.from_dict(schema)
    if name in _FACTORIES:
        build = partial(_FACTORIES[name], schema, scaler, **overrides)
    else:
        base, _, variant = name.partition(":")
        if base not in _FACTORIES or not variant:
            raise UnknownModelError(
                f"unknown model {name!r}; available: {sorted(_FACTORIES)} "
                "(GDM ablations as 'gdm:<ablation>')"
            )
        build = partial(_FACTORIES[base], schema, scaler, variant=variant, **overrides)
    if torch.empty(0).device.type != "meta":  # (a build on the meta device is the check)
        check_model_fits(name, build, schema)
    model = build()
    model.model_name = name
    return model


def check_model_fits(
    name: str, build: Callable[[], WorldModel], schema: Schema | None = None
) -> None:
    """Build the model on torch's meta device (nothing allocated) and refuse it, before any
    real allocation, when its float32 weights alone exceed half this machine's memory (a
    schema with a categorical feature of 10^9 categories, a hidden size of 2e5). With
    ``schema``, a categorical feature too large for memory is named before torch sizes a
    layer by it. Raises ``ValueError`` naming the size."""
    half = memory_bytes() // 2
    # each category is at least one weight (its one-hot column): refused by name before torch
    # sizes a layer by it (2**70 categories overflow torch's sizes)
    cats = [] if schema is None else [*schema.node_categorical, *schema.graph_categorical]
    for feature, k in cats:
        if 4 * k > half:
            raise ValueError(
                f"model {name!r}: categorical feature {feature!r} has {k:,} categories, at "
                f"least {4 * k / 2**30:.3g} GiB of float32 weights, more than half this "
                f"machine's memory ({memory_bytes() / 2**31:.3g} GiB)"
            )
    try:
        with torch.device("meta"):
            shape_only = build()
    except (RuntimeError, OverflowError) as err:
        if "overflow" not in str(err).lower():
            raise
        raise ValueError(f"model {name!r}: its sizes overflow torch's ({err})") from None
    count = sum(t.numel() for t in shape_only.state_dict().values())
    if 4 * count > memory_bytes() // 2:
        raise ValueError(
            f"model {name!r} would have {count:,} weights ({4 * count / 2**30:.3g} GiB as "
            f"float32), more than half this machine's memory ({memory_bytes() / 2**31:.3g} "
            "GiB): lower its sizes or the schema's categorical cardinalities"
        )
