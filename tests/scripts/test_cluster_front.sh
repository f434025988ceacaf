#!/usr/bin/env bash
# tests/scripts/test_cluster_front.sh
# A multi-process cluster on loopback (tiny model, reference backend, a cluster file written
# here with free ports): the front node (`serve --cluster FILE --node front`) started first waits
# for the nodes, which start in any order; it serves once every rank has joined. The decode
# group's two ranks are on two nodes, so each MoE layer's experts are split over two processes
# and its dispatches and combines cross them. Four greedy requests sent at once through the
# front give the same text as a one-process `serve` of the same 2 prefill + 2 decode ranks, and
# a load of 24 requests (8 in flight) is answered in full. A node stopped with SIGSTOP is found
# down by the heartbeats within seconds, one killed with -9 at once; meanwhile requests get a
# retryable 503, not silence. Continued, or started again, the node rejoins and the same
# requests give the same text. SIGTERM stops the front cleanly and leaves the nodes running.
# Everything started here is stopped at the end.
# Run by CTest as: bash test_cluster_front.sh <path-to-moeserve>
set -uo pipefail
moeserve=${1:?usage: test_cluster_front.sh <moeserve>}
source "$(dirname "${BASH_SOURCE[0]}")/cluster_helpers.sh"

"$moeserve" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
read -r p0 p1 p2 p3 rpc single < <(free_ports 6)
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

# a load through the split group: 24 requests, 8 in flight, every one answered in full
out=$(timeout -k 5 120 "$moeserve" bench --port "$rpc" --num-prompts 24 --concurrency 8 --input-len 48 \
  --output-len 24 --seed 3 2>&1) || fail "bench through the cluster: $out"
[[ $out == *"24/24 done, 0 failed, 0 rejected"* ]] || fail "bench through the cluster: $out"
echo "ok: 24 requests, 8 in flight, all answered through the split group"

# same_answers TAG: the four prompts through the front again equal the one-process answers
same_answers() {
  ask "$rpc" "$1"
  for i in "${!prompts[@]}"; do
    cmp -s "$tmp/$1.$i" "$tmp/one.$i" || fail "$1: prompt $i gave '$(cat "$tmp/$1.$i")', not '$(cat "$tmp/one.$i")'"
  done
}
# expect_503 WHEN: a request now gets the retryable 503 naming a lost rank
expect_503() {
  local out
  out=$(timeout -k 5 60 "$moeserve" client --port "$rpc" --temperature 0 --max-tokens 4 "Hello" 2>&1)
  [[ $? -ne 0 && $out == *"503"*"unavailable"*"down in another process"* ]] || fail "a request $1: $out"
}
# found_down NODE SINCE_NS: waits (5 s at most) for the front's line; prints the ms it took
found_down() {
  for _ in $(seq 500); do
    grep -q "node $1 is down" "$tmp/front.out" && break
    sleep 0.01
  done
  grep -q "node $1 is down" "$tmp/front.out" || fail "the front did not find $1 down: $(cat "$tmp/front.out" "$tmp/front.err")"
  echo $((($(date +%s%N) - $2) / 1000000))
}
# rejoined NODE COUNT: waits (20 s at most) for the front's COUNT-th "rejoined" line of NODE
rejoined() {
  for _ in $(seq 200); do
    [ "$(grep -c "node $1 rejoined" "$tmp/front.out")" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "$1 did not rejoin: $(cat "$tmp/front.out" "$tmp/front.err")"
}

# SIGSTOP: the node is silent, not gone; the heartbeats (0.1 s, timeout 1 s) find it, and after
# SIGCONT its gate answers again and its rank takes its place (a new epoch of the decode group)
since=$(date +%s%N)
kill -STOP "$pid_decode_1"
ms=$(found_down decode-1 "$since")
expect_503 "while decode-1 is stopped"
kill -CONT "$pid_decode_1"
rejoined decode-1 1
same_answers woke
echo "ok: decode-1 stopped with SIGSTOP was found down in $ms ms (503 meanwhile); after SIGCONT it rejoined and the answers are the same"

since=$(date +%s%N)
kill -KILL "$pid_decode_0"
wait "$pid_decode_0" 2>/dev/null
ms=$(found_down decode-0 "$since")
expect_503 "after decode-0 died"
kill -0 "$pid_front" || fail "the front exited after decode-0 died"
start decode-0
rejoined decode-0 1
same_answers restarted
echo "ok: decode-0 killed with -9 was found down in $ms ms (503 meanwhile); restarted, it rejoined and the answers are the same"

kill -TERM "$pid_front"
wait "$pid_front"
status=$?
[[ $status -eq 0 ]] && grep -q "moeserve: stopped" "$tmp/front.out" ||
  fail "front on SIGTERM: exit $status: $(cat "$tmp/front.out" "$tmp/front.err")"
kill -0 "$pid_prefill_0" || fail "prefill-0 stopped with the front"
kill -0 "$pid_decode_1" || fail "decode-1 stopped with the front"
echo "ok: the front stopped on SIGTERM; prefill-0 and decode-1 run on"
