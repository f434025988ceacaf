#!/usr/bin/env bash
# tests/scripts/test_chaos.sh
# `moeserve chaos` on a tiny model over 1P+1D and over 2P+2D (200 requests, every kind of actor
# killed at least twice, 27 kills): it must exit 0 (nothing lost, no broken stream, the greedy
# outputs of the run without faults, no KV left in use) and print a row per kind it killed; an
# unknown kind is refused up front. Run by CTest as: bash test_chaos.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_chaos.sh <moeserve> [build-dir]}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$moeserve" make-model --preset tiny --seed 4 --out "$tmp/m" >/dev/null 2>&1 || fail "make-model"

timeout -k 5 300 "$moeserve" chaos --model "$tmp/m" --reference --prefill-ranks 1 --decode-ranks 1 \
  --requests 60 --max-tokens 16 --kills 10 --interval 0.3 --seed 1 >"$tmp/one.out" 2>&1 ||
  fail "chaos on 1P+1D: $(cat "$tmp/one.out")"
grep -q "lost 0, broken streams 0, greedy mismatches 0, KV blocks leaked 0, running slots left 0" "$tmp/one.out" ||
  fail "chaos on 1P+1D totals: $(cat "$tmp/one.out")"
kinds=$(awk 'NR > 2 && $2 ~ /^[0-9]+$/ && $2 > 0 { n++ } END { print n + 0 }' "$tmp/one.out")
[[ $kinds -ge 3 ]] || fail "chaos on 1P+1D killed fewer than 3 kinds: $(cat "$tmp/one.out")"
echo "ok: chaos on 1P+1D:"; cat "$tmp/one.out"

timeout -k 5 300 "$moeserve" chaos --model "$tmp/m" --reference --prefill-ranks 2 --decode-ranks 2 \
  --requests 200 --max-tokens 16 --kills 27 --interval 0.25 --seed 2 >"$tmp/two.out" 2>&1 ||
  fail "chaos on 2P+2D: $(cat "$tmp/two.out")"
grep -q "lost 0, broken streams 0, greedy mismatches 0, KV blocks leaked 0, running slots left 0" "$tmp/two.out" ||
  fail "chaos on 2P+2D totals: $(cat "$tmp/two.out")"
twice=$(awk 'NR > 2 && $2 ~ /^[0-9]+$/ && $2 >= 2 { n++ } END { print n + 0 }' "$tmp/two.out")
[[ $twice -eq 9 ]] || fail "chaos on 2P+2D killed fewer than 9 kinds twice: $(cat "$tmp/two.out")"
echo "ok: chaos on 2P+2D:"; cat "$tmp/two.out"

out=$("$moeserve" chaos --model "$tmp/m" --prefill-ranks 2 --decode-ranks 2 --kinds decode_ranks 2>&1)
[[ $? -eq 2 && $out == *"--kinds: decode_ranks is not a kind of actor"* ]] ||
  fail "chaos --kinds decode_ranks: $out"
echo "ok: $out"
