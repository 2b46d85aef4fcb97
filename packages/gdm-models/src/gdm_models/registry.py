"""Model registry: build any world model by name.

Names: ``"gdm"`` and ``"gdm:<ablation>[+<ablation>...]"`` (see :data:`gdm_models.gdm.ABLATIONS`:
``no-graph-state``, ``no-beta-h``, ``no-h-plus``, ``bernoulli-adj``, ``all-pairs-mp``,
``no-recurrent-adj``), plus whatever other packages register with :func:`register_model`
(the baselines ``"vanilla-gwm"``, ``"ea-gwm"``, ``"g-rssm"`` are registered by
``gdm_models.baselines``, imported lazily on first lookup of an unknown name).

A factory has the signature ``factory(schema, scaler, **overrides) -> WorldModel`` where the
overrides are config-field values; :func:`make_model` sets ``model.model_name`` to the name.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .scaling import FeatureScaler
from .schema import Schema

if TYPE_CHECKING:
    from .api import WorldModel

__all__ = ["register_model", "make_model", "available_models", "UnknownModelError"]

Factory = Callable[..., "WorldModel"]
_FACTORIES: dict[str, Factory] = {}
_baselines_loaded = False


class UnknownModelError(KeyError):
    """Raised for a model name that no factory is registered for."""


def register_model(name: str, factory: Factory, *, overwrite: bool = False) -> None:
    """Register ``factory`` under ``name`` (a ``<base>:<variant>`` name may also be handled
    by registering only ``<base>`` and parsing the variant inside the factory via the
    ``variant`` keyword, see :func:`make_model`)."""
    if not name or not isinstance(name, str):
        raise ValueError("model name must be a non-empty string")
    if name in _FACTORIES and not overwrite and _FACTORIES[name] is not factory:
        raise ValueError(f"a model named {name!r} is already registered")
    _FACTORIES[name] = factory


def _load_builtin() -> None:
    if "gdm" not in _FACTORIES:
        from .gdm import build_gdm

        register_model("gdm", build_gdm)


def _load_baselines() -> None:
    global _baselines_loaded
    if _baselines_loaded:
        return
    _baselines_loaded = True
    try:
        importlib.import_module("gdm_models.baselines")
    except ModuleNotFoundError as e:  # the baselines package is optional
        if e.name not in ("gdm_models.baselines",):
            raise


def available_models() -> list[str]:
    """Registered base names (ablation/variant suffixes not listed)."""
    _load_builtin()
    _load_baselines()
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
    _load_builtin()
    if name not in _FACTORIES and name.split(":", 1)[0] not in _FACTORIES:
        _load_baselines()
    schema = Schema.from_dict(schema)
    if name in _FACTORIES:
        model = _FACTORIES[name](schema, scaler, **overrides)
    else:
        base, _, variant = name.partition(":")
        if base not in _FACTORIES or not variant:
            raise UnknownModelError(
                f"unknown model {name!r}; available: {sorted(_FACTORIES)} "
                "(GDM ablations as 'gdm:<ablation>')"
            )
        model = _FACTORIES[base](schema, scaler, variant=variant, **overrides)
    model.model_name = name
    return model
