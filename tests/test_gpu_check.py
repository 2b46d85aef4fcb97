"""benchmarks/gpu_check.sh, the prepared device call for issue 10: it parses, refuses an
unknown stage, and every script and flag it names exists (so a GPU session does not spend
its device minutes on a stale command); the quick CPU run of the bench stage is slow."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def _run(*args: str, script: Path = SCRIPT, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHON": sys.executable, **env}
    # the script times compiled code: not the interpreted numba loops that tests/conftest.py
    # switches on for this process (the quick bench stage's imagination took 300 s with them)
    full_env.pop("NUMBA_DISABLE_JIT", None)
    return subprocess.run(
        ["bash", str(script), *args], cwd=ROOT, env=full_env, capture_output=True, text=True
    )


def test_script_parses_and_refuses_an_unknown_stage(tmp_path):
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    res = _run("train", OUT=str(tmp_path))
    assert res.returncode == 2 and "unknown stage 'train'" in res.stderr


def _help_texts(scripts: list[Path]) -> list[str]:
    """``--help`` of each script, the processes run side by side (each imports torch)."""
    procs = [
        subprocess.Popen(
            [sys.executable, str(p), "--help"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        for p in scripts
    ]
    texts = []
    for proc, path in zip(procs, scripts, strict=True):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{path.name} --help failed: {err[-2000:]}"
        texts.append(out)
    return texts


def test_every_benchmark_flag_the_script_uses_exists():
    text = SCRIPT.read_text()
    args_vars = {
        "bench_gdm.py": "gdm_args",
        "bench_baselines.py": "base_args",
        "bench_ensemble.py": "ens_args",
        "check_capture_train.py": "train_args",
    }
    paths = [ROOT / "packages" / "gdm-models" / "benchmarks" / bench for bench in args_vars]
    job_script = ROOT / "benchmarks" / "job_overhead.py"
    for bench, path in zip(args_vars, paths, strict=True):
        assert path.exists() and f"benchmarks/{bench}" in text
    *helptexts, job_help = _help_texts([*paths, job_script])
    for (bench, args_var), helptext in zip(args_vars.items(), helptexts, strict=True):
        used = set(re.findall(rf"{args_var}\+?=\(([^)]*)\)", text))
        flags = {f for chunk in used for f in re.findall(r"--[a-z-]+", chunk)}
        assert flags, bench
        if bench == "bench_ensemble.py":  # flags given on the command line itself
            flags |= {"--compile", "--models", "--batch-scaling", "--count-ops"}
        for flag in flags:
            assert flag in helptext, f"{bench} has no {flag}"
    assert (ROOT / "src" / "graphwm" / "presets" / "medium.toml").exists()
    job_flags = {
        f
        for chunk in re.findall(r"job_args\+?=\(([^)]*)\)", text)
        for f in re.findall(r"--[a-z-]+", chunk)
    }
    assert job_flags == {"--device", "--jobs", "--workers"}
    assert all(flag in job_help for flag in job_flags)


@pytest.mark.slow
def test_quick_bench_stage_runs_on_the_cpu(tmp_path):
    res = _run("bench", OUT=str(tmp_path), GPU_CHECK_DEVICE="cpu", GPU_CHECK_QUICK="1")
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ms/step" in (tmp_path / "bench_gdm.txt").read_text()
    assert "vanilla-gwm" in (tmp_path / "bench_baselines.txt").read_text()


@pytest.mark.slow
def test_quick_ensemble_stage_runs_on_the_cpu(tmp_path):
    res = _run("ensemble", OUT=str(tmp_path), GPU_CHECK_DEVICE="cpu", GPU_CHECK_QUICK="1")
    assert res.returncode == 0, res.stderr[-2000:]
    text = (tmp_path / "bench_ensemble.txt").read_text()
    assert "members K= 3" in text  # the member engine (it replaced vmap), K = 3
    assert "one model on K x B = 24 windows" in text  # the batch-scaling row, K = 3


@pytest.mark.slow
def test_quick_core_stage_runs_on_the_cpu(tmp_path):
    """The core stage's prepared call, quick and on the CPU: the captured path up to the
    CUDA-only calls, the static ensemble step, and train()'s determinism and resume check."""
    res = _run("core", OUT=str(tmp_path), GPU_CHECK_DEVICE="cpu", GPU_CHECK_QUICK="1")
    assert res.returncode == 0, res.stderr[-2000:]
    text = (tmp_path / "bench_capture_vanilla-gwm.txt").read_text()
    assert "static eager single step" in text and "members+capture K= 2" in text
    assert "setup" in text  # warm-up and capture timed on their own, before the timed calls
    train_text = (tmp_path / "check_capture_train.txt").read_text()
    assert "identical weights: True" in train_text and "straight run: True" in train_text


