#!/usr/bin/env bash
# Builds the libFuzzer targets fuzz_rpc (the wire) and fuzz_http (the HTTP front) with clang++
# (ASan + UBSan) in their own build directory and runs each for half the bounded time over its
# seed corpus (tests/fuzz/corpus/, tests/fuzz/corpus_http/). Exits non-zero on a finding; the
# input that caused it is written to <build>/artifacts/.
#   tests/fuzz/run_fuzz.sh [seconds=60] [extra libFuzzer flags, e.g. -jobs=2 -workers=2]
# MOE_FUZZ_BUILD_DIR overrides the build directory (default build-fuzz/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
seconds="${1:-60}"
shift || true
build="${MOE_FUZZ_BUILD_DIR:-$root/build-fuzz}"
sanitizers="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined"

cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="$sanitizers" -DMOE_FUZZ=ON \
  -DMOE_USE_CUDA=OFF >/dev/null
cmake --build "$build" -j"${MOE_BUILD_JOBS:-2}" --target fuzz_rpc fuzz_http >/dev/null

mkdir -p "$build/corpus" "$build/corpus_http" "$build/artifacts"
half=$(( (seconds + 1) / 2 ))
# New inputs go to <build>/corpus*; the committed seeds are read only.
echo "fuzz: fuzz_rpc for $half s"
"$build/tests/fuzz/fuzz_rpc" -max_total_time="$half" -max_len=8192 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix="$build/artifacts/" \
  "$@" "$build/corpus" "$root/tests/fuzz/corpus"
echo "fuzz: fuzz_http for $half s"
"$build/tests/fuzz/fuzz_http" -max_total_time="$half" -max_len=8192 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix="$build/artifacts/" \
  "$@" "$build/corpus_http" "$root/tests/fuzz/corpus_http"
