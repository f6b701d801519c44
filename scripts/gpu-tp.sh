#!/usr/bin/env bash
# Issue 28's multi-GPU run (after `TF_CARRY=checks scripts/gpu-build.sh` here): per world size, one tf-dsv41-gpu-check process per GPU in an NCCL group.
# Each rank checks the collectives and their bandwidth, then tiny TPn runs with GPU ranks (all splits) over NCCL against the plain model on rank 0; logs per rank in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-tp-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
gpus="$(nvidia-smi -L | wc -l)"
nvidia-smi topo -m > "$out/topo.txt" 2>&1 || true
rc=0
for world in ${TF_TP_WORLDS:-2 4 8}; do
  if (( world > gpus )); then
    echo "gpu-tp: TP$world skipped: this machine has $gpus GPUs"
    continue
  fi
  pids=()
  for ((r = 0; r < world; r++)); do
    TF_NCCL_WORLD=$world TF_NCCL_RANK=$r TF_NCCL_ADDR="127.0.0.1:$((29500 + world))" TF_GPU=$r OUT="$out/tp$world-r$r" \
      timeout --signal=KILL "${TF_TP_TIMEOUT:-300}" gpu-carry/tf-dsv41-gpu-check > "$out/tp$world-r$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  grep -h "nccl group\|checks," "$out"/tp"$world"-r*.log
done
echo "gpu-tp: exited $rc; logs in $out"
exit "$rc"
