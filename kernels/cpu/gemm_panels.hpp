// kernels/cpu/gemm_panels.hpp
// BF16 weights packed ahead into the fast GEMM's panel layout (fast_linear.hpp), so a GEMM that
// runs every step need not pack them per call. Plain declarations (no SIMD), for callers
// outside the kernels.
#pragma once

#include <cstdint>
#include <memory>

#include "kernels/model/weights.hpp"

namespace moe::fast {

/// The whole BF16 weight `w` packed into GEMM panels (64-byte aligned, panel p at
/// p * panel_size(w.in_features)), for linear_weight::gemm_panels. Throws std::invalid_argument
/// unless `w` is BF16.
[[nodiscard]] std::shared_ptr<const uint16_t> pack_gemm_panels(const linear_weight& w);

/// Packs the lm_head once when it is BF16 (V3's FP8 checkpoints keep it BF16): a batched decode
/// step's LOGITS, the largest GEMM of the step, then skips packing (~40 % of a 32-row GEMM's
/// time on the 129280-row lm_head). Costs the lm_head's bytes again in memory. No-op for other
/// dtypes.
void prepack_lm_head(model_weights& w);

}  // namespace moe::fast
