#!/usr/bin/env bash
# On the GPU machine: tf serve with GPU tensor-parallel ranks (default split) answers as one GPU does; a killed rank makes the leader exit 70.
# Build here with `TF_CARRY="checks serve" TF_CARRY_XZ=1 bash scripts/gpu-build.sh`; logs go to $OUT. The default (gate) model.
# Processes over TCP on GPUs TF_GPU0 and TF_GPU1 (both 0 by default: two ranks share one GPU), NCCL as a group of one; threads and NCCL processes where 2 GPUs exist.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-$PWD/gpu-tp-serve-out}"
mkdir -p "$out"
source scripts/gpu-env.sh
need_carry gpu-tp-serve "$out/tp-serve.log" tf
log="$out/tp-serve.log"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
healthy() {
  for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.2; done
  echo "gpu-tp-serve: the server on port $1 never became healthy" | tee -a "$log"
  return 1
}
# The same three requests (greedy with logprobs, seeded sampled, a longer prompt) against a port: one JSON line of choices each.
ask() {
  local port=$1 body
  for body in \
    '{"messages":[{"role":"user","content":"Write a Rust function that adds two numbers."}],"max_tokens":24,"temperature":0,"logprobs":true,"top_logprobs":2}' \
    '{"messages":[{"role":"user","content":"Name three colours."}],"max_tokens":24,"temperature":0.8,"seed":7}' \
    "{\"messages\":[{\"role\":\"user\",\"content\":\"$(head -c 1500 README.md | tr -d '"\\\n\r\t')\"}],\"max_tokens\":16,\"temperature\":0}"; do
    curl -sf "http://127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' -d "$body" |
      python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin)["choices"], sort_keys=True))'
  done
}
rc=0
# verdict OK WHAT: one line for the log; a failed check fails the script.
verdict() {
  if [[ $1 == 0 ]]; then echo "ok    $2" | tee -a "$log"; else echo "FAIL  $2" | tee -a "$log"; rc=1; fi
}
# same PORT NAME WHAT: the three answers on PORT equal the one-GPU server's.
same() {
  ask "$1" >"$out/$2.jsonl"
  cmp -s "$out/plain.jsonl" "$out/$2.jsonl"
  verdict $? "$3 == one GPU (3 requests)"
}
gpu-carry/tf serve --device cuda --port 8100 >"$out/plain.log" 2>&1 &
pids+=($!)
healthy 8100 || exit 1
ask 8100 >"$out/plain.jsonl"
if [[ $(grep -c finish_reason "$out/plain.jsonl") != 3 ]]; then
  echo "FAIL  the one-GPU server did not answer all 3 requests" | tee -a "$log"
  exit 1
fi
gpu-carry/tf serve --tp 2 --tp-addr 127.0.0.1:29610 --tp-rank 1 --device "cuda:${TF_GPU1:-0}" >"$out/rank1.log" 2>&1 &
rank1=$!
pids+=($rank1)
gpu-carry/tf serve --tp 2 --tp-addr 127.0.0.1:29610 --tp-rank 0 --device "cuda:${TF_GPU0:-0}" --port 8101 >"$out/rank0.log" 2>&1 &
rank0=$!
pids+=($rank0)
healthy 8101 || exit 1
same 8101 tp2-processes "TP2 GPU ranks as processes over TCP"
kill -KILL "$rank1"
ask 8101 >/dev/null 2>&1
for _ in $(seq 100); do kill -0 "$rank0" 2>/dev/null || break; sleep 0.1; done
wait "$rank0"
code=$?
[[ $code == 70 ]]
verdict $? "a killed GPU rank makes the leader exit 70 (it exited $code)"
# NCCL allows one rank per GPU: a group of one here, two processes where two GPUs exist.
gpu-carry/tf serve --tp 1 --tp-addr 127.0.0.1:29611 --tp-transport nccl --device cuda:0 --port 8103 >"$out/nccl1.log" 2>&1 &
pids+=($!)
healthy 8103 || exit 1
same 8103 nccl1 "a group of one over NCCL"
if (( $(nvidia-smi -L | wc -l) >= 2 )); then
  gpu-carry/tf serve --tp 2 --device cuda --port 8102 >"$out/tp2-threads.log" 2>&1 &
  pids+=($!)
  healthy 8102 || exit 1
  same 8102 tp2-threads "TP2 GPU ranks as threads on GPUs 0 and 1"
  nccl=(--tp 2 --tp-addr 127.0.0.1:29612 --tp-transport nccl)
  gpu-carry/tf serve "${nccl[@]}" --tp-rank 1 --device cuda:1 >"$out/nccl2-rank1.log" 2>&1 &
  pids+=($!)
  gpu-carry/tf serve "${nccl[@]}" --tp-rank 0 --device cuda:0 --port 8104 >"$out/nccl2-rank0.log" 2>&1 &
  pids+=($!)
  healthy 8104 || exit 1
  same 8104 nccl2 "TP2 GPU ranks as processes over NCCL"
fi
echo "gpu-tp-serve: exited $rc; logs in $out"
exit "$rc"
