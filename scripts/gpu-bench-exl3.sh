#!/usr/bin/env bash
# EXL3 against the official formats on the flash-shaped bench (after scripts/gpu-build.sh here): one run each, logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-bench-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
export TF_BENCH_LAYERS="${TF_BENCH_LAYERS:-8}" TF_BENCH_CONTEXT="${TF_BENCH_CONTEXT:-1024}" TF_BENCH_PROMPT="${TF_BENCH_PROMPT:-4096}"
export TF_BENCH_BATCHES="${TF_BENCH_BATCHES:-1,8}" TF_BENCH_OPS=0 TF_BENCH_PREFILL_SECONDS="${TF_BENCH_PREFILL_SECONDS:-60}"
rc=0
# official FP8/FP4, EXL3 K=3 exact, EXL3 K=3 with the prompt GEMM from 256 rows
for run in "0 0 official" "3 0 exl3" "3 256 exl3-gemm"; do
  set -- $run
  # TF_BENCH_ONLY="exl3 exl3-gemm" runs only those.
  [[ -z "${TF_BENCH_ONLY:-}" || " $TF_BENCH_ONLY " == *" $3 "* ]] || continue
  mkdir -p "$out/$3"
  OUT="$out/$3" TF_BENCH_EXL3=$1 TF_BENCH_EXL3_PROMPT=$2 timeout --signal=KILL "${TF_BENCH_TIMEOUT:-180}" \
    gpu-carry/tf-dsv41-gpu-bench > "$out/$3.log" 2>&1
  r=$?
  echo "gpu-bench-exl3: $3 exited $r"
  ((rc != 0)) || rc=$r
done
exit "$rc"
