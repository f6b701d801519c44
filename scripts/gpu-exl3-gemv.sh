#!/usr/bin/env bash
# One device call for EXL3 GEMV work (after scripts/gpu-build.sh here): bit checks and times, a baseline, dsv41 EXL3 end to end, an ncu profile; logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-exl3-out}"
mkdir -p "$out"
rc=0
times() { grep -E 'µs' "$1" | grep -E 'exact|copy' | head -n 30; }
OUT="$out" TF_CHECK_TIMEOUT=260 TF_CHECKS=tf-exl3-gpu-check TF_SECTIONS="${TF_EXL3_SECTIONS:-device,copy,exl3}" bash scripts/gpu-check.sh >/dev/null 2>&1 || rc=$?
grep -E 'FAIL|failed|passed' "$out/tf-exl3-gpu-check.log" | tail -n 20
times "$out/tf-exl3-gpu-check.log"
# A baseline build carried as gpu-carry/tf-exl3-gpu-check-base is timed next, on the same GPU.
if [[ -x gpu-carry/tf-exl3-gpu-check-base ]]; then
  echo "== baseline"
  OUT="$out" TF_CHECK_TIMEOUT=120 TF_CHECKS=tf-exl3-gpu-check-base TF_SECTIONS="device,copy,exl3 fast" bash scripts/gpu-check.sh >/dev/null 2>&1
  times "$out/tf-exl3-gpu-check-base.log"
fi
OUT="$out" TF_CHECK_TIMEOUT=150 TF_CHECKS=tf-dsv41-gpu-check TF_SECTIONS="exl3 e2e,exl3 mxfp4 e2e" bash scripts/gpu-check.sh >/dev/null 2>&1 || rc=$?
grep -E 'FAIL|checks|failed' "$out/tf-dsv41-gpu-check.log" | tail -n 8
# TF_NCU=0 skips the profile: the exact GEMV on one 512→128 block and on 5120→2304, clocks as they run.
export PATH="$PATH:/usr/local/cuda-13.0/bin:/usr/local/cuda/bin"
if [[ "${TF_NCU:-1}" != 0 ]] && command -v ncu >/dev/null; then
  source scripts/gpu-env.sh
  TF_SECTIONS=profile timeout 90 ncu --clock-control none -k exl3_gemv_exact --set full --import-source no \
    gpu-carry/tf-exl3-gpu-check >"$out/ncu.txt" 2>&1 || echo "gpu-exl3-gemv: ncu exited $?"
  grep -E 'Duration|Elapsed Cycles|Executed Ipc A|Issue Slots Busy|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Executed Instructions  ' "$out/ncu.txt"
fi
exit "$rc"
