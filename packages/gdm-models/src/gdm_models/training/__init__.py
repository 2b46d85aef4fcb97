"""Training: one training step for every way a model is trained, and the loop around it.

Modules, each importing only those below it (checked by import-linter, see the root
pyproject.toml):

1. ``ensemble`` - :func:`train_ensemble` (K seeds of one configuration); ``trainer`` -
   :func:`train` (one run); ``session`` - what they share (their common keywords,
   :class:`RunOptions`, and the run once set up); ``callbacks`` - the trainers' own callbacks
   (logs, checkpoints, progress bar);
2. ``setup`` - a run's members, samplers and engine; ``ensemble_state`` - the ensemble's
   ``latest/`` folder; ``loop`` - the one training loop
   (:func:`~gdm_models.training.loop.run_loop`) and its hooks (:class:`Callback`);
3. ``engines`` - the loop engine (K ordinary models) and the member engine (K members as one
   member model);
4. ``capture`` - the static-shape step and its CUDA graph; ``state`` - a run's ``latest/``
   trainer state; ``members`` - member-folded batches and Adam states;
5. ``step`` - THE training step (:func:`~gdm_models.training.step.train_step`) and THE
   gradient-norm clipping (:func:`~gdm_models.training.step.clip_grad_norms_`);
   ``checkpoint`` - save / verify / load a model;
6. leaves: ``config`` (:class:`TrainConfig`, every hyperparameter of a run, each default
   written once), ``host_sync`` (find host synchronisations in a step), ``tensorboard_log``
   (TensorBoard event files beside the CSV log; optional extra).
"""

from .callbacks import CallbackError
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .config import TrainConfig
from .ensemble import EnsembleResult, MemberResult, train_ensemble
from .ensemble_state import verify_ensemble_state
from .loop import Callback, RunInfo
from .session import RunOptions
from .state import verify_trainer_state
from .trainer import TrainResult, train

__all__ = [
    "Callback",
    "CallbackError",
    "CheckpointError",
    "EnsembleResult",
    "MemberResult",
    "RunInfo",
    "RunOptions",
    "TrainConfig",
    "TrainResult",
    "load_checkpoint",
    "save_checkpoint",
    "train",
    "train_ensemble",
    "verify_ensemble_state",
    "verify_trainer_state",
]
