// kernels/model/fp8_quantize.hpp
// Block quantisation to FP8 E4M3 as DeepSeek-V3's FP8 checkpoints hold their linear weights
// (model-spec section 4): per 128x128 block, scale = amax / 448 and code = e4m3(w / scale), so
// that W ~ code * scale (the weight_scale_inv). At load, `--lm-head-fp8` quantises a BF16 lm_head
// this way: the largest single read of a batch-1 decode step on a small model, halved.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/model/weights.hpp"

namespace moe {

/// The rows and columns of an FP8 quantisation block.
inline constexpr int64_t fp8_quant_block = 128;

/// Scale of a block whose largest magnitude is `amax`: amax / 448, but at least 2^-126 (a normal
/// float, as the loader requires of any scale; the codes of such a block are then smaller) and 1
/// for an all-zero block.
[[nodiscard]] float fp8_block_scale(float amax) noexcept;

/// Quantises one block of `rows` x `cols` values (row r at `values + r * stride`): calls
/// store(r, c, code) for each of its elements and returns the block's scale (fp8_block_scale).
template <class Store>
float quantize_fp8_block(const float* values, int64_t stride, int64_t rows, int64_t cols, Store&& store) {
  float amax = 0.0f;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      amax = std::fmax(amax, std::fabs(values[r * stride + c]));
  const float scale = fp8_block_scale(amax);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      store(r, c, f32_to_fp8_e4m3(values[r * stride + c] / scale));
  return scale;
}

/// `w` (any dtype the loader accepts) quantised to FP8 E4M3 in 128x128 blocks with its codes in
/// `layout` (weight_layout::fp8_panels needs fp8_panels_fit). The codes and the scales are held
/// by `owner` (model_weights::requantized). Throws std::invalid_argument for fp8_panels that do
/// not fit.
[[nodiscard]] linear_weight quantize_to_fp8(const linear_weight& w, weight_layout layout,
                                            model_weights& owner);

/// Replaces `w.lm_head` by its FP8 quantisation, unless it is FP8 already (a tied embedding stays
/// as it is). `panels`: the codes in the fast kernels' panels where the shape fits them.
void quantize_lm_head_fp8(model_weights& w, bool panels);

}  // namespace moe
