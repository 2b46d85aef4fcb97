#!/usr/bin/env bash
# The prepared device call for issue 10's GPU targets: one command per stage, each well inside
# the device tool's 10-minute limit, results written under $OUT (the folder that comes back).
#
# On the lent GPU machine (see ../shared/gpu/README.md; carry [".whl"]):
#   source .whl/setup.sh && bash benchmarks/gpu_check.sh bench    # ~5 min: GDM + baselines
#   source .whl/setup.sh && bash benchmarks/gpu_check.sh ensemble # ~8 min: ensemble steps
#   source .whl/setup.sh && bash benchmarks/gpu_check.sh medium   # <= 10 min: medium preset
#                                                (3 seeds per configuration as one ensemble)
# Here, on the CPU, a quick dry run of the same stages (tiny sizes, ~3 min):
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_QUICK=1 OUT=/tmp/gpu_check bash benchmarks/gpu_check.sh bench
set -euo pipefail

stage=${1:?usage: gpu_check.sh bench|ensemble|medium}
device=${GPU_CHECK_DEVICE:-cuda}
quick=${GPU_CHECK_QUICK:-}
out=${OUT:?set OUT to the folder to write results to}
mkdir -p "$out"
py=${PYTHON:-python3}  # the interpreter with the project installed

case "$stage" in
bench)
    # GDM: eager reference, fast path and compiled whole loss (ms/step, kernels, GPU busy),
    # then imagination at N = 200 and 1000; baselines with compile "reduce-overhead".
    gdm_args=(--device "$device")
    base_args=(--device "$device" --imagine)
    if [[ -n "$quick" ]]; then
        gdm_args+=(--quick --train-steps 2)
        base_args+=(--quick --models vanilla-gwm --envs OD)
    else
        gdm_args+=(--compile)
        base_args+=(--compile reduce-overhead)
    fi
    timeout 300 "$py" packages/gdm-models/benchmarks/bench_gdm.py "${gdm_args[@]}" \
        2>&1 | tee "$out/bench_gdm.txt"
    timeout 240 "$py" packages/gdm-models/benchmarks/bench_baselines.py "${base_args[@]}" \
        2>&1 | tee "$out/bench_baselines.txt"
    ;;
ensemble)
    # one step of K = 3 (the medium preset) and K = 10 (the paper's seeds) members against the
    # single step: first one model on K x B windows (the least any ensemble step can cost),
    # then vmap eager for every model, then the GDM with vmap + torch.compile
    ens_args=(--device "$device" --ks 3 10)
    if [[ -n "$quick" ]]; then
        ens_args+=(--quick --models vanilla-gwm)
    fi
    timeout 240 "$py" packages/gdm-models/benchmarks/bench_ensemble.py "${ens_args[@]}" --batch-scaling \
        2>&1 | tee "$out/bench_ensemble.txt"
    if [[ -z "$quick" ]]; then
        timeout 280 "$py" packages/gdm-models/benchmarks/bench_ensemble.py "${ens_args[@]}" \
            --compile --models gdm 2>&1 | tee "$out/bench_ensemble_compile.txt"
    fi
    ;;
medium)
    preset=medium
    extra=()
    if [[ -n "$quick" ]]; then
        preset=tiny
        extra=(--device "$device")
    fi
    start=$(date +%s)
    timeout 560 graphwm reproduce --preset "$preset" --out /tmp/gpu_check_run "${extra[@]}" \
        2>&1 | tail -n 200 | tee "$out/reproduce.txt"
    echo "end to end: $(( $(date +%s) - start )) s" | tee -a "$out/reproduce.txt"
    cp /tmp/gpu_check_run/report/report.md "$out/report.md"
    ;;
*)
    echo "unknown stage '$stage' (bench, ensemble or medium)" >&2
    exit 2
    ;;
esac
