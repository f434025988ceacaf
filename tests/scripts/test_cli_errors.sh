#!/usr/bin/env bash
# tests/scripts/test_cli_errors.sh
# The CLI's answers to bad input: exit status 2 and one "error: ..." line naming what is wrong,
# never a crash. Run by CTest as: bash test_cli_errors.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_cli_errors.sh <moeserve> [build-dir]}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

# expect <label> <status> <text the error must contain> <command...>
expect() {
  local label=$1 status=$2 text=$3
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne $status || $out != *"$text"* ]]; then
    echo "FAIL: $label: exit $rc (want $status), output: $out"
    failures=$((failures + 1))
  else
    echo "ok: $label -> ${out%%$'\n'*}"
  fi
}

"$moeserve" make-model --preset tiny --seed 1 --vocab-size 512 --out "$tmp/m" >/dev/null 2>&1 ||
  { echo "FAIL: make-model"; exit 1; }

expect "missing model dir" 2 "a Hugging Face checkpoint directory" "$moeserve" generate --model "$tmp/nope" --prompt hi
expect "prompt and tokens both" 2 "exactly one of" "$moeserve" generate --model "$tmp/m" --prompt hi --tokens 1
expect "token id out of vocab" 2 "outside the vocabulary" "$moeserve" generate --model "$tmp/m" --tokens 0,600
expect "bad token list" 2 "--tokens" "$moeserve" logits --model "$tmp/m" --tokens "1,x" --out "$tmp/l.npy"
expect "bad sampling value" 2 "top_p" "$moeserve" generate --model "$tmp/m" --prompt hi --top-p 1.5
expect "unknown preset" 2 "--preset" "$moeserve" make-model --preset huge --out "$tmp/x"
expect "negative stall timeout" 2 "--stall-timeout" "$moeserve" serve --model "$tmp/m" --stall-timeout -1
expect "restart period of zero" 2 "--restart-period" "$moeserve" serve --model "$tmp/m" --restart-period 0
expect "trace into a missing directory" 2 "no directory" \
  "$moeserve" bench-cluster --model "$tmp/m" --overlap --trace "$tmp/nope/t.json"

cp -r "$tmp/m" "$tmp/trunc"
truncate -s 1000 "$tmp/trunc/model.safetensors"
expect "truncated safetensors" 2 "model.safetensors" "$moeserve" generate --model "$tmp/trunc" --prompt hi

cp -r "$tmp/m" "$tmp/badcfg"
sed -i 's/"hidden_size": *64/"hidden_size": -64/' "$tmp/badcfg/config.json"
expect "invalid config" 2 "hidden_size" "$moeserve" generate --model "$tmp/badcfg" --prompt hi

cp -r "$tmp/m" "$tmp/huge"
truncate -s 8T "$tmp/huge/model.safetensors"   # sparse: no blocks on disk
expect "weights bigger than memory" 2 "would take 8796.09 GB of memory" \
  "$moeserve" generate --model "$tmp/huge" --prompt hi
expect "KV caches bigger than memory" 2 "lower --kv-blocks" \
  "$moeserve" generate --model "$tmp/m" --prompt hi --kv-blocks 1000000000

"$moeserve" make-model --preset tiny --seed 1 --out "$tmp/v3vocab" >/dev/null 2>&1 ||   # vocab 129280
  { echo "FAIL: make-model"; exit 1; }
expect "detokenize past the model's vocabulary" 2 "outside the vocab [0, 129280)" \
  "$moeserve" detokenize --model "$tmp/v3vocab" "[1, 129280]"
out=$("$moeserve" detokenize --model "$tmp/v3vocab" "[1, 129044]" 2>&1)   # past the tokenizer's
if [[ $? -ne 0 || $out != "<｜end▁of▁sentence｜>" ]]; then
  echo "FAIL: detokenize of an id the model has and the tokenizer lacks: $out"
  failures=$((failures + 1))
else
  echo "ok: detokenize of an id the model has and the tokenizer lacks -> $out"
fi

expect "negative seed" 2 "--seed: expected a non-negative integer" \
  "$moeserve" make-model --preset tiny --seed -1 --out "$tmp/neg"
expect "seed past 2^64 - 1 (CLI11 capped it in silence)" 2 "--seed: expected a non-negative integer below 2^64" \
  "$moeserve" generate --model "$tmp/m" --tokens 1,2 --seed 18446744073709551616
