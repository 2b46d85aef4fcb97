"""The preset: its TOML file read once into frozen pydantic models, one per section.

Every default of the pipeline is a field default below; unknown keys are refused. A bad value
raises :class:`PresetError` naming the key, the value and what is allowed (``preset key
'collect.train_episodes': must be an integer >= 1, got 0``; the CLI puts the file in front).
What needs the envs, the models or the machine is checked by :mod:`graphwm.checks`.
"""

from __future__ import annotations

import copy
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Self

from gdm_models.training.config import PRECISIONS, TrainConfig
from pydantic import StrictBool, field_validator, model_validator

from graphwm.config_values import (
    Float,
    Given,
    Int,
    Items,
    Name,
    Names,
    PresetError,
    Rule,
    Section,
    Seed,
    Sizes,
    Str,
    _fail,
    _short,
)
from graphwm.downstream.section import DownstreamConfig

#: the trainer's defaults (gdm_models.training.TrainConfig): the [train] section's are these
_TRAINER = TrainConfig()

PRESET_NAMES = ("smoke", "medium", "long", "survey", "paper", "tiny")
#: the shipped presets (package data beside this module)
PRESETS_DIR = Path(__file__).resolve().parent / "presets"
#: the largest preset file read (the shipped ones are a few kilobytes)
MAX_PRESET_BYTES = 2**20
EXECUTORS = ("local", "ray")
# whether this machine has the device: graphwm.checks
DEVICE_PATTERN = re.compile(r"cpu|cuda(:\d+)?|mps")
DEVICES = "'cpu', 'cuda', 'cuda:<index>' or 'mps'"


# -- the sections: every default of the pipeline is a field default below --------------------
class CollectConfig(Section):
    """Stage 1: sizes and episode counts per split (``[collect]``)."""

    train_sizes: Sizes  # N of the training files (observations stored)
    train_episodes: Annotated[int, Int(ge=1)]
    val_sizes: Sizes  # N of the validation files (search)
    val_episodes: Annotated[int, Int(ge=1)]
    test_sizes: Sizes  # N of the test files (replayed from seeds)
    test_episodes: Annotated[int, Int(ge=1)]
    # RGC episodes are quadratic in N (docs/reproducing.md): its test sizes above are skipped
    rgc_max_test_size: Annotated[int, Int(ge=2)] = 200


class FitConfig(Section):
    """Stage 2: bandwidth fitting (``[fit]``; paper appendix "Bandwidth Fitting")."""

    transitions_per_episode: Annotated[int, Int(ge=1)] = 8
    seed: Seed = 0


class TrainerSettings(Section):
    """``[train.train_overrides]`` and a search grid's trainer keys: set for every model (else
    each model's own hyperparameters hold)."""

    lr: Annotated[float, Float(gt=0.0, le=10.0)] | None = None  # Adam learning rate
    batch_size: Annotated[int, Int(ge=1)] | None = None  # episodes per batch
    seq_len: Annotated[int, Int(ge=1)] | None = None  # transitions per training sequence


TRAINER_KEYS = tuple(TrainerSettings.model_fields)


class TrainSection(Section):
    """Stage 3 (``[train]``): exactly one of ``steps`` and ``epochs``; ``model_overrides``: a
    base model name -> its hyperparameters (checked by :mod:`graphwm.checks`); ``ensemble``:
    the most seeds of one configuration trained together; ``eval_every``: steps between the
    checkpoints evaluated for the GDD curve (0: off)."""

    steps: Annotated[int, Int(ge=1)] | None = None
    epochs: Annotated[int, Int(ge=1)] | None = None
    checkpoint_every: Annotated[int, Int(ge=1)] = _TRAINER.checkpoint_every
    model_overrides: dict[str, dict[str, Any]] = {}
    train_overrides: Annotated[dict[str, Any], Given(TrainerSettings)] = {}
    precision: Annotated[str, Str(PRECISIONS)] = _TRAINER.precision
    compile: StrictBool = _TRAINER.compile
    log_every: Annotated[int, Int(ge=1)] = _TRAINER.log_every
    tensorboard: StrictBool = False  # needs the graphwm[tensorboard] extra
    ensemble: Annotated[int, Int(ge=1)] = _TRAINER.ensemble
    eval_every: Annotated[int, Int(ge=0)] = 0

    @model_validator(mode="after")
    def _length(self) -> Self:
        if (self.steps is None) == (self.epochs is None):
            raise _fail("", "give exactly one of 'steps' and 'epochs'")
        if self.eval_every and self.steps is None:
            what = "needs the training length in 'steps' (not 'epochs')"
            raise _fail("eval_every", what, self.eval_every)
        if self.eval_every > (self.steps or 0):
            raise _fail("eval_every", f"must be at most 'steps' = {self.steps}", self.eval_every)
        return self


