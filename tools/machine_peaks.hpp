// tools/machine_peaks.hpp
// The machine's peaks that bench-model compares against: streaming read bandwidth and the
// AVX-512 multiply-add rates. Their one file holds the intrinsics, in a fast-path target region
// (kernels/cpu/fast_simd.hpp), and registers nothing, so `moeserve` starts on a CPU without
// AVX-512 (where these must not run: callers check cpu_fast_path_supported()).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace moe {
class thread_pool;
}

namespace moe::tools {

/// Best-of-3 multithreaded streaming read of 1 GiB, in bytes per second.
[[nodiscard]] double measure_read_bandwidth(int threads);

/// The machine's multiply-add peaks, on each of `threads` threads at once into 12 independent
/// accumulators, FLOP/s summed over the threads, best of 10:
///   vdpbf16ps (64 FLOPs: 16 lanes of two bf16 products), which the GEMV and the GEMM's tiles for
///     few rows use;
///   vfmadd231ps (32 FLOPs), which the GEMM's tiles for many rows use on bf16 widened to fp32
///     (fast_gemm_fma.cpp): on this project's Intel VMs a core issues two a cycle against one
///     vdpbf16ps every two, so this is the machine's BF16 GEMM peak.
enum class peak_op { vdpbf16ps, vfmadd231ps };
[[nodiscard]] double measure_peak(int threads, peak_op op);

/// Seconds to read `spans` once with plain 64-byte loads on `pool`, every span split into one
/// contiguous part per thread (as the GEMVs split their rows), all in one parallel region: what
/// the memory system gives a token's weights when nothing else runs.
[[nodiscard]] double time_plain_read(thread_pool& pool, const std::vector<std::span<const uint8_t>>& spans,
                                     std::vector<uint64_t>& sinks);

}  // namespace moe::tools
