// tools/bench_weights.hpp
// The weights one decoded token reads, as byte spans, for bench-model's paired bandwidth limit:
// after each batch-1 decode step it reads the same amount of weight bytes with plain loads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/model/weights.hpp"

namespace moe::tools {

/// weight_bytes_per_token's list as spans (FP8 block scales included): every weight outside the
/// routed experts, and top_k distinct routed experts per MoE layer, a different set per `call`
/// (as routing picks different experts token by token). Where a BF16 weight is packed ahead
/// (linear_weight::gemm_panels), its span is the packed copy, which the fast path reads instead.
[[nodiscard]] std::vector<std::span<const uint8_t>> token_weight_spans(const model_weights& w, int64_t call);

}  // namespace moe::tools
