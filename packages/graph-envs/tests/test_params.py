"""Every field of every env's ``XParams`` dataclass is checked, with the field in the message."""

from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest
from graphwm_envs.cf.shk import SHKParams
from graphwm_envs.cf.types import CFParams
from graphwm_envs.od.types import ODParams
from graphwm_envs.rgc.types import RGCParams
from graphwm_envs.sar.types import SARParams

PARAMS = (RGCParams, ODParams, SARParams, CFParams, SHKParams)
FIELDS = [(cls, field.name, field.default) for cls in PARAMS for field in dataclasses.fields(cls)]
IDS = [f"{cls.__name__}.{name}" for cls, name, _ in FIELDS]


def _named(cls, name):
    return re.escape(f"{cls.__name__}.{name} ")


@pytest.mark.parametrize("cls", PARAMS)
def test_defaults_and_numpy_scalars_are_accepted(cls):
    default = cls()
    as_numpy = {
        f.name: (np.float64(v) if isinstance(v, float) else np.int64(v))
        for f in dataclasses.fields(cls)
        if isinstance(v := getattr(default, f.name), int | float)
    }
    assert cls(**as_numpy) == default


@pytest.mark.parametrize(("cls", "name", "default"), FIELDS, ids=IDS)
def test_a_string_is_refused_naming_the_field(cls, name, default):
    with pytest.raises((TypeError, ValueError), match=_named(cls, name)):
        cls(**{name: str(default) + "x" if isinstance(default, str) else str(default)})


@pytest.mark.parametrize(
    ("cls", "name", "default"), [f for f in FIELDS if isinstance(f[2], float)], ids=str
)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_reals_are_refused_naming_the_field(cls, name, default, bad):
    with pytest.raises(ValueError, match=_named(cls, name)):
        cls(**{name: bad})


@pytest.mark.parametrize(
    ("cls", "name", "default"),
    [f for f in FIELDS if type(f[2]) is int],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_integer_fields_refuse_floats_and_bools(cls, name, default):
    with pytest.raises(TypeError, match=_named(cls, name)):
        cls(**{name: default + 0.5})
    with pytest.raises(TypeError, match=_named(cls, name)):
        cls(**{name: True})


def test_the_reported_cases():
    with pytest.raises(ValueError, match=r"SARParams\.step_reward must be finite, got nan"):
        SARParams(step_reward=float("nan"))
    with pytest.raises(TypeError, match=r"ODParams\.horizon must be an integer, got 2\.5"):
        ODParams(horizon=2.5)
    with pytest.raises(TypeError, match=r"SARParams\.stability_loss must be a real number"):
        SARParams(stability_loss="0.3")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: RGCParams(edge_probability=1.0),
            r"RGCParams\.edge_probability must lie in \(0, 1\)",
        ),
        (
            lambda: RGCParams(budget_fraction=0.0),
            r"RGCParams\.budget_fraction must lie in \(0, 1\]",
        ),
        (lambda: ODParams(target_opinion=5), r"ODParams\.target_opinion must lie in \[0, 4\]"),
        (lambda: ODParams(num_opinions=1), r"ODParams\.num_opinions must lie in \[2, inf\]"),
        (lambda: ODParams(temperature=0.0), r"ODParams\.temperature must lie in \(0, inf\)"),
        (lambda: ODParams(horizon=0), r"ODParams\.horizon must lie in \[1, inf\]"),
        (
            lambda: SARParams(stability_high=0.4),
            r"SARParams\.stability_high must lie in \[0\.5, 1\]",
        ),
        (lambda: SARParams(collapse_threshold=-0.1), r"SARParams\.collapse_threshold"),
        (lambda: SARParams(observation_hops=-1), r"SARParams\.observation_hops"),
        (lambda: CFParams(xi_low=1.5, xi_high=1.2), r"CFParams needs xi_low <= xi_high"),
        (lambda: CFParams(xi_low=0.0), r"CFParams\.xi_low must lie in \(0, inf\)"),
        (lambda: CFParams(horizon_frac=0.0), r"CFParams\.horizon_frac"),
        (lambda: SHKParams(s=-0.1), r"SHKParams\.s must lie in \[0, 1\]"),
    ],
)
def test_ranges_name_the_field_and_the_interval(make, message):
    with pytest.raises(ValueError, match=message):
        make()


ENV_PARAMS = [("RGC", RGCParams), ("OD", ODParams), ("SAR", SARParams), ("CF", CFParams)]


@pytest.mark.parametrize(("env_id", "cls"), ENV_PARAMS)
def test_every_env_takes_its_params_and_refuses_another_class(env_id, cls):
    """GraphEnv checks ``params=`` against the env's ``params_class`` (defaults when None)."""
    import graphwm_envs  # noqa: F401
    import gymnasium as gym

    env = gym.make(f"graphenv/{env_id}-v0", num_nodes=10).unwrapped
    assert type(env).params_class is cls and env.params == cls()
    custom = dataclasses.replace(cls(), horizon=7) if env_id == "OD" else cls()
    assert gym.make(f"graphenv/{env_id}-v0", num_nodes=10, params=custom).unwrapped.params is custom
    other = SHKParams()
    with pytest.raises(TypeError, match=f"params must be a {cls.__name__} or None, got SHKParams"):
        gym.make(f"graphenv/{env_id}-v0", num_nodes=10, params=other)


def test_an_env_without_a_params_class_refuses_params():
    from graphwm_envs.sar.env import SAREnv

    class NoParams(SAREnv):
        params_class = None

    with pytest.raises(TypeError, match="NoParams takes no params"):
        NoParams(10, params=SARParams())
