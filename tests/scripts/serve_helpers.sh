# tests/scripts/serve_helpers.sh: sourced by the script tests that run `moeserve serve`.
# Gives: $tmp (removed at exit), fail MESSAGE, start_server ARGS... (serve on ephemeral loopback
# ports; sets $server_pid, $wire_port and $http_port; the server's later output drains into
# $tmp/server.log), stop_server (SIGTERM; fails unless it exits 0), and at exit stops the server
# and every pid in $extra_pids.
tmp=$(mktemp -d)
server_pid=""
extra_pids=""
cleanup() {
  for pid in $extra_pids $server_pid; do
    kill -TERM "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# start_server MOESERVE ARGS...: `MOESERVE serve ARGS... --port 0`, waits for its listening lines.
start_server() {
  local moeserve=$1 line
  shift
  mkfifo "$tmp/server_out"
  "$moeserve" serve "$@" --port 0 >"$tmp/server_out" 2>&1 &
  server_pid=$!
  exec 3<"$tmp/server_out"
  read -r -t 120 -u 3 line || fail "no listening line from the server"
  [[ $line =~ listening\ on\ 127\.0\.0\.1:([0-9]+) ]] || fail "unexpected first line: $line"
  wire_port=${BASH_REMATCH[1]}
  read -r -t 10 -u 3 line || fail "no HTTP line from the server"
  [[ $line =~ HTTP\ on\ http://127\.0\.0\.1:([0-9]+) ]] || fail "unexpected second line: $line"
  http_port=${BASH_REMATCH[1]}
  echo "server: $line"
  cat <&3 >"$tmp/server.log" &
}

# stop_server: SIGTERM, and the server must exit 0.
stop_server() {
  local status
  kill -TERM "$server_pid"
  wait "$server_pid"
  status=$?
  server_pid=""
  [[ $status -eq 0 ]] || fail "the server exited with $status after SIGTERM"
  echo "ok: the server stopped cleanly"
}
