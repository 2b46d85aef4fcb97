"""One model's CPU training step (issue 36's "CPU step time not slower"), against any tree.

A training step at the paper's OD hyperparameters (``gdm_models.hyperparameters``) on synthetic
15-25-node episodes: loss, backward, gradient clipping (norm 100) and Adam, one torch thread,
``--steps`` steps after ``--warmup`` steps, each tree's own training step (the training
package's ``train_step``, or ``gdm_models.train_step`` in a tree before issue 36), so the same
script times an older tree of gdm-models: put that tree's ``src`` first on ``PYTHONPATH``
and run the two commands alternately (old, new, old, new, ...; a whole-process timer with
paired runs, or ``/usr/bin/time -v``), quoting medians:

    uv run python packages/gdm-models/benchmarks/cpu_step_time.py gdm --steps 12
    PYTHONPATH=/path/to/old/packages/gdm-models/src \\
        uv run python packages/gdm-models/benchmarks/cpu_step_time.py gdm --steps 12

It prints ``<model> <ms> ms/step`` (the mean over the timed steps).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
from gdm_models import EpisodeDataset, FeatureScaler, TrainConfig, get_hyperparameters, make_model
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode

#: the trainers' gradient-norm clipping (gdm_models.TrainConfig's default)
CLIP = TrainConfig().grad_clip

MODELS = ("gdm", "g-rssm", "ea-gwm", "vanilla-gwm")


def _train_step(model, optimiser, generator) -> Callable[[Any], object]:
    """The tree's own training step (loss, backward, clipping at 100, Adam) on a batch: the
    training package's ``train_step`` from issue 36 on, ``gdm_models.train_step`` before."""
    params = list(model.parameters())
    try:
        from gdm_models.training.step import train_step
    except ImportError:  # a tree before issue 36: train_step(model, opt, params, batch, ...)
        from gdm_models.train_step import train_step as old_step  # type: ignore[import-not-found]

        return lambda batch: old_step(
            model, optimiser, params, batch, generator, CLIP, nullcontext()
        )
    return lambda batch: train_step(
        lambda: model.training_loss(batch, generator), optimiser, params, CLIP, nullcontext()
    )


def step_ms(model_name: str, steps: int, warmup: int, seed: int = 0) -> float:
    """Mean milliseconds of ``steps`` training steps of ``model_name`` after ``warmup``."""
    if steps < 1 or warmup < 0:
        raise ValueError(f"need steps >= 1 and warmup >= 0, got steps={steps}, warmup={warmup}")
    torch.set_num_threads(1)
    preset = get_hyperparameters(model_name, "OD")
    rng = np.random.default_rng(seed)
    episodes = [random_episode(int(rng.choice([15, 18, 20, 23, 25])), 30, rng) for _ in range(16)]
    scaler = FeatureScaler.fit(episodes, SYNTHETIC_SCHEMA)
    torch.manual_seed(seed)
    model = make_model(model_name, SYNTHETIC_SCHEMA, scaler, **preset["model"])
    model.train()
    data = EpisodeDataset(episodes, SYNTHETIC_SCHEMA)
    train = preset["train"]
    batches = [
        data.sample_batch(train["batch_size"], rng, seq_len=train["seq_len"]) for _ in range(4)
    ]
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-6)
    generator = torch.Generator().manual_seed(seed)

    step_on = _train_step(model, optimiser, generator)

    def step(i: int) -> None:
        step_on(batches[i % len(batches)])

    for i in range(warmup):
        step(i)
    start = time.perf_counter()
    for i in range(steps):
        step(warmup + i)
    return 1000 * (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("--steps", type=int, default=12, help="timed steps (default 12)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    args = parser.parse_args()
    print(f"{args.model} {step_ms(args.model, args.steps, args.warmup):.1f} ms/step", flush=True)


if __name__ == "__main__":
    main()
