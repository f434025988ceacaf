// tests/cuda/cases.hpp
// Inputs and comparisons shared by the CUDA tests: random RMSNorm and router cases, running
// them on a moe::backend, and the checks against the CPU reference.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/backend.hpp"

namespace moe::test {

inline constexpr float gap_sentinel = -12345.0f;  // between strided rows; must survive

struct norm_case {
  int64_t tokens = 0, dim = 0, stride = 0;  // stride 0 -> dim
  std::vector<float> x, weight;

  [[nodiscard]] int64_t row_stride() const { return stride == 0 ? dim : stride; }
  [[nodiscard]] rms_norm_params params(float* out) const {
    return {x.data(), weight.data(), out, tokens, dim, stride, 1e-6f};
  }
};

inline norm_case make_norm_case(int64_t tokens, int64_t dim, int64_t stride, uint32_t seed) {
  norm_case c{tokens, dim, stride, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  c.x.assign(static_cast<size_t>(tokens * c.row_stride()), gap_sentinel);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < dim; ++i)
      c.x[t * c.row_stride() + i] = normal(rng) * (1.0f + static_cast<float>(t % 5));
  c.weight.resize(static_cast<size_t>(dim));
  for (auto& w : c.weight)
    w = 1.0f + 0.25f * normal(rng);
  return c;
}

/// out (strided like x, gaps pre-filled with the sentinel), or x itself normalised in place.
inline std::vector<float> run_norm(backend& b, const norm_case& c, bool in_place) {
  if (in_place) {
    std::vector<float> buf = c.x;
    b.rms_norm({buf.data(), c.weight.data(), buf.data(), c.tokens, c.dim, c.stride, 1e-6f});
    return buf;
  }
  std::vector<float> out(c.x.size(), gap_sentinel);
  b.rms_norm(c.params(out.data()));
  return out;
}

/// Element-wise closeness (relative 1e-5) and normalised MSE below 1e-10; gaps untouched.
inline void check_norm_close(const norm_case& c, const std::vector<float>& got,
                             const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  double err = 0.0, ref = 0.0;
  int64_t bad = 0, bad_gap = 0;
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t i = 0; i < c.row_stride(); ++i) {
      const size_t k = static_cast<size_t>(t * c.row_stride() + i);
      if (i >= c.dim) {
        bad_gap += got[k] != gap_sentinel;
        continue;
      }
      const double d = static_cast<double>(got[k]) - want[k];
      err += d * d;
      ref += static_cast<double>(want[k]) * want[k];
      bad += std::fabs(d) > 1e-5 * std::max(1.0, std::fabs(static_cast<double>(want[k])));
    }
  CHECK(bad == 0);
  CHECK(bad_gap == 0);
  CHECK(err / std::max(ref, 1e-30) < 1e-10);
}

struct gate_case {
  std::vector<float> logits, bias;  // bias empty -> none
  int64_t tokens = 0, experts = 0, groups = 1, topk_group = 1, top_k = 1;
  bool norm = true;
  float scale = 1.0f;
};

/// DeepSeek-V3's router shape over `tokens` random tokens.
inline gate_case make_v3_gate_case(int64_t tokens, uint32_t seed) {
  gate_case c;
  c.tokens = tokens;
  c.experts = 256;
  c.groups = 8;
  c.topk_group = 4;
  c.top_k = 8;
  c.scale = 2.5f;
  std::mt19937 rng(seed);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  std::uniform_real_distribution<float> bias(-0.3f, 0.3f);
  c.logits.resize(static_cast<size_t>(tokens * c.experts));
  for (auto& v : c.logits)
    v = logit(rng);
  c.bias.resize(static_cast<size_t>(c.experts));
  for (auto& v : c.bias)
    v = bias(rng);
  return c;
}