class EvalConfig(Section):
    """Stages 4-6 (``[evaluate]``): ``num_samples`` is kappa (>= 2: the unbiased self-GDD and
    the permutation test need two per set); ``permutations`` > 0 adds the permutation test (at
    most 10^6); ``curve_episodes``: the first test episodes, the GDD curve's subset."""

    num_samples: Annotated[int, Int(ge=2)]
    reference_transitions: Annotated[int, Int(ge=1)]
    max_episodes: Annotated[int, Int(ge=1)] | None = None  # test episodes used (None: all)
    permutations: Annotated[int, Int(ge=0, le=10**6)] = 0
    alpha: Annotated[float, Float(gt=0.0, lt=1.0)] = 0.05
    curve_episodes: Annotated[int, Int(ge=1)] = 2

    def evaluated(self, test_episodes: int) -> int:
        """The test episodes the final evaluation uses."""
        return min(test_episodes, self.max_episodes or test_episodes)


class MultiStepConfig(Section):
    """Stage 7: multi-step rollouts (``[multi_step]``)."""

    num_samples: Annotated[int, Int(ge=2)]
    reference_transitions: Annotated[int, Int(ge=1)]
    size: Annotated[int, Int(ge=2)]  # N of the multi-step test file
    horizon: Annotated[int, Int(ge=1)]  # rollout length H
    max_episodes: Annotated[int, Int(ge=1)] | None = None


class SearchConfig(Section):
    """``[search]``: ``grid.<model>.<name>`` lists the values of one hyperparameter (a list of
    tables sets several at once; checked by :mod:`graphwm.checks`) and the validation sizes."""

    grid: dict[str, dict[str, list]] = {}
    val_sizes: Sizes | None = None


#: an ablation names its variant: a base model here would silently train as a model
Ablation = Annotated[str, Rule(lambda v: ":" in v, "must name an ablation ('<model>:<variant>', "
                               "e.g. 'gdm:no-h-plus'): this is a base model, not an ablation; "
                               "list it under 'models'")]  # fmt: skip
#: an env's label in every table and figure
Label = Annotated[str, Rule(lambda v: v and v == v.strip(), "a label must be non-empty text "
                            "without leading or trailing spaces")]  # fmt: skip


class Preset(Section):
    """A preset, parsed (:meth:`parse`; checked: :func:`graphwm.checks.parse_checked`).

    ``envs``: the paper's short names or Gymnasium ids of other graph envs (docs/own-env.md);
    ``env_labels``: their labels in tables and figures; ``ablation_sizes``: the test sizes
    the ablations are evaluated at (None: all); ``workers``: 0 is one per core.
    """

    envs: Names
    models: Names
    seeds: Annotated[tuple[Seed, ...], Items()]
    collect: CollectConfig
    train: TrainSection
    evaluate: EvalConfig
    name: Annotated[str, Str()] = "custom"
    fit: FitConfig = FitConfig()
    ablations: Annotated[tuple[Ablation, ...], Items(allow_empty=True)] = ()
    ablation_envs: Annotated[tuple[Name, ...], Items(allow_empty=True)] | None = None
    env_labels: dict[str, Label] = {}
    ablation_sizes: Sizes | None = None
    device: Annotated[str, Rule(DEVICE_PATTERN.fullmatch, f"must be {DEVICES}")] = "cpu"
    executor: Annotated[str, Str(EXECUTORS)] = "local"
    workers: Annotated[int, Int(ge=0)] = 0
    multi_step: MultiStepConfig | None = None
    search: SearchConfig | None = None
    downstream: DownstreamConfig | None = None

    @field_validator("multi_step", mode="before")
    @classmethod
    def _empty_multi_step(cls, raw: Any) -> Any:
        return None if raw == {} else raw  # an empty [multi_step]: no multi-step stage

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        """What would silently do nothing is refused: a label of an env the preset does not
        run (or two envs' same label), an ablation env it does not run, an ablation size that
        is no test size. The GDD curve's subset lies inside the final evaluation's episodes;
        unset, it is lowered to them (a key the user never set must not fail a preset)."""
        envs = f"one of the preset's envs {list(self.envs)}"
        for env in self.env_labels:
            if env not in self.envs:
                raise _fail(f"env_labels.{env}", f"{env!r} is not {envs}")
        shown = [self.env_labels.get(env, env) for env in self.envs]
        if twice := sorted({name for name in shown if shown.count(name) > 1}):
            what = f"two envs would share the label {twice[0]!r} in every table and figure"
            raise _fail("env_labels", what)
        sizes = list(self.collect.test_sizes)
        for i, size in enumerate(self.ablation_sizes or ()):
            if size not in sizes:
                what = f"must be one of 'collect.test_sizes' {sizes} (the ablations' sizes)"
                raise _fail(f"ablation_sizes[{i}]", what, size)
        for i, env in enumerate(self.ablation_envs or () if self.ablations else ()):
            if env not in self.envs:
                what = f"must be {envs} (its ablations would never be trained)"
                raise _fail(f"ablation_envs[{i}]", what, env)
        e = self.evaluate
        evaluated = e.evaluated(self.collect.test_episodes)
        if "curve_episodes" not in e.model_fields_set and e.curve_episodes > evaluated:
            object.__setattr__(self, "evaluate", e.model_copy(update={"curve_episodes": evaluated}))
        elif self.train.eval_every and e.curve_episodes > evaluated:
            raise _fail("evaluate.curve_episodes", f"must be at most the {evaluated} test "
                        "episodes the final evaluation uses (collect.test_episodes, "
                        "evaluate.max_episodes)", e.curve_episodes)  # fmt: skip
        return self

    # -- derived views -----------------------------------------------------------------------
    def test_sizes(self, env: str) -> tuple[int, ...]:
        """Test sizes of an env (RGC is capped: its episodes are quadratic in N)."""
        sizes = self.collect.test_sizes
        if env == "RGC":
            sizes = tuple(n for n in sizes if n <= self.collect.rgc_max_test_size)
        return sizes

    def eval_sizes(self, env: str, model: str) -> tuple[int, ...]:
        """The test sizes ``model`` is evaluated at on ``env``: :meth:`test_sizes`, for an
        ablation only those in ``ablation_sizes`` (when set)."""
        sizes = self.test_sizes(env)
        if model in self.models or self.ablation_sizes is None:
            return sizes
        return tuple(n for n in sizes if n in self.ablation_sizes)

    def models_of(self, env: str) -> tuple[str, ...]:
        """The models trained on ``env``: the preset's models plus its ablations if selected."""
        models = list(self.models)
        if self.ablation_envs is None or env in self.ablation_envs:
            models += [a for a in self.ablations if a not in models]
        return tuple(models)

    def to_dict(self) -> dict[str, Any]:
        """A plain dict that :meth:`parse` reads back to an equal preset."""
        return self.model_dump(mode="json", exclude_none=True)


