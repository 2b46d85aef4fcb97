"""Checks of a parsed preset that need the envs, the models or the machine.

:func:`parse_checked` (the CLI and the pipeline's public functions call it once) parses a preset
and runs :func:`check_preset`: model names and hyperparameters, sizes and counts against the
envs' ranges and the limits (docs/reproducing.md, "Limits"), the envs, and the work and memory
bounds of :mod:`graphwm.work_bounds`. Each error is a :class:`PresetError` naming the key.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import typing
from collections.abc import Iterable, Mapping
from typing import Annotated, Any

from pydantic import StrictBool, create_model

from graphwm.config import (
    DEVICE_PATTERN,
    DEVICES,
    TRAINER_KEYS,
    Preset,
    PresetError,
    TrainerSettings,
    apply_overrides,
)
from graphwm.config_values import Float, Int, Section, Str
from graphwm.work_bounds import check_model_size, check_work_bounds

#: largest N of a split whose observations are stored (train, validation): N^2 bytes a frame
MAX_STORED_NODES = 500  # (episodes per file: at most graphwm.episodes.SEEDS_PER_SIZE)


# -- models: names through the registry, hyperparameters through a pydantic model of their config
#: the preset's type of a config field of each kind (integers up to MAX_INT, finite numbers, ...)
_VALUE: dict[Any, Any] = {int: Annotated[int, Int()], float: Annotated[float, Float()],
                          bool: StrictBool, str: Annotated[str, Str()]}  # fmt: skip


@functools.cache
def values_model(config: type) -> type[Section]:
    """The pydantic model of a config dataclass's fields, every one optional (a preset sets
    some on top of the model's hyperparameters; ``X | None`` reads as ``X``)."""
    hints, fields = typing.get_type_hints(config), dict[str, Any]()
    for field in dataclasses.fields(config):
        hint, args = hints[field.name], typing.get_args(hints[field.name])
        if len(args) == 2 and type(None) in args:
            hint = next(a for a in args if a is not type(None))
        fields[field.name] = (_VALUE.get(hint, Any) | None, None)
    return create_model(f"{config.__name__}Values", __base__=Section, **fields)


@functools.cache
def config_class(model: str, env: str, key: str) -> type:
    """The config dataclass of ``model`` (at preset key ``key``): from its registered factory's
    annotations (factory -> model class -> ``config``), else its build on torch's meta device;
    a name with no hyperparameters on ``env`` or an unknown GDM ablation is refused."""
    from gdm_models.gdm import ABLATIONS
    from gdm_models.registry import MODELS

    from graphwm.envs import model_hyperparameters

    base, _, variant = model.partition(":")
    try:
        values = model_hyperparameters(model, env)["model"]  # KeyError: no such model
        for name in variant.split("+") if base == "gdm" and variant else ():
            if name not in ABLATIONS:
                raise KeyError(f"unknown GDM ablation {name!r}; known: {sorted(ABLATIONS)}")
        try:
            if variant and base != "gdm":
                raise TypeError("a variant only its factory knows")
            factory = MODELS[base]
            built = typing.get_type_hints(getattr(factory, "func", factory))["return"]
            hint = typing.get_type_hints(built.__init__)["config"]
            return next(a for a in (hint, *typing.get_args(hint)) if isinstance(a, type)
                        and dataclasses.is_dataclass(a))  # fmt: skip
        except (KeyError, TypeError, NameError, StopIteration):
            from graphwm.work_bounds import meta_model

            return type(meta_model(model, env, json.dumps(values, sort_keys=True)).config)
    except (KeyError, ValueError, TypeError) as err:
        said = err.args[0] if err.args else err
        raise PresetError(f"preset key {key!r} ({model!r}): {said}") from None


def check_model_values(model: str, env: str, values: Mapping[str, Any], key: str) -> None:
    """``values`` (at preset key ``key``) are fields of ``model``'s config, of their types, pass
    the config's own checks on top of its hyperparameters on ``env``, and fit in memory."""
    from graphwm.envs import model_hyperparameters

    config = config_class(model, env, key)
    values_model(config).parse(values, key)
    try:
        config(**{**model_hyperparameters(model, env)["model"], **values})
    except (ValueError, TypeError, KeyError) as err:
        said = str(err.args[0] if err.args else err)
        # the config names the field it refuses (``GDMConfig.embed_dim must be >= 1``)
        field = next((n for n in values if re.search(rf"\b{re.escape(n)}\b", said)), None)
        at = f"{key}.{field}" if field else key
        got = "" if field is None or "got" in said else f", got {values[field]!r}"
        raise PresetError(f"preset key {at!r}: {said}{got}") from None
    check_model_size(model, env, values, key)


