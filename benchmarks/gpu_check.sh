#!/usr/bin/env bash
# The prepared device call for the GPU targets (issues 10, 19, 27): one command per stage, each well inside
# the device tool's 10-minute limit, results written under $OUT (the folder that comes back).
#
# On the lent GPU machine (see ../shared/gpu/README.md; carry [".whl"]). A session has 15
# minutes of device time, machine starts included: run `core` first (one call, <= 10 min at
# its parts' limits, about 5 min seen), the numbers issues 27 and 36 ask for; the other stages
# only with time to spare. Each part has its own time limit (`timeout -k`), one part per model
# (the GDM first), so a part that hangs or fails costs only its own numbers.
#   source .whl/setup.sh && bash benchmarks/gpu_check.sh core     # eager and captured steps of
#                       every model, r(3), r(10) captured and eager, train() checks
#   source .whl/setup.sh && bash benchmarks/gpu_check.sh compile  # <= 9 min: GDM compiled
#   source .whl/setup.sh && bash benchmarks/gpu_check.sh bench    # ~5 min: GDM + baselines
#   source .whl/setup.sh && bash benchmarks/gpu_check.sh ensemble # ~8 min: ensemble steps
#   source .whl/setup.sh && bash benchmarks/gpu_check.sh medium   # <= 10 min: medium preset
#                                                (3 seeds per configuration as one ensemble)
# Here, on the CPU, a quick dry run of the same stages (tiny sizes, ~3 min):
#   GPU_CHECK_DEVICE=cpu GPU_CHECK_QUICK=1 OUT=/tmp/gpu_check bash benchmarks/gpu_check.sh bench
set -euo pipefail
# every print reaches $OUT as it happens (a part killed by its time limit keeps what it printed)
export PYTHONUNBUFFERED=1

stage=${1:?usage: gpu_check.sh core|compile|bench|ensemble|medium}
device=${GPU_CHECK_DEVICE:-cuda}
quick=${GPU_CHECK_QUICK:-}
out=${OUT:?set OUT to the folder to write results to}
mkdir -p "$out"
py=${PYTHON:-python3}  # the interpreter with the project installed

# run a part with a time limit; a part that fails or runs out of time is noted in its output
# and the stage goes on with the next (so one slow compile does not cost the other numbers),
# then exits 1 at the end
failed=0
part() {
    local limit=$1 file=$2
    shift 2
    local rc=0
    # -k: a part that ignores SIGTERM (a hung CUDA call) is killed 10 s later; a pipeline, so
    # tee has closed the file before the note below is appended (a process substitution's tee
    # could still truncate it then, and lose the note, on a loaded machine)
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$out/$file" || rc=${PIPESTATUS[0]}
    if ((rc != 0)); then
        echo "[gpu_check] part ended with exit status $rc (124: over its ${limit} s)" \
            | tee -a "$out/$file"
        failed=1
    fi
}

case "$stage" in
core)
    # issue 27's numbers, one call of <= 6 min (machine start aside):
    # 1. every model: the eager single step against the captured one (one CUDA graph: forward,
    #    backward, clipping, fused Adam), warm-up + capture time; the floor of an ensemble
    #    step (one model on K x B windows against B, eager and captured); then r(3), r(10):
    #    the captured member-engine ensemble step against the captured single step, and the
    #    eager one against the eager single step; aten ops and CUDA kernels per step;
    # 2. train() end to end with its default (captured) step: ms/step, determinism, exact
    #    resume; and the fixed CUDA start-up of a fresh process (a job's per-process cost).
    # Nothing here compiles (the `compile` stage does, alone).
    ens_args=(--device "$device" --ks 3 10 --capture --count-ops)
    train_args=(--device "$device")
    job_args=(--device "$device" --jobs 8 --workers 2)
    if [[ -n "$quick" ]]; then
        job_args=(--device "$device" --jobs 2 --workers 1)
        ens_args=(--device "$device" --ks 2 --capture --quick)
        train_args+=(--quick --models vanilla-gwm)
    fi
    # one part per model, the GDM first (quick: Vanilla GWM alone)
    model_part() {
        local limit=$1 model=$2
        [[ -n "$quick" ]] && limit=280  # the CPU dry run is slower than the GPU
        if [[ -z "$quick" || "$model" == vanilla-gwm ]]; then
            part "$limit" "bench_capture_$model.txt" "$py" \
                packages/gdm-models/benchmarks/bench_ensemble.py "${ens_args[@]}" --models "$model"
        fi
    }
    model_part 100 gdm
    model_part 70 g-rssm
    model_part 60 ea-gwm
    model_part 50 vanilla-gwm
    part 140 check_capture_train.txt \
        "$py" packages/gdm-models/benchmarks/check_capture_train.py "${train_args[@]}"
    # 3. the fixed cost of a job in a worker that keeps its CUDA context (cold first job
    #    against warm later ones)
    part 60 job_overhead.txt "$py" benchmarks/job_overhead.py "${job_args[@]}"
    ;;
compile)
    # torch.compile of the GDM: the single step and the K = 10 loop of compiled members (each compile took
    # minutes on the 16-core host; run this stage alone, after every other number)
    gdm_args=(--device "$device" --skip-imagine --compile)
    if [[ -n "$quick" ]]; then
        gdm_args=(--device "$device" --skip-imagine --quick --train-steps 2)
    fi
    part 240 bench_gdm.txt "$py" packages/gdm-models/benchmarks/bench_gdm.py "${gdm_args[@]}"
    if [[ -z "$quick" ]]; then
        # K = 2: the benchmark compiles loops of at most 2 members (each member compiles alone)
        part 300 bench_ensemble_compile.txt "$py" packages/gdm-models/benchmarks/bench_ensemble.py \
            --device "$device" --ks 2 --compile --models gdm
    fi
    ;;
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
    timeout -k 10 300 "$py" packages/gdm-models/benchmarks/bench_gdm.py "${gdm_args[@]}" \
        2>&1 | tee "$out/bench_gdm.txt"
    timeout -k 10 240 "$py" packages/gdm-models/benchmarks/bench_baselines.py "${base_args[@]}" \
        2>&1 | tee "$out/bench_baselines.txt"
    ;;
ensemble)
    # one step of K = 3 (the medium preset) and K = 10 (the paper's seeds) members against the
    # single step: first one model on K x B windows (the least any ensemble step can cost),
    # then the member engine eager for every model, then the GDM's loop of compiled members
    ens_args=(--device "$device" --ks 3 10)  # (its compiled part below: K = 2)
    if [[ -n "$quick" ]]; then
        ens_args+=(--quick --models vanilla-gwm)
    fi
    timeout -k 10 240 "$py" packages/gdm-models/benchmarks/bench_ensemble.py "${ens_args[@]}" --batch-scaling \
        2>&1 | tee "$out/bench_ensemble.txt"
    if [[ -z "$quick" ]]; then
        timeout -k 10 280 "$py" packages/gdm-models/benchmarks/bench_ensemble.py --device "$device" \
            --ks 2 --compile --models gdm 2>&1 | tee "$out/bench_ensemble_compile.txt"
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
    timeout -k 10 560 graphwm reproduce --preset "$preset" --out /tmp/gpu_check_run "${extra[@]}" \
        2>&1 | tail -n 200 | tee "$out/reproduce.txt"
    echo "end to end: $(( $(date +%s) - start )) s" | tee -a "$out/reproduce.txt"
    cp /tmp/gpu_check_run/report/report.md "$out/report.md"
    ;;
*)
    echo "unknown stage '$stage' (core, compile, bench, ensemble or medium)" >&2
    exit 2
    ;;
esac
exit "$failed"
