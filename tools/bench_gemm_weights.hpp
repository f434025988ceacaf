// tools/bench_gemm_weights.hpp
// Random weights laid out as a fast session lays out a checkpoint's, the small preset's prefill
// matmul shapes, and the timing of the fast path's linear over them: shared by
// `bench-model --gemm` and the oneDNN comparison (tools/onednn/gemm_vs_onednn.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/backend.hpp"

namespace moe::tools {

/// A random weight: BF16 in +-[2^-7, 2^-6), FP8 codes without NaN, scales around 1e-3; laid out
/// as fast_weights.hpp lays out a checkpoint's (BF16 packed for the GEMM, FP8 in panels).
struct bench_weight {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  std::shared_ptr<const void> laid_out;
  linear_weight w;
};

[[nodiscard]] std::unique_ptr<bench_weight> make_bench_weight(dtype type, int64_t out, int64_t in,
                                                              uint64_t seed);

/// Seconds per call of dev.linear over `ws` in turn (so the weights stream from memory), with
/// `m` activation rows, best of 3 runs of `calls` calls.
[[nodiscard]] double time_linear(backend& dev, const std::vector<std::unique_ptr<bench_weight>>& ws,
                                 int64_t m, int64_t calls);

/// A matmul y[m, out] = x[m, in] W[out, in]^T.
struct gemm_shape {
  const char* what;
  int64_t out, in, m;
};

/// The small preset's prefill matmuls at 512 tokens, and a routed expert's at 64 rows.
[[nodiscard]] std::span<const gemm_shape> prefill_gemm_shapes();

}  // namespace moe::tools
