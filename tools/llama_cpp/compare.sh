#!/usr/bin/env bash
# moeserve beside llama.cpp on the same checkpoints, on this machine (issue 2's targets are set
# against llama.cpp). Not part of the tests: the first run builds llama.cpp (~12 min on 2 cores).
#
#   tools/llama_cpp/compare.sh bench  [--rounds N] [--threads N]   prefill 512 and batch-1 decode
#   tools/llama_cpp/compare.sh batched [--rounds N] [--threads N]  decode at batch 1, 8 and 32
#   tools/llama_cpp/compare.sh logits [--prompt TEXT]                one prompt's tokens and logits
#   tools/llama_cpp/compare.sh vectors                               rewrite tests/reference/llama_cpp_vectors.json
#   tools/llama_cpp/compare.sh serve [--rounds N] [--model DIR]    moeserve serve vs llama-server, one load
#
# llama.cpp: the release that node-llama-cpp 3.21.1 ships on npm as a git bundle (the only way
# its source reaches this machine), built once into build-llama.cpp/ with GGML_NATIVE.
# Checkpoints go to GGUF through tools/llama_cpp/export_gguf.py (with that release's gguf-py).
#
# bench: BF16 checkpoint -> BF16 GGUF; FP8 checkpoint -> Q8_0 GGUF (llama-quantize from the exact
# f32 expansion: llama.cpp's 8-bit format on the same weights). The two programs alternate,
# round by round, because this VM's memory bandwidth drifts by tens of percent within the hour.
# llama.cpp: `llama-bench -p 512 -n 128` (pp512, tg128 from an empty context); moeserve:
# `bench-model --prompt-len 512 --batches 1 --decode-prompt-len 64` (64 steps after 64 tokens).
#
# batched: decode tok/s with 1, 8 and 32 sequences of 64 prompt tokens; llama.cpp:
# `llama-batched-bench -npp 64 -ntg 64 -npl 1,8,32` (S_TG: 64 steps of every sequence, its
# prompts apart); moeserve: `bench-model --batches 1,8,32 --decode-prompt-len 64` (median step).
#
# logits: the default FP8 model, expanded to f32 GGUF; llama.cpp tokenizes the prompt with its
# own BPE (add_bos) and computes the last token's logits (llama-debug --save-logits); moeserve
# tokenizes the same text and computes its reference-path logits for the ids llama.cpp used.
#
# serve: the two OpenAI-compatible HTTP servers under the same load from moeserve's own load
# generator, `moeserve bench --backend openai` (32 requests of 128 random token ids, 64 tokens
# each with ignore_eos, greedy, 8 in flight; the same seed, so the same prompts), alternating round
# by round: `moeserve serve` (default topology) on the FP8 checkpoint, then llama-server (8 slots,
# 256 tokens of context each, --threads) on its Q8_0 GGUF; each server answers one short
# completion before the load, not measured (logs and reports: build-llama.cpp/serve/). The
# checkpoint: the FP8 small preset with DeepSeek's full 129280-token vocabulary
# (models/small-fp8), or --model DIR.
# Keeping it fair: random weights sample tokens whose bytes are pieces of UTF-8 characters, and
# llama-server will not send text that is not valid UTF-8. So its GGUF is exported with
# export_gguf.py --ascii-vocab: token i is named "<i>" (printable ASCII; BOS, EOS and the other
# added tokens keep their text). Same weights, same shapes, same number of tokens per request
# (token ids in, ignore_eos out; the table checks that each side generated them all): only the
# token strings, and so the bytes streamed back, differ. On Intel CPUs with AMX, llama-server
# runs with --no-repack: its AMX-repacked Q8_0 weights crash its scheduler there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
mode="${1:-bench}"; shift || true
rounds=2; threads="$(nproc)"; model=""; prompt="The quick brown fox jumps over the lazy dog. 深度求索 2025: x = 3.14159;"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --prompt) prompt="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    *) echo "compare.sh: unknown argument '$1' (bench|batched|logits|vectors|serve [--rounds N] [--threads N] [--prompt TEXT] [--model DIR])" >&2; exit 2 ;;
  esac
