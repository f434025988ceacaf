#!/usr/bin/env bash
# The tests: set up and build (tools/setup.sh), check the format (tools/format.sh --check) and
# lint actors/ and net/ (tools/lint.sh), run every test under CTest, fuzz the wire and HTTP parsers for
# MOE_FUZZ_SECONDS (default 60; 0 skips it), then build and run the actor, net and tools tests
# under AddressSanitizer+UBSan and ThreadSanitizer (tools/sanitize.sh; MOE_SANITIZERS=all by
# default, or asan, tsan, none). Extra arguments go to ctest (e.g. -R tokenizer) and skip the
# checks, the fuzzer and the sanitizer runs.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# ccache keys on paths relative to the checkout, so a fresh clone elsewhere reuses the cache
export CCACHE_BASEDIR="$root"
# how long each part took, for keeping the whole under CI's budget
started=$SECONDS
took() {
  echo "test: $1 took $((SECONDS - started)) s"
  started=$SECONDS
}
MOE_BUILD_JOBS="${MOE_BUILD_JOBS:-2}" bash tools/setup.sh
took "set-up and build"
if [ $# -eq 0 ]; then
  bash tools/format.sh --check
  bash tools/lint.sh actors net
  took "format and lint"
fi
ctest --test-dir build --output-on-failure -j2 --timeout 600 "$@"
took "ctest"
fuzz_seconds="${MOE_FUZZ_SECONDS:-60}"
if [ $# -eq 0 ] && [ "$fuzz_seconds" != 0 ]; then
  echo "test: fuzzing the MessagePack-RPC and HTTP request parsers and validators for ${fuzz_seconds} s"
  if ! bash tests/fuzz/run_fuzz.sh "$fuzz_seconds" >build/fuzz.log 2>&1; then
    tail -n 40 build/fuzz.log
    echo "test: the fuzzer failed (log: build/fuzz.log; inputs: build-fuzz/artifacts/)"
    exit 1
  fi
  tail -n 4 build/fuzz.log
  took "fuzzing"
fi
sanitizers="${MOE_SANITIZERS:-all}"
if [ $# -eq 0 ] && [ "$sanitizers" != none ]; then
  bash tools/sanitize.sh "$sanitizers"
  took "sanitizers"
fi
