#!/usr/bin/env bash
# The dsv41 speed bench on the GPU machine (after scripts/gpu-build.sh here): FP8 matrix rate via torch, then tf-dsv41-gpu-bench; logs to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-bench-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
cat gpu-carry/MANIFEST | head -2 | tee "$out/bench-host.txt"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>&1 | tee -a "$out/bench-host.txt"
# The FP8 rate the prefill ratio divides by, measured in this run; without torch the ratio is reported as not measured.
if TF_FP8_TFLOPS="$(python3 scripts/fp8_rate.py 2> >(tee "$out/fp8_rate.log" >&2))"; then
  export TF_FP8_TFLOPS
  echo "gpu-bench: FP8 matrix rate $TF_FP8_TFLOPS TFLOP/s (torch._scaled_mm)"
else
  unset TF_FP8_TFLOPS
  echo "gpu-bench: no FP8 matrix rate (scripts/fp8_rate.py failed; see $out/fp8_rate.log)"
fi
OUT="$out" timeout --signal=KILL "${TF_BENCH_TIMEOUT:-500}" gpu-carry/tf-dsv41-gpu-bench 2>&1 | tee "$out/tf-dsv41-gpu-bench.log"
rc=${PIPESTATUS[0]}
echo "gpu-bench: exited $rc; logs in $out"
exit "$rc"
