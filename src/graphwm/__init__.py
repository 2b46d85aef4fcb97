"""graphwm: the paper's experiments, wiring graphwm_envs, gdm_models and gdd_metric together.

Stages (``graphwm.pipeline``): collect -> fit -> train -> evaluate -> report, each a CLI
subcommand of ``graphwm`` and a Python function; ``graphwm reproduce`` runs them all from a
preset (``graphwm.presets``: tiny, smoke, paper). See ``docs/reproducing.md``.
:func:`load_preset` reads a preset, checked once; :func:`open_run` opens a finished run from
Python (``docs/metric.md``).
"""

from __future__ import annotations

import importlib
import os
from typing import Any

__version__ = "0.1.0"


def open_run(run_dir: str | os.PathLike[str]) -> Any:
    """Open a run directory for reading: a :class:`graphwm.run.Run`
    (:func:`graphwm.run.open_run`; imported on first use, so ``import graphwm`` stays light
    and the package's own modules never import it)."""
    return importlib.import_module("graphwm.run").open_run(run_dir)


def load_preset(name_or_path: str | os.PathLike[str], overrides: Any = None) -> Any:
    """A preset by name (``tiny``, ``smoke``, ``paper``) or TOML file, parsed and checked once:
    a :class:`graphwm.checks.CheckedPreset` that every pipeline function takes as it is
    (:func:`graphwm.pipeline.load_preset`; imported on first use, as :func:`open_run`)."""
    return importlib.import_module("graphwm.pipeline").load_preset(name_or_path, overrides)
