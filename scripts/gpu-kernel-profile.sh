#!/usr/bin/env bash
# On the GPU machine (after scripts/gpu-build.sh with TF_CARRY=bench here): ncu's full sections for named kernels of batch-1 decode steps; the report goes to $OUT/kernel-profile.txt.
# TF_PROFILE_KERNELS: a regex of kernel names; TF_PROFILE_SKIP: matching launches skipped (past the context prefill); TF_PROFILE_COUNT: launches profiled.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-bench-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
need_ncu gpu-kernel-profile
kernels="${TF_PROFILE_KERNELS:-^(sparse_attn|fp4_gemv_routed|hc_sinkhorn_warp4?|hc_dots|fp8_gemv_split|rms_norm_(seq|quant)|hc_pre_norm(_quant)?)$}"
TF_BENCH_BATCHES=1 TF_BENCH_LANES=0 TF_BENCH_PROMPT=0 TF_BENCH_OPS=0 TF_BENCH_GRAPHS=0 OUT="$out" \
  timeout --signal=KILL "${TF_NCU_TIMEOUT:-240}" "$ncu" --clock-control none --kernel-name-base function \
  --kernel-name "regex:$kernels" --launch-skip "${TF_PROFILE_SKIP:-700}" --launch-count "${TF_PROFILE_COUNT:-24}" \
  --set full --page details --print-units base gpu-carry/tf-dsv41-gpu-bench > "$out/kernel-profile.txt" 2>&1
rc=$?
echo "gpu-kernel-profile: ncu exited $rc"
grep -E "^  [a-z_0-9]+\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per" "$out/kernel-profile.txt" | head -80
exit "$rc"
