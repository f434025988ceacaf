#!/usr/bin/env bash
# tests/scripts/test_logits_vs_numpy.sh
# `moeserve logits` against the independent NumPy forward pass (tests/reference/
# deepseek_v3_reference.py, float64) on random "tiny" checkpoints, BF16 and FP8 (2 shards).
# Run by CTest as: bash test_logits_vs_numpy.sh <path-to-moeserve> <build-dir>
#
# Tolerances (max abs diff over all [T, V] logits; M = max(1, max |reference logit|)):
#   exact path (fp32 activations):     max abs diff <= 1e-3 * M
#   --fast path (bf16 activations):    max abs diff <  5e-2 * M  and  argmax agreement >= 90% of rows
# and, on the FP8 model, both paths with --lm-head-fp8 against the NumPy pass quantising its lm_head
# the same way (--lm-head-fp8 there), with the same tolerances; the exact path's logits must then
# miss the unquantised reference at 1e-3 * M (the flag is not a no-op).
set -uo pipefail

moeserve=${1:?usage: test_logits_vs_numpy.sh <moeserve> [build-dir]}
py=/usr/bin/python3
ref="$(cd "$(dirname "${BASH_SOURCE[0]}")/../reference" && pwd)/deepseek_v3_reference.py"
tokens="0,5,17,300,42,7,999,3,64,128,256,511"

if ! "$py" -c 'import numpy' 2>/dev/null; then
  echo "skipped: $py has no numpy (apt-get install python3-numpy)"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=()

step() {   # step <label> <command...>: runs a command, records a failure by label
  local label=$1
  shift
  echo "---- $label"
  echo "+ $*"
  if ! "$@"; then
    echo "FAILED: $label"
    failures+=("$label")
    return 1
  fi
}

step "reference self-test" "$py" "$ref" --self-test

for variant in bf16 fp8; do
  model="$tmp/tiny-$variant"
  extra=()
  [[ $variant == fp8 ]] && extra=(--fp8 --shards 2)
  step "make-model $variant" "$moeserve" make-model --preset tiny --seed 7 --vocab-size 1024 \
    "${extra[@]}" --out "$model" || continue

  # The reference logits once per model; both paths are compared with the same file.
  step "reference logits $variant" "$py" "$ref" --model "$model" --tokens "$tokens" \
    --out "$tmp/ref-$variant.npy" || continue

  if step "moeserve logits $variant" "$moeserve" logits --model "$model" --tokens "$tokens" \
       --out "$tmp/exact-$variant.npy"; then
    echo "compare $variant exact path: tolerance max abs diff <= 1e-3 * max(1, max|ref|)"
    step "compare $variant exact" "$py" "$ref" --model "$model" --tokens "$tokens" \
      --compare "$tmp/exact-$variant.npy" --atol-rel 1e-3
  fi

  if step "moeserve logits --fast $variant" "$moeserve" logits --model "$model" \
       --tokens "$tokens" --out "$tmp/fast-$variant.npy" --fast; then
    echo "compare $variant --fast path: tolerance max abs diff <= 5e-2 * max(1, max|ref|)," \
         "argmax agreement >= 90% of rows"
    step "compare $variant fast" "$py" "$ref" --model "$model" --tokens "$tokens" \
      --compare "$tmp/fast-$variant.npy" --atol-rel 5e-2 --min-argmax-agree 0.9
  fi

  [[ $variant == fp8 ]] || continue
  step "reference logits $variant --lm-head-fp8" "$py" "$ref" --model "$model" --tokens "$tokens" \
    --lm-head-fp8 --out "$tmp/ref-head8.npy" || continue
  for path in exact fast; do
    flags=(--lm-head-fp8)
    tolerance=(--atol-rel 1e-3)
    [[ $path == fast ]] && flags+=(--fast) && tolerance=(--atol-rel 5e-2 --min-argmax-agree 0.9)
    step "moeserve logits $variant $path --lm-head-fp8" "$moeserve" logits --model "$model" \
      --tokens "$tokens" --out "$tmp/$path-head8.npy" "${flags[@]}" || continue
    step "compare $variant $path --lm-head-fp8" "$py" "$ref" --model "$model" --tokens "$tokens" \
      --lm-head-fp8 --compare "$tmp/$path-head8.npy" "${tolerance[@]}"
  done
  echo "---- the FP8 lm_head's logits must miss the BF16 lm_head's reference at 1e-3 * M"
  if "$py" "$ref" --model "$model" --tokens "$tokens" --compare "$tmp/exact-head8.npy" --atol-rel 1e-3; then
    echo "FAILED: --lm-head-fp8 changed nothing"
    failures+=("--lm-head-fp8 is a no-op")
  fi
done

if ((${#failures[@]})); then
  echo "FAIL: ${failures[*]}"
  exit 1
fi
echo "PASS: moeserve logits match the NumPy reference"