done
case "$mode" in bench|batched|logits|vectors|serve) ;;
  *) echo "compare.sh: mode must be bench, batched, logits, vectors or serve, got '$mode'" >&2; exit 2 ;; esac

lc="$root/build-llama.cpp"
py=/usr/bin/python3
moe="${MOESERVE:-$root/build/tools/moeserve}"  # MOESERVE=FILE: another build (a copy that a rebuild will not replace)
[ -x "$moe" ] || bash tools/setup.sh

build_llama() {
  local t
  for t in llama-bench llama-batched-bench llama-quantize llama-debug llama-server; do [ -x "$lc/build/bin/$t" ] || break; done
  [ -x "$lc/build/bin/$t" ] && return
  mkdir -p "$lc"
  if [ ! -d "$lc/src" ]; then
    echo "compare.sh: fetching llama.cpp (npm pack node-llama-cpp@3.21.1, its llama/gitRelease.bundle)"
    (cd "$lc" && npm pack --silent node-llama-cpp@3.21.1 >/dev/null \
      && tar xzf node-llama-cpp-3.21.1.tgz package/llama/gitRelease.bundle \
      && git -c advice.detachedHead=false clone -q package/llama/gitRelease.bundle src \
      && rm -rf package node-llama-cpp-3.21.1.tgz)
  fi
  echo "compare.sh: building llama.cpp into $lc/build (once; ~12 min on 2 cores)"
  if ! { cmake -S "$lc/src" -B "$lc/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
           -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF \
           -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
         && cmake --build "$lc/build" -j"$(nproc)" --target llama-bench llama-batched-bench llama-quantize llama-debug \
              llama-server llama; } \
       >"$lc/build.log" 2>&1; then
    tail -30 "$lc/build.log"; echo "compare.sh: the llama.cpp build failed (all of it: $lc/build.log)" >&2; exit 1
  fi
}

build_greedy() {  # tools/llama_cpp/greedy.cpp against the llama.cpp just built
  [ "$lc/build/greedy" -nt tools/llama_cpp/greedy.cpp ] && return
  local b="$lc/build"
  g++ -std=c++17 -O2 tools/llama_cpp/greedy.cpp -I "$lc/src/include" -I "$lc/src/ggml/include" \
    "$b/src/libllama.a" "$b/ggml/src/libggml.a" "$b/ggml/src/libggml-cpu.a" "$b/ggml/src/libggml-base.a" \
    -fopenmp -lpthread -ldl -o "$b/greedy"
}

model_dir() {  # make-model flags -> models/NAME, made once
  local name="$1"; shift
  [ -f "models/$name/config.json" ] || "$moe" make-model --preset small --seed 0 "$@" --out "models/$name" >/dev/null
  echo "models/$name"
}

gguf() {  # DIR TYPE(f32|bf16|q8_0) [ascii] -> path of DIR's GGUF of that type, written once
  # (ascii: export_gguf.py --ascii-vocab); FILE.from names the directory it was written from, so
  # that another DIR of the same name, or DIR made again, writes it again
  local dir="$1" type="$2" vocab="${3:-}" out src
  out="$lc/gguf/$(basename "$dir")${vocab:+-$vocab}-$type.gguf"
  src="$(realpath "$dir")"
  mkdir -p "$lc/gguf"
  if [ ! -f "$out" ] || [ "$(cat "$out.from" 2>/dev/null)" != "$src" ] || [ "$dir/config.json" -nt "$out" ]; then
    if [ "$type" = q8_0 ]; then
      "$lc/build/bin/llama-quantize" "$(gguf "$dir" f32 "$vocab")" "$out" Q8_0 >/dev/null 2>&1
    else
      GGUF_PY="$lc/src/gguf-py" "$py" tools/llama_cpp/export_gguf.py --model "$dir" --out "$out" --type "$type" \
        ${vocab:+--ascii-vocab} >&2
    fi
    echo "$src" >"$out.from"
  fi
  echo "$out"
}

