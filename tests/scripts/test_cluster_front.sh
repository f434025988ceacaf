#!/usr/bin/env bash
# tests/scripts/test_cluster_front.sh
# A multi-process cluster on loopback (tiny model, reference backend, a cluster file written
# here with free ports): the front node (`serve --cluster FILE --node front`) started first waits
# for the nodes, which start in any order; it serves once every rank has joined. The decode
# group's two ranks are on two nodes, so each MoE layer's experts are split over two processes
# and its dispatches and combines cross them (over UCX where moeserve was built with it: the
# node's payload counts are checked at the end; test_cluster_mixed.sh sends them as CAF
# messages). Four greedy requests sent at once through the
# front give the same text as a one-process `serve` of the same 2 prefill + 2 decode ranks, and
# a load of 24 requests (8 in flight) is answered in full. The front's expert balancer
# rebalances the split group (admin.rebalance), experts moving between the nodes, with the same
# answers; a node that rejoins later takes that placement. A second front is refused while the
# first is up. The prefill group, which one node
# hosts whole, is rebalanced from the front as well, before and after that node restarts. A decode node stopped with SIGSTOP
# under load is found down by the heartbeats within seconds, one killed with -9 at once; the
# other decode node goes on alone (elastic EP), the lost node's requests are placed again, and
# every request of the load is answered in full, greedy answers unchanged. With the prefill node
# (every prefill rank) killed, requests get a retryable 503, not silence, and /ready says why. Continued, or started
# again, a node rejoins and the same requests give the same text. SIGTERM stops the front
# cleanly and leaves the nodes running; a front started again joins them and gives the same
# text. SIGTERM stops decode-1, which says what its data plane carried.
# Everything started here is stopped at the end.
# Run by CTest as: bash test_cluster_front.sh <path-to-moeserve>
set -uo pipefail
moeserve=${1:?usage: test_cluster_front.sh <moeserve>}
source "$(dirname "${BASH_SOURCE[0]}")/cluster_helpers.sh"

"$moeserve" make-model --preset tiny --seed 5 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
read -r p0 p1 p2 p3 rpc http single < <(free_ports 7)
cluster_head front-test "$p0"
cat >>"$tmp/cluster.toml" <<TOML
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

MOESERVE_ADMIN_KEY=front-admin-key start front
wait_for "$tmp/front.out" "waiting for prefill-0, decode-0, decode-1" "$pid_front"
start decode-1   # the nodes in another order than the file's
start decode-0
sleep 0.5
start prefill-0
wait_for "$tmp/front.out" "moeserve: listening on" "$pid_front"
grep -q "joined node decode-1 (decode rank 1)" "$tmp/front.out" || fail "front: $(cat "$tmp/front.out")"
echo "ok: the front waited for both nodes and serves: $(grep 'listening' "$tmp/front.out")"

# a second front of the cluster (a copy of the file with other front ports) is refused while
# this one is up: the nodes serve one front at a time
read -r q0 qrpc qhttp < <(free_ports 3)
sed -e "0,/^port = $p0\$/s//port = $q0/" -e "s/^rpc_port = $rpc\$/rpc_port = $qrpc/" \
  -e "s/^http_port = $http\$/http_port = $qhttp/" "$tmp/cluster.toml" >"$tmp/second.toml"
out=$(timeout -k 5 60 "$moeserve" serve --model "$tmp/m" --reference --cluster "$tmp/second.toml" --node front 2>&1)
status=$?
[[ $status -eq 2 && $out == *"node prefill-0 refused: as a second front"* ]] ||
  fail "a second front: exit $status: $out"
grep -q 'refused a peer calling itself "front" as a second front' "$tmp/prefill-0.err" ||
  fail "prefill-0 did not log the second front: $(cat "$tmp/prefill-0.err")"
echo "ok: a second front of the cluster is refused while the first is up, and the node logs it"

ask "$rpc" multi

one_process "$single" --prefill-ranks 2 --decode-ranks 2
for i in "${!prompts[@]}"; do
  cmp -s "$tmp/multi.$i" "$tmp/one.$i" ||
    fail "prompt $i: 4 processes gave '$(cat "$tmp/multi.$i")', one process '$(cat "$tmp/one.$i")'"
