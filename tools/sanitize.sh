#!/usr/bin/env bash
# Builds the actor, net and tools tests under AddressSanitizer + UndefinedBehaviorSanitizer (asan),
# and the actor and net tests, where the threads are, under ThreadSanitizer (tsan), CPU only
# (CMakePresets.json), and runs them under CTest.
# Usage: tools/sanitize.sh asan|tsan|all [ctest arguments, e.g. -R queue]
# Suppressions (tests/sanitizers/*.supp) cover only CAF 0.17's own reports, each with a comment.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
which="${1:-all}"
shift || true
case "$which" in
  asan) presets=(asan) ;;
  tsan) presets=(tsan) ;;
  all) presets=(asan tsan) ;;
  *) echo "usage: tools/sanitize.sh asan|tsan|all [ctest arguments]"; exit 2 ;;
esac
supp="$root/tests/sanitizers"
export ASAN_OPTIONS="abort_on_error=0:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export LSAN_OPTIONS="suppressions=$supp/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:suppressions=$supp/ubsan.supp"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$supp/tsan.supp"
# UCX's memory hooks (libucm, loaded by every binary that links the data plane: malloc hooks and
# mmap/munmap events) and TSan's own interception of the same calls collide: under TSan such a
# binary died with SIGSEGV, at start or once it mapped memory. The hooks only keep RDMA
# registration caches fresh, which no test here uses.
export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_EVENTS=no
for preset in "${presets[@]}"; do
  started=$SECONDS
  # TSan must see CAF's own synchronisation: an instrumented CAF, built once (tools/caf_tsan.sh)
  [ "$preset" = tsan ] && bash tools/caf_tsan.sh
  echo "sanitize: $preset: building its tests"
  cmake --preset "$preset" >/dev/null
  if ! cmake --build --preset "$preset" -j "${MOE_BUILD_JOBS:-2}" >"build-$preset.log" 2>&1; then
    grep -E -A5 'error|Error' "build-$preset.log" | head -n 60
    echo "sanitize: $preset: the build failed (log: build-$preset.log)"
    exit 1
  fi
  echo "sanitize: $preset: built in $((SECONDS - started)) s; running"
  started=$SECONDS
  ctest --preset "$preset" -j 2 "$@"
  echo "sanitize: $preset: ran in $((SECONDS - started)) s"
done
