#!/usr/bin/env bash
# tests/scripts/test_ctl.sh
# `moeserve ctl` against `moeserve serve` (tiny model, 1P+2D, an admin key from the environment)
# on an ephemeral loopback port: get, set (and a refused change that changes nothing), apply of
# a TOML file, drain/undrain, expert-load written to a file that `eplb-plan` then plans from, and
# a rebalance that installs a placement in both EP groups;
# the replies read back by Python's json; without the key, refused. The server always goes down.
# Run by CTest as: bash test_ctl.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_ctl.sh <moeserve> [build-dir]}
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
# check <label> <python expression over j, the JSON of file $tmp/out>
check() {
  /usr/bin/python3 -c "import json, sys; j = json.load(open('$tmp/out')); sys.exit(0 if ($2) else 1)" ||
    fail "$1: $(cat "$tmp/out")"
  echo "ok: $1"
}

"$moeserve" make-model --preset tiny --seed 3 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"
mkfifo "$tmp/server_out"
export MOESERVE_ADMIN_KEY="admin-$$"
"$moeserve" serve --model "$tmp/m" --port 0 --prefill-ranks 1 --decode-ranks 2 --kv-blocks 64 \
  --page-size 16 --reference >"$tmp/server_out" 2>&1 &
server_pid=$!
exec 3<"$tmp/server_out"
read -r -t 120 -u 3 line || fail "no listening line from the server"
[[ $line =~ listening\ on\ 127\.0\.0\.1:([0-9]+) ]] || fail "unexpected first line: $line"
port=${BASH_REMATCH[1]}
cat <&3 >/dev/null &  # keep the server's log flowing
ctl=("$moeserve" ctl --port "$port")

"${ctl[@]}" get >"$tmp/out" || fail "ctl get"
check "get lists every target at epoch 0" \
  "sorted(j) == ['decode_balancer', 'expert_balancer', 'prefill_balancer', 'request_queue'] and j['decode_balancer']['epoch'] == 0 and j['expert_balancer']['policy'] == 'off'"
"${ctl[@]}" set decode_balancer policy=round_robin seed=4 >"$tmp/out" || fail "ctl set"
check "set answers the new epoch" "j == {'target': 'decode_balancer', 'epoch': 1}"
out=$("${ctl[@]}" set decode_balancer policy=power_of_two kv_weight=-1 2>&1)
[[ $? -eq 2 && $out == *"422 kv_weight: expected a number from 0 to 1000000, got -1"* ]] ||
  fail "a refused change: $out"
echo "ok: a refused change names the field: $out"
"${ctl[@]}" get decode_balancer >"$tmp/out" || fail "ctl get decode_balancer"
check "the refused change changed nothing" "j['epoch'] == 1 and j['policy'] == 'round_robin' and j['seed'] == 4"

cat >"$tmp/c.toml" <<'TOML'
[request_queue]
max_running = 6

[prefill_balancer]
policy = "least_tokens"
TOML
"${ctl[@]}" apply "$tmp/c.toml" >"$tmp/applied" || fail "ctl apply"
head -1 "$tmp/applied" >"$tmp/out"
check "apply: the queue first" "j == {'target': 'request_queue', 'epoch': 1}"
tail -1 "$tmp/applied" >"$tmp/out"
check "apply: then the prefill balancer" "j == {'target': 'prefill_balancer', 'epoch': 1}"
"${ctl[@]}" drain decode 1 >/dev/null || fail "ctl drain"
"${ctl[@]}" get decode_balancer >"$tmp/out" || fail "ctl get after drain"
check "drain shows in the configuration" "j['drained'] == [1] and j['epoch'] == 2"
"${ctl[@]}" undrain decode 1 >/dev/null || fail "ctl undrain"

# load to count: three generates through the C++ client
for p in "one two three" "four five six seven" "eight"; do
  "$moeserve" client --port "$port" --max-tokens 4 --ignore-eos --temperature 0 "$p" >/dev/null 2>&1 ||
    fail "client"
done
"${ctl[@]}" expert-load --out "$tmp/load.json" 2>"$tmp/err" || fail "ctl expert-load: $(cat "$tmp/err")"
cp "$tmp/load.json" "$tmp/out"
check "expert-load: 2 MoE layers x 16 experts, tokens counted" \
  "len(j) == 2 and all(len(r) == 16 for r in j) and sum(j[0]) > 0 and sum(j[0]) % 4 == 0"
"$moeserve" eplb-plan --load "$tmp/load.json" --replicas 20 --ranks 2 >"$tmp/out" || fail "eplb-plan"
check "eplb-plan plans from what expert-load wrote" \
  "len(j['phy2log']) == 2 and all(sorted(set(r)) == list(range(16)) and len(r) == 20 for r in j['phy2log'])"

"${ctl[@]}" rebalance >"$tmp/out" 2>"$tmp/err" || fail "ctl rebalance: $(cat "$tmp/err")"
# the prefill group is one rank: even already, nothing to install (epoch 0); the decode group's
# two ranks get a new placement (epoch 1) at least as even as the one before
check "rebalance: both groups planned from the load" \
  "[g['role'] for g in j['groups']] == ['prefill', 'decode'] and all(g['error'] == '' and len(g['balancedness_after']) == 2 for g in j['groups']) and [g['epoch'] for g in j['groups']] == [0, 1] and j['groups'][0]['moved_experts'] == 0 and all(a >= b for a, b in zip(j['groups'][1]['balancedness_after'], j['groups'][1]['balancedness_before'])) and j['epoch'] == 1 and j['plain_moved_bytes'] >= j['moved_bytes']"
"${ctl[@]}" set expert_balancer interval_steps=0 minimal_movement=false >"$tmp/out" || fail "ctl set expert_balancer"
check "set expert_balancer: both groups' balancers take it" "j == {'target': 'expert_balancer', 'epoch': 1}"
out=$("${ctl[@]}" rebalance --role middle 2>&1)
[[ $? -ne 0 && $out == *"--role"* ]] || fail "ctl rebalance --role middle: $out"
echo "ok: rebalance refuses an unknown role"

out=$(env -u MOESERVE_ADMIN_KEY "${ctl[@]}" get 2>&1)
[[ $? -eq 2 && $out == *"403"* ]] || fail "ctl without the key: $out"
echo "ok: without the key: $out"
out=$("${ctl[@]}" --port 1 get 2>&1)
[[ $? -eq 2 ]] || fail "ctl to a closed port: $out"
echo "ok: a closed port: $out"