done
echo "ok: 4 greedy answers through 4 processes (the decode group's experts on two of them) equal one process's"

# a load through the split group: 24 requests, 8 in flight, every one answered in full
out=$(timeout -k 5 120 "$moeserve" bench --port "$rpc" --num-prompts 24 --concurrency 8 --input-len 48 \
  --output-len 24 --seed 3 2>&1) || fail "bench through the cluster: $out"
[[ $out == *"24/24 done, 0 failed, 0 rejected"* ]] || fail "bench through the cluster: $out"
echo "ok: 24 requests, 8 in flight, all answered through the split group"

# EPLB over the split group: the front's expert balancer plans from the routed load of both
# processes and installs the new placement, its experts copied between the nodes' ranks
out=$(MOESERVE_ADMIN_KEY=front-admin-key timeout -k 5 90 "$moeserve" ctl --port "$rpc" rebalance --role decode 2>&1) ||
  fail "ctl rebalance through the front: $out"
echo "$out" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
g = j["groups"][0]
assert g["role"] == "decode" and g["error"] == "" and g["epoch"] == 1, j
assert g["moved_experts"] > 0 and g["moved_bytes"] > 0, j
assert all(a >= b for a, b in zip(g["balancedness_after"], g["balancedness_before"])), j
' || fail "rebalance of the split decode group: $out"
same_answers eplb
echo "ok: the split decode group rebalanced through the front (epoch 1, $(echo "$out" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["moved_experts"])') experts moved between the nodes) and the answers are the same"

# EPLB over the prefill group prefill-0 hosts whole: its balancer runs on the front too, and
# prefill-0 keeps the decision in the membership it gave its ranks
rebalance_prefill() {
  out=$(MOESERVE_ADMIN_KEY=front-admin-key timeout -k 5 90 "$moeserve" ctl --port "$rpc" rebalance --role prefill 2>&1) ||
    fail "ctl rebalance --role prefill through the front ($1): $out"
  echo "$out" | /usr/bin/python3 -c '
import json, sys
g = json.load(sys.stdin)["groups"][0]
assert g["role"] == "prefill" and g["error"] == "" and g["epoch"] == 1, g
assert g["moved_experts"] > 0 and g["moved_bytes"] > 0, g
' || fail "rebalance of the prefill group prefill-0 hosts whole ($1): $out"
}
rebalance_prefill "first"
same_answers eplb-prefill
echo "ok: the prefill group on prefill-0 rebalanced from the front (epoch 1, kept by prefill-0) and the answers are the same"

# SIGSTOP under load: the node is silent, not gone; the heartbeats (0.1 s, timeout 1 s) find it.
# The decode group goes on with decode-0 alone (it holds every expert then), the requests on
# decode-1 are placed again, and every request is answered in full. After SIGCONT its gate
# answers again and its rank takes its place (a new epoch of the whole group).
lose_under_load stopped decode-1 kill -STOP "$pid_decode_1"
same_answers alone
kill -CONT "$pid_decode_1"
rejoined decode-1 1
same_answers woke
# the whole group again takes the placement its balancer decided (epoch 1), not the one it began
# with (epoch 0): a rebalance now starts from epoch 1, so it installs epoch 2 or finds nothing to move
out=$(MOESERVE_ADMIN_KEY=front-admin-key timeout -k 5 90 "$moeserve" ctl --port "$rpc" rebalance --role decode 2>&1) ||
  fail "ctl rebalance after decode-1 rejoined: $out"
echo "$out" | /usr/bin/python3 -c '
import json, sys
g = json.load(sys.stdin)["groups"][0]
assert g["error"] == "" and (g["epoch"] == 2 or (g["epoch"] == 1 and g["moved_experts"] == 0)), g
' || fail "after decode-1 rejoined, the decode group did not keep its rebalanced placement: $out"
echo "ok: decode-1 stopped with SIGSTOP under load was found down in $lost_ms ms; decode-0 went on alone, all 24 requests answered in full and the answers the same; after SIGCONT it rejoined with the rebalanced placement and the answers are the same"

lose_under_load killed decode-0 kill_node decode-0
same_answers alone-1
kill -0 "$pid_front" || fail "the front exited after decode-0 died"
start decode-0
rejoined decode-0 1
same_answers restarted
echo "ok: decode-0 killed with -9 under load was found down in $lost_ms ms; decode-1 went on alone, all 24 requests answered in full; restarted, it rejoined and the answers are the same"