field() {  # a moeserve bench-model line's number: PATTERN
  grep -m1 "$1" | grep -oE '[0-9]+(\.[0-9]+)? tok/s' | head -1 | cut -d' ' -f1
}

# The speed comparisons' checkpoints (small preset, vocab 32000) and their GGUF files: sets
# bf16, fp8 (checkpoint directories), gbf (BF16 GGUF) and gq8 (Q8_0 GGUF of the FP8 weights).
comparison_models() {
  bf16="$(model_dir small-bf16-32k --vocab-size 32000)"
  fp8="$(model_dir small-fp8-32k --vocab-size 32000 --fp8)"
  gbf="$(gguf "$bf16" bf16)"; gq8="$(gguf "$fp8" q8_0)"
}

run_bench() {
  local bf16 fp8 gbf gq8 r row out
  comparison_models
  printf '%-5s %-44s %14s %14s\n' round "program, weights (small preset, vocab 32000)" "prefill tok/s" "decode b1"
  for r in $(seq 1 "$rounds"); do
    for row in "moe|$bf16|BF16" "llama|$gbf|BF16" "moe|$fp8|FP8, lm_head BF16 (as V3's release)" \
               "moe|$fp8|FP8, --lm-head-fp8|--lm-head-fp8" "llama|$gq8|Q8_0 (all 8-bit, lm_head too)"; do
      IFS='|' read -r prog path label flag <<<"$row"
      if [ "$prog" = moe ]; then
        out="$("$moe" bench-model --model "$path" --threads "$threads" --prompt-len 512 --prefill-runs 3 \
                --batches 1 --decode-prompt-len 64 --decode-steps 64 ${flag:+"$flag"} 2>/dev/null)"
        printf '%-5s %-44s %14s %14s\n' "$r" "moeserve, $label" "$(field '^prefill:' <<<"$out")" \
          "$(field 'batch   1' <<<"$out")"
      else
        out="$("$lc/build/bin/llama-bench" -m "$path" -t "$threads" -p 512 -n 128 -r 3 -o csv 2>/dev/null)"
        local rates=()  # pp512 and tg128, in llama-bench's csv order
        read -r -a rates < <("$py" -c '
import csv, sys
print(" ".join("%.1f" % float(x["avg_ts"]) for x in csv.DictReader(sys.stdin)))' <<<"$out")
        printf '%-5s %-44s %14s %14s\n' "$r" "llama.cpp, $label" "${rates[0]:-?}" "${rates[1]:-?}"
      fi
    done
  done
}

run_batched() {
  local bf16 fp8 gbf gq8 r row out
  comparison_models
  printf '%-5s %-44s %10s %10s %10s\n' round "program, weights (small preset, vocab 32000)" "b1 tok/s" b8 b32
  for r in $(seq 1 "$rounds"); do
    for row in "moe|$bf16|BF16" "llama|$gbf|BF16" "moe|$fp8|FP8, --lm-head-fp8|--lm-head-fp8" \
               "llama|$gq8|Q8_0 (all 8-bit, lm_head too)"; do
      IFS='|' read -r prog path label flag <<<"$row"
      local rates=()
      if [ "$prog" = moe ]; then
        out="$("$moe" bench-model --model "$path" --threads "$threads" --prompt-len 16 --prefill-runs 1 \
                --batches 1,8,32 --decode-prompt-len 64 --decode-steps 64 ${flag:+"$flag"} 2>/dev/null)"
        read -r -a rates <<<"$(grep -E '^decode: +batch' <<<"$out" | grep -oE '[0-9.]+ tok/s' | cut -d' ' -f1 | tr '\n' ' ')"
        label="moeserve, $label"
      else
        out="$("$lc/build/bin/llama-batched-bench" -m "$path" -t "$threads" -c 4096 -b 2048 -ub 512 \
                -npp 64 -ntg 64 -npl 1,8,32 2>/dev/null)"
        # the table's rows: | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | ...
        read -r -a rates <<<"$(awk -F'|' '$4 ~ /^ *[0-9]+ *$/ { printf "%.1f ", $9 }' <<<"$out")"
        label="llama.cpp, $label"
      fi
      printf '%-5s %-44s %10s %10s %10s\n' "$r" "$label" "${rates[0]:-?}" "${rates[1]:-?}" "${rates[2]:-?}"
    done
  done
}

run_logits() {
  local dir g ids
  dir="$(model_dir small-fp8 --fp8)"
  g="$(gguf "$dir" f32)"
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  llama_logits "$g" "$prompt" "$tmp"
  ids="$(llama_ids "$tmp")"
  "$moe" tokenize --model "$dir" "$prompt" >"$tmp/ours.json"
  "$moe" logits --model "$dir" --tokens "$ids" --out "$tmp/ours.npy" >/dev/null
  "$py" - "$tmp" "$ids" <<'EOF'
import glob, json, sys
import numpy as np
tmp, ids = sys.argv[1], [int(x) for x in sys.argv[2].split(",")]
ours_ids = json.load(open(f"{tmp}/ours.json"))
theirs = np.fromfile([p for p in glob.glob(f"{tmp}/llamacpp-*.bin") if not p.endswith("-tokens.bin")][0], dtype=np.float32)
ours = np.load(f"{tmp}/ours.npy")[-1].astype(np.float64)
theirs = theirs[-ours.size:].astype(np.float64)
d = ours - theirs
print(f"tokens: llama.cpp {len(ids)} ids (bos first: {ids[0] == 0}), moeserve {len(ours_ids)}; "
      f"same ids after bos: {ids[1:] == ours_ids or ids == ours_ids}")
print(f"last-token logits over {ours.size} ids: rms {np.sqrt((d**2).mean()):.3e} of an rms of "
      f"{np.sqrt((ours**2).mean()):.3e}; max |diff| {abs(d).max():.3e}; argmax {ours.argmax()} / {theirs.argmax()}; "
      f"top-10 overlap {len(set(np.argsort(-ours)[:10]) & set(np.argsort(-theirs)[:10]))}/10")
EOF
}

llama_ids() {  # DIR: the token ids llama_logits saved there, comma-separated
  "$py" -c 'import glob, numpy, sys
print(",".join(map(str, numpy.fromfile(glob.glob(sys.argv[1] + "/*-tokens.bin")[0], dtype=numpy.int32))))' "$1"
}

llama_logits() {  # GGUF PROMPT DIR: llama.cpp's ids and last-token logits for PROMPT, into DIR
  # f32 KV cache and no flash attention: llama.cpp's defaults (f16) round the latent cache
  "$lc/build/bin/llama-debug" -m "$1" -t "$threads" -ctk f32 -ctv f32 -fa off -p "$2" --save-logits \
    --logits-output-dir "$3" >"$3/debug.log" 2>&1 || { tail -20 "$3/debug.log"; exit 1; }
}

# The vectors of tests/scripts/test_logits_vs_llama_cpp.sh: tiny and small checkpoints (make-model
# is deterministic per seed), llama.cpp's ids for a few prompts (its BPE on the vocabulary cut to
# the model's 1024 ids), its last-token logits, and 24 greedy steps through its KV cache
# (greedy.cpp: each id and its logprob); write_vectors.py gathers them.
run_vectors() {
  build_greedy
  tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
  local runs=() variant dir g i flags
  local prompts=("Hello" "The quick brown fox jumps over the lazy dog, again and again: 1, 2, 3."
    "$(printf 'def f(x):\n    return x * 2  # %s\n' one two three four five six seven eight)")
  # tiny BF16 and FP8 (two shards) on every prompt; the small preset in FP8 (the default model's
  # shapes: 64 experts in 8 groups, FP8 panels on the fast path) on the first
  for variant in tiny-bf16 tiny-fp8 small-fp8; do
    dir="$tmp/$variant"
    flags=(--preset "${variant%-*}" --seed 7 --vocab-size 1024)
    [ "$variant" = tiny-fp8 ] && flags+=(--fp8 --shards 2)
    [ "$variant" = small-fp8 ] && flags+=(--fp8)
    "$moe" make-model "${flags[@]}" --out "$dir" >/dev/null 2>&1
    g="$tmp/$variant.gguf"
    GGUF_PY="$lc/src/gguf-py" "$py" tools/llama_cpp/export_gguf.py --model "$dir" --out "$g" --type f32 >/dev/null
    for i in "${!prompts[@]}"; do
      [ "$variant" = small-fp8 ] && [ "$i" != 0 ] && continue   # its fp32 reference runs ~0.6 s a token
      mkdir -p "$tmp/$variant-$i"
      printf '%s' "${prompts[$i]}" >"$tmp/$variant-$i/prompt.txt"
      printf '%s\n' "${flags[@]}" >"$tmp/$variant-$i/make_model.txt"
      llama_logits "$g" "${prompts[$i]}" "$tmp/$variant-$i"
      "$lc/build/greedy" "$g" "$(llama_ids "$tmp/$variant-$i")" 24 >"$tmp/$variant-$i/greedy.json"
      runs+=("$dir" "$tmp/$variant-$i")
    done
  done
  "$py" tools/llama_cpp/write_vectors.py "llama.cpp $(git -C "$lc/src" log -1 --format=%h)" "${runs[@]}" \
    >tests/reference/llama_cpp_vectors.json
  echo "compare.sh: wrote tests/reference/llama_cpp_vectors.json ($(( ${#runs[@]} / 2 )) cases)"
}

# serve mode (see the header). A server runs in its own session (setsid), so that stopping it
# stops whatever it started; the EXIT trap stops the one still running, if any.
server_pid=""

free_ports() {  # two free TCP ports on 127.0.0.1
  "$py" -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))'
}

