#!/usr/bin/env bash
# Runs the carried self-check on the GPU machine from the repo root; logs and gpu-check.json go to $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-check-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
# TF_CHECKS picks which carried checks run (all by default), e.g. TF_CHECKS=tf-dsv41-gpu-check.
checks=(${TF_CHECKS:-tf-gpu-check tf-exl3-gpu-check tf-dsv41-gpu-check})
for c in "${checks[@]}"; do
  if [[ ! -x "gpu-carry/$c" ]]; then
    echo "gpu-check: no gpu-carry/$c; run scripts/gpu-build.sh on the build machine and carry gpu-carry" | tee "$out/gpu-check.log"
    exit 2
  fi
done
{
  echo "== host: $(uname -srm); $(grep PRETTY_NAME /etc/os-release 2>/dev/null); $(ldd --version | head -1)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv 2>&1
  echo "== carried build"
  cat gpu-carry/MANIFEST
  echo "== ldd gpu-carry/${checks[0]}"
  ldd "gpu-carry/${checks[0]}"
  echo "== TF_CACHE_DIR=$TF_CACHE_DIR TF_CUDA_INCLUDE=${TF_CUDA_INCLUDE:-the toolkit include dir} LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
} 2>&1 | tee "$out/host.txt"
# Each check ends itself before a 600 s device call would, so its own exit line still reaches the log.
rc=0
for c in "${checks[@]}"; do
  OUT="$out" timeout --signal=KILL "${TF_CHECK_TIMEOUT:-300}" "gpu-carry/$c" 2>&1 | tee "$out/$c.log"
  r=${PIPESTATUS[0]}
  echo "gpu-check: $c exited $r; logs in $out" | tee -a "$out/$c.log"
  ((rc != 0)) || rc=$r
done
exit "$rc"
