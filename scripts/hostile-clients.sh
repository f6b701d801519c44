#!/usr/bin/env bash
# Issue 23's receipts against a real `tf serve` (default model, loopback): hung-up plain clients and oversized prompts.
# TF_BIN picks the binary (default target/release/tf); TF_ARGS adds serve flags. Prints one JSON line per check.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${TF_BIN:-target/release/tf}
[ -x "$bin" ] || { echo "no $bin: cargo build --release -p tf-server first" >&2; exit 2; }
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
base="http://127.0.0.1:$port"
log=$(mktemp "${TMPDIR:-/tmp}/tf-hostile.XXXXXX")
work=$(mktemp -d "${TMPDIR:-/tmp}/tf-hostile-body.XXXXXX")
"$bin" serve --port "$port" ${TF_ARGS:-} >"$log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$work" "$log"' EXIT
for _ in $(seq 600); do curl -sf "$base/health" >/dev/null && break; sleep 0.1; done
curl -sf "$base/health" >/dev/null || { cat "$log" >&2; exit 1; }

metric() { curl -s "$base/metrics" | awk -v n="$1" '$1 == n {print $2}' | head -1; }
now() { date +%s.%N; }

# 1. Eight plain clients that give up after 0.5 s, then one more request: how long until lanes free, and what ran meanwhile.
chat='{"messages":[{"role":"user","content":"hi"}],"max_tokens":1000,"temperature":0.7}'
for i in $(seq 8); do
  curl -s -m 0.5 "$base/v1/chat/completions" -H 'content-type: application/json' -d "$chat" >/dev/null || true &
done
wait_pids=$(jobs -p | grep -v "^$pid$" || true)
[ -z "$wait_pids" ] || wait $wait_pids 2>/dev/null || true
gone=$(now); tokens0=$(metric tf:generation_tokens_total)
while [ "$(metric tf:num_requests_running)" != "0" ]; do sleep 0.005; done
freed=$(now); tokens1=$(metric tf:generation_tokens_total)
aborts=$(metric 'tf:request_success_total{finished_reason="abort"}')
lengths=$(metric 'tf:request_success_total{finished_reason="length"}')
t0=$(now)
curl -s "$base/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0}' >/dev/null
t1=$(now)
python3 -c "import json,sys; a=sys.argv[1:]; print(json.dumps({'check': 'hung_up_plain_clients', 'clients': 8,
  'lanes_free_after_s': round(float(a[1]) - float(a[0]), 4), 'tokens_after_hangup': float(a[3]) - float(a[2]),
  'aborts': float(a[4] or 0), 'finished_length': float(a[5] or 0), 'next_request_s': round(float(a[7]) - float(a[6]), 3)}))" \
  "$gone" "$freed" "$tokens0" "$tokens1" "$aborts" "$lengths" "$t0" "$t1"

# 2. Two concurrent chats of N characters (15 M: refused by byte count; 2 M: tokenized first) while /health is polled.
for chars in 15000000 2000000; do
python3 -c "import json, sys; print(json.dumps({'messages': [{'role': 'user', 'content': 'x ' * (int(sys.argv[1]) // 2)}]}))" "$chars" >"$work/huge.json"
for i in 1 2; do
  curl -s -o "$work/r$i.json" -w '%{http_code} %{time_total}\n' "$base/v1/chat/completions" \
    -H 'content-type: application/json' --data-binary @"$work/huge.json" >"$work/s$i" &
done
big="$(jobs -p | grep -v "^$pid$" | tr '\n' ' ')"
: >"$work/health"
while kill -0 $big 2>/dev/null; do
  curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "$base/health" >>"$work/health"
  sleep 0.01
done
wait $big 2>/dev/null || true
rss=$(awk '/VmRSS/ {print $2 * 1024}' "/proc/$pid/status")
python3 - "$work" "$rss" "$chars" <<'EOF2'
import json, pathlib, sys
w = pathlib.Path(sys.argv[1])
h = [l.split() for l in (w / "health").read_text().splitlines() if l.strip()]
lat = sorted(float(t) for _, t in h)
codes = {c for c, _ in h}
big = [(w / f"s{i}").read_text().split() for i in (1, 2)]
msg = json.loads((w / "r1.json").read_text())["error"]["message"]
print(json.dumps({"check": "oversized_prompts_and_health", "prompt_chars": int(sys.argv[3]),
                  "statuses": [int(s) for s, _ in big], "seconds": [float(t) for _, t in big],
                  "health_polls": len(lat), "health_codes": sorted(codes), "health_p50_ms": round(1e3 * lat[len(lat) // 2], 2),
                  "health_max_ms": round(1e3 * lat[-1], 2), "server_rss_mb_after": round(int(sys.argv[2]) / 2**20), "message": msg[:120]}))
EOF2
done
