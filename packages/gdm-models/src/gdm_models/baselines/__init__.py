"""Baseline world models behind the common :class:`~gdm_models.api.WorldModel` API.

Registered names (see :func:`gdm_models.registry.make_model`):

* ``"vanilla-gwm"`` - :class:`~gdm_models.baselines.gwm.GWM` trained on the one-step losses;
* ``"ea-gwm"`` - the same architecture plus the rollout-consistency, spectral and critical-node
  losses (:mod:`gdm_models.baselines.ea_losses`);
* ``"g-rssm"`` - :class:`~gdm_models.baselines.grssm.GRSSM`.

Importing this package also registers their presets from the paper's final hyperparameter
table (:func:`gdm_models.presets.get_preset`), for the environments RGC, OD, SAR and CF.
"""

from __future__ import annotations

from functools import partial

from ..presets import register_preset
from ..registry import register_model
from .grssm import GRSSM, GRSSMConfig, GRSSMLatent, build_grssm
from .gwm import EA_DEFAULTS, GWM, GWMConfig, build_gwm

__all__ = [
    "GWM",
    "GWMConfig",
    "GRSSM",
    "GRSSMConfig",
    "GRSSMLatent",
    "EA_DEFAULTS",
    "BASELINE_PRESETS",
    "build_gwm",
    "build_grssm",
]

register_model("vanilla-gwm", partial(build_gwm, ea=False), overwrite=True)
register_model("ea-gwm", partial(build_gwm, ea=True), overwrite=True)
register_model("g-rssm", build_grssm, overwrite=True)


def _train(lr: float) -> dict:
    # Adam, batch 8, sequence length 20 (paper, appendix "Training Details")
    return {"lr": lr, "batch_size": 8, "seq_len": 20}


def _gwm(lr: float, layers: int, dim: int, beta_adj: float) -> dict:
    return {
        "model": {"mp_layers": layers, "hidden_dim": dim, "beta_adj": beta_adj},
        "train": _train(lr),
    }


def _grssm(layers: int, enc_layers: int, beta_adj: float, free_bits: float) -> dict:
    return {
        "model": {
            "mp_layers": layers,  # L: rounds of recurrent all-pairs message passing
            "encoder_layers": enc_layers,  # Encoder L
            "embed_dim": 128,  # dim(e) *
            "hidden_dim": 128,  # dim(h) *
            "latent_groups": 8,  # dim(z) = 8 x 8 *
            "latent_classes": 8,
            "beta_adj": beta_adj,
            "beta_dyn": 1.0,  # *
            "beta_rep": 0.1,  # *
            "beta_pred": 1.0,  # *
            "free_bits": free_bits,  # *
            # the experiments reproduce the paper's exact decoder logit (no learned bias)
            "adj_bias": False,
        },
        "train": _train(1e-3),
    }


#: Final hyperparameters (paper, appendix "Final Hyperparameters"); * = unsearched.
BASELINE_PRESETS: dict[str, dict[str, dict]] = {
    "ea-gwm": {
        "RGC": _gwm(1e-3, 2, 64, 1.0),
        "OD": _gwm(1e-4, 4, 64, 1.0),
        "SAR": _gwm(5e-4, 2, 128, 1.0),
        "CF": _gwm(1e-4, 4, 128, 1.0),
    },
    "vanilla-gwm": {
        "RGC": _gwm(5e-4, 2, 64, 0.1),
        "OD": _gwm(1e-4, 4, 128, 0.1),
        "SAR": _gwm(1e-4, 2, 128, 0.1),
        "CF": _gwm(1e-4, 1, 128, 0.1),
    },
    "g-rssm": {
        "RGC": _grssm(3, 1, 10.0, 0.0),
        "OD": _grssm(1, 1, 1.0, 0.01),
        "SAR": _grssm(1, 2, 10.0, 0.01),
        "CF": _grssm(1, 1, 0.1, 0.01),
    },
}

for _model, _by_env in BASELINE_PRESETS.items():
    for _env, _preset in _by_env.items():
        register_preset(_model, _env, _preset)
