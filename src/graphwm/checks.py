"""Checks of a parsed preset that need the envs, the models or the machine.

:func:`check_preset` (run by :func:`parse_checked`, the pipeline's entry to a preset) checks
every model name (ablations included) through gdm_models' registry, every
``train.model_overrides`` and ``search.grid`` entry against the fields and the own checks of
the model's config dataclass
(the config of a model built by :func:`gdm_models.make_model` on the env's schema), and every
size and count against the limits below. :func:`check_machine` (run before any work) checks
that this machine has the preset's device. Each error is a :class:`PresetError` naming the key.
Bounds that build a model or an env (a training step's memory, the multi-step horizon) are
:mod:`graphwm.work_bounds`', run last by :func:`check_preset`.

Limits (docs/reproducing.md, "Limits"):

* every graph size N: the env's own range, ``graphwm_envs.core.base.MIN_NODES`` (5) to the
  env class's ``max_nodes`` (2000 for RGC and CF, 5000 for OD and SAR);
* sizes whose observations are stored (``collect.train_sizes``, ``collect.val_sizes``,
  ``search.val_sizes``): at most :data:`MAX_STORED_NODES`, since every stored frame holds a
  dense N x N adjacency;
* episodes per file: at most :data:`graphwm.episodes.SEEDS_PER_SIZE` (the seed scheme
  gives each split and size that many disjoint seeds).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from graphwm.config import PRESET, TRAINER_KEYS, Preset, PresetError, TrainerSettings
from graphwm.settings import read_value, type_hints

#: largest N of a split whose observations are stored (train, validation): N^2 bytes a frame
MAX_STORED_NODES = 500


# ---------------------------------------------------------------------------------------------
# Models and their overrides
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=256)
def _built_config_class(model: str, env: str) -> type:
    from gdm_models import make_model

    from graphwm.envs import env_schema, model_preset

    built = make_model(model, env_schema(env), None, **model_preset(model, env)["model"])
    return type(built.config)


_CLASSES: dict[str, type] = {}


def _config_class(model: str, env: str) -> type:
    """The config dataclass of ``model`` (KeyError/ValueError for a bad name or env).

    The model is built once per name (on the first env asked for) through
    :func:`gdm_models.make_model`, which refuses unknown names and ablations; its config's
    class is the same on every env, so other envs only need their paper preset.
    """
    from graphwm.envs import model_preset

    model_preset(model, env)  # KeyError: no preset for this model on this env
    if model not in _CLASSES:
        _CLASSES[model] = _built_config_class(model, env)
    return _CLASSES[model]


def _has_preset(model: str, env: str) -> bool:
    from graphwm.envs import model_preset

    try:
        model_preset(model, env)
    except KeyError:
        return False
    return True


def _model_error(key: str, name: str, err: BaseException) -> PresetError:
    msg = err.args[0] if err.args else err
    return PresetError(f"preset key {key!r} ({name!r}): {msg}")


def check_model_name(name: str, env: str, key: str) -> type:
    """The config class of ``name`` on ``env``; a name gdm_models cannot build is refused."""
    try:
        return _config_class(name, env)
    except (KeyError, ValueError, TypeError) as err:
        raise _model_error(key, name, err) from None


def _build_error(model: str, env: str, overrides: Mapping[str, Any]) -> str | None:
    """The error of the model's config under ``overrides`` on top of the paper preset (None:
    accepted); the config dataclass's own checks (``__post_init__``) decide."""
    from graphwm.envs import model_preset

    values = {**model_preset(model, env)["model"], **overrides}
    try:
        _config_class(model, env)(**values)
    except (ValueError, TypeError, KeyError) as err:
        return str(err.args[0] if err.args else err)
    return None


