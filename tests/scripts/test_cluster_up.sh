#!/usr/bin/env bash
# tests/scripts/test_cluster_up.sh
# `moeserve cluster up FILE --model DIR` starts every loopback node of a cluster file (tiny
# model, reference backend, free ports), prints how to start a node of another host instead (the
# front, waiting for that node, still stops at once on Ctrl-C), and
# the cluster it started answers a request through its front node. Ctrl-C (SIGINT) stops every
# node it started and it exits 0. A rank node that dies on its own is started again and rejoins,
# and the front answers; the front dying stops the rest, and it exits with an error naming it.
# Nothing is left running.
# Run by CTest as: bash test_cluster_up.sh <path-to-moeserve>
set -uo pipefail
moeserve=${1:?usage: test_cluster_up.sh <moeserve>}
source "$(dirname "${BASH_SOURCE[0]}")/cluster_helpers.sh"

"$moeserve" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
read -r p0 p1 p2 rpc < <(free_ports 4)
cat >"$tmp/cluster.toml" <<TOML
name = "up-test"
token = "up-test-token-0123456789"
[[node]]
name = "front"
port = $p0
front = true
rpc_port = $rpc
http_port = 0
[[node]]
name = "ranks"
port = $p1
prefill_ranks = 1
decode_ranks = 1
[[node]]
name = "elsewhere"
host = "192.0.2.7"
port = $p2
decode_ranks = 1
TOML
# nodes(): the serve processes of this cluster file still running
nodes() { pgrep -f -- "--cluster $tmp/cluster.toml" | wc -l; }

# the file's node on another host cannot join here: the front would wait for it, so this run
# uses a copy without it (cluster up only prints how to start it)
"$moeserve" cluster up "$tmp/cluster.toml" --model "$tmp/m" --reference >"$tmp/remote.out" 2>&1 &
pid=$!
pids="$pids $pid"
for _ in $(seq 100); do grep -q "started node ranks" "$tmp/remote.out" && break; sleep 0.1; done
grep -q "cluster up: node elsewhere is on 192.0.2.7: start it there with \`moeserve serve --cluster $tmp/cluster.toml --node elsewhere" "$tmp/remote.out" ||
  fail "the other host's node: $(cat "$tmp/remote.out")"
for _ in $(seq 100); do grep -q "waiting for ranks, elsewhere" "$tmp/remote.out" && break; sleep 0.1; done
started=$SECONDS
kill -INT "$pid"
wait "$pid" || fail "cluster up on SIGINT: $(cat "$tmp/remote.out")"
grep -q "moeserve: stopping before every node joined" "$tmp/remote.out" ||
  fail "the front waiting for nodes did not stop on its own: $(cat "$tmp/remote.out")"
((SECONDS - started < 20)) || fail "Ctrl-C took $((SECONDS - started)) s while the front waited for nodes"
echo "ok: a node on another host is named with the command that starts it; Ctrl-C stops the waiting front at once"

head -n -5 "$tmp/cluster.toml" >"$tmp/local.toml"
mv "$tmp/local.toml" "$tmp/cluster.toml"
"$moeserve" cluster up "$tmp/cluster.toml" --model "$tmp/m" --reference >"$tmp/up.out" 2>&1 &
pid=$!
pids="$pids $pid"
for _ in $(seq 300); do
  grep -q "moeserve: listening on" "$tmp/up.out" && break
  kill -0 "$pid" 2>/dev/null || fail "cluster up exited: $(cat "$tmp/up.out")"
  sleep 0.1
done
grep -q "moeserve: listening on" "$tmp/up.out" || fail "no front: $(cat "$tmp/up.out")"
[ "$(nodes)" -eq 2 ] || fail "$(nodes) nodes running, not 2"
out=$(timeout -k 5 60 "$moeserve" client --port "$rpc" --temperature 0 --max-tokens 6 "Hello" 2>&1) ||
  fail "a request through the front: $out"
echo "ok: cluster up started 2 nodes and the front answered: $out"
kill -INT "$pid"
wait "$pid"
status=$?
[[ $status -eq 0 ]] && grep -q "cluster up: stopped" "$tmp/up.out" || fail "SIGINT: exit $status: $(cat "$tmp/up.out")"
[ "$(nodes)" -eq 0 ] || fail "$(nodes) nodes left running after SIGINT"
echo "ok: Ctrl-C stopped both nodes"

"$moeserve" cluster up "$tmp/cluster.toml" --model "$tmp/m" --reference >"$tmp/die.out" 2>&1 &
pid=$!
pids="$pids $pid"
for _ in $(seq 300); do grep -q "moeserve: listening on" "$tmp/die.out" && break; sleep 0.1; done
pkill -KILL -f -- "--cluster $tmp/cluster.toml --node ranks"
for _ in $(seq 300); do grep -q "moeserve: node ranks rejoined" "$tmp/die.out" && break; sleep 0.1; done
grep -q "cluster up: node ranks exited (signal 9): started again" "$tmp/die.out" &&
  grep -q "moeserve: node ranks rejoined" "$tmp/die.out" || fail "the rank node killed: $(cat "$tmp/die.out")"
out=$(timeout -k 5 60 "$moeserve" client --port "$rpc" --temperature 0 --max-tokens 6 "Hello" 2>&1) ||
  fail "a request after the rank node came back: $out"
echo "ok: the rank node killed with -9 was started again and rejoined; the front answered: $out"
pkill -KILL -f -- "--cluster $tmp/cluster.toml --node front"
wait "$pid"
status=$?
[[ $status -eq 2 ]] && grep -q "cluster up: node front exited (signal 9): the others were stopped" "$tmp/die.out" ||
  fail "the front killed: exit $status: $(cat "$tmp/die.out")"
[ "$(nodes)" -eq 0 ] || fail "$(nodes) nodes left running after the front died"
echo "ok: the front killed stopped the rest, named: $(grep 'front exited' "$tmp/die.out")"
