// kernels/model/rope_tables.cpp
// YaRN rotation frequencies, the cos/sin attention factor and the MLA softmax scale
// (model-spec 5.3 and 5.4), computed once per model in fp64.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/model/forward.hpp"

namespace moe {

namespace {

// mscale(s, m) = 1 for s <= 1, else 0.1 * m * ln(s) + 1
double yarn_mscale(double scale, double m) { return scale <= 1.0 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; }

}  // namespace

rope_tables make_rope_tables(const model_config& cfg) {
  const int64_t d = cfg.qk_rope_head_dim;
  const double base = cfg.rope_theta;
  rope_tables tables;
  tables.inv_freq.resize(static_cast<size_t>(d / 2));
  double softmax_scale = 1.0 / std::sqrt(static_cast<double>(cfg.qk_head_dim()));
  const auto& yarn = cfg.rope_scaling;
  const bool use_yarn = yarn && yarn->type == "yarn";
  double low = 0.0, high = 0.0;
  if (use_yarn) {
    // corr(n) = d * ln(L0 / (n * 2 pi)) / (2 ln(base))
    auto corr = [&](double n) {
      return d * std::log(yarn->original_max_position_embeddings / (n * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(base));
    };
    low = std::max(std::floor(corr(yarn->beta_fast)), 0.0);
    high = std::min(std::ceil(corr(yarn->beta_slow)), static_cast<double>(d - 1));
    if (low == high)
      high += 0.001;
    tables.attention_factor = static_cast<float>(yarn_mscale(yarn->factor, yarn->mscale) /
                                                 yarn_mscale(yarn->factor, yarn->mscale_all_dim));
    if (yarn->mscale_all_dim != 0.0) {
      const double m = yarn_mscale(yarn->factor, yarn->mscale_all_dim);
      softmax_scale *= m * m;
    }
  }
  for (int64_t i = 0; i < d / 2; ++i) {
    const double f = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    double inv = f;
    if (use_yarn) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      inv = f / yarn->factor * ramp + f * (1.0 - ramp);
    }
    tables.inv_freq[i] = static_cast<float>(inv);
  }
  tables.softmax_scale = static_cast<float>(softmax_scale);
  return tables;
}

}  // namespace moe
