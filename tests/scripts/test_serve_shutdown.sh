#!/usr/bin/env bash
# tests/scripts/test_serve_shutdown.sh
# SIGTERM to `moeserve serve` with a generate streaming: a generate sent after it gets a 503,
# the one in flight streams to its end, and the server exits 0. With --shutdown-grace 0 the
# generate in flight gets the 503 instead, and the server still exits 0.
# Run by CTest as: bash test_serve_shutdown.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_serve_shutdown.sh <moeserve> [build-dir]}
tmp=$(mktemp -d)
server_pid=""
cleanup() {
  if [[ -n $server_pid ]]; then
    kill -KILL "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$moeserve" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"

# start_server <grace seconds>: sets server_pid and port
start_server() {
  rm -f "$tmp/server_out"
  mkfifo "$tmp/server_out"
  "$moeserve" serve --model "$tmp/m" --port 0 --prefill-ranks 1 --decode-ranks 1 --kv-blocks 64 \
    --page-size 16 --max-context 1024 --reference --log-stats-interval 0 --shutdown-grace "$1" \
    >"$tmp/server_out" 2>&1 &
  server_pid=$!
  exec 3<"$tmp/server_out"
  read -r -t 120 -u 3 line || fail "no listening line from the server"
  [[ $line =~ listening\ on\ 127\.0\.0\.1:([0-9]+) ]] || fail "unexpected first line: $line"
  port=${BASH_REMATCH[1]}
}

# stream_long: a long greedy generate in the background, streaming into $tmp/long.out
stream_long() {
  : >"$tmp/long.out"
  "$moeserve" client --port "$port" --max-tokens 200 --ignore-eos --temperature 0 "Once upon a time" \
    >"$tmp/long.out" 2>"$tmp/long.err" &
  client_pid=$!
  for _ in $(seq 1 2000); do  # until its first text arrives (20 s at most)
    [[ -s $tmp/long.out ]] && return
    sleep 0.01
  done
  fail "the long generate streamed nothing"
}

# wait_server: the server's exit status, within 60 s
wait_server() {
  for _ in $(seq 1 600); do
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  wait "$server_pid"
  local status=$?
  server_pid=""
  cat <&3 >"$tmp/server.log"
  exec 3<&-
  return $status
}

start_server 30
stream_long
kill -TERM "$server_pid"
for _ in $(seq 1 500); do  # until the server says it drains
  "$moeserve" client --port "$port" --max-tokens 2 "hi" >/dev/null 2>"$tmp/late.err" || break
  sleep 0.01
done
grep -q "server: 503" "$tmp/late.err" || fail "a generate after SIGTERM: $(cat "$tmp/late.err")"
echo "ok: a generate after SIGTERM -> $(head -1 "$tmp/late.err")"
wait "$client_pid" || fail "the generate in flight at SIGTERM: $(cat "$tmp/long.err")"
grep -q "200 generated" "$tmp/long.err" || fail "the generate in flight did not finish: $(cat "$tmp/long.err")"
echo "ok: the generate in flight finished: $(tail -1 "$tmp/long.err")"
wait_server || fail "serve exited $? after SIGTERM: $(cat "$tmp/server.log")"
grep -q "stopped" "$tmp/server.log" || fail "no 'stopped' line: $(cat "$tmp/server.log")"
echo "ok: serve drained and exited 0"

start_server 0
stream_long
kill -TERM "$server_pid"
wait "$client_pid" && fail "the generate in flight with --shutdown-grace 0 succeeded"
grep -q "server: 503" "$tmp/long.err" || fail "no 503 past the grace period: $(cat "$tmp/long.err")"
echo "ok: past the grace period -> $(grep "server: 503" "$tmp/long.err" | head -1)"
wait_server || fail "serve exited $? after SIGTERM with --shutdown-grace 0: $(cat "$tmp/server.log")"
grep -q "answered 503" "$tmp/server.log" || fail "no count of generates cut off: $(cat "$tmp/server.log")"
echo "ok: serve exited 0"
