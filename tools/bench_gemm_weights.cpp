// tools/bench_gemm_weights.cpp
#include "tools/bench_gemm_weights.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "kernels/cpu/fast_weights.hpp"

namespace moe::tools {

std::unique_ptr<bench_weight> make_bench_weight(dtype type, int64_t out, int64_t in, uint64_t seed) {
  auto b = std::make_unique<bench_weight>();
  const int64_t n = out * in * dtype_size(type);
  b->bytes.resize(static_cast<size_t>(n));
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int64_t i = 0; i + 8 <= n; i += 8) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    uint64_t v = s;
    if (type == dtype::bf16)
      v = (v & 0x807f807f807f807full) | 0x3c003c003c003c00ull;
    else
      v &= 0xf7f7f7f7f7f7f7f7ull;  // exponent <= 14: never NaN
    std::memcpy(b->bytes.data() + i, &v, 8);
  }
  b->w = {.type = type, .data = b->bytes.data(), .out_features = out, .in_features = in};
  if (type == dtype::f8_e4m3) {
    b->scales.assign(static_cast<size_t>(((out + 127) / 128) * ((in + 127) / 128)), 1e-3f);
    b->w.scale_inv = b->scales.data();
    auto panels = fast::pad_fp8_panels(b->w);
    b->w.data = panels.get();
    b->w.layout = weight_layout::fp8_panels;
    b->laid_out = std::move(panels);
  } else {
    auto panels = fast::pack_gemm_panels(b->w);
    b->w.gemm_panels = panels.get();
    b->laid_out = std::move(panels);
  }
  return b;
}

double time_linear(backend& dev, const std::vector<std::unique_ptr<bench_weight>>& ws, int64_t m,
                   int64_t calls) {
  using clock_type = std::chrono::steady_clock;
  const linear_weight& w0 = ws.front()->w;
  std::vector<float> x(static_cast<size_t>(m * w0.in_features), 0.5f);
  std::vector<float> y(static_cast<size_t>(m * w0.out_features));
  auto call = [&](int64_t i) {
    dev.linear({.x = x.data(), .w = &ws[i % ws.size()]->w, .out = y.data(), .num_tokens = m});
  };
  for (size_t i = 0; i < ws.size(); ++i)
    call(static_cast<int64_t>(i));  // warm up: page in, grow scratch
  double best = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    const auto start = clock_type::now();
    for (int64_t i = 0; i < calls; ++i)
      call(i);
    best = std::min(best, std::chrono::duration<double>(clock_type::now() - start).count() /
                            static_cast<double>(calls));
  }
  return best;
}

std::span<const gemm_shape> prefill_gemm_shapes() {
  static constexpr gemm_shape shapes[] = {
    {"dense gate/up  [2816,1024] x 512", 2816, 1024, 512},
    {"dense down     [1024,2816] x 512", 1024, 2816, 512},
    {"o_proj         [1024,1024] x 512", 1024, 1024, 512},
    {"q_b_proj       [1536, 384] x 512", 1536, 384, 512},
    {"expert gate/up [ 256,1024] x  64", 256, 1024, 64},
    {"expert down    [1024, 256] x  64", 1024, 256, 64},
  };
  return shapes;
}

}  // namespace moe::tools