def test_core_stage_goes_on_after_a_failed_part_and_exits_1(tmp_path):
    """A part that fails (here every part: the interpreter is `false`) is noted in its output
    file, the next part still runs, and the stage exits 1 at the end."""
    res = _run("core", OUT=str(tmp_path), GPU_CHECK_DEVICE="cpu", PYTHON="false")
    assert res.returncode == 1
    names = sorted(p.name for p in tmp_path.iterdir())
    models = ["ea-gwm", "g-rssm", "gdm", "vanilla-gwm"]  # one part per model
    assert names == [
        *(f"bench_capture_{m}.txt" for m in models),
        "check_capture_train.txt",
        "job_overhead.txt",
    ]
    for name in names:
        assert "part ended with exit status 1" in (tmp_path / name).read_text()


def test_the_script_exports_unbuffered_output_and_kills_hung_parts():
    """Prints reach $OUT as they happen, and a part that ignores SIGTERM is killed."""
    text = SCRIPT.read_text()
    assert "export PYTHONUNBUFFERED=1" in text
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    timeouts = re.findall(r"\btimeout (\S+)", code)
    assert timeouts and all(t == "-k" for t in timeouts), timeouts


def test_the_compile_stage_compiles_what_the_benchmark_compiles():
    """bench_ensemble compiles loops of at most 2 members: a compile part asking for more
    would compile nothing."""
    text = SCRIPT.read_text()
    for line in re.findall(r"bench_ensemble\.py[^\n]*\n[^\n]*--compile[^\n]*", text):
        ks = [int(k) for k in re.search(r"--ks ([\d ]+)", line).group(1).split()]
        assert max(ks) <= 2, line


def test_core_stage_times_out_a_part_and_names_its_limit(tmp_path):
    """`timeout` stops a part over its limit (exit 124), and the note says so."""
    slow = tmp_path / "slow_python"
    slow.write_text("#!/usr/bin/env bash\nsleep 30\n")
    slow.chmod(0o755)
    out = tmp_path / "out"
    script = SCRIPT.read_text()
    for limit in re.findall(r"part (\d+) ", script):
        script = script.replace(f"part {limit} ", "part 1 ")
    patched = tmp_path / "gpu_check.sh"
    patched.write_text(script)
    res = _run("core", script=patched, PYTHON=str(slow), OUT=str(out), GPU_CHECK_DEVICE="cpu")
    assert res.returncode == 1
    assert "exit status 124 (124: over its 1 s)" in (out / "check_capture_train.txt").read_text()


def test_core_stage_fits_in_eight_minutes():
    """The core stage is the first device call of a 15-minute session (machine start
    included, a rerun left room): its parts' time limits (one per model, then the train()
    check and the job overhead) add up to at most 8 minutes; the compile stage, alone in its
    call, to at most 9."""
    text = SCRIPT.read_text()
    core = text[text.index("\ncore)") : text.index("\ncompile)")]
    limits = [int(x) for x in re.findall(r"part (\d+) ", core)]
    assert len(limits) == 6 and sum(limits) <= 8 * 60
    comp = text[text.index("\ncompile)") : text.index("\nbench)")]
    assert "--compile" in comp and "--compile" not in core
    assert sum(int(x) for x in re.findall(r"part (\d+) ", comp)) <= 9 * 60
