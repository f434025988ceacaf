#!/usr/bin/env bash
# tests/scripts/test_cluster_nodes.sh
# Nodes of a multi-process cluster on loopback (tiny model, a cluster file written here with
# free ports): `serve --cluster FILE --node NAME` processes that run ranks, reached through
# their gates by `cluster ping` over CAF's middleman. A ping started before its node waits for it
# (nodes join in any order) and gets every rank's stats across the process boundary; a wrong
# token or another cluster's name is refused, and the node logs it; a node killed with -9 no
# longer answers; SIGTERM stops a node cleanly. Everything started here is stopped at the end.
# Run by CTest as: bash test_cluster_nodes.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_cluster_nodes.sh <moeserve> [build-dir]}
source "$(dirname "${BASH_SOURCE[0]}")/cluster_helpers.sh"

"$moeserve" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
read -r p0 p1 p2 p3 < <(free_ports 4)
cat >"$tmp/cluster.toml" <<TOML
name = "test"
token = "test-token-0123456789"
heartbeat_interval_s = 0.1
connection_timeout_s = 1.0
[[node]]
name = "front"
port = $p0
front = true
rpc_port = 0
[[node]]
name = "prefill-0"
port = $p1
prefill_ranks = 1
[[node]]
name = "decode-0"
port = $p2
decode_ranks = 1
[[node]]
name = "decode-1"
port = $p3
decode_ranks = 1
TOML
"$moeserve" cluster check "$tmp/cluster.toml" --model "$tmp/m" >/dev/null || fail "cluster check of the test's file"

# start_node NAME: runs the node in the background, waits for its line
start_node() {
  "$moeserve" serve --model "$tmp/m" --reference --cluster "$tmp/cluster.toml" --node "$1" \
    >"$tmp/$1.out" 2>"$tmp/$1.err" &
  local pid=$!
  pids="$pids $pid"
  eval "pid_${1//-/_}=$pid"
  for _ in $(seq 300); do
    grep -q "moeserve: node $1 of cluster test on" "$tmp/$1.out" && return 0
    kill -0 "$pid" 2>/dev/null || fail "node $1 exited: $(cat "$tmp/$1.out" "$tmp/$1.err")"
    sleep 0.1
  done
  fail "node $1 did not come up: $(cat "$tmp/$1.out" "$tmp/$1.err")"
}

# a ping before the node exists waits for it
timeout -k 5 90 "$moeserve" cluster ping "$tmp/cluster.toml" --node decode-0 --timeout 60 >"$tmp/early.out" 2>&1 &
early=$!
pids="$pids $early"
sleep 0.5
start_node decode-0
wait "$early" || fail "a ping started before its node: $(cat "$tmp/early.out")"
grep -q "decode rank 0: [0-9]* of [0-9]* KV blocks free, 0 running" "$tmp/early.out" ||
  fail "ping of decode-0: $(cat "$tmp/early.out")"
echo "ok: a ping started before decode-0 joined it and read its rank's stats: $(grep 'decode rank' "$tmp/early.out")"

start_node prefill-0
out=$(timeout -k 5 60 "$moeserve" cluster ping "$tmp/cluster.toml" --node prefill-0 --timeout 20 2>&1) ||
  fail "ping of prefill-0: $out"
[[ $out == *"prefill rank 0: "*" KV blocks free"* ]] || fail "ping of prefill-0: $out"
echo "ok: prefill-0: $(echo "$out" | tail -1)"

out=$(timeout -k 5 60 "$moeserve" cluster ping "$tmp/cluster.toml" --node prefill-0 --token wrong --timeout 20 2>&1)
status=$?
[[ $status -eq 2 && $out == *"node prefill-0 refused: with a wrong cluster token"* ]] ||
  fail "a wrong token: exit $status: $out"
grep -q 'refused a peer calling itself "cluster ping" with a wrong cluster token' "$tmp/prefill-0.err" ||
  fail "the node did not log the refusal: $(cat "$tmp/prefill-0.err")"
echo "ok: a wrong token is refused and logged: $out"
out=$(timeout -k 5 60 "$moeserve" cluster ping "$tmp/cluster.toml" --node prefill-0 --cluster-name other \
  --timeout 20 2>&1)
status=$?
[[ $status -eq 2 && $out == *'refused: of cluster "other", not "test"'* ]] || fail "another cluster: exit $status: $out"
echo "ok: another cluster's peer is refused: $out"

kill -KILL "$pid_decode_0"
wait "$pid_decode_0" 2>/dev/null
out=$(timeout -k 5 60 "$moeserve" cluster ping "$tmp/cluster.toml" --node decode-0 --timeout 1 2>&1)
status=$?
[[ $status -eq 2 && $out == *"node decode-0 at 127.0.0.1:$p2 did not answer (waited"* ]] ||
  fail "a node killed with -9: exit $status: $out"
echo "ok: decode-0 killed with -9 no longer answers"

kill -TERM "$pid_prefill_0"
wait "$pid_prefill_0"
status=$?
[[ $status -eq 0 ]] && grep -q "moeserve: node prefill-0 stopping" "$tmp/prefill-0.out" ||
  fail "SIGTERM: exit $status: $(cat "$tmp/prefill-0.out" "$tmp/prefill-0.err")"
echo "ok: prefill-0 stopped on SIGTERM"
