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
# node b rejoins and the answers are the same. A rank that dies (decode rank 1, killed through
# the front's admin.kill) takes its node down whole, with the same outcome. Everything started
# here is stopped at the end.
# Run by CTest as: bash test_cluster_mixed.sh <path-to-moeserve>
set -uo pipefail
moeserve=${1:?usage: test_cluster_mixed.sh <moeserve>}
source "$(dirname "${BASH_SOURCE[0]}")/cluster_helpers.sh"

"$moeserve" make-model --preset tiny --seed 6 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
read -r p0 p1 p2 rpc http single < <(free_ports 6)
cluster_head mixed-test "$p0" middleman  # the payloads as CAF messages (test_cluster_front.sh: UCX)
cat >>"$tmp/cluster.toml" <<TOML
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
MOESERVE_ADMIN_KEY=mixed-admin-key start front --fault-injection
wait_for "$tmp/front.out" "moeserve: listening on" "$pid_front"
ask "$rpc" multi
one_process "$single" --prefill-ranks 2 --decode-ranks 2
for i in "${!prompts[@]}"; do
  cmp -s "$tmp/multi.$i" "$tmp/one.$i" ||
    fail "prompt $i: 3 processes gave '$(cat "$tmp/multi.$i")', one process '$(cat "$tmp/one.$i")'"
done
echo "ok: 4 greedy answers through 3 processes (both groups' experts on two of them) equal one process's"

lose_under_load killed node-b kill_node node-b
same_answers alone
ready=$(curl -s -o /dev/null -w "%{http_code}" "http://127.0.0.1:$http/ready")
[ "$ready" = 200 ] || fail "GET /ready with node-b lost: $ready (the survivors serve)"
kill -0 "$pid_front" || fail "the front exited after node-b died"
echo "ok: node-b (a prefill and a decode rank) killed with -9 under load was found down in $lost_ms ms; node-a's ranks went on alone, all 24 requests answered in full and the answers the same"

start node-b
rejoined node-b 1
same_answers back
echo "ok: node-b started again rejoined; the answers are the same"

# admin_kill KIND INDEX: that actor killed through the front's admin.kill (MessagePack-RPC)
admin_kill() {
  /usr/bin/python3 - "$rpc" "$1" "$2" <<'PY' || fail "admin.kill $1 $2 through the front"
import socket, sys, msgpack
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=30)
unpacker = msgpack.Unpacker(raw=False)
def call(msgid, method, params):
    s.sendall(msgpack.packb([0, msgid, method, params]))
    while True:
        unpacker.feed(s.recv(65536))
        for reply in unpacker:
            return reply
kill = {"kind": sys.argv[2], "index": int(sys.argv[3])}
for reply in (call(1, "auth", ["mixed-admin-key"]), call(2, "admin.kill", [kill])):
    assert reply[2] is None and reply[3] is not None, reply
PY
}

# a rank that dies takes its node down whole: decode rank 1 killed through the front's admin.kill
lose_under_load rank-killed node-b admin_kill decode_rank 1
wait "$pid_node_b"
status=$?
[[ $status -ne 0 ]] && grep -q "moeserve: node node-b stopping: its decode rank 1 died" "$tmp/node-b.out" ||
  fail "node-b after its rank was killed: exit $status: $(cat "$tmp/node-b.out" "$tmp/node-b.err")"
same_answers rank-alone
start node-b
rejoined node-b 2
same_answers back-again
echo "ok: decode rank 1 killed through admin.kill took node-b down whole (exit $status); the load was answered in full; started again, node-b rejoined"

kill -TERM "$pid_front"
wait "$pid_front" || fail "the front exited $? on SIGTERM: $(cat "$tmp/front.out" "$tmp/front.err")"
echo "ok: the front stopped on SIGTERM"
