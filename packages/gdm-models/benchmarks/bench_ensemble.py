"""Ensemble-training benchmark: one step of K members against one single-model step.

For each model (GDM and the baselines, paper presets of OD, OD's feature schema, B = 8
windows of L = 20 transitions on 15-25-node graphs with mean degree ~4, as
``bench_baselines.py``) it times, in the same run and on the same data:

* ``single``: one step of the trainer (``gdm_models.training.step.train_step``: loss,
  backward, clipping, Adam) of one model;
* ``members K`` / ``loop K``: one step of a K-member ensemble (``gdm_models.training.engines``;
  members: one member model whose layers hold the K members' parameters, the members'
  batches folded into one; loop: the single step per member); with ``--capture`` also
  ``members+capture K`` (the static member step, one CUDA graph on CUDA) and with
  ``--compile`` ``loop+compile K`` (each member's ``enable_compile``).

Printed: ms per step (median), the ratio to the single step (target: CPU K=4 <= 2x, GPU
K=10 <= 1.5x) and ms per member-step. The single step and the ensemble step are timed in
alternation, so the ratio holds up on a shared machine even when the absolute times do not.

``--thread-scaling`` (CPU) also times the single step at 1 thread and at the machine's core
count n, in alternation, and prints their ratio r = t(1 thread) / t(n threads) per model: the
evidence for what an ensemble can gain on that CPU. r = 1 means the single step leaves n - 1
cores idle, so members stepped together could fill them (K = n members for ~1x). r = n means
the single step already keeps every core busy (compute-bound): a K-member step does K times
its arithmetic on the same n cores, so unless batching makes each core faster (on the CPU it
does not: vmap K = 4 at one thread costs 4.6x), it costs at least K * r / n single steps. The
CPU target (K = 4 within 2x on a 2-core CPU) therefore needs r <= 1; measured idle, 2-core
CPU: GDM 431 ms at 1 thread, 303 ms at 2 (r = 1.42, bound 2.8x at K = 4), Vanilla GWM 62 vs
34 ms (r = 1.82, bound 3.6x), and K = 4 costs ~4x.

``--count-ops`` also prints the aten ops (and, on CUDA, the GPU kernels) of one single step
and of each ensemble step (batch assembly included). Where a step is per-op overhead, its time
follows these counts: with the member engine they barely grow with K (a linear layer becomes
one ``baddbmm``, a layer norm a norm plus a per-member affine step; only the members' own noise
draws grow with K). Measured on the CPU (OD, paper sizes), see docs/notes/ensemble-engines.md.

``--batch-scaling`` (any device) times one model's step on K x B windows against its step on
B, alternately: the least a K-member step can cost whatever the implementation, since K
members do at least the arithmetic of one model on K x B windows and one batch through shared
weights is the most a kernel can amortise. It settles whether a step is per-op overhead (ratio
near 1: members stepped together are nearly free, the GPU's case) or arithmetic (ratio near
K). Measured idle on the 2-core CPU, see docs/notes/ensemble-engines.md ("Why not 2x").

Usage::

    uv run python packages/gdm-models/benchmarks/bench_ensemble.py --device cpu --quick
    uv run python packages/gdm-models/benchmarks/bench_ensemble.py --device cpu --thread-scaling
    uv run python packages/gdm-models/benchmarks/bench_ensemble.py --device cpu --ks 4 10 \
        --batch-scaling --scaling-only
    python3 packages/gdm-models/benchmarks/bench_ensemble.py --device cuda --compile
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import traceback
import warnings
from collections.abc import Callable

import numpy as np
import torch
from gdm_models import (
    EpisodeDataset,
    EpochSampler,
    FeatureScaler,
    MemberModel,
    TrainConfig,
    get_hyperparameters,
    make_model,
)
from gdm_models.compiling import CompileFallbackWarning
from gdm_models.synthetic import schema_episode
from gdm_models.training.capture import CaptureFallbackWarning, StaticShape, StaticTrainStep
from gdm_models.training.engines import LoopEngine, MemberEngine
from gdm_models.training.step import batch_to_device, make_adam, train_step
from torch.profiler import ProfilerActivity, profile

#: the trainers' gradient-norm clipping (gdm_models.TrainConfig's default)
CLIP = TrainConfig().grad_clip

OD = {
    "node_continuous": ["vibe"],
    "node_categorical": {"opinion": 5},
    "graph_continuous": ["k_frac", "k_frac_env"],
    "graph_categorical": {},
}
MODELS = ("gdm", "vanilla-gwm", "ea-gwm", "g-rssm")
SIZES = (15, 18, 20, 23, 25)
B, L = 8, 20


def _data(seed: int = 0, episodes: int = 32) -> tuple[EpisodeDataset, FeatureScaler]:
    """``episodes`` synthetic OD episodes; a batch holds at most one window per episode (an
    epoch visits each episode once), so a batch of b windows needs ``episodes >= b``."""
    rng = np.random.default_rng(seed)
    sizes = rng.choice(SIZES, episodes)
    eps = [schema_episode(OD, int(n), L + 5, rng, edge_p=4.0 / n) for n in sizes]
    return EpisodeDataset(eps, OD), FeatureScaler.fit(eps, OD)


def _models(name: str, k: int, scaler: FeatureScaler, dev: torch.device) -> list:
    cfg = get_hyperparameters(name, "OD")["model"]
    out = []
    for s in range(k):
        torch.manual_seed(s)
        out.append(make_model(name, OD, scaler, **cfg).to(dev).train())
    return out


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def _time(
    steps_fns: list[Callable[[], object]],
    dev: torch.device,
    steps: int,
    threads: list[int] | None = None,
) -> list[float]:
    """Median ms per call of each function, timed in alternation (so that load changes on a
    shared machine hit all of them alike) after two warm-up calls each (compilation happens
    there). ``threads``: torch's thread count for each function, set before its call (outside
    the timed span); the caller's count is restored at the end."""
    before = torch.get_num_threads()
    counts = threads or [before] * len(steps_fns)
    try:
        for fn, n in zip(steps_fns, counts, strict=True):
            torch.set_num_threads(n)
            fn()
            fn()
        _sync(dev)
        times: list[list[float]] = [[] for _ in steps_fns]
        for _ in range(steps):
            for fn, n, out in zip(steps_fns, counts, times, strict=True):
                torch.set_num_threads(n)
                t0 = time.perf_counter()
                fn()
                _sync(dev)
                out.append(time.perf_counter() - t0)
    finally:
        torch.set_num_threads(before)
    return [1000 * statistics.median(t) for t in times]