def _check_models(p: Preset, listed: Iterable[str]) -> None:
    """Model names, and each ``train.model_overrides`` table: it names a model the preset runs
    (or ``listed``, the preset file's own models where ``--models`` narrowed them) and its
    values fit that model."""
    from gdm_models import available_models

    for key, names in (("models", p.models), ("ablations", p.ablations)):
        for i, name in enumerate(names):
            for env in p.envs:
                config_class(name, env, f"{key}[{i}]")
    known = available_models()
    runs = sorted({m.partition(":")[0] for m in (*p.models, *p.ablations, *listed)})
    for base, values in p.train.model_overrides.items():
        key = f"train.model_overrides.{base}"
        if base not in known:  # a typo would leave the model at its hyperparameters
            said = f"{base!r} is not a model name; known keys here: {known}"
            raise PresetError(f"preset key {key!r} is unknown: {said}")
        if base not in runs:  # overrides of a model that never trains would do nothing
            said = f"its models and ablations: {runs}); add it to 'models' or remove the table"
            raise PresetError(f"preset key {key!r}: the preset does not run {base!r} ({said}")
        used = [(env, m) for env in p.envs for m in p.models_of(env) if m.partition(":")[0] == base]
        for env, model in used or [(p.envs[0], base)]:  # kept for a model --models left out
            check_model_values(model, env, values, key)


def _check_grid(p: Preset) -> None:
    """``search.grid``: a value (or a table of several) per point, of the trainer or the model."""
    for model, grid in (p.search.grid if p.search else {}).items():
        gkey = f"search.grid.{model}"
        for env in p.envs:
            config_class(model, env, gkey)
        for name, values in grid.items():
            for i, value in enumerate(values):
                table = isinstance(value, Mapping)
                point, where = (value, f"{gkey}.{name}[{i}]") if table else ({name: value}, gkey)
                TrainerSettings.parse({k: v for k, v in point.items() if k in TRAINER_KEYS}, where)
                rest = {k: v for k, v in point.items() if k not in TRAINER_KEYS}
                for env in p.envs if rest else ():
                    check_model_values(model, env, rest, where)


# -- envs and sizes ----------------------------------------------------------------------------
def _refused(key: str, what: str) -> PresetError:
    return PresetError(f"preset key {key!r}: {what}")


def _check_sizes(values: Iterable[int], key: str, envs: Iterable[str], stored: bool = False):
    """Each size in every env's range (``key`` formatted with its index); ``stored``: at most
    :data:`MAX_STORED_NODES` too."""
    from graphwm.envs import env_limits

    for i, n in enumerate(values):
        for env in envs:
            low, high = env_limits(env)
            why = f"the {env} env's range"
            if stored and high > MAX_STORED_NODES:
                high, why = MAX_STORED_NODES, "its observations are stored, N x N per frame"
            if not low <= n <= high:
                what = f"must be an integer >= {low} and <= {high} ({why}), got {n}"
                raise _refused(key.format(i), what)


def _check_envs(p: Preset, own: bool) -> None:
    """Every env is a paper env or a registered Gymnasium id of a graph env whose schema can be
    read; with ``own``, one of the user's passes :func:`graphwm_envs.check_graph_env` at each
    stored size (nothing of an env that breaks the contract is stored or scored)."""
    from graphwm.envs import check_own_env, env_schema, is_paper_env

    sizes = sorted({*p.collect.train_sizes, *p.collect.val_sizes})
    for key, names in (("envs", p.envs), ("ablation_envs", p.ablation_envs or ())):
        for i, name in enumerate(names):
            try:
                if not own:
                    env_schema(name)
                elif not (is_paper_env(name) or (key == "ablation_envs" and name in p.envs)):
                    for n in sizes:
                        check_own_env(name, n)
            except (ValueError, TypeError) as err:
                said = f": {err}" if own else f" ({name!r}): {err}"
                raise PresetError(f"preset key '{key}[{i}]'{said}") from None


