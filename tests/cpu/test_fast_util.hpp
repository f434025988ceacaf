// tests/cpu/test_fast_util.hpp
// Random weights in every stored dtype and error measures for the fast-vs-reference tests.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/backend.hpp"
#include "kernels/dtype.hpp"
#include "kernels/model/weights.hpp"

/// Ends a test case early, with a message, on a CPU without the fast path's instructions.
#define MOE_SKIP_WITHOUT_FAST_PATH()                                                          \
  if (!moe::cpu_fast_path_supported()) {                                                      \
    MESSAGE("skipped: this CPU lacks AVX-512 BF16, VBMI or GFNI, which the fast path needs"); \
    return;                                                                                   \
  }

namespace moe::test {

/// A linear_weight with its own storage.
struct owned_weight {
  std::vector<uint8_t> bytes;
  std::vector<float> scales;
  linear_weight w;
};

inline std::vector<float> random_floats(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v)
    x = dist(rng);
  return v;
}

/// Random [out, in] weight of `type`. FP8: uniformly random codes (every value but NaN, so zero
/// and subnormals appear) with random per-128x128-block scales.
inline std::unique_ptr<owned_weight> random_weight(dtype type, int64_t out, int64_t in, uint32_t seed) {
  auto o = std::make_unique<owned_weight>();
  const int64_t n = out * in;
  o->bytes.resize(static_cast<size_t>(n * dtype_size(type)));
  std::mt19937 rng(seed);
  const std::vector<float> values = random_floats(n, seed + 1, 1.0f / std::sqrt(float(in)));
  for (int64_t i = 0; i < n; ++i) {
    switch (type) {
      case dtype::f32: std::memcpy(&o->bytes[i * 4], &values[i], 4); break;
      case dtype::bf16: {
        const uint16_t b = f32_to_bf16(values[i]);
        std::memcpy(&o->bytes[i * 2], &b, 2);
        break;
      }
      case dtype::f16: {
        const uint16_t b = f32_to_f16(values[i]);
        std::memcpy(&o->bytes[i * 2], &b, 2);
        break;
      }
      case dtype::f8_e4m3: {
        uint8_t b = static_cast<uint8_t>(rng());
        if ((b & 0x7f) == 0x7f)
          b ^= 1;  // no NaN
        o->bytes[i] = b;
        break;
      }
      default: break;
    }
  }
  o->w = {.type = type, .data = o->bytes.data(), .out_features = out, .in_features = in};
  if (type == dtype::f8_e4m3) {
    const int64_t rows = (out + 127) / 128, cols = (in + 127) / 128;
    std::uniform_real_distribution<float> scale(0.2f, 1.0f);
    for (int64_t i = 0; i < rows * cols; ++i)
      o->scales.push_back(scale(rng) / 448.0f / std::sqrt(float(in)) * 8.0f);
    o->w.scale_inv = o->scales.data();
  }
  return o;
}

/// The same FP8 weight repacked into weight_layout::fp8_panels (its shape must fit), by the
/// layout's offset function, element by element.
inline std::unique_ptr<owned_weight> to_fp8_panels(const owned_weight& rm) {
  auto o = std::make_unique<owned_weight>(owned_weight{.bytes = rm.bytes, .scales = rm.scales, .w = rm.w});
  const int64_t out = rm.w.out_features, in = rm.w.in_features;
  for (int64_t r = 0; r < out; ++r)
    for (int64_t i = 0; i < in; ++i)
      o->bytes[static_cast<size_t>(fp8_panel_offset(r, i, in))] = rm.bytes[static_cast<size_t>(r * in + i)];
  o->w.data = o->bytes.data();
  o->w.scale_inv = o->scales.data();
  o->w.layout = weight_layout::fp8_panels;
  return o;
}

inline double rms(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v)
    s += double(x) * x;
  return std::sqrt(s / double(std::max<size_t>(1, v.size())));
}

/// max |a - b| / rms(b).
inline double max_rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    m = std::max(m, std::abs(double(a[i]) - b[i]));
  return m / std::max(rms(b), 1e-30);
}

/// rms(a - b) / rms(b).
inline double rms_rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i)
    s += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
  return std::sqrt(s / double(std::max<size_t>(1, a.size()))) / std::max(rms(b), 1e-30);
}

/// The two vectors hold the same floats, bit for bit.
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// The batch-1 FP8 GEMV of `w` (the codes and scales of `rm`, row-major, in any layout) checked
/// row by row against a by-hand sum: e4m3 value (0 for subnormal codes) times the activation
/// rounded to bf16, times the weight's block scale, summed in double; the kernels sum fp32
/// products of the same values per 128-column block and scale the block sums, so they agree to
/// 1e-6 of the sum of |terms|. Rows whose codes are all subnormal must come out exactly 0.
inline void check_fp8_gemv_by_hand(const owned_weight& rm, const std::vector<float>& got,
                                   const std::vector<float>& x) {
  const int64_t out = rm.w.out_features, in = rm.w.in_features;
  for (int64_t r = 0; r < out; ++r) {
    CAPTURE(r);
    double want = 0.0, size = 0.0;
    bool all_subnormal = true;
    for (int64_t i = 0; i < in; ++i) {
      const uint8_t code = rm.bytes[static_cast<size_t>(r * in + i)];
      const float scale = rm.scales[static_cast<size_t>((r / 128) * ((in + 127) / 128) + i / 128)];
      all_subnormal = all_subnormal && (code & 0x78) == 0;
      const double weight = (code & 0x78) == 0 ? 0.0 : fp8_e4m3_value(code);
      const double term = weight * bf16_to_f32(f32_to_bf16(x[static_cast<size_t>(i)])) * scale;
      want += term;
      size += std::abs(term);
    }
    if (all_subnormal)
      CHECK(got[static_cast<size_t>(r)] == 0.0f);
    else
      CHECK(std::abs(got[static_cast<size_t>(r)] - want) <= 1e-6 * size);
  }
}

/// y = x W^T for `tokens` rows through b.linear, into a buffer pre-filled with -7 so a row left
/// unwritten shows.
inline std::vector<float> run_linear(backend& b, const linear_weight& w, const std::vector<float>& x,
                                     int64_t tokens) {
  std::vector<float> out(static_cast<size_t>(tokens * w.out_features), -7.0f);
  b.linear({.x = x.data(), .w = &w, .out = out.data(), .num_tokens = tokens});
  return out;
}

}  // namespace moe::test