# the prefill node hosts every prefill rank: with it lost, nothing can prefill, and requests get
# the retryable 503 until it is back
kill_node prefill-0
found_down prefill-0 "$(date +%s%N)" >/dev/null || fail "the front did not find prefill-0 down"
expect_503 "with every prefill rank lost"
ready=$(curl -s -w " %{http_code}" "http://127.0.0.1:$http/ready")
[[ $ready == *"lost with their nodes: every prefill rank"*" 503" ]] || fail "GET /ready with prefill-0 lost: $ready"
# /metrics answers all the same, the lost ranks down and the others up
metrics=$(curl -s -w "%{http_code}" "http://127.0.0.1:$http/metrics")
[[ $metrics == *'rank_up{model_name="m",rank="0",role="prefill"} 0'* && $metrics == *'rank_up{model_name="m",rank="1",role="prefill"} 0'* &&
  $metrics == *'rank_up{model_name="m",rank="2",role="decode"} 1'* && $metrics == *200 ]] ||
  fail "GET /metrics with prefill-0 lost: $(echo "$metrics" | grep -E 'rank_up|error' | head -5)"
start prefill-0
rejoined prefill-0 1
same_answers prefill-back
# the restarted node's ranks begin with the first placement again; the front's balancer knows
# them and the new node's keeper: a rebalance installs epoch 1 anew
rebalance_prefill "after prefill-0 restarted"
same_answers prefill-eplb-back
echo "ok: with prefill-0 (every prefill rank) killed, requests got a retryable 503 and /metrics showed its ranks down; restarted, it rejoined, rebalanced again from the front, and the answers are the same"

kill -TERM "$pid_front"
wait "$pid_front"
status=$?
[[ $status -eq 0 ]] && grep -q "moeserve: stopped" "$tmp/front.out" ||
  fail "front on SIGTERM: exit $status: $(cat "$tmp/front.out" "$tmp/front.err")"
kill -0 "$pid_prefill_0" || fail "prefill-0 stopped with the front"
kill -0 "$pid_decode_1" || fail "decode-1 stopped with the front"
echo "ok: the front stopped on SIGTERM; prefill-0 and decode-1 run on"

# a front started again while the nodes run joins them again and serves the same answers (the
# split decode group introduced anew, with the placement it began with)
MOESERVE_ADMIN_KEY=front-admin-key start front
wait_for "$tmp/front.out" "moeserve: listening on" "$pid_front"
same_answers front-again
# the nodes' ranks are in memberships of the old front's later epochs (decode-0 and decode-1 were
# lost and rejoined): the new front's memberships must begin above them, or a survivor goes on
# waiting for a lost rank's payloads in a step of the old one
lose_under_load killed-again decode-0 kill_node decode-0
start decode-0
rejoined decode-0 1
same_answers front-again-back
echo "ok: the front started again joined the running nodes and the answers are the same; decode-0 killed under load then, decode-1 went on alone and every request was answered"

kill -TERM "$pid_decode_1"
wait "$pid_decode_1"
if grep -q "payloads from other processes over UCX" "$tmp/decode-1.out"; then
  # "... data plane (UCX): S payloads sent (B bytes), R received (B bytes), D dropped"
  counts=$(grep -o "data plane (UCX): [0-9]* payloads sent ([0-9]* bytes), [0-9]* received" "$tmp/decode-1.out")
  read -r sent received < <(echo "$counts" | sed -E 's/.*: ([0-9]+) payloads sent .*, ([0-9]+) received/\1 \2/')
  [[ ${sent:-0} -gt 0 && ${received:-0} -gt 0 ]] ||
    fail "decode-1's data plane carried nothing: $(cat "$tmp/decode-1.out")"
  echo "ok: decode-1's dispatches and combines went over UCX: $sent payloads sent, $received received"
else
  grep -q "payloads from other processes as messages" "$tmp/decode-1.out" || fail "decode-1: $(cat "$tmp/decode-1.out")"
  echo "ok: built without UCX, so decode-1 sent its payloads as messages (not a UCX check)"
fi
