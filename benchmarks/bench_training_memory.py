"""Measure the peak memory of one training step and compare it with the estimate
(:func:`gdm_models.memory.training_step_bytes`): the calibration of issue 38's training-memory
check (Linux only: it reads and resets the process's peak resident size, ``VmHWM``).

    uv run python benchmarks/bench_training_memory.py --models gdm vanilla-gwm --nodes 20 40 80

For each model and N, one ``train(steps=1)`` call on synthetic episodes (B x L windows); the
peak is the rise of the resident peak over the call (freed memory handed back to the OS first).
Prints the measured peak, the estimate and their ratio (the estimate should be above every
measured peak and at most 2x above it). One thread, so that the numbers do not depend on the
machine's core count.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
from pathlib import Path

import numpy as np
import torch
from gdm_models import EpisodeDataset, TrainConfig, make_model, train
from gdm_models.memory import training_step_bytes
from gdm_models.synthetic import SYNTHETIC_SCHEMA, random_episode

STATUS, CLEAR = Path("/proc/self/status"), Path("/proc/self/clear_refs")


def _kib(key: str) -> int:
    line = next(x for x in STATUS.read_text().splitlines() if x.startswith(key))
    return int(line.split()[1])


def measure(model_name: str, n: int, b: int, seq: int) -> tuple[int, int]:
    """(measured peak bytes, estimated bytes) of one training step."""
    rng = np.random.default_rng(0)
    data = EpisodeDataset([random_episode(n, seq, rng) for _ in range(b)], SYNTHETIC_SCHEMA,
                          seq_len=seq)  # fmt: skip
    torch.manual_seed(0)
    model = make_model(model_name, SYNTHETIC_SCHEMA)
    need = training_step_bytes(model, batch_size=b, seq_len=seq, num_nodes=n)
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    CLEAR.write_text("5")
    before = _kib("VmRSS")
    train(
        model, data, TrainConfig(steps=1, batch_size=b, seq_len=seq, device="cpu"), progress=False
    )
    return (_kib("VmHWM") - before) * 1024, int(need or 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["gdm", "vanilla-gwm", "ea-gwm", "g-rssm"])
    parser.add_argument("--nodes", nargs="+", type=int, default=[20, 40, 80])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for name in args.models:
        measure(name, 5, 1, 2)  # warm-up: libraries loaded, lazy state built
        for n in args.nodes:
            peak, need = measure(name, n, args.batch, args.seq_len)
            print(f"{name:12s} N={n:4d} B={args.batch} L={args.seq_len}: measured "
                  f"{peak / 2**20:8.1f} MiB, estimate {need / 2**20:8.1f} MiB, "
                  f"ratio {need / peak:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
