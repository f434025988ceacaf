#!/usr/bin/env bash
# tests/scripts/test_logits_vs_llama_cpp.sh
# `moeserve logits` against llama.cpp: tests/reference/llama_cpp_vectors.json holds, for tiny
# BF16 and FP8 checkpoints (make-model --preset tiny --seed 7 --vocab-size 1024) and a small-preset
# FP8 one (the default model's shapes, vocabulary cut to 1024), the token ids llama.cpp's own BPE
# gave a few prompts and the last token's logits its deepseek2 forward pass computed in f32
# (written by tools/llama_cpp/compare.sh vectors; llama.cpp is not built here).
# Run by CTest as: bash test_logits_vs_llama_cpp.sh <path-to-moeserve> <build-dir>
#
# Tolerances on the last row (M = max(1, max |llama.cpp logit|)):
#   exact path (fp32 activations):  max abs diff <= 1e-4 * M   (measured ~1e-6)
#   --fast path (bf16 activations): max abs diff <= 2e-2 * M   (measured <= 5e-3 * M)
# Greedy decoding (24 steps after the prompt, 8 on the small preset; llama.cpp through its f32
# KV cache): `moeserve generate --reference --dispatch-dtype fp32` (the routed experts' inputs
# not rounded to FP8 as the default dispatch payload does) gives the same ids, each logprob
# within 1e-4; one rank for every prompt, the 2P+2D cluster for the longest (KV handed from a
# prefill to a decode rank, 16-token pages).
# A checkpoint whose sha256 differs from the recorded one fails with its own message: make-model
# changed, and the vectors must be regenerated, not the forward pass suspected.
set -uo pipefail

moeserve=${1:?usage: test_logits_vs_llama_cpp.sh <moeserve> [build-dir]}
py=/usr/bin/python3
vectors="$(cd "$(dirname "${BASH_SOURCE[0]}")/../reference" && pwd)/llama_cpp_vectors.json"
if ! "$py" -c 'import numpy' 2>/dev/null; then
  echo "skipped: $py has no numpy (apt-get install python3-numpy)"
  exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=()

field() {  # field CASE KEY: the make-model flags space-separated, token ids comma-separated
  "$py" -c 'import json, sys
v = json.load(open(sys.argv[1]))["cases"][int(sys.argv[2])][sys.argv[3]]
print(" ".join(v) if sys.argv[3] == "make_model" else ",".join(map(str, v)) if isinstance(v, list) else v)' \
    "$vectors" "$1" "$2"
}

count=$("$py" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["cases"]))' "$vectors")
for ((i = 0; i < count; i++)); do
  flags=$(field "$i" make_model)
  model="$tmp/$(echo "$flags" | tr -c 'a-z0-9' '_')"
  if [ ! -d "$model" ]; then
    echo "---- make-model $flags"
    # shellcheck disable=SC2086
    "$moeserve" make-model $flags --out "$model" >/dev/null || { failures+=("make-model $flags"); continue; }
  fi
  want=$(field "$i" safetensors_sha256)
  got=$(cat "$model"/*.safetensors | sha256sum | cut -d' ' -f1)   # the glob sorts, as write_vectors.py
  if [ "$got" != "$want" ]; then
    echo "FAILED: case $i: make-model $flags wrote a different checkpoint (sha256 $got, the vectors were" \
         "computed on $want): regenerate them with tools/llama_cpp/compare.sh vectors"
    failures+=("case $i checkpoint")
    continue
  fi
  tokens=$(field "$i" tokens)
  for path in exact fast; do
    extra=(); tol=1e-4
    [ $path = fast ] && extra=(--fast) && tol=2e-2
    if ! "$moeserve" logits --model "$model" --tokens "$tokens" --out "$tmp/$i-$path.npy" "${extra[@]}" >/dev/null 2>&1; then
      echo "FAILED: case $i: moeserve logits ($path)"; failures+=("case $i $path logits"); continue
    fi
    if ! "$py" - "$vectors" "$i" "$tmp/$i-$path.npy" "$tol" "$path" <<'EOF'
import json, sys
import numpy as np
case = json.load(open(sys.argv[1]))["cases"][int(sys.argv[2])]
ours = np.load(sys.argv[3])
theirs = np.array(case["last_logits"], dtype=np.float64)
tol, path = float(sys.argv[4]), sys.argv[5]
if ours.shape != (len(case["tokens"]), theirs.size):
    sys.exit(f"case {sys.argv[2]}: logits shape {ours.shape}, expected {(len(case['tokens']), theirs.size)}")
d = np.abs(ours[-1].astype(np.float64) - theirs)
m = max(1.0, np.abs(theirs).max())
ok = d.max() <= tol * m
print(f"case {sys.argv[2]} ({' '.join(case['make_model'][-3:])}, {len(case['tokens'])} tokens) {path}: max |diff| "
      f"{d.max():.3e} (limit {tol * m:.3e}), argmax {ours[-1].argmax()} / {theirs.argmax()}: {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
EOF
    then failures+=("case $i $path"); fi
  done
  steps=24                                  # the small preset's fp32 reference: ~1 s a step
  [[ " $flags " == *" --preset small "* ]] && steps=8
  runs=(--single-rank)
  [ "$(field "$i" tokens | tr ',' '\n' | wc -l)" -gt 100 ] && runs+=(--decode-ranks)
  for run in "${runs[@]}"; do
    where=(--single-rank); [ "$run" = --decode-ranks ] && where=(--prefill-ranks 2 --decode-ranks 2)
    if ! "$moeserve" generate --model "$model" --reference "${where[@]}" --dispatch-dtype fp32 --page-size 16 \
         --tokens "$tokens" --temperature 0 --max-tokens "$steps" --ignore-eos --json --logprobs 1 \
         >"$tmp/$i-greedy.json" 2>"$tmp/$i-greedy.err"; then
      echo "FAILED: case $i: moeserve generate ${where[*]}"; cat "$tmp/$i-greedy.err"
      failures+=("case $i greedy ${where[*]}"); continue
    fi
    if ! "$py" - "$vectors" "$i" "$tmp/$i-greedy.json" "$steps" <<'EOF'
import json, sys
case = json.load(open(sys.argv[1]))["cases"][int(sys.argv[2])]
ours = json.load(open(sys.argv[3]))
steps = int(sys.argv[4])
ids, want = ours["output_ids"], case["greedy_tokens"][:steps]
lp = [x["logprob"] for x in ours["logprobs"]]
d = max(abs(a - b) for a, b in zip(lp, case["greedy_logprobs"]))
ok = ids == want and len(lp) == steps and d <= 1e-4
print(f"case {sys.argv[2]} greedy ({ours['backend']}): {len(ids)} ids "
      f"{'equal' if ids == want else 'DIFFER'}, max |logprob diff| {d:.2e}: {'ok' if ok else 'FAILED'}")
if ids != want:
    print(f"  moeserve  {ids}\n  llama.cpp {want}")
sys.exit(0 if ok else 1)
EOF
    then failures+=("case $i greedy ${where[*]}"); fi
  done
done

if ((${#failures[@]})); then
  echo "FAIL: ${failures[*]}"
  exit 1
fi
echo "PASS: moeserve logits match llama.cpp's on $count prompts"