def op_counts(fn: Callable[[], object], dev: torch.device) -> dict[str, int]:
    """One profiled call of ``fn`` (after the timing's warm-up): its aten ops (nested calls
    included: each costs host dispatch time) and, on CUDA, its GPU kernels. Where a step is
    per-op overhead (a launch-bound GPU) its time follows these counts, not the arithmetic."""
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=acts) as prof:
        fn()
        _sync(dev)
    events = prof.events()
    out = {"aten_ops": sum(1 for e in events if e.name.startswith("aten::"))}
    if dev.type == "cuda":
        cuda = torch.autograd.DeviceType.CUDA
        out["cuda_kernels"] = sum(1 for e in events if e.device_type == cuda)
    return out


def _counts_text(counts: dict[str, int], ref: dict[str, int]) -> str:
    return ", ".join(f"{v} {k.replace('_', ' ')} (x{v / ref[k]:.2f})" for k, v in counts.items())


def core_count() -> int:
    """The cores this process may run on (the affinity mask; ``os.cpu_count()`` elsewhere)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def thread_scaling(
    name: str, single: Callable[[], object], dev: torch.device, steps: int, ks: list[int]
) -> float:
    """Time ``single`` at 1 thread and at :func:`core_count` threads in alternation, print
    the ratio r = t(1) / t(n) and the least K-member step it implies (K * r / n single steps,
    see the module docstring); return r."""
    n = core_count()
    one, many = _time([single, single], dev, steps, threads=[1, n])
    r = one / many
    bounds = ", ".join(f"K={k}: >= x{k * r / n:.2f}" for k in ks if k > 1)
    print(
        f"[{name}] single step at 1 thread {one:.1f} ms, at {n} threads {many:.1f} ms (timed "
        f"alternately): r = x{r:.2f} of the ideal x{n}" + (f"; so {bounds}" if bounds else ""),
        flush=True,
    )
    return r


def batch_scaling(
    name: str,
    make_single: Callable[[int], Callable[[], object]],
    dev: torch.device,
    steps: int,
    ks: list[int],
) -> dict[int, float]:
    """Time one model's step on K * B windows against its step on B windows (alternately) for
    each K > 1 in ``ks``, print the ratios and return them by K.

    A K-member step does at least the arithmetic of one model on K * B windows (the same
    forward and backward products, plus K sets of weight gradients and Adam updates), and one
    big batch through shared weights is the most a kernel can amortise: so this ratio is the
    least any ensemble implementation (vmap, member-dimension layers, a fused kernel) can cost
    at K, up to kernel efficiency. Near 1: the step is per-op overhead and K members cost
    about one; near K: the step is arithmetic and no batching of members can beat K.
    ``make_single(b)`` returns a step of the single model on batches of ``b`` windows."""
    ratios: dict[int, float] = {}
    base = make_single(B)
    for k in ks:
        if k <= 1:
            continue
        ref, big = _time([base, make_single(k * B)], dev, steps)
        ratios[k] = big / ref
        print(
            f"[{name}] one model on K x B = {k * B} windows: {big:.1f} ms = x{big / ref:.2f} "
            f"the step on B = {B} ({ref:.1f} ms, timed alternately): the least a K={k} "
            "ensemble step can cost",
            flush=True,
        )
    return ratios


def make_captured(name: str, dev: torch.device, b: int) -> Callable[[], object]:
    """A captured static step of one model on batches of ``b`` windows (warmed up and
    captured before it is returned)."""
    ds, scaler = _data(episodes=max(32, b))
    [model] = _models(name, 1, scaler, dev)
    params = [p for p in model.parameters() if p.requires_grad]
    lr = get_hyperparameters(name, "OD")["train"]["lr"]
    gen = torch.Generator(device=dev).manual_seed(0)
    step = StaticTrainStep(
        model, make_adam(params, lr, dev), params, gen, CLIP, StaticShape.for_dataset(ds, b, L)
    )
    sampler = EpochSampler(ds, b, L, seed=0)
    while step.calls <= step.warmup:
        step(sampler.next_batch())

    def captured() -> None:
        step(sampler.next_batch())

    return captured


def capture_status(engine: object) -> str:
    """How an engine's steps run: "captured" (one CUDA graph replayed), "static eager" (the
    static-shape step run eagerly: off CUDA, or after a failed capture, with its reason) or
    "eager"."""
    runner = getattr(engine, "_runner", None)
    if runner is None:
        return "eager"
    if getattr(runner, "graph", None) is not None:
        return "captured"
    reason = getattr(runner, "fallback_reason", None)
    return "static eager" + (f" (FELL BACK: {reason})" if reason else "")


def warm_up(step: Callable[[], object], engine: object, dev: torch.device) -> tuple[float, str]:
    """Call ``step`` until its engine is past warm-up and capture (a static engine's runner:
    its ``warmup`` calls, then the capture and a first replay; otherwise two calls, where a
    compile happens), so that no timed call pays for either. Returns the seconds this took and
    the peak device memory of those calls as text (CUDA only)."""
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    t0 = time.perf_counter()
    step()
    runner = getattr(engine, "_runner", None)
    extra = getattr(runner, "warmup", 1) + 1 if runner is not None else 1
    for _ in range(extra):
        step()
    _sync(dev)
    setup = time.perf_counter() - t0
    peak = ""
    if dev.type == "cuda":
        peak = f", peak memory {torch.cuda.max_memory_allocated(dev) / 2**30:.2f} GiB"
    return setup, peak


def captured_single(
    name: str, dev: torch.device, steps: int, single: Callable[[], object], count_ops: bool
) -> Callable[[], object]:
    """Time the static-shape step (:mod:`gdm_models.training.capture`; one CUDA graph on CUDA) of a
    second copy of the model against the eager single step, alternately; print both, their
    ratio, the time the capture took (warm-up steps included) and, with ``count_ops``, the
    aten ops and kernels of one eager static step against one replay."""
    ds, scaler = _data()
    lr = get_hyperparameters(name, "OD")["train"]["lr"]
    [model] = _models(name, 1, scaler, dev)
    params = [p for p in model.parameters() if p.requires_grad]
    gen = torch.Generator(device=dev).manual_seed(0)
    step = StaticTrainStep(
        model, make_adam(params, lr, dev), params, gen, CLIP, StaticShape.for_dataset(ds, B, L)
    )
    sampler = EpochSampler(ds, B, L, seed=0)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        while step.calls <= step.warmup:  # warm-up, then capture and the first replay
            step(sampler.next_batch())
        _sync(dev)
    setup = time.perf_counter() - t0
    for w in caught:
        print(f"[{name}] warning: {w.category.__name__}: {w.message}", flush=True)
    how = "captured" if step.graph is not None else "static eager"
    if step.fallback_reason:
        how += f" (FELL BACK: {step.fallback_reason})"

    def captured() -> None:
        step(sampler.next_batch())

    ref, ms = _time([single, captured], dev, steps)
    print(
        f"[{name}] {how} single step: {ms:.1f} ms = x{ms / ref:.2f} the eager step "
        f"({ref:.1f} ms, timed alternately); warm-up + capture {setup:.1f} s",
        flush=True,
    )
    if count_ops:
        print(f"[{name}] {how} step: {op_counts(captured, dev)} per step", flush=True)
    return captured


def bench(
    name: str,
    dev: torch.device,
    ks: list[int],
    steps: int,
    compile_: bool,
    scaling: bool = False,
    batching: bool = False,
    ensembles: bool = True,
    count_ops: bool = False,
    capture: bool = False,
) -> None:
    ds, scaler = _data()
    lr = get_hyperparameters(name, "OD")["train"]["lr"]
    autocast = torch.autocast(dev.type, enabled=False)
    [model] = _models(name, 1, scaler, dev)
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    params = [p for p in model.parameters() if p.requires_grad]

    def make_single(b: int) -> Callable[[], None]:
        # enough episodes for b windows per batch (one window per episode per epoch)
        data = ds if b <= len(ds) else _data(episodes=b)[0]
        sampler = EpochSampler(data, b, L, seed=0)
        gen = torch.Generator(device=dev).manual_seed(0)

        def single() -> None:
            batch = batch_to_device(sampler.next_batch(), dev)
            train_step(lambda: model.training_loss(batch, gen), opt, params, CLIP, autocast)

        return single

    single = make_single(B)
    captured = captured_single(name, dev, steps, single, count_ops) if capture else None
    if scaling:
        thread_scaling(name, single, dev, steps, ks)
    if batching:
        batch_scaling(name, make_single, dev, steps, ks)
        if capture:  # the floor of a captured ensemble: one captured model on K x B windows
            print(f"[{name}] the same with captured steps:", flush=True)
            batch_scaling(name, lambda b: make_captured(name, dev, b), dev, steps, ks)
    if not ensembles:
        return
    kinds = ["members", "loop"] if dev.type == "cpu" else ["members"]
    if capture:
        kinds.insert(0, "members+capture")
    if compile_:
        kinds.append("loop+compile")
    if not isinstance(model, MemberModel):
        kinds = [k for k in kinds if k.startswith("loop")]
    single_counts: dict[str, int] = {}
    for kind in kinds:
        for k in ks:
            if kind == "loop+compile" and k > 2:  # K compilations of minutes each
                print(f"[{name}] {kind:>12} K={k:2d}: skipped (compiles each member)", flush=True)
                continue
            members = _models(name, k, scaler, dev)
            if kind.startswith("members"):
                static = StaticShape.for_dataset(ds, B, L) if kind.endswith("capture") else None
                engine: MemberEngine | LoopEngine = MemberEngine(
                    members, lr=lr, clip=CLIP, autocast=autocast, static_shape=static
                )
            else:
                engine = LoopEngine(
                    members, lr=lr, clip=CLIP, autocast=autocast, compile=kind.endswith("compile")
                )
            engine.build(list(range(k)), None)
            samplers = [EpochSampler(ds, B, L, seed=s) for s in range(k)]
            gens = [torch.Generator(device=dev).manual_seed(s) for s in range(k)]

            def ens(engine=engine, samplers=samplers, gens=gens) -> None:
                engine.step(samplers, gens)

            # a captured ensemble against the captured single step, the others against eager
            base = captured if kind.endswith("capture") and captured is not None else single
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", CompileFallbackWarning)
                warnings.simplefilter("always", CaptureFallbackWarning)
                # warm-up and capture (or compile) before the timed calls, timed on their own
                setup, peak = warm_up(ens, engine, dev)
                ref, ms = _time([base, ens], dev, steps)
            fallback = [
                w
                for w in caught
                if issubclass(w.category, (CompileFallbackWarning, CaptureFallbackWarning))
            ]
            for w in caught:  # the other warnings (e.g. functorch's "performance drop") go on
                if w not in fallback:
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            note = f"; FELL BACK TO EAGER: {fallback[0].message}" if fallback else ""
            print(
                f"[{name}] {kind:>12} K={k:2d}: {ms:8.1f} ms/step = x{ms / ref:5.2f} the single "
                f"step ({ref:.1f} ms, timed alternately), {ms / k:7.1f} ms per member-step; "
                f"{capture_status(engine)}, setup {setup:.1f} s{peak}{note}",
                flush=True,
            )
            if count_ops:
                single_counts = single_counts or op_counts(single, dev)
                print(
                    f"[{name}] {kind:>12} K={k:2d}: per step "
                    f"{_counts_text(op_counts(ens, dev), single_counts)} the eager single step's",
                    flush=True,
                )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--ks", nargs="+", type=int, default=[1, 4, 10])
    ap.add_argument("--steps", type=int, default=5, help="timed steps per measurement")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument(
        "--compile", action="store_true", help="also time the loop with each member compiled"
    )
    ap.add_argument("--quick", action="store_true", help="K in {1, 4}, 2 timed steps")
    ap.add_argument(
        "--thread-scaling",
        action="store_true",
        help="CPU: also time the single step at 1 thread and at the core count, alternately",
    )
    ap.add_argument(
        "--batch-scaling",
        action="store_true",
        help="also time one model on K x B windows against B: the least a K-member step can cost",
    )
    ap.add_argument(
        "--scaling-only",
        action="store_true",
        help="only the --thread-scaling / --batch-scaling rows, no ensemble steps",
    )
    ap.add_argument(
        "--count-ops",
        action="store_true",
        help="also count aten ops (and CUDA kernels) per step, single and ensemble",
    )
    ap.add_argument(
        "--capture",
        action="store_true",
        help="also time the static-shape step (one CUDA graph on CUDA) against the eager one",
    )
    args = ap.parse_args(argv)
    if args.thread_scaling and args.device != "cpu":
        ap.error("--thread-scaling times CPU threads; use it with --device cpu")
    if args.scaling_only and not (args.thread_scaling or args.batch_scaling):
        ap.error("--scaling-only needs --thread-scaling or --batch-scaling")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.quick:
        args.ks, args.steps = [k for k in args.ks if k <= 4], 2
    dev = torch.device(args.device)
    print(f"device {dev}, torch {torch.__version__}, threads {torch.get_num_threads()}")
    failed = []
    for name in args.models:
        # one model's failure (a crash, an out-of-memory) must not cost the later models' numbers
        try:
            bench(
                name,
                dev,
                args.ks,
                args.steps,
                args.compile,
                scaling=args.thread_scaling,
                batching=args.batch_scaling,
                ensembles=not args.scaling_only,
                count_ops=args.count_ops,
                capture=args.capture,
            )
        except Exception:  # noqa: BLE001 - reported, then the next model
            failed.append(name)
            print(f"[{name}] FAILED:\n{traceback.format_exc()}", flush=True)
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
