"""Ensemble-training benchmark: one step of K members against one single-model step.

For each model (GDM and the baselines, paper presets of OD, OD's feature schema, B = 8
windows of L = 20 transitions on 15-25-node graphs with mean degree ~4, as
``bench_baselines.py``) it times, in the same run and on the same data:

* ``single``: one step of the existing trainer (``gdm_models.trainer._train_step``: loss,
  backward, ``clip_grad_norm_``, Adam) of one model;
* ``vmap K`` / ``loop K``: one step of a K-member ensemble (``gdm_models.ensemble_engines``;
  vmap: stacked parameters through ``torch.func.vmap``, loop: the single step per member);
  with ``--compile`` also ``vmap+compile K`` (the vmapped loss and gradient through
  ``torch.compile``, mode "reduce-overhead" = CUDA graphs on CUDA).

Printed: ms per step (median), the ratio to the single step (target: CPU K=4 <= 2x, GPU
K=10 <= 1.5x) and ms per member-step. The single step and the ensemble step are timed in
alternation, so the ratio holds up on a shared machine even when the absolute times do not.

Usage::

    uv run python packages/gdm-models/benchmarks/bench_ensemble.py --device cpu --quick
    python3 packages/gdm-models/benchmarks/bench_ensemble.py --device cuda --compile
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch
from gdm_models import EpisodeDataset, EpochSampler, FeatureScaler, get_preset, make_model
from gdm_models.ensemble_engines import LoopEngine, VmapEngine
from gdm_models.ensemble_loss import member_loss_for
from gdm_models.synthetic import schema_episode
from gdm_models.trainer import _to_device, _train_step

OD = {
    "node_continuous": ["vibe"],
    "node_categorical": {"opinion": 5},
    "graph_continuous": ["k_frac", "k_frac_env"],
    "graph_categorical": {},
}
MODELS = ("gdm", "vanilla-gwm", "ea-gwm", "g-rssm")
SIZES = (15, 18, 20, 23, 25)
B, L = 8, 20


def _data(seed: int = 0) -> tuple[EpisodeDataset, FeatureScaler]:
    rng = np.random.default_rng(seed)
    eps = [schema_episode(OD, int(n), L + 5, rng, edge_p=4.0 / n) for n in rng.choice(SIZES, 32)]
    return EpisodeDataset(eps, OD), FeatureScaler.fit(eps, OD)


def _models(name: str, k: int, scaler: FeatureScaler, dev: torch.device) -> list:
    cfg = get_preset(name, "OD")["model"]
    out = []
    for s in range(k):
        torch.manual_seed(s)
        out.append(make_model(name, OD, scaler, **cfg).to(dev).train())
    return out


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _time(steps_fns: list[Callable[[], object]], dev: torch.device, steps: int) -> list[float]:
    """Median ms per call of each function, timed in alternation (so that load changes on a
    shared machine hit all of them alike) after two warm-up calls each (compilation happens
    there)."""
    for fn in steps_fns:
        fn()
        fn()
    _sync(dev)
    times: list[list[float]] = [[] for _ in steps_fns]
    for _ in range(steps):
        for fn, out in zip(steps_fns, times, strict=True):
            t0 = time.perf_counter()
            fn()
            _sync(dev)
            out.append(time.perf_counter() - t0)
    return [1000 * statistics.median(t) for t in times]


def bench(name: str, dev: torch.device, ks: list[int], steps: int, compile_: bool) -> None:
    ds, scaler = _data()
    lr = get_preset(name, "OD")["train"]["lr"]
    autocast = torch.autocast(dev.type, enabled=False)
    [model] = _models(name, 1, scaler, dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    params = [p for p in model.parameters() if p.requires_grad]
    sampler = EpochSampler(ds, B, L, seed=0)
    gen = torch.Generator(device=dev).manual_seed(0)

    def single() -> None:
        batch = _to_device(sampler.next_batch(), dev)
        _train_step(model, opt, params, batch, gen, 100.0, autocast)

    kinds = ["vmap", "loop"] if dev.type == "cpu" else ["vmap"]
    if compile_:
        kinds.append("vmap+compile")
    if member_loss_for(model) is None:
        kinds = ["loop"]
    for kind in kinds:
        for k in ks:
            members = _models(name, k, scaler, dev)
            if kind.startswith("vmap"):
                engine: VmapEngine | LoopEngine = VmapEngine(
                    members, member_loss_for(members[0]), lr=lr, clip=100.0,  # type: ignore[arg-type]
                    autocast=autocast, compile=kind.endswith("compile"),
                )  # fmt: skip
            else:
                engine = LoopEngine(members, lr=lr, clip=100.0, autocast=autocast)
            engine.build(list(range(k)), None)
            samplers = [EpochSampler(ds, B, L, seed=s) for s in range(k)]
            gens = [torch.Generator(device=dev).manual_seed(s) for s in range(k)]

            def ens(engine=engine, samplers=samplers, gens=gens) -> None:
                engine.step([s.next_batch() for s in samplers], gens)

            ref, ms = _time([single, ens], dev, steps)
            print(
                f"[{name}] {kind:>12} K={k:2d}: {ms:8.1f} ms/step = x{ms / ref:5.2f} the single "
                f"step ({ref:.1f} ms, timed alternately), {ms / k:7.1f} ms per member-step",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--ks", nargs="+", type=int, default=[1, 4, 10])
    ap.add_argument("--steps", type=int, default=5, help="timed steps per measurement")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--compile", action="store_true", help="also time vmap+torch.compile")
    ap.add_argument("--quick", action="store_true", help="K in {1, 4}, 2 timed steps")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.ks, args.steps = [k for k in args.ks if k <= 4], 2
    dev = torch.device(args.device)
    print(f"device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    for name in args.models:
        bench(name, dev, args.ks, args.steps, args.compile)


if __name__ == "__main__":
    main()
