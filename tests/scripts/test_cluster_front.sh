#!/usr/bin/env bash
# tests/scripts/test_cluster_front.sh
# A multi-process cluster on loopback (tiny model, reference backend, a cluster file written
# here with free ports): the front node (`serve --cluster FILE --node front`) started first waits
# for the nodes, which start in any order; it serves once every rank has joined. The decode
# group's two ranks are on two nodes, so each MoE layer's experts are split over two processes
# and its dispatches and combines cross them. Four greedy requests sent at once through the
# front give the same text as a one-process `serve` of the same 2 prefill + 2 decode ranks. A
# node stopped with SIGSTOP is found down by the heartbeats within seconds, and one killed with
# -9 at once; the front keeps answering, with a retryable 503 (also after SIGCONT: a node does
# not rejoin yet), not silence. SIGTERM stops the front cleanly and leaves the nodes running.
# Everything started here is stopped at the end.
# Run by CTest as: bash test_cluster_front.sh <path-to-moeserve>
set -uo pipefail
moeserve=${1:?usage: test_cluster_front.sh <moeserve>}
tmp=$(mktemp -d)
pids=""
cleanup() {
  for pid in $pids; do
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$moeserve" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
read -r p0 p1 p2 p3 rpc single < <(/usr/bin/python3 -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
cat >"$tmp/cluster.toml" <<TOML
name = "front-test"
token = "front-test-token-0123456789"
heartbeat_interval_s = 0.1
connection_timeout_s = 1.0
[[node]]
name = "front"
port = $p0
front = true
rpc_port = $rpc
http_port = 0
[[node]]
name = "prefill-0"
port = $p1
prefill_ranks = 2
[[node]]
name = "decode-0"
port = $p2
decode_ranks = 1
[[node]]
name = "decode-1"
port = $p3
decode_ranks = 1
TOML

# start NAME: a node of the cluster in the background (its pid in pid_NAME)
start() {
  "$moeserve" serve --model "$tmp/m" --reference --cluster "$tmp/cluster.toml" --node "$1" \
    >"$tmp/$1.out" 2>"$tmp/$1.err" &
  local pid=$!
  pids="$pids $pid"
  eval "pid_${1//-/_}=$pid"
}
# wait_for FILE TEXT PID: until FILE holds TEXT (30 s at most), failing if PID exits first
wait_for() {
  for _ in $(seq 300); do
    grep -q "$2" "$1" && return 0
    kill -0 "$3" 2>/dev/null || fail "$(basename "$1") exited: $(cat "$1" "${1%.out}.err")"
    sleep 0.1
  done
  fail "no \"$2\" in $(basename "$1"): $(cat "$1" "${1%.out}.err")"
}

start front
wait_for "$tmp/front.out" "waiting for prefill-0, decode-0, decode-1" "$pid_front"
start decode-1   # the nodes in another order than the file's
start decode-0
sleep 0.5
start prefill-0
wait_for "$tmp/front.out" "moeserve: listening on" "$pid_front"
grep -q "joined node decode-1 (decode rank 1)" "$tmp/front.out" || fail "front: $(cat "$tmp/front.out")"
echo "ok: the front waited for both nodes and serves: $(grep 'listening' "$tmp/front.out")"

prompts=("The capital of France is" "Once upon a time" "1, 2, 3, 4," "def fibonacci(n):")
# ask PORT TAG: the four prompts at once, greedy, each answer in $tmp/TAG.N
ask() {
  local jobs=""
  for i in "${!prompts[@]}"; do
    timeout -k 5 120 "$moeserve" client --port "$1" --temperature 0 --max-tokens 12 --ignore-eos \
      "${prompts[$i]}" >"$tmp/$2.$i" 2>&1 &
    jobs="$jobs $!"
  done
  for j in $jobs; do wait "$j" || fail "$2: a client failed: $(cat "$tmp/$2".*)"; done
}
ask "$rpc" multi

"$moeserve" serve --model "$tmp/m" --reference --prefill-ranks 2 --decode-ranks 2 --port "$single" \
  --http-port 0 >"$tmp/single.out" 2>"$tmp/single.err" &
pid_single=$!
pids="$pids $pid_single"
wait_for "$tmp/single.out" "moeserve: listening on" "$pid_single"
ask "$single" one
kill -TERM "$pid_single"
wait "$pid_single"
for i in "${!prompts[@]}"; do
  [ -s "$tmp/one.$i" ] || fail "no text for prompt $i"
  cmp -s "$tmp/multi.$i" "$tmp/one.$i" ||
    fail "prompt $i: 4 processes gave '$(cat "$tmp/multi.$i")', one process '$(cat "$tmp/one.$i")'"
done
echo "ok: 4 greedy answers through 4 processes (the decode group's experts on two of them) equal one process's"

# SIGSTOP: the node is silent, not gone; the heartbeats (0.1 s, timeout 1 s) find it
kill -STOP "$pid_decode_1"
stopped_at=$(date +%s%N)
for _ in $(seq 100); do
  grep -q "decode_rank 1, in another process, is down" "$tmp/front.err" && break
  sleep 0.05
done
grep -q "decode_rank 1, in another process, is down" "$tmp/front.err" ||
  fail "the front did not find the stopped decode-1: $(cat "$tmp/front.err")"
detected_ms=$((($(date +%s%N) - stopped_at) / 1000000))
out=$(timeout -k 5 60 "$moeserve" client --port "$rpc" --temperature 0 --max-tokens 4 "While it sleeps" 2>&1)
[[ $? -ne 0 && $out == *"503"*"unavailable"* ]] || fail "a request while decode-1 is stopped: $out"
kill -CONT "$pid_decode_1"
sleep 1.5
kill -0 "$pid_decode_1" || fail "decode-1 exited after SIGCONT"
kill -0 "$pid_front" || fail "the front exited after decode-1 came back"
out=$(timeout -k 5 60 "$moeserve" client --port "$rpc" --temperature 0 --max-tokens 4 "After it woke" 2>&1)
[[ $? -ne 0 && $out == *"503"* ]] || fail "a request after decode-1 woke (it has not rejoined): $out"
echo "ok: decode-1 stopped with SIGSTOP was found down in $detected_ms ms; requests get 503, also after SIGCONT"

killed_at=$(date +%s%N)
kill -KILL "$pid_decode_0"
wait "$pid_decode_0" 2>/dev/null
for _ in $(seq 500); do
  grep -q "decode_rank 0, in another process, is down" "$tmp/front.err" && break
  sleep 0.01
done
detected_ms=$((($(date +%s%N) - killed_at) / 1000000))
grep -q "decode_rank 0, in another process, is down" "$tmp/front.err" ||
  fail "the front did not report decode-0's ranks down: $(cat "$tmp/front.err")"
out=$(timeout -k 5 60 "$moeserve" client --port "$rpc" --temperature 0 --max-tokens 4 "After the node died" 2>&1)
status=$?
[[ $status -ne 0 && $status -ne 124 && $out == *"503"*"unavailable"*"down in another process"* ]] ||
  fail "a request after decode-0 died: exit $status: $out"
kill -0 "$pid_front" || fail "the front exited after decode-0 died"
echo "ok: decode-0 killed with -9 was found down in $detected_ms ms; a request gets: $out"

kill -TERM "$pid_front"
wait "$pid_front"
status=$?
[[ $status -eq 0 ]] && grep -q "moeserve: stopped" "$tmp/front.out" ||
  fail "front on SIGTERM: exit $status: $(cat "$tmp/front.out" "$tmp/front.err")"
kill -0 "$pid_prefill_0" || fail "prefill-0 stopped with the front"
kill -0 "$pid_decode_1" || fail "decode-1 stopped with the front"
echo "ok: the front stopped on SIGTERM; prefill-0 and decode-1 run on"
