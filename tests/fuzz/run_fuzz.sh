#!/usr/bin/env bash
# Builds the fuzz_rpc libFuzzer target with clang++ (ASan + UBSan) in its own build directory and
# runs it for a bounded time over the seed corpus (tests/fuzz/corpus/). Exits non-zero on a
# finding; the input that caused it is written to <build>/artifacts/.
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
cmake --build "$build" -j"${MOE_BUILD_JOBS:-2}" --target fuzz_rpc >/dev/null

mkdir -p "$build/corpus" "$build/artifacts"
# New inputs go to <build>/corpus; the committed seeds are read only.
"$build/tests/fuzz/fuzz_rpc" -max_total_time="$seconds" -max_len=8192 -rss_limit_mb=2048 \
  -timeout=10 -print_final_stats=1 -artifact_prefix="$build/artifacts/" \
  "$@" "$build/corpus" "$root/tests/fuzz/corpus"
