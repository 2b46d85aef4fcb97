"""graphwm: the paper's experiments, wiring graphwm_envs, gdm_models and gdd_metric together.

Stages (``graphwm.pipeline``): collect -> fit -> train -> evaluate -> report, each a CLI
subcommand of ``graphwm`` and a Python function; ``graphwm reproduce`` runs them all from a
preset (``graphwm.presets``: tiny, smoke, paper). See ``docs/reproducing.md``.
"""

__version__ = "0.1.0"
