"""The Graph Dynamics Model (paper, section "Graph Dynamics Model"), in layers:

* :mod:`.config` - :class:`GDMConfig` and the named :data:`ABLATIONS` (plain data);
* :mod:`.latent` - the latent :class:`GDMLatent` and the :class:`Noise` source;
* :mod:`.parts` - the named parts of the network, one per paragraph of the paper;
* :mod:`.step` - the posterior step (written once) and its scan;
* :mod:`.cell` - :class:`GDMCell`, the parts composed: posterior pass, prior, imagination step;
* :mod:`.terms` - the per-transition loss terms and their weighting (paper eq. loss);
* :mod:`.sequence_loss` - the time-vectorised training loss built from the cell;
* :mod:`.model` - :class:`GDM`, the world model (loss, observe/imagine, start/step) and its
  registry factory :func:`build_gdm`.
"""

from __future__ import annotations

from .cell import GDMCell
from .config import ABLATIONS, GDMConfig
from .latent import GDMLatent, Noise, permute_noise
from .model import GDM, build_gdm
from .sequence_loss import draw_sequence_noise, sequence_noise_to_steps

__all__ = [
    "ABLATIONS",
    "GDM",
    "GDMCell",
    "GDMConfig",
    "GDMLatent",
    "Noise",
    "build_gdm",
    "draw_sequence_noise",
    "permute_noise",
    "sequence_noise_to_steps",
]
