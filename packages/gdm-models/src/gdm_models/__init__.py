"""gdm-models: the Graph Dynamics Model (GDM) world model, its baselines, training and
imagination.

Public API::

    from gdm_models import (Schema, FeatureScaler, EpisodeDataset, WorldModel, MemberModel,
                            make_model, register_model, get_hyperparameters, TrainConfig, train,
                            train_ensemble, load_checkpoint)

Modules in layers, each importing only those below it (checked by import-linter, see the root
pyproject.toml):

1. ``training`` - the training package (:mod:`gdm_models.training`: ``train``,
   ``train_ensemble``, the one training step, the engines, checkpoints, logs);
2. ``registry`` - every model by name (one line per model); ``reference`` - slow reference
   losses for tests and benchmarks;
3. the models: ``gdm`` (the GDM and its ablations), ``baselines`` (Vanilla / EA-GWM, G-RSSM);
4. ``world_model`` (the ``WorldModel`` base class), ``encoder``, ``decoder``, ``losses``;
5. ``member_layers`` (the member axis: the ``MemberModel`` interface a model opts into and
   the member layers of a member model);
6. leaves: ``scaling``, ``data``, ``layers``, ``adjacency``, ``message_passing``,
   ``compiling``, ``hyperparameters`` (hyperparameters of every model, plain data), ``synthetic``;
   below them ``member_ops``, then ``schema``.
"""

from .data import OBS_KEYS, Batch, DataError, EpisodeDataset, EpochSampler
from .gdm import GDM, GDMConfig
from .hyperparameters import (
    ENV_IDS,
    default_hyperparameters,
    default_preset,
    get_hyperparameters,
    get_preset,
    register_hyperparameters,
    register_preset,
)
from .member_layers import MemberModel
from .registry import available_models, make_model, register_model
from .scaling import FeatureScaler
from .schema import Schema, SchemaError, parse_schema
from .training import (
    CheckpointError,
    EnsembleResult,
    MemberResult,
    TrainConfig,
    TrainResult,
    load_checkpoint,
    save_checkpoint,
    train,
    train_ensemble,
)
from .world_model import (
    PREDICTION_KEYS,
    StepResult,
    StepState,
    WorldModel,
    bind_checkpoint_io,
    predictions_to_numpy,
)

# WorldModel.save / WorldModel.load delegate to the checkpoint layer above the base class
bind_checkpoint_io(save_checkpoint, load_checkpoint)

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
    "MemberModel",
    "MemberResult",
    "Schema",
    "SchemaError",
    "StepResult",
    "StepState",
    "TrainResult",
    "WorldModel",
    "available_models",
    "default_hyperparameters",
    "get_hyperparameters",
    "load_checkpoint",
    "make_model",
    "parse_schema",
    "predictions_to_numpy",
    "register_model",
    "register_hyperparameters",
    "save_checkpoint",
    "TrainConfig",
    "train",
    # deprecated names of get_hyperparameters, register_hyperparameters, default_hyperparameters
    "get_preset",
    "register_preset",
    "default_preset",
    "train_ensemble",
]
