#!/usr/bin/env bash
# tests/scripts/test_chaos.sh
# `moeserve chaos` on a tiny model over 1P+1D (both ranks killed, where a dead rank leaves no peer)
# and over 2P+2D (200 requests, every kind of actor killed at least twice, at least 20 kills): it
# must exit 0 (nothing lost, no error but a retryable 503, no broken stream, the greedy outputs of
# the run without faults, no KV or running slot left in use), every request must complete, and
# every kill must be followed by its successor; an unknown kind is refused up front.
# Run by CTest as: bash test_chaos.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_chaos.sh <moeserve> [build-dir]}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$moeserve" make-model --preset tiny --seed 4 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"

clean="lost 0, broken streams 0, greedy mismatches 0, KV blocks leaked 0, running slots left 0"
# rows: kind, kills, recovered, median ms, max ms
rows() { awk 'NR > 2 && $2 ~ /^[0-9]+$/' "$1"; }
check_run() {  # output file, requests, what
  grep -q "$clean" "$1" || fail "$3 totals: $(cat "$1")"
  grep -Eq "^kills +sent $2, completed $2, failed 0," "$1" || fail "$3: not every request completed: $(cat "$1")"
  unrecovered=$(rows "$1" | awk '$2 != $3 { print $1 }')
  [[ -z $unrecovered ]] || fail "$3: no successor seen after a kill of $unrecovered: $(cat "$1")"
}

timeout -k 5 300 "$moeserve" chaos --model "$tmp/m" --reference --prefill-ranks 1 --decode-ranks 1 \
  --requests 60 --max-tokens 16 --kills 8 --interval 0.3 --seed 1 \
  --kinds prefill_rank,decode_rank,session,request_queue >"$tmp/one.out" 2>&1 ||
  fail "chaos on 1P+1D: $(cat "$tmp/one.out")"
check_run "$tmp/one.out" 60 "chaos on 1P+1D"
for kind in prefill_rank decode_rank; do
  rows "$tmp/one.out" | awk -v k=$kind '$1 == k && $2 >= 1 { found = 1 } END { exit !found }' ||
    fail "chaos on 1P+1D killed no $kind: $(cat "$tmp/one.out")"
done
echo "ok: chaos on 1P+1D:"; cat "$tmp/one.out"

timeout -k 5 300 "$moeserve" chaos --model "$tmp/m" --reference --prefill-ranks 2 --decode-ranks 2 \
  --requests 200 --max-tokens 16 --kills 30 --interval 0.25 --seed 2 >"$tmp/two.out" 2>&1 ||
  fail "chaos on 2P+2D: $(cat "$tmp/two.out")"
check_run "$tmp/two.out" 200 "chaos on 2P+2D"
twice=$(rows "$tmp/two.out" | awk '$2 >= 2 { n++ } END { print n + 0 }')
[[ $twice -eq 9 ]] || fail "chaos on 2P+2D killed fewer than 9 kinds twice: $(cat "$tmp/two.out")"
kills=$(rows "$tmp/two.out" | awk '{ n += $2 } END { print n + 0 }')
[[ $kills -ge 20 ]] || fail "chaos on 2P+2D made $kills kills, fewer than 20: $(cat "$tmp/two.out")"
echo "ok: chaos on 2P+2D:"; cat "$tmp/two.out"

out=$("$moeserve" chaos --model "$tmp/m" --prefill-ranks 2 --decode-ranks 2 --kinds decode_ranks 2>&1)
[[ $? -eq 2 && $out == *"--kinds: decode_ranks is not a kind of actor"* ]] ||
  fail "chaos --kinds decode_ranks: $out"
echo "ok: $out"
