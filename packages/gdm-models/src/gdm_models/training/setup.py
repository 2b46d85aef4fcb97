"""The one setup of a training run, of :func:`~gdm_models.training.trainer.train` (one model,
K = 1) and :func:`~gdm_models.training.ensemble.train_ensemble` (K members): the argument
checks, the device, each member's data sampler and noise generator (seeded from its seed as a
single run seeds them), the number of steps, and the engine
(:func:`~gdm_models.training.engines.make_engine`)."""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

from ..data import EpisodeDataset, EpochSampler
from ..member_layers import MemberModel
from ..world_model import WorldModel
from .config import STRATEGIES, TrainConfig
from .engines import LoopEngine, MemberEngine, make_engine, not_a_member_model
from .step import default_device, run_seeds

__all__ = ["STRATEGIES", "RunSetup", "setup_run", "torch_threads"]


@contextmanager
def torch_threads(threads: int | None) -> Iterator[None]:
    """Run the body with ``threads`` torch CPU threads (``None``: as they are), then restore."""
    if threads is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


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
    config: TrainConfig


def _strategy(models: Sequence[WorldModel], strategy: str, compile: bool) -> str:
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
    config: TrainConfig,
    strategy: str,
) -> RunSetup:
    """Check the run (``config``'s length, the dataset), move the models to the device in
    training mode, and build each member's sampler and generator and the engine (``strategy``:
    ``config.strategy`` for an ensemble, "loop" for a single run)."""
    c = config
    c.check_length()
    if not isinstance(dataset, EpisodeDataset):
        raise TypeError("dataset must be an EpisodeDataset")
    if not dataset.schema.same_features(models[0].schema):
        raise ValueError("dataset schema does not match the model schema")
    strategy = _strategy(models, strategy, c.compile)
    dev = default_device() if c.device is None else torch.device(c.device)
    for m in models:
        m.to(dev)
        m.train()
    samplers, gens = [], []
    for s in seeds:
        data_seed, noise_seed = run_seeds(s)
        samplers.append(EpochSampler(dataset, c.batch_size, c.seq_len, seed=data_seed))
        gens.append(torch.Generator(device=dev).manual_seed(noise_seed))
    if c.steps is not None:
        total = c.steps
    else:
        assert c.epochs is not None  # exactly one of them is given (checked above)
        total = c.epochs * samplers[0].batches_per_epoch
    engine = make_engine(models, dataset, c, strategy)
    # every hyperparameter of the run: a resume with any of them changed is refused
    args = [
        {"batch_size": c.batch_size, "seq_len": c.seq_len, "seed": s, "lr": c.lr,
         "grad_clip": c.grad_clip}
        for s in seeds
    ]  # fmt: skip
    return RunSetup(list(models), [int(s) for s in seeds], engine, samplers, gens, total, dev,
                    strategy, args, c)  # fmt: skip