def check_model_values(model: str, env: str, values: Mapping[str, Any], key: str) -> None:
    """Each of ``values`` must be a field of the model's config, of its type, and the model
    must build with them (the config's own range checks); errors name ``key.<field>``."""
    cls = check_model_name(model, env, key)
    hints = type_hints(cls)
    known = sorted(f.name for f in dataclasses.fields(cls))
    for name, value in values.items():
        if name not in hints:
            raise PresetError(
                f"preset key '{key}.{name}' is unknown: not a field of {cls.__name__} "
                f"({model!r}); known keys here: {known}"
            )
        read_value(hints[name], value, PRESET, f"{key}.{name}")
    if _build_error(model, env, values) is None:
        _check_model_size(model, env, values, key)
        return
    for name, value in values.items():  # name the value the model's config refuses
        err = _build_error(model, env, {name: value})
        if err is not None:
            got = "" if "got" in err else f", got {value!r}"
            raise PresetError(f"preset key '{key}.{name}': {err}{got}")
    raise PresetError(f"preset key {key!r}: {_build_error(model, env, values)}")


def check_trainer_value(name: str, value: Any, key: str) -> None:
    """A trainer key (``lr``, ``batch_size``, ``seq_len``) of a search grid."""
    field = next(f for f in dataclasses.fields(TrainerSettings) if f.name == name)
    read_value(type_hints(TrainerSettings)[name], value, PRESET, key, field.metadata)


def _base(name: str) -> str:
    return str(name).split(":", 1)[0]


def _check_models(p: Preset, listed: Iterable[str] | None = None) -> None:
    """Model names, and ``train.model_overrides``: each names a model the preset lists
    (``listed``: the bases of the preset file's own ``models`` and ``ablations``, which
    ``--models`` may narrow; default: this preset's), and its values fit that model."""
    for key, names in (("models", p.models), ("ablations", p.ablations)):
        for i, name in enumerate(names):
            for env in p.envs:
                check_model_name(name, env, f"{key}[{i}]")
    trained = {env: p.models_of(env) for env in p.envs}
    from gdm_models import available_models

    registered = available_models()
    runs = sorted({_base(m) for m in (*p.models, *p.ablations)} | {_base(m) for m in listed or ()})
    for base, values in p.train.model_overrides.items():
        key = f"train.model_overrides.{base}"
        if base not in registered:
            # a typo would otherwise silently leave the model at its paper preset
            raise PresetError(
                f"preset key {key!r} is unknown: {base!r} is not a model name; known keys "
                f"here: {registered}"
            )
        if base not in runs:
            # overrides of a model that never trains would be accepted and do nothing
            raise PresetError(
                f"preset key {key!r}: the preset does not run {base!r} (its models and "
                f"ablations: {runs}); add it to 'models' or remove the table"
            )
        used = [(env, m) for env, ms in trained.items() for m in ms if _base(m) == base]
        if not used:  # overrides kept for a model left out by --models: checked too
            used = [(env, base) for env in p.envs if _has_preset(base, env)][:1]
        for env, model in used:
            check_model_values(model, env, values, key)


def _check_grid(p: Preset) -> None:
    if p.search is None:
        return
    for model, grid in p.search.grid.items():
        gkey = f"search.grid.{model}"
        for env in p.envs:
            check_model_name(model, env, gkey)
        for name, values in grid.items():
            for i, value in enumerate(values):
                key = f"{gkey}.{name}[{i}]"
                point = value if isinstance(value, Mapping) else {name: value}
                trainer = {k: v for k, v in point.items() if k in TRAINER_KEYS}
                for k, v in trainer.items():
                    check_trainer_value(k, v, key if k == name else f"{key}.{k}")
                rest = {k: v for k, v in point.items() if k not in TRAINER_KEYS}
                if rest:
                    for env in p.envs:
                        where = key if isinstance(value, Mapping) else f"{gkey}"
                        check_model_values(model, env, rest, where)


# ---------------------------------------------------------------------------------------------
# Sizes and counts
# ---------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=16)
def env_limits(env: str) -> tuple[int, int]:
    """``(min N, max N)`` the env accepts (its class's ``max_nodes`` or the range declared at
    registration; no env is built)."""
    from graphwm.envs import env_limits as limits

    return limits(env)