def read_preset(name_or_path: str | Path) -> dict[str, Any]:
    """The raw dict of a named preset (``smoke``, ``paper``, ``tiny``) or a TOML file;
    :class:`PresetError` for an unknown name, a missing or odd file, or one that is not TOML."""
    text = str(name_or_path)
    if not text.strip():
        raise PresetError(f"the preset is empty: give one of {PRESET_NAMES} or a .toml file")
    if text in PRESET_NAMES:
        return tomllib.loads((PRESETS_DIR / f"{text}.toml").read_text(encoding="utf-8"))
    path = Path(name_or_path)
    if path.suffix != ".toml" and len(path.parts) <= 1 and not path.exists():
        raise PresetError(f"unknown preset {text!r}: give one of {PRESET_NAMES} or a .toml file")
    if not path.is_file():
        what = "is not a regular file" if path.exists() else "does not exist"
        raise PresetError(f"preset file {path} {what}")
    if path.stat().st_size > MAX_PRESET_BYTES:
        raise PresetError(f"preset file {path} is {path.stat().st_size} bytes; a preset is at "
                          f"most {MAX_PRESET_BYTES}")  # fmt: skip
    try:
        # a UTF-8 byte order mark (some editors write one) is read as what it is, not TOML
        return tomllib.loads(path.read_bytes().decode("utf-8-sig"))
    except UnicodeDecodeError as err:
        raise PresetError(f"preset file {path} is not UTF-8 text ({err.reason})") from None
    except tomllib.TOMLDecodeError as err:
        raise PresetError(f"preset file {path} is not valid TOML: {err}") from None
    except RecursionError:
        raise PresetError(f"preset file {path} nests arrays or tables too deeply") from None


def apply_overrides(raw: Mapping[str, Any], overrides: Mapping[str, Any] | None) -> dict:
    """A deep copy of ``raw`` with overrides: ``"a.b"`` keys set nested tables (a
    :class:`PresetError` where ``a`` is no table), ``None`` values are skipped."""
    try:
        out = copy.deepcopy(dict(raw))
    except RecursionError:
        raise PresetError("the preset nests arrays or tables too deeply") from None
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        *parents, leaf = key.split(".")
        table = out
        for i, p in enumerate(parents):
            table = table.setdefault(p, {})
            if not isinstance(table, dict):
                where = ".".join(parents[: i + 1])
                raise PresetError(f"preset key {where!r}: must be a table (to set {key!r}), "
                                  f"got {_short(table)}")  # fmt: skip
        table[leaf] = value
    return out


def preset_dict(
    name_or_path: str | Path | Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The preset by name, TOML file (or dict) as a plain dict to edit, unchecked, with
    :func:`apply_overrides`. A ``"models"`` override runs only those: the
    ``train.model_overrides`` of base models the preset no longer runs (in neither ``models``
    nor ``ablations``) go with them (:mod:`graphwm.checks` refuses a table of a model not run)."""
    raw = name_or_path if isinstance(name_or_path, Mapping) else read_preset(name_or_path)
    out = apply_overrides(raw, overrides)
    train, ablations = out.get("train"), out.get("ablations")
    if isinstance((overrides or {}).get("models"), list) and isinstance(train, dict):
        kept = [*out["models"], *(ablations if isinstance(ablations, list) else [])]
        runs = {str(m).split(":", 1)[0] for m in kept}
        tables = train.get("model_overrides")
        if isinstance(tables, dict):
            train["model_overrides"] = {k: v for k, v in tables.items() if k in runs}
    return out
