// kernels/sampling/logprobs.cpp
// log_softmax(x)_i = x_i - lse(x), lse(x) = m + log(sum_j exp(x_j - m)) with m = max_j x_j:
// every exponent is <= 0, so the sum lies in [1, vocab] whatever the logits' scale.
#include "kernels/sampling/logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace moe {
namespace {

constexpr double neg_inf = -std::numeric_limits<double>::infinity();

double value_of(float logit) { return std::isnan(logit) ? neg_inf : static_cast<double>(logit); }

double log_sum_exp(std::span<const float> logits) {
  double max_logit = neg_inf;
  for (float x : logits)
    max_logit = std::max(max_logit, value_of(x));
  if (!std::isfinite(max_logit))
    return max_logit;  // all -inf, or a +inf logit
  double sum = 0.0;
  for (float x : logits)
    sum += std::exp(value_of(x) - max_logit);
  return max_logit + std::log(sum);
}

}  // namespace

token_logprobs logprobs_of(std::span<const float> logits, int32_t token_id, int32_t num_top) {
  const double lse = log_sum_exp(logits);
  const auto logprob = [&](int32_t id) {
    return static_cast<float>(value_of(logits[static_cast<size_t>(id)]) - lse);
  };
  token_logprobs out{.token_id = token_id, .logprob = logprob(token_id), .top = {}};
  const size_t n = std::min(logits.size(), static_cast<size_t>(std::max(num_top, 0)));
  if (n == 0)
    return out;
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int32_t a, int32_t b) {
                      const double va = value_of(logits[static_cast<size_t>(a)]);
                      const double vb = value_of(logits[static_cast<size_t>(b)]);
                      return va != vb ? va > vb : a < b;
                    });
  out.top.reserve(n);
  for (size_t i = 0; i < n; ++i)
    out.top.push_back({ids[i], logprob(ids[i])});
  return out;
}

picked_token pick_token(sampler& pick, std::span<const float> logits, std::optional<int32_t> num_top) {
  picked_token out{.token_id = pick.sample(logits), .logprobs = {}};
  pick.accept(out.token_id);
  if (num_top)
    out.logprobs.push_back(logprobs_of(logits, out.token_id, *num_top));
  return out;
}

}  // namespace moe
