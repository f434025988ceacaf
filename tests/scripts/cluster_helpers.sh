# tests/scripts/cluster_helpers.sh: sourced by the script tests that run a multi-process cluster.
# Gives: $tmp (removed at exit; copied to $MOE_TEST_KEEP first when that is set), $pids (each
# killed with -9 at exit, as is any process still serving $tmp/cluster.toml), fail MESSAGE, and
# free_ports N (N free loopback ports, one line). For a cluster of $tmp/cluster.toml over the
# model $tmp/m whose front listens on $rpc (set by the caller, as is $moeserve): starting nodes,
# greedy prompts asked through it and compared with a one-process serve's answers, a load in the
# background, and waits for the front's lines about lost, rejoined and migrated work.
tmp=$(mktemp -d)
pids=""
cleanup() {
  for pid in $pids; do
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  pkill -KILL -f -- "--cluster $tmp/cluster.toml" 2>/dev/null
  [ -n "${MOE_TEST_KEEP:-}" ] && cp -r "$tmp" "$MOE_TEST_KEEP"  # the nodes' output, to debug
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

free_ports() {
  /usr/bin/python3 -c '
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])' "$1"
}

# start NAME [ARGS...]: a node of the cluster in the background (its pid in pid_NAME)
start() {
  local name=$1
  shift
  "$moeserve" serve --model "$tmp/m" --reference --cluster "$tmp/cluster.toml" --node "$name" \
    --log-stats-interval 1 "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" &
  local pid=$!
  pids="$pids $pid"
  eval "pid_${name//-/_}=$pid"
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
# one_process PORT ARGS...: the four prompts through a one-process `serve ARGS` of the same model
# on PORT, each answer in $tmp/one.N (what the cluster's answers must equal)
one_process() {
  local port=$1
  shift
  "$moeserve" serve --model "$tmp/m" --reference --port "$port" --http-port 0 "$@" >"$tmp/single.out" \
    2>"$tmp/single.err" &
  local pid=$!
  pids="$pids $pid"
  wait_for "$tmp/single.out" "moeserve: listening on" "$pid"
  ask "$port" one
  kill -TERM "$pid"
  wait "$pid"
  for i in "${!prompts[@]}"; do
    [ -s "$tmp/one.$i" ] || fail "no text for prompt $i"
  done
}

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
# downs NODE: how many times the front has found NODE down so far
downs() { grep -c "node $1 is down" "$tmp/front.out"; }
# found_down NODE SINCE_NS [DOWNS]: waits (5 s at most) for the front's line finding NODE down
# for the (DOWNS + 1)-th time (default: the first); prints the ms it took since SINCE_NS
found_down() {
  for _ in $(seq 500); do
    [ "$(downs "$1")" -gt "${3:-0}" ] && break
    sleep 0.01
  done
  [ "$(downs "$1")" -gt "${3:-0}" ] || fail "the front did not find $1 down: $(cat "$tmp/front.out" "$tmp/front.err")"
  echo $((($(date +%s%N) - $2) / 1000000))
}
# kill_node NODE: kill -9 of the node's process, reaped
kill_node() {
  local pid_var="pid_${1//-/_}"
  kill -KILL "${!pid_var}"
  wait "${!pid_var}" 2>/dev/null
}
# rejoined NODE COUNT: waits (20 s at most) for the front's COUNT-th "rejoined" line of NODE
rejoined() {
  for _ in $(seq 200); do
    [ "$(grep -c "node $1 rejoined" "$tmp/front.out")" -ge "$2" ] && return 0
    sleep 0.1
  done
  fail "$1 did not rejoin: $(cat "$tmp/front.out" "$tmp/front.err")"
}

# load_in_background TAG: 24 requests, 8 in flight, 48 tokens each, through the front (its pid in
# load_pid, its output in $tmp/TAG.load)
load_in_background() {
  timeout -k 5 180 "$moeserve" bench --port "$rpc" --num-prompts 24 --concurrency 8 --input-len 32 \
    --output-len 48 --seed 4 >"$tmp/$1.load" 2>&1 &
  load_pid=$!
}
# output_tokens: the tokens the front has streamed since it started (the first output_tokens of
# GET /stats on its HTTP port $http, not its window's;
# asked again while /stats has no answer, 10 s at most)
output_tokens() {
  local n
  for _ in $(seq 100); do
    n=$(curl -s -m 5 "http://127.0.0.1:$http/stats" | grep -o '"output_tokens": *[0-9]*' | head -n 1 | grep -o '[0-9]*$')
    [ -n "$n" ] && { echo "$n"; return 0; }
    sleep 0.1
  done
  echo "no output_tokens in /stats: $(curl -s -m 5 "http://127.0.0.1:$http/stats")" >&2
  return 1
}
# in_flight FROM: after load_in_background, waits (30 s at most) until the front has streamed 16
# tokens more than FROM (output_tokens before the load): requests are decoding, whatever the
# machine's speed
in_flight() {
  [[ $1 =~ ^[0-9]+$ ]] || fail "in_flight: no token count to start from ('$1')"
  local now
  for _ in $(seq 300); do
    now=$(output_tokens) || fail "the front's /stats did not answer"
    [ "$now" -ge $(($1 + 16)) ] && return 0
    kill -0 "$load_pid" 2>/dev/null || fail "the load ended before it was in flight: $(cat "$tmp"/*.load)"
    sleep 0.1
  done
  fail "the load did not start: $now tokens streamed, from $1"
}
# load_answered TAG: the background load ended with every request answered in full
load_answered() {
  wait "$load_pid" || fail "$1: the load failed: $(cat "$tmp/$1.load")"
  grep -q "24/24 done, 0 failed, 0 rejected" "$tmp/$1.load" || fail "$1: $(cat "$tmp/$1.load")"
}
# lose_under_load TAG NODE COMMAND...: a load in the background (TAG) and, once it is decoding,
# COMMAND, which takes NODE away; then waits for the front to find NODE down (the ms it took in
# lost_ms), for every request of the load to be answered in full, and for the stats lines to name
# more migrations than before (NODE's requests were placed again)
lose_under_load() {
  local tag=$1 node=$2 before streamed since down_before
  shift 2
  before=$(migration_lines)
  down_before=$(downs "$node")
  streamed=$(output_tokens) || fail "the front's /stats did not answer"
  load_in_background "$tag"
  in_flight "$streamed"
  since=$(date +%s%N)
  "$@"
  lost_ms=$(found_down "$node" "$since" "$down_before") || fail "$lost_ms"
  load_answered "$tag"
  migrated "$before"
}
# migrated SINCE: waits (5 s at most) until the front's stats lines (one a second) name more
# migrations than the SINCE lines did: requests of the lost node were placed again
migration_lines() { grep -c "migration" "$tmp/front.err"; }
migrated() {
  for _ in $(seq 50); do
    [ "$(migration_lines)" -gt "$1" ] && return 0
    sleep 0.1
  done
  fail "no migration in the front's stats lines: $(grep 'requests' "$tmp/front.err" | tail -5)"
}

# cluster_head NAME PORT [DATA_PLANE]: the start of $tmp/cluster.toml (the cluster NAME,
# heartbeats every 0.1 s, down after 1 s, payloads between processes over DATA_PLANE, default
# auto) with its front node on PORT, wire and HTTP ports $rpc and $http; the caller appends the
# rank nodes
cluster_head() {
  cat >"$tmp/cluster.toml" <<TOML
name = "$1"
token = "$1-token-0123456789"
heartbeat_interval_s = 0.1
connection_timeout_s = 1.0
data_plane = "${3:-auto}"
[[node]]
name = "front"
port = $2
front = true
rpc_port = $rpc
http_port = $http
TOML
}