def _check_size(value: int, key: str, envs: Iterable[str], stored: bool = False) -> None:
    for env in envs:
        low, high = env_limits(env)
        why = f"the {env} env's range"
        if stored and high > MAX_STORED_NODES:
            high, why = MAX_STORED_NODES, "its observations are stored, N x N per frame"
        if not low <= value <= high:
            raise PRESET.fail(key, f"must be an integer >= {low} and <= {high} ({why})", value)


def _check_sizes(values: Iterable[int], key: str, envs: Iterable[str], stored: bool) -> None:
    envs = tuple(envs)
    for i, n in enumerate(values):
        _check_size(n, f"{key}[{i}]", envs, stored)


def _check_limits(p: Preset) -> None:
    from graphwm.episodes import SEEDS_PER_SIZE

    c = p.collect
    _check_sizes(c.train_sizes, "collect.train_sizes", p.envs, True)
    _check_sizes(c.val_sizes, "collect.val_sizes", p.envs, True)
    for i, n in enumerate(c.test_sizes):
        used = [env for env in p.envs if n in p.test_sizes(env)]
        _check_size(n, f"collect.test_sizes[{i}]", used)
    if "RGC" in p.envs:
        _check_size(c.rgc_max_test_size, "collect.rgc_max_test_size", ["RGC"])
    for name in ("train_episodes", "val_episodes", "test_episodes"):
        value = getattr(c, name)
        if value > SEEDS_PER_SIZE:
            raise PRESET.fail(
                f"collect.{name}",
                f"must be an integer >= 1 and <= {SEEDS_PER_SIZE} (the seed scheme's episodes "
                "per split and size)",
                value,
            )
    if p.multi_step is not None:
        _check_size(p.multi_step.size, "multi_step.size", p.envs)
    if p.search is not None and p.search.val_sizes is not None:
        _check_sizes(p.search.val_sizes, "search.val_sizes", p.envs, True)
    section = p.downstream
    if section is not None:
        envs = [e for e in (section.envs or p.envs) if e in p.envs]
        _check_size(section.num_nodes, "downstream.num_nodes", envs)


def _check_selection(p: Preset) -> None:
    """What would otherwise be accepted and silently do nothing: an ablation that is a base
    model, an ``ablation_envs`` env the preset does not run, an ``ablation_sizes`` size that
    is no test size."""
    for i, name in enumerate(p.ablations):
        if ":" not in name:
            raise PresetError(
                f"preset key 'ablations[{i}]' ({name!r}) is a base model, not an ablation "
                "(ablations are '<model>:<variant>', e.g. 'gdm:no-h-plus'); list it under "
                "'models'"
            )
    for env, label in p.env_labels.items():
        if env not in p.envs:
            raise PresetError(
                f"preset key 'env_labels.{env}': {env!r} is not one of the preset's envs "
                f"{list(p.envs)}"
            )
        if not label.strip() or label != label.strip():
            raise PresetError(
                f"preset key 'env_labels.{env}': a label must be non-empty text without "
                f"leading or trailing spaces, got {label!r}"
            )
    shown = [p.env_labels.get(env, env) for env in p.envs]
    twice = sorted({name for name in shown if shown.count(name) > 1})
    if twice:
        raise PresetError(
            f"preset key 'env_labels': two envs would share the label {twice[0]!r} in every "
            "table and figure"
        )
    for i, size in enumerate(p.ablation_sizes or ()):
        if size not in p.collect.test_sizes:
            raise PresetError(
                f"preset key 'ablation_sizes[{i}]' ({size}) is not one of 'collect.test_sizes' "
                f"{list(p.collect.test_sizes)}: the ablations would never be evaluated there"
            )
    for i, env in enumerate(p.ablation_envs or ()):
        if p.ablations and env not in p.envs:
            raise PresetError(
                f"preset key 'ablation_envs[{i}]' ({env!r}) is not one of the preset's envs "
                f"{list(p.envs)}: its ablations would never be trained"
            )


