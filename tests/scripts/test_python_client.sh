#!/usr/bin/env bash
# tests/scripts/test_python_client.sh
# `moeserve serve` on an ephemeral loopback port with a tiny model and an api key (from the
# environment); the Python example client (Debian's python3-msgpack, --api-key) and `moeserve
# client` (MOESERVE_API_KEY) stream the same greedy text, which equals `moeserve generate` with
# the same topology; without the key the client gets a 401; the server always goes down at the end.
# Run by CTest as: bash test_python_client.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_python_client.sh <moeserve> [build-dir]}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n $server_pid ]]; then
    kill -TERM "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

if ! /usr/bin/python3 -c 'import msgpack' 2>/dev/null; then
  echo "skipped: Debian's python3-msgpack is not installed"
  exit 0
fi
"$moeserve" make-model --preset tiny --seed 3 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"

out=$(timeout -k 5 60 "$moeserve" serve --model "$tmp/m" --host bogus --prefill-ranks 1 \
  --decode-ranks 1 2>&1)
status=$?
[[ $status -eq 2 && $out == *"--host"* ]] || fail "serve --host bogus: exit $status, output: $out"
echo "ok: serve --host bogus -> $out"

mkfifo "$tmp/server_out"
key="test-key-$$"
MOESERVE_API_KEY=$key "$moeserve" serve --model "$tmp/m" --port 0 --prefill-ranks 1 --decode-ranks 1 --kv-blocks 64 \
  --page-size 16 --max-context 4096 --dispatch-dtype fp32 --reference --log-stats-interval 1 >"$tmp/server_out" 2>&1 &
server_pid=$!
exec 3<"$tmp/server_out"
read -r -t 120 -u 3 line || fail "no listening line from the server"
[[ $line =~ listening\ on\ 127\.0\.0\.1:([0-9]+) ]] || fail "unexpected first line: $line"
[[ $line == *"context 1024 tokens"* ]] || fail "the listening line should name the served context: $line"
port=${BASH_REMATCH[1]}
echo "server: $line"

prompt="The quick brown fox"
env -u MOESERVE_API_KEY /usr/bin/python3 "$root/tools/example_client.py" --port "$port" \
  --api-key "$key" --max-tokens 8 --ignore-eos "$prompt" >"$tmp/py.out" 2>"$tmp/py.err" ||
  fail "python client: $(cat "$tmp/py.err")"
grep -q "finish: length | 5 prompt tokens | 8 generated" "$tmp/py.err" ||
  fail "python client summary: $(cat "$tmp/py.err")"
MOESERVE_API_KEY=$key "$moeserve" client --port "$port" --max-tokens 8 --ignore-eos \
  --temperature 0 "$prompt" >"$tmp/cpp.out" 2>"$tmp/cpp.err" ||
  fail "moeserve client: $(cat "$tmp/cpp.err")"
cmp -s "$tmp/py.out" "$tmp/cpp.out" || fail "the two clients streamed different text"
"$moeserve" generate --model "$tmp/m" --reference --prompt "$prompt" --max-tokens 8 --ignore-eos \
  --temperature 0 --prefill-ranks 1 --decode-ranks 1 --kv-blocks 64 --page-size 16 \
  --max-context 4096 --dispatch-dtype fp32 >"$tmp/gen.out" 2>"$tmp/gen.err" ||
  fail "moeserve generate: $(cat "$tmp/gen.err")"
gen_text=$(head -c "$(stat -c %s "$tmp/py.out")" "$tmp/gen.out")
[[ $gen_text == "$(cat "$tmp/py.out")" ]] || fail "served text differs from moeserve generate"
echo "ok: python client and moeserve client streamed: $(cat "$tmp/py.out")"
env -u MOESERVE_API_KEY "$moeserve" client --port "$port" --max-tokens 2 "$prompt" \
  >/dev/null 2>"$tmp/nokey.err" && fail "moeserve client without the key succeeded"
grep -q "server: 401" "$tmp/nokey.err" || fail "no 401 without the key: $(cat "$tmp/nokey.err")"
echo "ok: without the key: $(cat "$tmp/nokey.err")"

# bench: a --prompt longer than the served context (1024: the KV pool of 64 x 16 under
# --max-context 4096) is refused up front, counted in the server's tokens;
# a run where no request completes (each cancelled 10 ms in, long before 250 tokens) exits 1
long_prompt=$(printf "1 %.0s" {1..600})
MOESERVE_API_KEY=$key timeout -k 5 60 "$moeserve" bench --port "$port" --num-prompts 2 --output-len 2 \
  --prompt "$long_prompt" >"$tmp/bench.out" 2>"$tmp/bench.err"
status=$?
[[ $status -eq 2 ]] && grep -q -- "--prompt (1201 tokens).*context of 1024" "$tmp/bench.err" ||
  fail "bench --prompt past the context: exit $status, $(cat "$tmp/bench.err")"
echo "ok: bench --prompt past the context -> $(tail -1 "$tmp/bench.err")"
MOESERVE_API_KEY=$key timeout -k 5 60 "$moeserve" bench --port "$port" --num-prompts 2 --concurrency 2 \
  --input-len 4 --output-len 250 --duration 0.01 --grace-period 0 >"$tmp/bench.out" 2>"$tmp/bench.err"
status=$?
[[ $status -eq 1 ]] && grep -q "none of the 2 requests completed" "$tmp/bench.err" ||
  fail "bench with no request completed: exit $status, $(cat "$tmp/bench.err")"
echo "ok: bench with no request completed -> $(tail -1 "$tmp/bench.err")"

sleep 1.2                                   # one more --log-stats-interval
kill -TERM "$server_pid"
wait "$server_pid"
status=$?
server_pid=""
[[ $status -eq 0 ]] || fail "the server exited with $status after SIGTERM"
echo "ok: the server stopped cleanly"
log=$(timeout 5 cat <&3)                    # what it printed after its listening line
stats=$(grep -m1 "\[info\] prompt .* tok/s, generation .* tok/s, .* requests" <<<"$log") ||
  fail "no stats line on the server's stderr: $log"
echo "ok: stats line: $stats"
warning=$(grep -m1 "\[warning\] serving a context of 1024 tokens, less than --max-context 4096" <<<"$log") ||
  fail "no warning that the KV pool lowers the context: $log"
echo "ok: $warning"