def _check_limits(p: Preset) -> None:
    from graphwm.episodes import SEEDS_PER_SIZE

    c = p.collect
    _check_sizes(c.train_sizes, "collect.train_sizes[{}]", p.envs, stored=True)
    _check_sizes(c.val_sizes, "collect.val_sizes[{}]", p.envs, stored=True)
    for i, n in enumerate(c.test_sizes):
        _check_sizes([n], f"collect.test_sizes[{i}]", [e for e in p.envs if n in p.test_sizes(e)])
    _check_sizes([c.rgc_max_test_size], "collect.rgc_max_test_size", ["RGC"] * ("RGC" in p.envs))
    for name in ("train_episodes", "val_episodes", "test_episodes"):
        if getattr(c, name) > SEEDS_PER_SIZE:
            why = "the seed scheme's episodes per split and size"
            what = f"must be an integer >= 1 and <= {SEEDS_PER_SIZE} ({why})"
            raise _refused(f"collect.{name}", f"{what}, got {getattr(c, name)}")
    if p.multi_step is not None:
        _check_sizes([p.multi_step.size], "multi_step.size", p.envs)
    if p.search is not None and p.search.val_sizes is not None:
        _check_sizes(p.search.val_sizes, "search.val_sizes[{}]", p.envs, stored=True)
    if p.downstream is not None:
        envs = [e for e in (p.downstream.envs or p.envs) if e in p.envs]
        _check_sizes([p.downstream.num_nodes], "downstream.num_nodes", envs)
    for env in p.envs:  # RGC's test sizes are capped: an env without one has empty tables
        if not p.test_sizes(env):
            cap = f"collect.rgc_max_test_size = {c.rgc_max_test_size}"
            what = f"no size is left for {env} (RGC keeps those <= {cap}): every table of it"
            raise _refused("collect.test_sizes", what + " would be empty")


def check_preset(p: Preset, listed: Iterable[str] = ()) -> None:
    """Every check of this module except the device's; ``listed``: the models the preset file
    lists, where the command line narrowed ``models`` (their overrides stay accepted)."""
    _check_envs(p, own=False)
    _check_models(p, listed)
    _check_grid(p)
    _check_limits(p)
    _check_envs(p, own=True)  # before the first work that builds and steps an env
    check_work_bounds(p)  # memory, permutation work, the multi-step horizon, a training step


def check_device(device: str, key: str = "device") -> None:
    """The device must exist on this machine (``cuda:<i>``: ``i`` below torch's CUDA device
    count; ``mps``: ``torch.backends.mps.is_available()``)."""
    if not DEVICE_PATTERN.fullmatch(str(device)):
        raise _refused(key, f"must be {DEVICES}, got {device!r}")
    if device != "cpu":
        import torch

        kind, _, index = device.partition(":")
        mps = torch.backends.mps.is_available()
        has = torch.cuda.device_count() if kind == "cuda" else int(mps)
        if int(index or 0) >= has:
            why = f"it has {has} {kind} device(s)"
            raise _refused(key, f"{device!r} is not available on this machine ({why}); use 'cpu'")


class CheckedPreset(Preset):
    """A :class:`Preset` that passed :func:`check_preset` (built by :func:`parse_checked`
    only): the pipeline passes it from stage to stage as it is."""


def parse_checked(
    raw: Mapping[str, Any] | Preset, overrides: Mapping[str, Any] | None = None
) -> CheckedPreset:
    """The preset dict ``raw`` (as read from TOML) with ``overrides`` (:func:`apply_overrides`)
    parsed and checked once, before any work; a :class:`CheckedPreset` is returned as it is.
    A ``models`` override narrows the file's models as ``--models`` does: the
    ``train.model_overrides`` of those it leaves out stay accepted and checked."""
    if isinstance(raw, CheckedPreset) and not overrides:
        return raw
    file = raw.to_dict() if isinstance(raw, Preset) and overrides else raw
    listed: list[str] = []
    if isinstance(file, Mapping):  # the file's own models, which a `models` override narrows
        listed = [m for k in ("models", "ablations") if isinstance(file.get(k), list)
                  for m in file[k] if isinstance(m, str)]  # fmt: skip
        file = apply_overrides(file, overrides)
    preset = Preset.parse(file)
    check_preset(preset, listed)
    return CheckedPreset.model_construct(preset.model_fields_set, **dict(preset))