def _check_tables_filled(p: Preset) -> None:
    """Every env keeps a test size (RGC's are capped): else all its tables stay empty."""
    for env in p.envs:
        if not p.test_sizes(env):
            raise PresetError(
                f"preset key 'collect.test_sizes': no size is left for {env} (RGC keeps those "
                f"<= collect.rgc_max_test_size = {p.collect.rgc_max_test_size}): every table "
                "of it would be empty"
            )


# ---------------------------------------------------------------------------------------------
# Memory: sizes whose memory grows with them are bounded by this machine's
# ---------------------------------------------------------------------------------------------
def memory_bytes() -> int:
    """This machine's physical memory in bytes (16 GiB where the OS does not say)."""
    import os

    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return 16 * 2**30


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB"


def _fits(key: str, value: Any, need: float, what: str) -> None:
    """Refuse ``value`` of ``key`` when ``need`` bytes exceed half this machine's memory."""
    have = memory_bytes() // 2
    if need > have:
        raise PresetError(
            f"preset key {key!r}: {value!r} needs about {_gib(need)} ({what}), more than half "
            f"this machine's memory ({_gib(have)})"
        )


#: float64 (T, T) matrices alive at once at the peak of one GDD, T = 2 kappa pooled samples
#: (gdd_metric.grams: the eight kernel terms, the four component Grams and the temporaries of
#: their assembly). Measured with tracemalloc: 16.0 x 8 T^2 bytes at kappa = 250, 500, 1000.
GRAM_MATRICES_AT_PEAK = 16
#: seconds per pooled-Gram entry of one permutation-test relabeling (gdd_metric.stats: each
#: relabeling sums the (T, T) Gram under a mask); measured 7 ns on a 2-core CPU, rounded up
PERMUTATION_SECONDS_PER_ENTRY = 10e-9
#: the most CPU-hours the permutation tests of one run may take (the paper preset's: 2.3)
MAX_PERMUTATION_HOURS = 1000.0


def sample_bytes(num_samples: int, num_nodes: int) -> int:
    """Bytes held at once for one reference transition's GDD: the two sets of
    ``num_samples`` sampled N x N graphs (float32) and the peak of the pooled float64 Gram
    matrices (:data:`GRAM_MATRICES_AT_PEAK` of them, T = 2 ``num_samples``)."""
    pooled = 2 * num_samples
    return 4 * pooled * num_nodes * num_nodes + 8 * GRAM_MATRICES_AT_PEAK * pooled * pooled


def reference_transitions(p: Preset) -> int:
    """Reference transitions the final evaluation scores: per env, evaluated test size (an
    ablation's: ``ablation_sizes``), model and seed, ``evaluate.reference_transitions`` of
    each evaluated test episode."""
    episodes = min(p.collect.test_episodes, p.evaluate.max_episodes or p.collect.test_episodes)
    per_run = p.evaluate.reference_transitions * episodes * len(p.seeds)
    return sum(
        len(p.eval_sizes(env, model)) * per_run for env in p.envs for model in p.models_of(env)
    )


def permutation_hours(p: Preset) -> float:
    """CPU-hours of the run's permutation tests: relabelings x transitions x (2 kappa)^2
    Gram entries at :data:`PERMUTATION_SECONDS_PER_ENTRY`."""
    pooled = 2 * p.evaluate.num_samples
    entries = p.evaluate.permutations * reference_transitions(p) * pooled * pooled
    return entries * PERMUTATION_SECONDS_PER_ENTRY / 3600


def _check_work(p: Preset) -> None:
    """Refuse a run whose permutation tests alone would take more than
    :data:`MAX_PERMUTATION_HOURS` CPU-hours, before any stage runs."""
    hours = permutation_hours(p)
    if hours > MAX_PERMUTATION_HOURS:
        raise PresetError(
            f"preset key 'evaluate.permutations': {p.evaluate.permutations} relabelings of "
            f"{reference_transitions(p)} reference transitions need about {hours:.3g} CPU-hours "
            f"(more than {MAX_PERMUTATION_HOURS:g}); lower evaluate.permutations (the paper: "
            "200) or the transitions evaluated (evaluate.reference_transitions, "
            "evaluate.max_episodes)"
        )


