#!/usr/bin/env bash
# One device call for decode speed (after TF_CARRY="checks bench serve" TF_CARRY_XZ=1 scripts/gpu-build.sh here): the same-bits switches checked, the step timed with each off and on, ncu's tables and full sections, the drafting server receipt; all packed into $OUT after each step.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:?gpu-decode-call: set OUT to the result folder}"
w=/tmp/decode-call; rm -rf $w; mkdir -p $w/check $w/bench $w/off $w/on $w/serve $w/profile
t0=$SECONDS
# A call cut short still brings back every finished step.
pack() { tar czf "$out/decode-call.tgz" -C $w . ; cp $w/summary.txt "$out/"; }
step() { echo "$1 rc=$2 t=$((SECONDS-t0))s" | tee -a $w/summary.txt; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee $w/summary.txt
OUT=$w/check TF_CHECKS=tf-dsv41-gpu-check TF_SECTIONS="${TF_CALL_SECTIONS:-sparse_attn,mhc,e2e small,dspark small}" TF_CHECK_TIMEOUT=200 bash scripts/gpu-check.sh >/dev/null 2>&1
step checks $?; grep -hE "checks|FAIL" $w/check/*.log | head -20 | tee -a $w/summary.txt; pack
source scripts/gpu-env.sh
# Every combination of the same-bits switches, in one process, so the ratios share a GPU and a clock.
OUT=$w/bench TF_BENCH_BATCHES=1 TF_BENCH_LANES=0 TF_BENCH_PROMPT=0 TF_BENCH_OPS=1 TF_BENCH_GRAPHS=0 TF_BENCH_SPLIT_ATTN=0,1 TF_BENCH_FUSED_MHC=0,1 TF_BENCH_NORM_CODES=0,1 \
  timeout --signal=KILL 150 gpu-carry/tf-dsv41-gpu-bench > $w/bench/bench.log 2>&1
step bench $?; grep -E "decode batch|split_attn|hc_mixes|copy" $w/bench/bench.log | head -30 >> $w/summary.txt; pack
OUT=$w/off TF_BENCH_SPLIT_ATTN=0 TF_BENCH_FUSED_MHC=0 TF_BENCH_NORM_CODES=0 TF_NCU_TIMEOUT=120 bash scripts/gpu-kernel-times.sh > $w/off/kt.log 2>&1
step "kernel times, switches off" $?
OUT=$w/on TF_BENCH_SPLIT_ATTN=1 TF_BENCH_FUSED_MHC=1 TF_BENCH_NORM_CODES=1 TF_NCU_TIMEOUT=120 bash scripts/gpu-kernel-times.sh > $w/on/kt.log 2>&1
step "kernel times, switches on" $?; xz -T8 -f $w/off/ncu.csv $w/on/ncu.csv 2>/dev/null; pack
OUT=$w/serve TF_CALL_S=200 TF_SERVE_ARGS="--draft-len 2" TF_SWEEP_MAX_S=40 TF_SWEEP_LENGTHS=1024 TF_SOAK_S=0 timeout --signal=KILL 170 bash scripts/gpu-reliability.sh > $w/serve/rel.log 2>&1
step "server receipt, --draft-len 2" $?; tail -3 $w/serve/rel.log >> $w/summary.txt; pack
OUT=$w/profile TF_BENCH_SPLIT_ATTN=1 TF_BENCH_FUSED_MHC=1 TF_BENCH_NORM_CODES=1 TF_PROFILE_COUNT=40 TF_NCU_TIMEOUT=150 \
  TF_PROFILE_KERNELS="${TF_CALL_PROFILE:-^(attn_scores|attn_softmax|attn_pv|sparse_attn|fp4_gemv_routed|fp8_gemv_split|hc_sinkhorn_warp4|hc_dots)$}" \
  bash scripts/gpu-kernel-profile.sh > $w/profile/prof.log 2>&1
step "ncu full sections" $?; xz -T8 -f $w/profile/kernel-profile.txt 2>/dev/null; pack
cat $w/summary.txt; head -40 $w/on/kernel-times.txt; head -80 $w/profile/prof.log
