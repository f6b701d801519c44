#!/usr/bin/env bash
# On the GPU machine (after scripts/gpu-build.sh with TF_CARRY=bench here): ncu's time of every kernel of batch-1 decode steps on the flash-shaped layers, summed per kernel per step (scripts/ncu_step.py); logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-bench-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
need_ncu gpu-kernel-times
# The synthetic weights are thousands of synth_* launches: the filter leaves them out, so the skip counts forward kernels only (past the 1,024-token context prefill).
TF_BENCH_BATCHES=1 TF_BENCH_LANES=0 TF_BENCH_PROMPT=0 TF_BENCH_OPS=0 TF_BENCH_GRAPHS=0 OUT="$out" \
  timeout --signal=KILL "${TF_NCU_TIMEOUT:-240}" "$ncu" --clock-control none --cache-control none \
  --kernel-name-base function --kernel-name 'regex:^([^s]|s[^y])' --metrics gpu__time_duration.sum --csv \
  --launch-skip "${TF_NCU_SKIP:-1500}" --launch-count "${TF_NCU_COUNT:-2000}" --log-file "$out/ncu.csv" \
  gpu-carry/tf-dsv41-gpu-bench > "$out/ncu-run.log" 2>&1
rc=$?
echo "gpu-kernel-times: ncu exited $rc"
python3 scripts/ncu_step.py "$out/ncu.csv" | tee "$out/kernel-times.txt"