def _check_memory(p: Preset) -> None:
    largest = max(max(p.test_sizes(env), default=0) for env in p.envs)
    k = p.evaluate.num_samples
    _fits("evaluate.num_samples", k, sample_bytes(k, largest), f"samples of N = {largest}")
    if p.multi_step is not None:
        m = p.multi_step
        need = sample_bytes(m.num_samples, m.size)
        _fits("multi_step.num_samples", m.num_samples, need, f"samples of N = {m.size}")
    section = p.downstream
    if section is not None:
        width, depth = section.policy_hidden_dim, max(1, section.policy_num_layers)
        # weights, gradients and Adam's two moments, float32
        need = 16 * width * width * (depth + 2)
        _fits("downstream.policy_hidden_dim", width, need, "the graph policy's weights")
        from graphwm.config import MAX_SEED

        last = max(p.seeds) + section.dream_envs - 1
        if last > MAX_SEED:
            raise PresetError(
                f"preset key 'seeds': {max(p.seeds)} plus downstream.dream_envs - 1 "
                f"({section.dream_envs - 1}) must be <= {MAX_SEED} (a dream agent's envs reset "
                "with seed + i, and seeds stop there)"
            )


def model_parameters(model: str, env: str, overrides: Mapping[str, Any]) -> int:
    """The parameter count of ``model`` on ``env`` under ``overrides`` (on top of the paper
    preset), built on torch's ``meta`` device: no memory is allocated (cached per value).

    Raises:
        OverflowError: a size is too large for torch to describe.
    """
    import json

    return _model_parameters(model, env, json.dumps(dict(overrides), sort_keys=True))


@functools.lru_cache(maxsize=256)
def _model_parameters(model: str, env: str, overrides_json: str) -> int:
    import json

    from graphwm.envs import resolved_configs
    from graphwm.work_bounds import meta_model

    values, _ = resolved_configs(model, env, json.loads(overrides_json))
    try:
        built = meta_model(model, env, json.dumps(values, sort_keys=True))
    except (RuntimeError, TypeError, ValueError, OverflowError, MemoryError) as err:
        raise OverflowError(str(err).splitlines()[0]) from None
    return sum(int(t.numel()) for t in built.parameters())


def _check_model_size(model: str, env: str, values: Mapping[str, Any], key: str) -> None:
    """A model whose weights, gradients and Adam state (16 bytes a parameter) would not fit
    half this machine's memory is refused, naming the size key(s)."""
    sizes = {k: v for k, v in values.items() if isinstance(v, int) and not isinstance(v, bool)}
    if not sizes:
        return
    what = ", ".join(f"{key}.{k} = {v}" for k, v in sizes.items())
    try:
        count = model_parameters(model, env, values)
    except OverflowError as err:
        raise PresetError(f"preset key {key!r}: {what} is too large to build ({err})") from None
    have = memory_bytes() // 2
    if 16 * count > have:
        raise PresetError(
            f"preset key {key!r}: {what} makes {model!r} hold {count} parameters, about "
            f"{_gib(16 * count)} with gradients and Adam's state, more than half this "
            f"machine's memory ({_gib(have)})"
        )


def _check_envs(p: Preset) -> None:
    """Every env name is a paper env or a registered Gymnasium id of a graph env (its
    ``module:`` prefix imported), whose schema can be read."""
    from graphwm.envs import env_schema

    for key, names in (("envs", p.envs), ("ablation_envs", p.ablation_envs or ())):
        for i, name in enumerate(names):
            try:
                env_schema(name)
            except (ValueError, TypeError) as err:
                raise PresetError(f"preset key '{key}[{i}]' ({name!r}): {err}") from None


