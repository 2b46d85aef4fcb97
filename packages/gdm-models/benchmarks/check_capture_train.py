"""The trainer's captured path end to end (``train()`` with ``capture`` on its default).

For each model (paper presets of OD, B = 8, L = 20, as ``bench_ensemble.py``): train
``--steps`` steps twice with one seed and compare the weights (determinism of the replayed
graph, its noise included); train half the steps, resume from the checkpoint to the end and
compare with the straight run (exact resume: the graph is captured again after the resume).
Weights pass when equal within a tolerance (:data:`RTOL`, :data:`ATOL`: CUDA's scatter is not
bitwise deterministic); the script prints whether they are bitwise equal and the largest
difference;
print the mean time per step of the straight run (progress bar off, one log row every 10
steps, the warm-up and capture included) and whether the step was captured.

It also prints the fixed cost a fresh process pays before its first CUDA kernel (the per-job
start-up of a worker that does not keep its CUDA context).

Usage::

    uv run python packages/gdm-models/benchmarks/check_capture_train.py --device cpu --quick
    python3 packages/gdm-models/benchmarks/check_capture_train.py            # on a GPU
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import torch
from gdm_models import TrainConfig, get_hyperparameters, make_model, train
from gdm_models.synthetic import TINY_GDM_CONFIG

sys.path.insert(0, str(Path(__file__).parent))
from bench_ensemble import MODELS, OD, _data  # noqa: E402

_CUDA_START = (
    "import time; t = time.perf_counter(); import torch; torch.zeros(1, device='cuda'); "
    "torch.cuda.synchronize(); print(f'{time.perf_counter() - t:.2f}')"
)


def cuda_start_seconds() -> float:
    """Seconds a fresh Python process takes to import torch and run its first CUDA kernel."""
    out = subprocess.run([sys.executable, "-c", _CUDA_START], capture_output=True, text=True)
    return float(out.stdout.strip().splitlines()[-1])


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


#: weights agree within this tolerance (``torch.allclose``): CUDA's scatter (the GDM's message
#: passing) is not bitwise deterministic, ~2e-7 apart after a few steps
RTOL, ATOL = 1e-5, 1e-6


def compare(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> tuple[bool, bool, float]:
    """(bitwise equal, equal within :data:`RTOL` / :data:`ATOL`, largest absolute difference)
    of two state dicts."""
    exact = all(torch.equal(a[k], b[k]) for k in a)
    close = all(torch.allclose(a[k].float(), b[k].float(), rtol=RTOL, atol=ATOL) for k in a)
    diff = max(
        ((a[k].float() - b[k].float()).abs().max().item() for k in a if a[k].numel()), default=0.0
    )
    return exact, close, diff


def check(name: str, dev: torch.device, steps: int, quick: bool, capture: bool | None) -> bool:
    ds, scaler = _data()
    cfg = dict(get_hyperparameters(name, "OD")["model"])
    if quick:  # tiny models on the CPU
        cfg = dict(TINY_GDM_CONFIG) if name == "gdm" else {"hidden_dim": 16}
    # the paper's lr, batch and window of OD
    kw = TrainConfig(
        **get_hyperparameters(name, "OD")["train"],
        seed=3,
        device=dev,
        log_every=10,
        capture=capture,
    )

    def fresh() -> torch.nn.Module:
        torch.manual_seed(0)
        return make_model(name, OD, scaler, **cfg)

    runs = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(2):
            m = fresh()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            train(m, ds, replace(kw, steps=steps), progress=False)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            ms = 1000 * (time.perf_counter() - t0) / steps
            runs.append(_weights(m))
            if i == 0:
                first_ms = ms
        with tempfile.TemporaryDirectory() as tmp:
            half = fresh()
            train(
                half,
                ds,
                replace(kw, steps=steps // 2, checkpoint_every=steps),
                checkpoint_dir=tmp,
                progress=False,
            )
            resumed = fresh()
            train(
                resumed,
                ds,
                replace(kw, steps=steps, checkpoint_every=steps),
                checkpoint_dir=tmp,
                progress=False,
            )
    same, same_close, same_diff = compare(runs[0], runs[1])
    exact, close, diff = compare(runs[0], _weights(resumed))
    notes = sorted({f"{w.category.__name__}: {w.message}" for w in caught})
    tol = f"within rtol {RTOL:g} / atol {ATOL:g}"
    print(
        f"[{name}] train() {steps} steps on {dev}: {first_ms:.1f} ms/step (warm-up and capture "
        f"included); same seed twice -> identical weights: {same}, {tol}: {same_close} (max "
        f"|diff| {same_diff:.3g}); resumed at {steps // 2} -> identical to the straight run: "
        f"{exact}, {tol}: {close} (max |diff| {diff:.3g})"
        + "".join(f"\n[{name}]   warning {n}" for n in notes),
        flush=True,
    )
    return same_close and close


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--quick", action="store_true", help="tiny models, 4 steps")
    ap.add_argument(
        "--eager", action="store_true", help="train(capture=False): the eager step, for comparison"
    )
    args = ap.parse_args(argv)
    dev = torch.device(args.device)
    if args.quick:
        args.steps = 4
    print(f"device {dev}, torch {torch.__version__}", flush=True)
    if dev.type == "cuda":
        print(f"fixed CUDA start-up of a fresh process: {cuda_start_seconds():.2f} s", flush=True)
    capture = False if args.eager else None
    ok = [check(name, dev, args.steps, args.quick, capture) for name in args.models]
    sys.exit(0 if all(ok) else 1)


if __name__ == "__main__":
    main()
