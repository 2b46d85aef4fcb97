"""The paper's baseline world models behind the common
:class:`~gdm_models.world_model.WorldModel` API (registered by name in
:mod:`gdm_models.registry`; hyperparameters in :mod:`gdm_models.hyperparameters`):

* ``"vanilla-gwm"`` - :class:`~gdm_models.baselines.gwm.GWM` trained on the one-step losses;
* ``"ea-gwm"`` - the same architecture plus the rollout-consistency, spectral and critical-node
  losses (:mod:`gdm_models.baselines.ea_losses`);
* ``"g-rssm"`` - :class:`~gdm_models.baselines.grssm.GRSSM`.
"""

from __future__ import annotations

from .grssm import GRSSM, GRSSMConfig, GRSSMLatent, build_grssm
from .gwm import EA_DEFAULTS, GWM, GWMConfig, build_gwm

__all__ = [
    "GWM",
    "GWMConfig",
    "GRSSM",
    "GRSSMConfig",
    "GRSSMLatent",
    "EA_DEFAULTS",
    "build_gwm",
    "build_grssm",
]
