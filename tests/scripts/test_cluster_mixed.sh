#!/usr/bin/env bash
# tests/scripts/test_cluster_mixed.sh
# A multi-process cluster on loopback whose two rank nodes each run a prefill and a decode rank
# (tiny model, reference backend, a cluster file written here with free ports), so that both
# expert-parallel groups span the two processes. Greedy answers through the front equal a
# one-process `serve` of 2 prefill + 2 decode ranks. Node b killed with -9 under a load of 24
# requests takes a prefill and a decode rank with it: both groups go on with node a's ranks
# alone (elastic EP), the requests on node b are placed again (re-prefilled on node a), every
# request of the load is answered in full, the greedy answers are unchanged, and the front stays
# ready (HTTP /ready 200). Started again,
# node b rejoins and the answers are the same. Everything started here is stopped at the end.
# Run by CTest as: bash test_cluster_mixed.sh <path-to-moeserve>
set -uo pipefail
moeserve=${1:?usage: test_cluster_mixed.sh <moeserve>}
source "$(dirname "${BASH_SOURCE[0]}")/cluster_helpers.sh"

"$moeserve" make-model --preset tiny --seed 6 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
read -r p0 p1 p2 rpc http single < <(free_ports 6)
cat >"$tmp/cluster.toml" <<TOML
name = "mixed-test"
token = "mixed-test-token-0123456789"
heartbeat_interval_s = 0.1
connection_timeout_s = 1.0
[[node]]
name = "front"
port = $p0
front = true
rpc_port = $rpc
http_port = $http
[[node]]
name = "node-a"
port = $p1
prefill_ranks = 1
decode_ranks = 1
[[node]]
name = "node-b"
port = $p2
prefill_ranks = 1
decode_ranks = 1
TOML

start node-b
start node-a
start front
wait_for "$tmp/front.out" "moeserve: listening on" "$pid_front"
ask "$rpc" multi
one_process "$single" --prefill-ranks 2 --decode-ranks 2
for i in "${!prompts[@]}"; do
  cmp -s "$tmp/multi.$i" "$tmp/one.$i" ||
    fail "prompt $i: 3 processes gave '$(cat "$tmp/multi.$i")', one process '$(cat "$tmp/one.$i")'"
done
echo "ok: 4 greedy answers through 3 processes (both groups' experts on two of them) equal one process's"

before=$(migration_lines)
load_in_background killed
sleep 0.5
since=$(date +%s%N)
kill -KILL "$pid_node_b"
wait "$pid_node_b" 2>/dev/null
ms=$(found_down node-b "$since")
load_answered killed
migrated "$before"
same_answers alone
ready=$(curl -s -o /dev/null -w "%{http_code}" "http://127.0.0.1:$http/ready")
[ "$ready" = 200 ] || fail "GET /ready with node-b lost: $ready (the survivors serve)"
kill -0 "$pid_front" || fail "the front exited after node-b died"
echo "ok: node-b (a prefill and a decode rank) killed with -9 under load was found down in $ms ms; node-a's ranks went on alone, all 24 requests answered in full and the answers the same"

start node-b
rejoined node-b 1
same_answers back
echo "ok: node-b started again rejoined; the answers are the same"

kill -TERM "$pid_front"
wait "$pid_front" || fail "the front exited $? on SIGTERM: $(cat "$tmp/front.out" "$tmp/front.err")"
echo "ok: the front stopped on SIGTERM"