/// model-spec 5.7's worked example: experts {3: 1.915212, 2: 0.584788}.
inline gate_case spec_gate_case() {
  gate_case c;
  c.logits = {0.0f, 1.0f, -1.0f, 2.0f, 0.5f, 0.5f, -2.0f, 3.0f};
  c.bias = {0.0f, 0.0f, 0.5f, 0.0f, 0.0f, 0.0f, 0.0f, -0.9f};
  c.tokens = 1;
  c.experts = 8;
  c.groups = 4;
  c.topk_group = 2;
  c.top_k = 2;
  c.scale = 2.5f;
  return c;
}

struct gate_result {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

inline moe_gate_params gate_params(const gate_case& c, gate_result& r) {
  r.ids.assign(static_cast<size_t>(c.tokens * c.top_k), -1);
  r.weights.assign(static_cast<size_t>(c.tokens * c.top_k), -1.0f);
  return {c.logits.data(), c.bias.empty() ? nullptr : c.bias.data(),
          r.ids.data(),    r.weights.data(),
          c.tokens,        c.experts,
          c.groups,        c.topk_group,
          c.top_k,         c.norm,
          c.scale};
}

inline gate_result run_gate(backend& b, const gate_case& c) {
  gate_result r;
  b.moe_gate(gate_params(c, r));
  return r;
}

/// Token t's (id, weight) pairs sorted by id: the comparison ignores the output order.
inline std::vector<std::pair<int32_t, float>> by_id(const gate_case& c, const gate_result& r, int64_t t) {
  std::vector<std::pair<int32_t, float>> v;
  for (int64_t k = 0; k < c.top_k; ++k)
    v.emplace_back(r.ids[t * c.top_k + k], r.weights[t * c.top_k + k]);
  std::sort(v.begin(), v.end());
  return v;
}

/// Same experts for every token; weights within 1e-6 (relative to max(1, |w|)). The order is
/// compared too: the CPU reference and the CUDA kernel both list the experts by biased score
/// descending, ties to the lower index.
inline void check_gate_close(const gate_case& c, const gate_result& got, const gate_result& want) {
  int64_t bad_ids = 0, bad_weights = 0;
  for (int64_t t = 0; t < c.tokens; ++t) {
    const auto g = by_id(c, got, t), w = by_id(c, want, t);
    for (size_t k = 0; k < g.size(); ++k) {
      bad_ids += g[k].first != w[k].first;
      bad_weights +=
        !(std::fabs(g[k].second - w[k].second) <= 1e-6f * std::max(1.0f, std::fabs(w[k].second)));
    }
  }
  CHECK(bad_ids == 0);
  CHECK(bad_weights == 0);
  CHECK(got.ids == want.ids);
}

/// The documented output order: biased score s + bias descending, ties to the lower index.
inline void check_gate_order(const gate_case& c, const gate_result& r) {
  int64_t bad = 0;
  for (int64_t t = 0; t < c.tokens; ++t)
    for (int64_t k = 1; k < c.top_k; ++k) {
      auto biased = [&](int32_t e) {
        const float s = 1.0f / (1.0f + std::exp(-c.logits[t * c.experts + e]));
        return c.bias.empty() ? s : s + c.bias[e];
      };
      const int32_t a = r.ids[t * c.top_k + k - 1], b = r.ids[t * c.top_k + k];
      bad += !(biased(a) > biased(b) || (biased(a) == biased(b) && a < b));
    }
  CHECK(bad == 0);
}

/// The spec's worked example, exactly as model-spec 5.7 prints it.
inline void check_spec_gate(const gate_result& r) {
  const gate_case c = spec_gate_case();
  const auto v = by_id(c, r, 0);
  REQUIRE(v.size() == 2);
  CHECK(v[0].first == 2);
  CHECK(v[0].second == doctest::Approx(0.584788).epsilon(2e-6));
  CHECK(v[1].first == 3);
  CHECK(v[1].second == doctest::Approx(1.915212).epsilon(2e-6));
}

}  // namespace moe::test
