"""The one setup of a training run, of :func:`~gdm_models.training.trainer.train` (one model,
K = 1) and :func:`~gdm_models.training.ensemble.train_ensemble` (K members): the argument
checks, the device, each member's data sampler and noise generator (seeded from its seed as a
single run seeds them), the number of steps, and the engine
(:func:`~gdm_models.training.engines.make_engine`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..data import EpisodeDataset, EpochSampler
from ..member_layers import MemberModel
from ..world_model import WorldModel
from .engines import LoopEngine, MemberEngine, make_engine, not_a_member_model
from .step import check_train_args, default_device, run_seeds

__all__ = ["STRATEGIES", "RunSetup", "setup_run"]

#: ``strategy`` values: "auto" = "members" for a
#: :class:`~gdm_models.member_layers.MemberModel` unless ``compile`` is asked for, else "loop"
STRATEGIES = ("auto", "members", "loop")


@dataclass
class RunSetup:
    """A run ready to train: member k is ``models[k]`` with seed ``seeds[k]``."""

    models: list[WorldModel]
    seeds: list[int]
    engine: MemberEngine | LoopEngine
    samplers: list[EpochSampler]
    gens: list[torch.Generator]
    total: int
    device: torch.device
    strategy: str
    #: member k's training arguments as its ``trainer_state.json`` records them
    args: list[dict[str, Any]]


def _strategy(models: Sequence[WorldModel], strategy: str, compile: bool) -> str:
    if strategy == "vmap":
        raise ValueError(
            "strategy 'vmap' was replaced by 'members' (issue 27: the K members as one model "
            "with member-dimension layers, the same numbers at a fraction of the ops); use "
            "strategy='members' or 'auto'"
        )
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    stackable = isinstance(models[0], MemberModel)  # the model's class opted in
    if strategy == "auto" and not stackable and hasattr(models[0], "member_loss"):
        # a model written for the hooks WorldModel had before issue 36
        warnings.warn(
            f"model {models[0].model_name!r} ({type(models[0]).__name__}) has a member_loss "
            "but its class does not inherit gdm_models.member_layers.MemberModel, so its "
            "ensembles train member by member (the loop); inherit MemberModel to train them "
            "as one member model",
            stacklevel=4,  # train_ensemble's caller
        )
    if strategy == "auto":
        strategy = "members" if stackable and not compile else "loop"
    if strategy == "members" and not stackable:
        raise ValueError(f"strategy 'members': {not_a_member_model(models[0])}")
    if strategy == "members" and compile:
        raise ValueError("compile is for strategy 'loop'; 'members' runs eager or captured")
    return strategy


def setup_run(
    models: Sequence[WorldModel],
    seeds: Sequence[int],
    dataset: EpisodeDataset,
    *,
    steps: int | None,
    epochs: int | None,
    batch_size: int,
    seq_len: int,
    lr: float,
    grad_clip: float | None,
    precision: str,
    compile: bool,
    capture: bool | None,
    strategy: str,
    device: torch.device | str | None,
    log_every: int,
    checkpoint_every: int,
    keep_every: int | None,
) -> RunSetup:
    """Check the arguments (as documented by ``train``), move the models to the device in
    training mode, and build each member's sampler and generator and the engine."""
    check_train_args(
        dataset, steps, epochs, precision, log_every, checkpoint_every, keep_every, lr, grad_clip
    )
    if not dataset.schema.same_features(models[0].schema):
        raise ValueError("dataset schema does not match the model schema")
    strategy = _strategy(models, strategy, compile)
    dev = default_device() if device is None else torch.device(device)
    for m in models:
        m.to(dev)
        m.train()
    samplers, gens = [], []
    for s in seeds:
        data_seed, noise_seed = run_seeds(s)
        samplers.append(EpochSampler(dataset, batch_size, seq_len, seed=data_seed))
        gens.append(torch.Generator(device=dev).manual_seed(noise_seed))
    if steps is not None:
        total = int(steps)
    else:
        assert epochs is not None  # exactly one of them is given (checked above)
        total = int(epochs) * samplers[0].batches_per_epoch
    if total < 0:
        raise ValueError("steps/epochs must be non-negative")
    engine = make_engine(
        models, dataset, batch_size=batch_size, seq_len=seq_len, lr=lr, grad_clip=grad_clip,
        precision=precision, compile=compile, capture=capture, strategy=strategy,
    )  # fmt: skip
    # every hyperparameter of the run: a resume with any of them changed is refused
    args = [
        {"batch_size": batch_size, "seq_len": seq_len, "seed": s, "lr": lr, "grad_clip": grad_clip}
        for s in seeds
    ]
    return RunSetup(list(models), [int(s) for s in seeds], engine, samplers, gens, total, dev,
                    strategy, args)  # fmt: skip