expect "bench-model without a prefill to time" 2 "--prefill-runs: Value 0 not in range" \
  "$moeserve" bench-model --model "$tmp/m" --prefill-runs 0
# bench-model measures the fast path: without its AVX-512 BF16, VBMI and GFNI it says so first
if grep -q avx512_bf16 /proc/cpuinfo && grep -q avx512vbmi /proc/cpuinfo && grep -qw gfni /proc/cpuinfo; then
  expect "bench-model prompt past the context" 2 "--prompt-len: 1000000 tokens is over the model's" \
    "$moeserve" bench-model --model "$tmp/v3vocab" --prompt-len 1000000
else
  expect "bench-model on a CPU without the fast path" 2 "bench-model measures the fast path, which needs AVX-512 BF16" \
    "$moeserve" bench-model --model "$tmp/v3vocab" --prompt-len 1000000
fi
expect "bench-cluster requests past the context" 2 "requests of 9002 tokens do not fit the served context of 8192" \
  "$moeserve" bench-cluster --model "$tmp/m" --concurrency 1 --prompt-len 9000 --output-len 2
expect "bench-cluster outputs cut short by the context" 2 "requests of 108 tokens do not fit the served context of 16" \
  "$moeserve" bench-cluster --model "$tmp/m" --concurrency 1 --prompt-len 8 --output-len 100 --max-context 16
expect "ranks that do not split the experts, before loading" 2 "decode.ranks (--decode-ranks) must divide the model's 16 routed experts + 0 redundant slots" \
  "$moeserve" generate --model "$tmp/m" --prompt hi --decode-ranks 3
expect "max_running_requests past its bound" 2 "decode.max_running_requests (--max-running-requests) must be <= 16777216" \
  "$moeserve" generate --model "$tmp/m" --tokens 1,2 --max-running-requests 4611686018427387904
expect "a page size past its bound" 2 "kv_cache.page_size (--page-size) must be <= 4096" \
  "$moeserve" generate --model "$tmp/m" --tokens 1,2 --kv-blocks 1048576 --page-size 2199023255552
expect "bench --json into a missing directory, before connecting" 2 "--json: cannot write" \
  "$moeserve" bench --port 1 --json "$tmp/nope/b.json"
expect "detokenize of an unclosed list" 2 "the '[' is never closed" \
  "$moeserve" detokenize --model "$tmp/m" "[1, 2"

echo '[[1, 2, 3], [4, 5]]' >"$tmp/ragged.json"
echo '[[1, 2, 3, 4], [4, 5, 6, 7]]' >"$tmp/load.json"
expect "eplb-plan of a missing load file" 2 "--load: cannot open" \
  "$moeserve" eplb-plan --load "$tmp/nope.json" --replicas 4
expect "eplb-plan of a ragged load" 2 "row 1 has 2 experts, row 0 has 3" \
  "$moeserve" eplb-plan --load "$tmp/ragged.json" --replicas 4
expect "eplb-plan of replicas that do not split over the ranks" 2 "--replicas 6 is not a multiple of --ranks 4" \
  "$moeserve" eplb-plan --load "$tmp/load.json" --replicas 6 --ranks 4
echo '[[1, 2' >"$tmp/cut.json"
expect "eplb-plan of a cut JSON file" 2 "not JSON" "$moeserve" eplb-plan --load "$tmp/cut.json" --replicas 4

src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
expect "cluster check of an unknown node" 2 'unknown node "decode-9" (the cluster file names: front, prefill-0, decode-0, decode-1)' \
  "$moeserve" cluster check "$src/config/cluster.toml" --node decode-9
sed '0,/^decode_ranks = 2$/s//decode_ranks = 1/' "$src/config/cluster.toml" >"$tmp/three.toml"  # decode-0: 1, decode-1: 2
expect "cluster check of ranks that do not split the experts" 2 "3 decode ranks (decode-0 (1), decode-1 (2)) do not divide the model's 16 routed experts" \
  "$moeserve" cluster check "$tmp/three.toml" --model "$tmp/m"
sed 's/^port = 7403$/port = 7402/' "$src/config/cluster.toml" >"$tmp/dup.toml"
expect "cluster check of two nodes on one address" 2 'node "decode-1" port and node "decode-0" port have the same address 127.0.0.1:7402' \
  "$moeserve" cluster check "$tmp/dup.toml"
