// kernels/model/fp8_quantize.cpp
// FP8 block quantisation of a loaded weight (fp8_quantize.hpp).
#include "kernels/model/fp8_quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/checkpoint/host_memory.hpp"
#include "kernels/cpu/fast_weights.hpp"

namespace moe {

float fp8_block_scale(float amax) noexcept {
  if (amax == 0.0f)
    return 1.0f;
  return std::max(amax / 448.0f, std::ldexp(1.0f, -126));
}

linear_weight quantize_to_fp8(const linear_weight& w, weight_layout layout, model_weights& owner) {
  const int64_t out = w.out_features, in = w.in_features;
  if (layout == weight_layout::fp8_panels && !fp8_panels_fit(out, in))
    throw std::invalid_argument("quantize_to_fp8: FP8 panels need rows a multiple of 64 and columns of 64");
  const int64_t block_rows = (out + fp8_quant_block - 1) / fp8_quant_block;
  const int64_t block_cols = (in + fp8_quant_block - 1) / fp8_quant_block;
  const int64_t code_bytes = layout == weight_layout::fp8_panels ? fp8_panels_bytes(out, in) : out * in;
  const int64_t bytes = code_bytes + 4 * block_rows * block_cols;
  require_memory(static_cast<uint64_t>(bytes), "an FP8 copy of a weight (--lm-head-fp8)",
                 ": use a machine with more memory, or leave the weight as it is");
  // huge pages, as the loader's copy of the checkpoint: a decode step streams the whole weight
  std::shared_ptr<void> storage = fast::huge_page_buffer(static_cast<size_t>(bytes));
  auto* codes = static_cast<uint8_t*>(storage.get());
  auto* scales = reinterpret_cast<float*>(codes + code_bytes);  // code_bytes is a multiple of 64
  linear_weight q{.type = dtype::f8_e4m3,
                  .data = codes,
                  .layout = layout,
                  .out_features = out,
                  .in_features = in,
                  .scale_inv = scales,
                  .block_rows = fp8_quant_block,
                  .block_cols = fp8_quant_block};

  // each thread quantises whole row blocks: 128 rows' values, then block by block
  auto quantize_rows = [&](int64_t first_block, int64_t end_block) {
    std::vector<float> rows(static_cast<size_t>(fp8_quant_block * in));
    for (int64_t br = first_block; br < end_block; ++br) {
      const int64_t r0 = br * fp8_quant_block, r1 = std::min(out, r0 + fp8_quant_block);
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = 0; c < in; ++c)
          rows[static_cast<size_t>((r - r0) * in + c)] = w.at(r, c);
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        const int64_t c0 = bc * fp8_quant_block, c1 = std::min(in, c0 + fp8_quant_block);
        scales[br * block_cols + bc] = quantize_fp8_block(rows.data() + c0, in, r1 - r0, c1 - c0,
                                                          [&](int64_t r, int64_t c, uint8_t code) {
                                                            codes[q.index(r0 + r, c0 + c)] = code;
                                                          });
      }
    }
  };
  if (layout == weight_layout::fp8_panels)  // the panels' padding rows (none when they fit)
    std::memset(codes, 0, static_cast<size_t>(code_bytes));
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1,
                                              std::max<int64_t>(block_rows, 1));
  std::vector<std::jthread> helpers;
  for (int64_t t = 1; t < threads; ++t)
    helpers.emplace_back(quantize_rows, block_rows * t / threads, block_rows * (t + 1) / threads);
  quantize_rows(0, block_rows / threads);
  helpers.clear();  // joins
  owner.requantized.push_back(std::move(storage));
  return q;
}

void quantize_lm_head_fp8(model_weights& w, bool panels) {
  if (w.lm_head.type == dtype::f8_e4m3)
    return;
  const bool fit = panels && fp8_panels_fit(w.lm_head.out_features, w.lm_head.in_features);
  w.lm_head = quantize_to_fp8(w.lm_head, fit ? weight_layout::fp8_panels : weight_layout::row_major, w);
}

}  // namespace moe
