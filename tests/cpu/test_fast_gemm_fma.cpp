// tests/cpu/test_fast_gemm_fma.cpp
// The GEMM's FMA tiles (kernels/cpu/fast_gemm_fma.cpp) and the vdpbf16ps kernels both against
// VDPBF16PS as Intel's SDM defines it, emulated here lane by lane: per column pair, the odd
// column's product then the even one's, each a round-to-nearest fused multiply-add into fp32,
// subnormal inputs read as zero and subnormal results flushed to zero. The inputs sit where the
// flushes decide the result: products near fp32's smallest normal, subnormal weights against
// large activations, and sums that cancel.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/fast_backend.hpp"
#include "kernels/cpu/fast_linear.hpp"
#include "kernels/cpu/fast_weights.hpp"
#include "test_fast_util.hpp"

using namespace moe;

namespace {

[[nodiscard]] float flush(float v) { return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v; }

// VDPBF16PS's sums for one output: the activations rounded to bf16, as the kernels' inputs.
float vdpbf16ps_by_hand(const float* x, const uint16_t* w, int64_t in) {
  float acc = 0.0f;
  for (int64_t kp = 0; 2 * kp < in; ++kp)
    for (const int64_t i : {2 * kp + 1, 2 * kp}) {
      // vcvtneps2bf16 reads an fp32 subnormal as zero, as the kernels round the activations
      const float a = i < in ? flush(bf16_to_f32(f32_to_bf16(flush(x[i])))) : 0.0f;
      const float b = i < in ? flush(bf16_to_f32(w[i])) : 0.0f;
      acc = flush(std::fma(a, b, acc));
    }
  return acc;
}

}  // namespace

TEST_CASE("fast: the GEMM's FMA tiles sum as vdpbf16ps, subnormal inputs and results flushed") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  // 3 panels, the last short; an odd width of 301 column pairs, past one 256-pair chunk of the
  // widened panel (sums stored and reloaded); exactly the rows where the FMA tiles start
  const int64_t out = 150, in = 601;
  const int64_t rows = fast::fma_min_rows;
  REQUIRE(rows >= 3);
  // Weight rows by kind: r % 3 == 0 subnormal bf16 codes, 1 tiny (~2^-63), 2 ordinary.
  std::vector<uint16_t> wbits(static_cast<size_t>(out * in));
  const std::vector<float> g = test::random_floats(out * in, 7u);
  for (int64_t r = 0; r < out; ++r)
    for (int64_t i = 0; i < in; ++i) {
      const float v = g[static_cast<size_t>(r * in + i)];
      const size_t at = static_cast<size_t>(r * in + i);
      if (r % 3 == 0)
        wbits[at] = static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | (1 + (r * 31 + i) % 127));
      else
        wbits[at] = f32_to_bf16(r % 3 == 1 ? std::ldexp(v, -63) : v / 16.0f);
    }
  linear_weight w{.type = dtype::bf16, .data = wbits.data(), .out_features = out, .in_features = in};
  const std::shared_ptr<const uint16_t> packed = fast::pack_gemm_panels(w);
  // Activation rows by kind: m % 3 == 0 tiny (~2^-63, products with tiny weights around 2^-126),
  // 1 large (2^100: subnormal weights give normal products unless read as zero), 2 ordinary.
  std::vector<float> x = test::random_floats(rows * in, 9u);
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t i = 0; i < in; ++i) {
      float& v = x[static_cast<size_t>(m * in + i)];
      v = m % 3 == 0 ? std::ldexp(v, -63) : m % 3 == 1 ? std::ldexp(v, 100) : v;
    }
  std::vector<float> want(static_cast<size_t>(rows * out));
  int64_t zero_by_flush = 0;
  for (int64_t m = 0; m < rows; ++m)
    for (int64_t r = 0; r < out; ++r) {
      want[static_cast<size_t>(m * out + r)] = vdpbf16ps_by_hand(&x[m * in], &wbits[r * in], in);
      zero_by_flush += want[static_cast<size_t>(m * out + r)] == 0.0f;
    }
  CHECK(zero_by_flush >= 2 * out);  // the flushes decide many outputs
  cpu_fast_backend fast(2);
  for (const uint16_t* panels : {static_cast<const uint16_t*>(nullptr), packed.get()}) {
    CAPTURE(panels != nullptr);
    w.gemm_panels = panels;
    const std::vector<float> together = test::run_linear(fast, w, x, rows);  // FMA tiles
    CHECK(test::same_bits(together, want));
    for (int64_t m = 0; m < rows; ++m) {  // one row: the vdpbf16ps kernels
      CAPTURE(m);
      const std::vector<float> alone =
        test::run_linear(fast, w, std::vector<float>(x.begin() + m * in, x.begin() + (m + 1) * in), 1);
      CHECK(std::memcmp(alone.data(), want.data() + m * out, out * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("fast: the FMA tiles round to nearest whatever the caller's MXCSR, and give zeros for no inputs") {
  MOE_SKIP_WITHOUT_FAST_PATH();
  const int64_t out = 64, in = 96, rows = fast::fma_min_rows;
  const auto w = test::random_weight(dtype::bf16, out, in, 21u);
  const std::vector<float> x = test::random_floats(rows * in, 23u);
  std::vector<const float*> ptrs;
  for (int64_t m = 0; m < rows; ++m)
    ptrs.push_back(x.data() + m * in);
  fast::thread_scratch s;
  auto run = [&](int64_t n, int64_t k, const linear_weight& wt) {  // on this thread
    std::vector<float> y(static_cast<size_t>(n * out), -7.0f);
    fast::linear_rows({.num_rows = n, .k = k, .f32 = ptrs.data()}, wt, 0, out, y.data(), out, s);
    return y;
  };
  const unsigned saved = _mm_getcsr();
  _mm_setcsr((saved & ~0x6000u) | 0x4000u);                 // round down
  const std::vector<float> together = run(rows, in, w->w);  // FMA tiles
  std::vector<float> alone;
  for (int64_t m = 0; m < rows; ++m) {  // one row: vdpbf16ps
    ptrs[0] = x.data() + m * in;
    const std::vector<float> y = run(1, in, w->w);
    alone.insert(alone.end(), y.begin(), y.end());
  }
  _mm_setcsr(saved);
  CHECK(_mm_getcsr() == saved);
  CHECK(test::same_bits(together, alone));
  linear_weight empty = w->w;
  empty.in_features = 0;
  for (int64_t m = 0; m < rows; ++m)
    ptrs[static_cast<size_t>(m)] = x.data() + m * in;
  const std::vector<float> zeros = run(rows, 0, empty);
  CHECK(std::all_of(zeros.begin(), zeros.end(), [](float v) { return v == 0.0f; }));
}