out=$("$moeserve" cluster check "$src/config/cluster.toml" --model "$tmp/m" 2>&1)
if [[ $? -ne 0 || $out != *"decode-1 at 127.0.0.1:7403: decode ranks 2-3, expert slots 8-15 of 16"* ]]; then
  echo "FAIL: cluster check of the example: $out"
  failures=$((failures + 1))
else
  echo "ok: cluster check of the example prints the plan"
fi
sed 's/^data_plane = "auto"/data_plane = "middleman"/' "$src/config/cluster.toml" >"$tmp/middleman.toml"
out=$("$moeserve" cluster check "$tmp/middleman.toml" 2>&1)
if [[ $? -ne 0 || $out != *"payloads between processes as CAF messages"* ]]; then
  echo "FAIL: cluster check of data_plane = middleman: $out"
  failures=$((failures + 1))
else
  echo "ok: cluster check says what carries payloads between processes"
fi
# data_plane = "nccl": each rank on a CUDA device of its own. A build with NCCL says so in the
# check, and a node that sees no device is an error naming the key; a build without, both
sed 's/^data_plane = "auto"/data_plane = "nccl"/' "$src/config/cluster.toml" >"$tmp/nccl.toml"
if out=$("$moeserve" cluster check "$tmp/nccl.toml" 2>&1); then
  if [[ $out == *"payloads between processes over NCCL"* ]]; then
    echo "ok: cluster check of data_plane = nccl says NCCL carries the payloads"
  else
    echo "FAIL: cluster check of data_plane = nccl: $out"
    failures=$((failures + 1))
  fi
  expect "a node with data_plane = nccl and no CUDA device" 2 'node decode-0: data_plane = "nccl": no CUDA device is visible' \
    env CUDA_VISIBLE_DEVICES= "$moeserve" serve --cluster "$tmp/nccl.toml" --node decode-0 --model "$tmp/m"
else
  expect "cluster check of data_plane = nccl without NCCL" 2 'data_plane = "nccl", but this moeserve was built without NCCL' \
    "$moeserve" cluster check "$tmp/nccl.toml"
  expect "a node with data_plane = nccl without NCCL" 2 'data_plane = "nccl": this moeserve was built without NCCL' \
    "$moeserve" serve --cluster "$tmp/nccl.toml" --node decode-0 --model "$tmp/m"
fi
# UCX that finds no transport it may use (UCX_TLS names none): data_plane = "ucx" is an error
# before the node publishes anything; "auto" falls back to messages and says so
if "$moeserve" cluster check "$src/config/cluster.toml" | grep -q "over UCX"; then
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  sed "s/^port = 7402$/port = $port/" "$src/config/cluster.toml" >"$tmp/auto.toml"
  sed 's/^data_plane = "auto"/data_plane = "ucx"/' "$tmp/auto.toml" >"$tmp/ucx.toml"
  expect "a node whose UCX finds no transport" 2 'node decode-0: data_plane = "ucx", but data plane: ucx: ucp_init' \
    env UCX_TLS=nonexistent "$moeserve" serve --cluster "$tmp/ucx.toml" --node decode-0 --model "$tmp/m"
  UCX_TLS=nonexistent "$moeserve" serve --cluster "$tmp/auto.toml" --node decode-0 --model "$tmp/m" \
    >"$tmp/auto.out" 2>"$tmp/auto.err" &
  pid=$!
  for _ in $(seq 1 100); do grep -q "of cluster loopback" "$tmp/auto.out" && break; sleep 0.1; done
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if grep -q "payloads from other processes as messages" "$tmp/auto.out" &&
    grep -q "UCX did not start" "$tmp/auto.err"; then
    echo "ok: with data_plane = auto, a node whose UCX does not start sends payloads as messages"
  else
    echo "FAIL: data_plane = auto without a UCX transport: $(cat "$tmp/auto.out" "$tmp/auto.err")"
    failures=$((failures + 1))
  fi
else
  echo "ok: without UCX in this build, nothing to check of a node whose UCX does not start"
  echo "ok: without UCX in this build, data_plane = auto sends payloads as messages anyway"
fi

echo "$((35 - failures)) passed, $failures failed"
[[ $failures -eq 0 ]]
