#!/usr/bin/env bash
# One device call for EXL3 GEMV work (after scripts/gpu-build.sh here): bit checks and times, other builds' times, an ncu profile, dsv41 EXL3 end to end; logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-exl3-out}"
mkdir -p "$out"
rc=0
times() { grep -E 'µs' "$1" | grep -iE 'exact|copy|bytedot' | head -n 60; }
OUT="$out" TF_CHECK_TIMEOUT="${TF_EXL3_TIMEOUT:-260}" TF_CHECKS=tf-exl3-gpu-check TF_SECTIONS="${TF_EXL3_SECTIONS:-device,copy,exl3}" bash scripts/gpu-check.sh >/dev/null 2>&1 || rc=$?
grep -E 'FAIL|failed|passed' "$out/tf-exl3-gpu-check.log" | tail -n 20
times "$out/tf-exl3-gpu-check.log"
# Other builds carried as gpu-carry/tf-exl3-gpu-check-NAME (a baseline, variants) are timed next, on the same GPU.
for b in gpu-carry/tf-exl3-gpu-check-*; do
  [[ -x "$b" ]] || continue
  echo "== $(basename "$b")"
  OUT="$out" TF_CHECK_TIMEOUT="${TF_VARIANT_TIMEOUT:-75}" TF_CHECKS="$(basename "$b")" TF_SECTIONS="device,copy,time exl3" bash scripts/gpu-check.sh >/dev/null 2>&1
  times "$out/$(basename "$b").log"
done
# TF_NCU=0 skips the profile: the exact GEMV on one 512→128 block, on 5120→2304 and routed, then bytedot routed, clocks as they run.
export PATH="$PATH:/usr/local/cuda-13.0/bin:/usr/local/cuda/bin"
if [[ "${TF_NCU:-1}" != 0 ]] && command -v ncu >/dev/null; then
  source scripts/gpu-env.sh
  # Stall reasons per issued instruction, as raw metrics (the full set prints only their sum).
  TF_SECTIONS=profile timeout "${TF_NCU_TIMEOUT:-120}" ncu --clock-control none -k 'regex:exl3_gemv_exact|exl3_mul1_bytedot' --set full --import-source no \
    --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
    gpu-carry/tf-exl3-gpu-check >"$out/ncu.txt" 2>&1 || echo "gpu-exl3-gemv: ncu exited $?"
  grep -E '^  exl3_|Duration|Elapsed Cycles|Executed Ipc A|Issue Slots Busy|Registers Per|Achieved Occupancy|Warp Cycles Per Issued|Executed Instructions  ' "$out/ncu.txt"
fi
# TF_DSV41=0 skips dsv41 end to end.
if [[ "${TF_DSV41:-1}" != 0 ]]; then
  OUT="$out" TF_CHECK_TIMEOUT="${TF_DSV41_TIMEOUT:-150}" TF_CHECKS=tf-dsv41-gpu-check TF_SECTIONS="exl3 e2e,exl3 mxfp4 e2e" bash scripts/gpu-check.sh >/dev/null 2>&1 || rc=$?
  grep -E 'FAIL|checks|failed' "$out/tf-dsv41-gpu-check.log" | tail -n 8
fi
exit "$rc"
