#!/usr/bin/env bash
# On the GPU machine: tf serve --device cuda on the default model with each drafting mode, one stream of xtask bench openai each.
# Build here with `TF_CARRY=serve TF_CARRY_XZ=1 bash scripts/gpu-build.sh` and carry gpu-carry; logs and receipts go to $OUT.
# TF_DRAFT_MODES (the modes, `plain` = --no-draft, `auto` = the default), TF_DRAFT_TOKENS (96) and TF_DRAFT_REQUESTS (3) set the run.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-drafting-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
need_carry gpu-drafting "$out/drafting.log" tf xtask
port=8000
url="http://127.0.0.1:$port"
rc=0
for mode in ${TF_DRAFT_MODES:-plain auto 1 2 3 5}; do
  case "$mode" in
    plain) args=(--no-draft) ;;
    auto) args=() ;;
    *) args=(--draft-len "$mode") ;;
  esac
  gpu-carry/tf serve --device cuda --port "$port" "${args[@]}" >"$out/serve-$mode.log" 2>&1 &
  pid=$!
  for _ in $(seq 600); do curl -sf "$url/health" >/dev/null && break; sleep 0.2; done
  gpu-carry/xtask bench openai --url "$url" --prompt-tokens 256 --concurrency 1 --kinds code,prose \
    --max-tokens "${TF_DRAFT_TOKENS:-96}" --requests-per-stream "${TF_DRAFT_REQUESTS:-3}" --ignore-eos \
    --out "$out/bench-$mode.json" >"$out/bench-$mode.log" 2>&1 || rc=1
  {
    echo "== mode $mode"
    grep -E '^\| (code|prose) ' "$out/bench-$mode.log"
    curl -s "$url/metrics" | grep -E '^tf:spec_decode_(num_drafts_total|num_draft_tokens_total|num_accepted_tokens_total|mean_accepted_length)'
    grep -o 'window_s=.*' "$out/serve-$mode.log" | head -1
  } | tee -a "$out/drafting.log"
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
done
exit "$rc"