def _check_own_envs(p: Preset) -> None:
    """An env that is not the paper's passes :func:`graphwm_envs.check_graph_env` at each
    stored size (train and validation N) before any work: nothing of an env that breaks the
    contract, or whose ``reset`` raises, is collected, stored or scored (the paper's envs are
    checked by their own tests)."""
    from graphwm.envs import check_own_env, is_paper_env

    sizes = sorted({*p.collect.train_sizes, *p.collect.val_sizes})
    for key, names in (("envs", p.envs), ("ablation_envs", p.ablation_envs or ())):
        for i, name in enumerate(names):
            if is_paper_env(name) or (key == "ablation_envs" and name in p.envs):
                continue
            for n in sizes:
                try:
                    check_own_env(name, n)
                except ValueError as err:
                    raise PresetError(f"preset key '{key}[{i}]': {err}") from None


def check_preset(p: Preset, listed: Iterable[str] | None = None) -> None:
    """Every check of this module except the machine's (see the module docstring);
    ``listed``: the models the preset file itself lists, where the command line narrowed
    ``models`` (their ``train.model_overrides`` stay accepted)."""
    _check_envs(p)
    _check_selection(p)
    _check_models(p, listed)
    _check_grid(p)
    _check_limits(p)
    _check_own_envs(p)  # before the first work that builds and steps an env
    _check_tables_filled(p)
    _check_memory(p)
    _check_work(p)
    from graphwm.work_bounds import check_work_bounds

    check_work_bounds(p, memory_bytes())  # the multi-step horizon, a training step's memory


# ---------------------------------------------------------------------------------------------
# The machine
# ---------------------------------------------------------------------------------------------
def check_device(device: str, key: str = "device") -> None:
    """The device must exist here: ``cuda`` needs ``torch.cuda.is_available()`` (and the
    index below the device count), ``mps`` ``torch.backends.mps.is_available()``."""
    from graphwm.config import DEVICE_PATTERN

    if not DEVICE_PATTERN.fullmatch(str(device)):
        raise PRESET.fail(key, "must be 'cpu', 'cuda', 'cuda:<index>' or 'mps'", device)
    if device == "cpu":
        return
    import torch

    if device.startswith("cuda"):
        if not torch.cuda.is_available():
            raise PresetError(
                f"preset key {key!r}: {device!r} is not available on this machine "
                "(torch.cuda.is_available() is False); use 'cpu'"
            )
        index = int(device.split(":")[1]) if ":" in device else 0
        if index >= torch.cuda.device_count():
            raise PresetError(
                f"preset key {key!r}: {device!r}: this machine has "
                f"{torch.cuda.device_count()} CUDA device(s)"
            )
    elif device == "mps" and not torch.backends.mps.is_available():
        raise PresetError(f"preset key {key!r}: 'mps' is not available on this machine")


def check_machine(p: Preset) -> None:
    """What the preset needs of this machine (its device), checked before any work."""
    check_device(p.device)


@dataclasses.dataclass(frozen=True)
class CheckedPreset(Preset):
    """A :class:`Preset` that passed :func:`check_preset`: what :func:`parse_checked` returns.

    A command checks its preset once and passes this down from stage to stage;
    :func:`parse_checked` hands it back as it is (a frozen preset stays checked). Whether this
    machine has its device is :func:`check_machine`'s (cheap, checked by each entry point).
    Build one with :func:`parse_checked` only (``dataclasses.replace`` of one is unchecked).
    """


def parse_checked(
    raw: Mapping[str, Any] | Preset, listed: Iterable[str] | None = None
) -> CheckedPreset:
    """:meth:`Preset.parse` and :func:`check_preset`: every preset value checked, including
    what needs the envs and the models, before any work (what the pipeline's entry points
    call; this machine's device is :func:`check_machine`'s). A :class:`CheckedPreset` is
    returned as it is. ``listed``: the models (and ablations) the preset file lists where a
    command narrowed ``models`` (``--models``): overrides of those stay accepted."""
    if isinstance(raw, CheckedPreset):
        return raw
    preset = Preset.parse(raw)
    check_preset(preset, listed)
    return CheckedPreset(**{f.name: getattr(preset, f.name) for f in dataclasses.fields(Preset)})
