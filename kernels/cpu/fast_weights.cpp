// kernels/cpu/fast_weights.cpp
// The fast path's own copies of weights, made at load (fast_weights.hpp).
#include "kernels/cpu/fast_weights.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/checkpoint/host_memory.hpp"
#include "kernels/cpu/fast_simd.hpp"

// built for the fast path's target (kernels/cpu/fast_simd.hpp)
MOE_FAST_TARGET_BEGIN

namespace moe::fast {

std::shared_ptr<void> huge_page_buffer(size_t bytes) {
  constexpr size_t huge = size_t{2} << 20;
  const bool big = bytes >= huge;  // smaller ones: 64-byte aligned, not rounded to 2 MiB
  const size_t align = big ? huge : 64, rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* data = std::aligned_alloc(align, rounded);
  if (data == nullptr)
    throw std::bad_alloc();
  if (big)
    (void)::madvise(data, rounded, MADV_HUGEPAGE);  // best effort: THP may be off
  return {data, [](void* p) { std::free(p); }};
}

void pad_fp8_panels_into(const linear_weight& w, uint8_t* dst) {
  if (w.type != dtype::f8_e4m3 || w.layout != weight_layout::row_major || w.in_features % 64 != 0 ||
      w.out_features <= 0)
    throw std::invalid_argument(
      "pad_fp8_panels: needs a row-major FP8 weight with in_features a multiple of 64");
  const int64_t out = w.out_features, in = w.in_features;
  std::memset(dst, 0, static_cast<size_t>(fp8_panels_bytes(out, in)));
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; i += 2)  // a column pair's two bytes sit together
      std::memcpy(dst + fp8_panel_offset(o, i, in), src + o * in + i, 2);
}

std::shared_ptr<const uint8_t> pad_fp8_panels(const linear_weight& w) {
  std::shared_ptr<void> buffer =
    huge_page_buffer(static_cast<size_t>(fp8_panels_bytes(w.out_features, w.in_features)));
  pad_fp8_panels_into(w, static_cast<uint8_t*>(buffer.get()));
  return {buffer, static_cast<const uint8_t*>(buffer.get())};
}

std::shared_ptr<const uint16_t> pack_gemm_panels(const linear_weight& w) {
  std::shared_ptr<void> buffer = huge_page_buffer(static_cast<size_t>(gemm_panels_bytes(w)));
  pack_gemm_panels_into(w, static_cast<uint16_t*>(buffer.get()));
  return {buffer, static_cast<const uint16_t*>(buffer.get())};
}

void prepare_fast_weights(model_weights& w) {
  if (!cpu_fast_path_supported())  // the reference backend runs: it reads the weights as they are
    return;
  std::vector<linear_weight*> todo;
  auto add = [&](linear_weight& x) {
    if (x.data == nullptr)
      return;
    if ((x.type == dtype::bf16 && x.gemm_panels == nullptr) ||
        (x.type == dtype::f8_e4m3 && x.layout == weight_layout::row_major && x.in_features % 64 == 0 &&
         x.out_features % fp8_panel_rows != 0 && x.block_rows % fp8_panel_rows == 0))
      todo.push_back(&x);
  };
  auto add_mlp = [&](mlp_weights& m) {
    add(m.gate_proj);
    add(m.up_proj);
    add(m.down_proj);
  };
  add(w.lm_head);
  for (layer_weights& l : w.layers) {
    for (linear_weight* x :
         {&l.attn.q_a_proj, &l.attn.q_b_proj, &l.attn.q_proj, &l.attn.kv_a_proj_with_mqa, &l.attn.o_proj})
      add(*x);
    add_mlp(l.mlp);
    add(l.moe.gate);
    for (mlp_weights& e : l.moe.experts)
      add_mlp(e);
    add_mlp(l.moe.shared_experts);
  }
  if (!todo.empty())
    w.fast_copies.push_back(lay_out(todo));
}

std::shared_ptr<void> lay_out(std::span<linear_weight* const> todo) {
  // one buffer, each weight's copy at a 64-byte boundary (separate 2 MiB-rounded buffers would
  // take 4x the bytes of the small preset's 512 KiB experts)
  std::vector<size_t> offset(todo.size() + 1, 0);
  for (size_t i = 0; i < todo.size(); ++i) {
    const linear_weight& x = *todo[i];
    const int64_t bytes = x.type == dtype::bf16 ? gemm_panels_bytes(x)
                                                : fp8_panels_bytes(x.out_features, x.in_features);
    offset[i + 1] = offset[i] + (static_cast<size_t>(bytes) + 63) / 64 * 64;
  }
  require_memory(offset.back(),
                 "the fast CPU path's own copies of the weights (BF16 GEMM panels, FP8 GEMV panels)",
                 ": use a machine with more memory");
  std::shared_ptr<void> buffer = huge_page_buffer(offset.back());
  auto* base = static_cast<uint8_t*>(buffer.get());
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < todo.size(); i = next++) {
      if (todo[i]->type == dtype::bf16)
        pack_gemm_panels_into(*todo[i], reinterpret_cast<uint16_t*>(base + offset[i]));
      else
        pad_fp8_panels_into(*todo[i], base + offset[i]);
    }
  };
  std::vector<std::thread> helpers;
  const size_t threads = std::min<size_t>(todo.size(), std::max(1u, std::thread::hardware_concurrency()));
  for (size_t h = 1; h < threads; ++h)
    helpers.emplace_back(work);
  work();
  for (auto& t : helpers)
    t.join();
  for (size_t i = 0; i < todo.size(); ++i) {
    linear_weight& x = *todo[i];
    if (x.type == dtype::bf16) {
      x.gemm_panels = reinterpret_cast<const uint16_t*>(base + offset[i]);
    } else {
      x.data = base + offset[i];
      x.layout = weight_layout::fp8_panels;
    }
  }
  return buffer;
}

}  // namespace moe::fast

MOE_FAST_TARGET_END
