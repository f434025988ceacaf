# tests/scripts/cluster_helpers.sh: sourced by the script tests that run a multi-process cluster.
# Gives: $tmp (removed at exit), $pids (each killed with -9 at exit, as is any process still
# serving $tmp/cluster.toml), fail MESSAGE, and free_ports N (N free loopback ports, one line).
tmp=$(mktemp -d)
pids=""
cleanup() {
  for pid in $pids; do
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  pkill -KILL -f -- "--cluster $tmp/cluster.toml" 2>/dev/null
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
