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
# DeepSeek's reference on the same GPU, layers and context, when its source is carried (tools/golden/README.md §7); TF_BENCH_REF=0 skips it.
if [[ "${TF_BENCH_REF:-1}" == 1 && -f tools/golden/ref/deepseek_v41/model.py && $rc == 0 ]]; then
  layers="${TF_BENCH_LAYERS:-8}"; ctx="${TF_BENCH_CONTEXT:-1024}"
  (cd tools/golden && timeout --signal=KILL "${TF_BENCH_REF_TIMEOUT:-400}" python3 ref_speed.py --layers "$layers" --context "$ctx" --steps 10) 2>&1 | tee "$out/ref-speed.log"
  python3 - "$out/dsv41-bench.json" "$out/ref-speed.log" <<'PY'
import json, sys
ours = [d for d in json.load(open(sys.argv[1]))["decode"] if d["batch"] == 1 and not d.get("graphs")]
ref = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
if ours and ref:
    o, r = ours[0]["step_ms"], ref[-1]["step_ms_median"]
    print(f"gpu-bench: decode batch 1 against DeepSeek's reference in this run: ours {o:.2f} ms/step, reference {r:.1f} ms/step, {r / o:.0f}x faster (target >= 2x)")
else:
    print("gpu-bench: no reference ratio (one side did not report a batch-1 step)")
PY
fi
echo "gpu-bench: exited $rc; logs in $out"
exit "$rc"