start_server() {  # LOG CMD...: start CMD in its own session; sets server_pid
  local log="$1"; shift
  setsid "$@" >"$log" 2>&1 &
  server_pid=$!
}

stop_server() {  # TERM server_pid's session, KILL it after 20 s
  local i pid="$server_pid"
  [ -n "$pid" ] || return 0
  server_pid=""
  kill -TERM -- "-$pid" 2>/dev/null || true
  for i in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

wait_ready() {  # URL LOG: until URL answers 200 (both servers' /health: once the model is loaded)
  local i
  for i in $(seq 1 1200); do
    curl -sf -o /dev/null --max-time 2 "$1" && return 0
    if ! kill -0 "$server_pid" 2>/dev/null; then
      tail -20 "$2"; echo "compare.sh: the server exited before it was ready (its log: $2)" >&2; exit 1
    fi
    sleep 0.5
  done
  tail -20 "$2"; echo "compare.sh: the server was not ready after 600 s (its log: $2)" >&2; exit 1
}

warm_up() {  # HTTP_PORT: one short completion, not measured (first touches out of the load)
  curl -sf -o /dev/null --max-time 300 "http://127.0.0.1:$1/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": [3, 4, 5, 6, 7, 8, 9, 10], "max_tokens": 8, "temperature": 0, "ignore_eos": true}' \
    || { echo "compare.sh: the warm-up request failed" >&2; exit 1; }
}

