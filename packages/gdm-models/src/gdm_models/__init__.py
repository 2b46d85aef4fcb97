"""gdm-models: the Graph Dynamics Model (GDM) world model, its training and imagination.

Public API::

    from gdm_models import (Schema, FeatureScaler, EpisodeDataset, WorldModel, make_model,
                            register_model, get_preset, train, train_ensemble, load_checkpoint)
"""

from .api import PREDICTION_KEYS, WorldModel, predictions_to_numpy
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .data import OBS_KEYS, Batch, DataError, EpisodeDataset, EpochSampler
from .ensemble import EnsembleResult, MemberResult, train_ensemble
from .presets import ENV_IDS, get_preset, register_preset
from .registry import available_models, make_model, register_model
from .scaling import FeatureScaler
from .schema import Schema, SchemaError, parse_schema
from .trainer import TrainResult, train

__version__ = "0.1.0"

__all__ = [
    "OBS_KEYS",
    "PREDICTION_KEYS",
    "ENV_IDS",
    "Batch",
    "CheckpointError",
    "DataError",
    "EpisodeDataset",
    "EnsembleResult",
    "EpochSampler",
    "FeatureScaler",
    "GDM",
    "GDMConfig",
    "MemberResult",
    "Schema",
    "SchemaError",
    "TrainResult",
    "WorldModel",
    "available_models",
    "get_preset",
    "load_checkpoint",
    "make_model",
    "parse_schema",
    "predictions_to_numpy",
    "register_model",
    "register_preset",
    "save_checkpoint",
    "train",
    "train_ensemble",
]


def __getattr__(name: str):  # lazy: keep `import gdm_models` light
    if name in ("GDM", "GDMConfig"):
        from . import gdm

        return getattr(gdm, name)
    raise AttributeError(f"module 'gdm_models' has no attribute {name!r}")
