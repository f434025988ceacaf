#!/usr/bin/env bash
# tests/scripts/test_metrics.sh
# GET /metrics of `moeserve serve` (tiny model, loopback): after a load of completions and one
# refused for its context, promtool (Debian's prometheus) checks the text, the counters equal
# what `stats` (/stats) says, the histograms counted every request, and a real `prometheus`
# process started here scrapes the server every second until a PromQL query through its HTTP API
# returns the tokens generated. Everything started here is stopped at the end.
# Run by CTest as: bash test_metrics.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_metrics.sh <moeserve> [build-dir]}
if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
  echo "skipped: Debian's prometheus (promtool, prometheus) is not installed (tools/setup.sh installs it)"
  exit 0
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/tests/scripts/serve_helpers.sh"

"$moeserve" make-model --preset tiny --seed 3 --out "$tmp/tiny" >/dev/null 2>&1 || fail "make-model"
start_server "$moeserve" --model "$tmp/tiny" --prefill-ranks 1 --decode-ranks 1 --kv-blocks 64 --page-size 16 \
  --dispatch-dtype fp32 --reference --log-stats-interval 0
port=$http_port
base="http://127.0.0.1:$port"

for i in 1 2 3 4; do
  curl -sf "$base/v1/completions" -H 'Content-Type: application/json' \
    -d "{\"prompt\": \"Hello number $i\", \"max_tokens\": $((2 + i)), \"temperature\": 0, \"ignore_eos\": true}" \
    >/dev/null || fail "completion $i"
done
# prompt + max_tokens past the 1024-token context: refused by the bridge, counted as validation
status=$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Hello", "max_tokens": 1023}')
[[ $status == 422 ]] || fail "a request past the context: $status"

curl -sf "$base/metrics" >"$tmp/metrics.txt" || fail "GET /metrics"
curl -sf "$base/stats" >"$tmp/stats.json" || fail "GET /stats"
# promtool: the text must parse and pass every lint but the one against ':' in names, which
# vLLM's names ("vllm:...", here "moeserve:...") break by design
promtool check metrics <"$tmp/metrics.txt" >"$tmp/promtool.out" 2>&1
status=$?
other=$(grep -v "metric names should not contain ':'" "$tmp/promtool.out")
[[ ($status -eq 0 || $status -eq 3) && -z $other ]] || fail "promtool check metrics: exit $status: $other"
echo "ok: promtool check metrics: $(grep -c '^# TYPE' "$tmp/metrics.txt") families, only the ':' naming lint"

/usr/bin/python3 - "$tmp/metrics.txt" "$tmp/stats.json" <<'PY' || fail "metrics against stats"
import json, re, sys
text = open(sys.argv[1]).read()
stats = json.load(open(sys.argv[2]))
samples = {}
for line in text.splitlines():
    if line.startswith("#") or not line.strip():
        continue
    name, value = line.rsplit(" ", 1)
    samples[name] = float(value)
def value(name, **labels):
    hits = [v for k, v in samples.items()
            if k.split("{")[0] == name and all(f'{l}="{x}"' in k for l, x in labels.items())]
    if len(hits) != 1:
        sys.exit(f"FAIL: {name} {labels}: {len(hits)} samples")
    return hits[0]
checks = [
    ("moeserve:generation_tokens_total", {}, stats["output_tokens"], 3 + 4 + 5 + 6),
    ("moeserve:prompt_tokens_total", {}, stats["input_tokens"], None),
    ("moeserve:request_success_total", {"finished_reason": "length"}, stats["finished"]["length"], 4),
    ("moeserve:requests_rejected_total", {"reason": "validation"}, stats["rejected"]["validation"], 1),
    ("moeserve:num_requests_running", {}, stats["queue"]["running"], 0),
    ("moeserve:e2e_request_latency_seconds_count", {}, 4, None),
    ("moeserve:time_to_first_token_seconds_count", {}, 4, None),
    ("moeserve:inter_token_latency_seconds_count", {}, 2 + 3 + 4 + 5, None),
    ("moeserve:kv_cache_usage_perc", {"rank": "1", "role": "decode"}, 0.0, None),
]
for name, labels, from_stats, by_hand in checks:
    got = value(name, **labels)
    if got != from_stats or (by_hand is not None and got != by_hand):
        sys.exit(f"FAIL: {name}{labels} = {got}, stats {from_stats}, by hand {by_hand}")
buckets = [v for k, v in samples.items() if k.startswith("moeserve:time_to_first_token_seconds_bucket")]
if len(buckets) != 23 or max(buckets) != 4:
    sys.exit(f"FAIL: TTFT buckets {buckets}")
# each of the 4 completions was handed from the prefill rank to the decode rank once
handoffs = sum(stats["ranks"][1]["kv_transfer"]["counts"])
if value("moeserve:kv_transfer_seconds_count") != 4 or handoffs != 4:
    sys.exit(f"FAIL: kv_transfer_seconds_count {value('moeserve:kv_transfer_seconds_count')}, stats {handoffs}, want 4")
if not 0 < value("moeserve:kv_transfer_seconds_sum") < 60:
    sys.exit("FAIL: kv_transfer_seconds_sum out of range")
for rank, role in (("0", "prefill"), ("1", "decode")):
    for stage in ("ATTN-0", "ATTN-1", "MLP", "LOGITS"):
        got = value("moeserve:rank_stage_seconds_total", rank=rank, role=role, stage=stage)
        if not got > 0 or abs(got - stats["ranks"][int(rank)]["stage_seconds"][stage]) > 1e-6:
            sys.exit(f"FAIL: rank_stage_seconds_total {role} {stage} = {got}")
print(f"ok: /metrics equals /stats: {int(value('moeserve:generation_tokens_total'))} tokens, "
      f"4 successes, 1 rejected, histograms of 4 requests, {2 + 3 + 4 + 5} token gaps and 4 KV hand-offs, "
      f"stage seconds of both ranks")
PY

prom_port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$tmp/prometheus.yml" <<YML
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: moeserve
    static_configs:
      - targets: ["127.0.0.1:$port"]
YML
prometheus --config.file="$tmp/prometheus.yml" --storage.tsdb.path="$tmp/tsdb" \
  --web.listen-address="127.0.0.1:$prom_port" >"$tmp/prometheus.log" 2>&1 &
prom_pid=$!
extra_pids=$prom_pid
expected=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["output_tokens"])' "$tmp/stats.json")
got=""
for _ in $(seq 60); do
  got=$(curl -s "http://127.0.0.1:$prom_port/api/v1/query" --data-urlencode 'query=moeserve:generation_tokens_total' |
    /usr/bin/python3 -c 'import json,sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")' 2>/dev/null)
  [[ $got == "$expected" ]] && break
  sleep 0.5
done
[[ $got == "$expected" ]] || fail "prometheus: moeserve:generation_tokens_total = '$got', expected $expected ($(tail -3 "$tmp/prometheus.log"))"
echo "ok: a real prometheus scraped /metrics: PromQL moeserve:generation_tokens_total = $got"
stop_server
