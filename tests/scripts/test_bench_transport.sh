#!/usr/bin/env bash
# tests/scripts/test_bench_transport.sh
# `moeserve bench-transport`: KV pages between two real processes over CAF's middleman on
# loopback. The peer acknowledges each message with a checksum of the floats it received, which
# the bench checks against what it sent (a mismatch is an error), so a zero exit means every
# message crossed whole through kv_pages' raw-blob inspect; and the peer process is gone after.
# Run by CTest as: bash test_bench_transport.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_bench_transport.sh <moeserve> [build-dir]}
out=$(timeout -k 5 120 "$moeserve" bench-transport --engine middleman --sizes 4,4096,1048576 --iters 5 \
  --window 4 2>&1)
status=$?
[[ $status -eq 0 ]] || { echo "FAIL: bench-transport exited $status: $out"; exit 1; }
rows=$(echo "$out" | awk '$1 ~ /^[0-9]+$/ && NF == 4' | wc -l)
[[ $rows -eq 3 ]] || { echo "FAIL: expected a row per size: $out"; exit 1; }
if pgrep -f "bench-transport --serve" >/dev/null; then
  echo "FAIL: the peer process outlived the bench"
  exit 1
fi
echo "ok: 3 sizes crossed between two processes, checksums equal:"
echo "$out"
