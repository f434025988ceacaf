#!/usr/bin/env bash
# tools/gpu_check.sh
# The GPU checks in one go, for a machine with an NVIDIA GPU (fits in about 10 minutes): shows
# the device, configures a Release build with CUDA in build-gpu, builds and runs test_cuda (every
# CUDA kernel against the CPU reference), runs the parity cases under compute-sanitizer where it
# exists, the NCCL engine's cases (two ranks need two devices), then builds moeserve if time is
# left. Logs go to build-gpu/gpu_check/ (and $OUT if set).
# Usage: tools/gpu_check.sh [cuda-arch, default 90]. Exit status: 0 only if test_cuda and the
# NCCL cases passed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 1
arch="${1:-90}"
build="${MOE_GPU_BUILD_DIR:-build-gpu}"
jobs="${MOE_BUILD_JOBS:-$(nproc)}"
deadline=$((SECONDS + ${MOE_GPU_CHECK_BUDGET_S:-570}))
logs="$build/gpu_check"
mkdir -p "$logs"
export PATH="/usr/local/cuda/bin:$PATH"

section() { printf '\n=== %s ===\n' "$*"; }
save_logs() { [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ] && cp -r "$logs" "$OUT/" 2>/dev/null; true; }
# step NAME CAP_S CMD...: runs CMD with output in $logs/NAME.log, killed at min(CAP_S, time left).
step() {
  local name="$1" cap="$2"; shift 2
  local left=$((deadline - SECONDS)); ((left < cap)) && cap=$left
  if ((cap < 10)); then echo "gpu_check: no time left for $name"; return 124; fi
  local t0=$SECONDS rc=0
  timeout "$cap" "$@" >"$logs/$name.log" 2>&1 || rc=$?
  echo "gpu_check: $name -> rc $rc in $((SECONDS - t0)) s (limit $cap s)"
  if ((rc != 0)); then echo "--- tail of $logs/$name.log"; tail -n 40 "$logs/$name.log"; fi
  return $rc
}
finish() { save_logs; echo "gpu_check: done in $SECONDS s, exit $1"; exit "$1"; }

section "device"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,compute_cap --format=csv 2>&1 ||
  echo "gpu_check: nvidia-smi failed (no driver?)"
command -v nvcc >/dev/null && nvcc --version | tail -n 2

section "configure $build (CUDA arch $arch, $jobs jobs)"
step configure 150 cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DMOE_USE_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$arch" || finish 2
if ! grep -q '^MOE_USE_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
   ! grep -q '^CMAKE_CUDA_COMPILER:.*nvcc' "$build/CMakeCache.txt"; then
  echo "gpu_check: CMake did not enable CUDA (no nvcc?): see $logs/configure.log"; finish 2
fi

section "build test_cuda"
step build_test_cuda 300 cmake --build "$build" -j "$jobs" --target test_cuda || finish 3

section "test_cuda (parity against the CPU reference)"
rc=0
step test_cuda 120 "$build/tests/test_cuda" --success=false --duration=true || rc=$?
grep -E 'MESSAGE|ERROR|FATAL| s: |test cases|assertions|Status' "$logs/test_cuda.log"
if grep -q 'CUDA parity skipped' "$logs/test_cuda.log"; then
  echo "gpu_check: WARNING: parity was skipped, so no kernel ran on a GPU"; ((rc == 0)) && rc=4
fi

sanitizer="$(command -v compute-sanitizer || ls /usr/local/cuda/compute-sanitizer/compute-sanitizer 2>/dev/null)"
if [ -n "$sanitizer" ]; then
  for tool in memcheck racecheck synccheck; do
    section "compute-sanitizer --tool $tool (parity cases)"
    step "sanitizer_$tool" 90 "$sanitizer" --tool "$tool" --error-exitcode 99 \
      "$build/tests/test_cuda" -tc='rms_norm: *,moe_gate: *' || rc=$((rc == 0 ? 5 : rc))
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$logs/sanitizer_$tool.log"
  done
else
  echo "gpu_check: compute-sanitizer not found; skipped"
fi

section "NCCL (the collective channel's engine: join, rounds, abort)"
if step build_test_actors 300 cmake --build "$build" -j "$jobs" --target test_actors; then
  step test_nccl 90 "$build/tests/test_actors" -tc='nccl: *' --success=false || rc=$((rc == 0 ? 6 : rc))
  grep -E 'MESSAGE|ERROR|FATAL|test cases|assertions' "$logs/test_nccl.log"
else
  echo "gpu_check: test_actors did not build in time (NCCL not checked)"
fi

section "build moeserve (optional)"
step build_moeserve 240 cmake --build "$build" -j "$jobs" --target moeserve ||
  echo "gpu_check: moeserve did not build (not counted in the exit status)"
finish "$rc"
