#!/usr/bin/env bash
# tests/scripts/test_http.sh
# The HTTP front of `moeserve serve` (tiny model, ephemeral loopback ports, an api key and an
# admin key) driven by Python's http.client and raw sockets (tests/scripts/http_checks.py): the
# OpenAI endpoints against the greedy text of `moeserve generate`, streams, errors, auth, admin,
# keep-alive, pipelining, the request limits and a disconnect that frees KV; `moeserve bench`
# over both fronts (--backend moeserve and --backend openai); then the server
# stops on SIGTERM. Run by CTest as: bash test_http.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_http.sh <moeserve> [build-dir]}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$root/tests/scripts/serve_helpers.sh"

"$moeserve" make-model --preset tiny --seed 3 --out "$tmp/tiny" >/dev/null 2>&1 || fail "make-model"
flags=(--prefill-ranks 1 --decode-ranks 1 --kv-blocks 64 --page-size 16 --max-context 4096
       --dispatch-dtype fp32 --reference)
prompt="The quick brown fox"
"$moeserve" generate --model "$tmp/tiny" "${flags[@]}" --prompt "$prompt" --max-tokens 8 --ignore-eos \
  --temperature 0 >"$tmp/gen.out" 2>"$tmp/gen.err" || fail "moeserve generate: $(cat "$tmp/gen.err")"

MOESERVE_API_KEY=key-$$ MOESERVE_ADMIN_KEY=admin-$$ start_server "$moeserve" --model "$tmp/tiny" "${flags[@]}" \
  --read-timeout 1 --keep-alive-timeout 2 --max-body-bytes 4096 --max-header-bytes 1024 --max-connections 6 \
  --log-stats-interval 0

timeout -k 5 240 /usr/bin/python3 "$root/tests/scripts/http_checks.py" "$http_port" "key-$$" "admin-$$" tiny \
  "$tmp/gen.out" || fail "http checks (server log: $(tail -5 "$tmp/server.log"))"

# the same load through both fronts: `moeserve bench` over the wire and as an OpenAI client
for backend in moeserve openai; do
  if [[ $backend == openai ]]; then where=(--backend openai --base-url "http://127.0.0.1:$http_port/v1"); else
    where=(--port "$wire_port"); fi
  MOESERVE_API_KEY=key-$$ timeout -k 5 120 "$moeserve" bench "${where[@]}" --num-prompts 6 --concurrency 3 \
    --input-len 16 --output-len 8 >"$tmp/bench.out" 2>"$tmp/bench.err" || fail "bench $backend: $(cat "$tmp/bench.err")"
  grep -q "Successful requests: *6" "$tmp/bench.out" && grep -q "Total generated tokens: *48" "$tmp/bench.out" ||
    fail "bench $backend: $(cat "$tmp/bench.out")"
  echo "ok: bench --backend $backend: $(grep "Output token throughput" "$tmp/bench.out")"
done

stop_server