serve_bench() {  # HTTP_PORT OUT: the load; its report into OUT, its progress into OUT.log
  "$moe" bench --backend openai --base-url "http://127.0.0.1:$1/v1" --num-prompts 32 --concurrency 8 \
    --input-len 128 --output-len 64 >"$2" 2>"$2.log" \
    || { cat "$2" "$2.log"; echo "compare.sh: moeserve bench failed" >&2; exit 1; }
}

report_field() {  # FILE LABEL: the number after LABEL in a "Serving Benchmark Result"
  awk -v label="$2" 'index($0, label) == 1 { print $NF; exit }' "$1"
}

run_serve() {
  local dir g r prog port http_port out label amx=() logs="$lc/serve"  # the last run's logs and reports
  local -A tps  # output tok/s of this round, by prog
  dir="${model:-$(model_dir small-fp8 --fp8)}"
  g="$(gguf "$dir" q8_0 ascii)"
  rm -rf "$logs"; mkdir -p "$logs"
  trap 'stop_server' EXIT
  if grep -m1 '^flags' /proc/cpuinfo | grep -qwE 'amx_(tile|int8)'; then
    amx=(--no-repack)
    echo "compare.sh: this CPU has AMX: llama-server runs with --no-repack (its AMX-repacked Q8_0 weights crash its scheduler)"
  fi
  echo "compare.sh: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs, shared: the load average is the machine's"
  echo "moeserve serve (default topology) on $dir; llama-server ($(git -C "$lc/src" log -1 --format=%h), -np 8," \
       "--threads $threads${amx:+ ${amx[*]}}) on $g"
  echo "load: moeserve bench --backend openai, 32 prompts of 128 random ids, 64 tokens (ignore_eos, greedy), concurrency 8"
  for r in $(seq 1 "$rounds"); do
    echo
    printf 'round %s (load average before: %s)\n' "$r" "$(cut -d' ' -f1-3 /proc/loadavg)"
    printf '  %-14s %13s %13s %13s %10s\n' server "output tok/s" "mean TTFT ms" "mean TPOT ms" generated
    for prog in moe llama; do
      read -r port http_port < <(free_ports)
      if [ "$prog" = moe ]; then
        label=moeserve
        start_server "$logs/$prog-$r.log" "$moe" serve --model "$dir" --port "$port" --http-port "$http_port" \
          --log-stats-interval 0
      else
        label=llama-server
        # 8 slots of 2048 / 8 = 256 tokens: a request's 128 + 64, and a BOS
        start_server "$logs/$prog-$r.log" "$lc/build/bin/llama-server" -m "$g" --host 127.0.0.1 --port "$http_port" \
          -np 8 -c 2048 --threads "$threads" "${amx[@]}"
      fi
      wait_ready "http://127.0.0.1:$http_port/health" "$logs/$prog-$r.log"
      warm_up "$http_port"
      out="$logs/$prog-$r.txt"
      serve_bench "$http_port" "$out"
      stop_server
      tps[$prog]="$(report_field "$out" 'Output token throughput')"
      printf '  %-14s %13s %13s %13s %10s\n' "$label" "${tps[$prog]}" "$(report_field "$out" 'Mean TTFT')" \
        "$(report_field "$out" 'Mean TPOT')" "$(report_field "$out" 'Total generated tokens:')/2048"
      if [ "$(report_field "$out" 'Total generated tokens:')" != 2048 ]; then  # not the whole load: say why
        printf '    INCOMPLETE: %s done, %s failed, of 32 (%s); not comparable\n' \
          "$(report_field "$out" 'Successful requests:')" "$(report_field "$out" 'Failed requests:')" "$out"
        grep -m2 -E '^(Failed requests by error|Error 0)' "$out" | sed 's/^/    /' || true
      fi
    done
    printf '  moeserve / llama-server, output tok/s: %s\n' \
      "$("$py" -c 'import sys; print("%.2f" % (float(sys.argv[1]) / float(sys.argv[2])))' "${tps[moe]}" "${tps[llama]}")"
  done
}

build_llama
"run_$mode"

