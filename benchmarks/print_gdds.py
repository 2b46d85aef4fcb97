"""Print the single-step GDD and p-value of a few reference transitions per model, as
``graphwm.stages.evaluate.single_step_job`` scores them (the tree's current path): run it in
two trees and compare the outputs to see that a change kept the evaluation's numbers.

    uv run python benchmarks/print_gdds.py 200
    uv run python benchmarks/print_gdds.py 1000 gdm vanilla-gwm
    # an older tree, with this environment's packages:
    PYTHONPATH=src:packages/gdm-models/src:packages/gdd-metric/src:packages/graph-envs/src \\
        .venv/bin/python benchmarks/print_gdds.py 200 > before.txt

It uses ``bench_evaluation.py``'s set-up (OD, one recorded episode of N nodes, fitted
bandwidths, freshly initialised models at the paper's hyperparameters, seed 0), four
reference transitions and 50 permutations; copy it into the older tree if it lacks it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_evaluation as bench  # noqa: E402

DEFAULT_MODELS = ("gdm", "gdm:no-graph-state", "vanilla-gwm", "g-rssm")


def main(argv: list[str]) -> None:
    from gdm_models import FeatureScaler, make_model

    from graphwm.envs import model_hyperparameters
    from graphwm.metric.graph import OBS_KEYS
    from graphwm.metric.protocol import STREAM_POSTERIOR, sample_seeds

    if not argv:
        raise SystemExit(__doc__)
    n, names = int(argv[0]), argv[1:] or DEFAULT_MODELS
    torch.set_num_threads(1)
    schema, small, ctx, replay, _, chosen, env_sets, _, _ = bench._setup("OD", n, 4)
    obs = {k: np.stack([o[k] for o in replay.observations]) for k in OBS_KEYS}
    steps = sorted(replay.snapshots)
    for name in names:
        torch.manual_seed(0)
        scaler = FeatureScaler.fit(small, schema)
        model = make_model(
            name, schema, scaler, **model_hyperparameters(name, "OD")["model"]
        ).eval()
        seed = sample_seeds(7, 0, STREAM_POSTERIOR, 1)[0]
        with torch.no_grad():
            lat = model.observe_at(obs, replay.action_nodes, steps, seed)
        latents = dict(zip(steps, lat, strict=True))
        for t in chosen:
            _, gdd, p = bench._score(model, ctx, replay, latents, t, env_sets[t], 50, True)
            print(f"{name} N={n} t={t} gdd={gdd!r} p={p!r}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
