// kernels/sampling/sampler.cpp
// vLLM-style sampling of one logits row: repetition / presence / frequency penalties, then
// greedy argmax (temperature 0) or temperature -> min-p -> top-k -> top-p -> an inverse-CDF
// draw from a seeded std::mt19937_64. The order is vLLM v1's: min-p is a logits processor run on
// the tempered row before the top-k/top-p sampler (v0 ran min-p last), so top-p's running sum is
// over the tokens min-p kept, renormalised. A temperature in (0, 0.01) is raised to 0.01, as
// vLLM's SamplingParams does (smaller ones overflow the tempered logits), so only 0 is greedy.
#include "kernels/sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace moe {
namespace {

constexpr float sampling_eps = 1e-5f;     // vLLM _SAMPLING_EPS: below this temperature is greedy
constexpr float min_temperature = 1e-2f;  // vLLM _MAX_TEMP: (0, this) is raised to this
constexpr float neg_inf = -std::numeric_limits<float>::infinity();

std::string field_error(const char* field, const char* rule, double got) {
  std::ostringstream out;
  out << field << " must be " << rule << ", got " << got << ".";
  return out.str();
}

/// Lowest index of the largest value; NaN never wins. Returns 0 if every entry is NaN. Two
/// passes: the largest value over 16 independent lanes (the compiler vectorises it; a running
/// index does not), then its first index.
int32_t argmax_lowest(std::span<const float> v) {
  constexpr size_t lanes = 16;
  float lane_max[lanes];
  std::fill_n(lane_max, lanes, neg_inf);
  size_t i = 0;
  for (; i + lanes <= v.size(); i += lanes)
    for (size_t j = 0; j < lanes; ++j)
      lane_max[j] = v[i + j] > lane_max[j] ? v[i + j] : lane_max[j];  // NaN compares false
  float best = neg_inf;
  for (const float m : lane_max)
    best = m > best ? m : best;
  for (; i < v.size(); ++i)
    best = v[i] > best ? v[i] : best;
  for (size_t k = 0; k < v.size(); ++k)
    if (v[k] == best)
      return static_cast<int32_t>(k);
  return 0;  // every entry NaN
}

/// Uniform double in [0, 1) from the top 53 bits of one 64-bit draw (library-independent).
double uniform01(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

uint64_t random_seed() {
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ static_cast<uint64_t>(rd());
}

/// Keeps the k largest logits (all ties with the k-th value survive, as vLLM's threshold does).
void apply_top_k(std::vector<float>& logits, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= logits.size())
    return;
  std::vector<float> tmp(logits);
  std::nth_element(tmp.begin(), tmp.begin() + (k - 1), tmp.end(), std::greater<float>());
  const float threshold = tmp[static_cast<size_t>(k - 1)];
  for (float& x : logits)
    if (x < threshold)
      x = neg_inf;
}

/// Softmax of `logits` in double (masked entries -> 0). Requires a finite maximum.
std::vector<double> softmax(const std::vector<float>& logits, float max_logit) {
  std::vector<double> p(logits.size(), 0.0);
  double sum = 0.0;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (logits[i] == neg_inf)
      continue;
    p[i] = std::exp(static_cast<double>(logits[i]) - static_cast<double>(max_logit));
    sum += p[i];
  }
  for (double& x : p)
    x /= sum;
  return p;
}

/// Keeps the smallest set of most probable tokens whose total probability is >= top_p (at least
/// one token). Ties in probability are taken in increasing token id.
void apply_top_p(std::vector<float>& logits, const std::vector<double>& probs, float top_p) {
  if (top_p >= 1.0f)
    return;
  std::vector<int32_t> order;
  for (size_t i = 0; i < probs.size(); ++i)
    if (probs[i] > 0.0)
      order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(),
            [&](int32_t a, int32_t b) { return probs[a] != probs[b] ? probs[a] > probs[b] : a < b; });
  double cum = 0.0;
  size_t keep = 0;
  while (keep < order.size()) {
    cum += probs[static_cast<size_t>(order[keep])];
    ++keep;
    if (cum >= static_cast<double>(top_p))
      break;
  }
  for (size_t j = keep; j < order.size(); ++j)
    logits[static_cast<size_t>(order[j])] = neg_inf;
}

/// Drops tokens whose probability is below min_p times the largest probability.
void apply_min_p(std::vector<float>& logits, const std::vector<double>& probs, float min_p) {
  if (min_p <= 0.0f)
    return;
  const double cut = static_cast<double>(min_p) * *std::max_element(probs.begin(), probs.end());
  for (size_t i = 0; i < probs.size(); ++i)
    if (probs[i] < cut)
      logits[i] = neg_inf;
}

}  // namespace

std::string validate(const sampling_params& p) {
  if (!(p.temperature >= 0.0f && std::isfinite(p.temperature)))
    return field_error("temperature", "a finite non-negative number", p.temperature);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    return field_error("top_p", "in (0, 1]", p.top_p);
  if (p.top_k < -1)
    return field_error("top_k", "-1 (disable), 0 (disable) or at least 1", p.top_k);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    return field_error("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty)))
    return field_error("repetition_penalty", "a finite number greater than zero", p.repetition_penalty);
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    return field_error("presence_penalty", "in [-2, 2]", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    return field_error("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  if (p.max_tokens < 1)
    return field_error("max_tokens", "at least 1", p.max_tokens);
  if (p.logprobs && *p.logprobs < 0)
    return field_error("logprobs", "at least 0", *p.logprobs);
  return "";
}

sampler::sampler(sampling_params params, const std::vector<int32_t>& prompt_ids)
    : params_(std::move(params)), rng_(params_.seed ? *params_.seed : random_seed()),
      prompt_ids_(prompt_ids) {
  if (params_.temperature > 0.0f && params_.temperature < min_temperature)
    params_.temperature = min_temperature;
}

void sampler::accept(int32_t token_id) {
  if (token_id < 0)
    return;
  ++output_counts_[token_id];
  if (static_cast<size_t>(token_id) < seen_.size())
    seen_[static_cast<size_t>(token_id)] = 1;
}

void sampler::resume_after(std::span<const int32_t> generated) {
  for (const int32_t id : generated)
    accept(id);
  if (params_.temperature >= sampling_eps)
    rng_.discard(generated.size());
}

int32_t sampler::sample(std::span<const float> logits) {
  const bool penalties = params_.repetition_penalty != 1.0f || params_.presence_penalty != 0.0f ||
                         params_.frequency_penalty != 0.0f;
  if (params_.temperature < sampling_eps && !penalties) {  // greedy reads the row as it is
    if (logits.empty())
      throw std::invalid_argument("sampler::sample: empty logits row");
    return argmax_lowest(logits);
  }
  std::vector<float> row(logits.begin(), logits.end());
  return sample(row);
}

int32_t sampler::sample(std::vector<float>& logits) {
  if (logits.empty())
    throw std::invalid_argument("sampler::sample: empty logits row");
  const size_t vocab = logits.size();

  // Penalties (vLLM): repetition over prompt + output tokens, presence/frequency over output.
  if (params_.repetition_penalty != 1.0f) {
    if (seen_.size() != vocab) {
      seen_.assign(vocab, 0);
      for (int32_t t : prompt_ids_)
        if (t >= 0 && static_cast<size_t>(t) < vocab)
          seen_[static_cast<size_t>(t)] = 1;
      for (const auto& [t, n] : output_counts_)
        if (static_cast<size_t>(t) < vocab)
          seen_[static_cast<size_t>(t)] = 1;
    }
    const float rp = params_.repetition_penalty;
    for (size_t i = 0; i < vocab; ++i)
      if (seen_[i])
        logits[i] = logits[i] > 0.0f ? logits[i] / rp : logits[i] * rp;
  }
  if (params_.presence_penalty != 0.0f || params_.frequency_penalty != 0.0f) {
    for (const auto& [t, n] : output_counts_) {
      if (static_cast<size_t>(t) >= vocab || n <= 0)
        continue;
      logits[static_cast<size_t>(t)] -= params_.frequency_penalty * static_cast<float>(n) +
                                        params_.presence_penalty;
    }
  }

  if (params_.temperature < sampling_eps)
    return argmax_lowest(logits);

  for (float& x : logits) {
    if (std::isnan(x))
      x = neg_inf;  // a NaN logit can never be drawn
    x /= params_.temperature;
  }
  const int32_t best = argmax_lowest(logits);
  const float max_logit = logits[static_cast<size_t>(best)];
  if (!std::isfinite(max_logit))
    return best;  // all -inf, or a +inf logit: nothing to draw

  if (params_.min_p > 0.0f)
    apply_min_p(logits, softmax(logits, max_logit), params_.min_p);
  apply_top_k(logits, params_.top_k);
  if (params_.top_p < 1.0f)
    apply_top_p(logits, softmax(logits, max_logit), params_.top_p);

  // Inverse CDF over the surviving tokens in id order.
  const std::vector<double> probs = softmax(logits, max_logit);
  const double u = uniform01(rng_);
  double cum = 0.0;
  int32_t last = best;
  for (size_t i = 0; i < vocab; ++i) {
    if (probs[i] <= 0.0)
      continue;
    cum += probs[i];
    last = static_cast<int32_t>(i);
    if (u < cum)
      return last;
  }
  return last;  // rounding left cum just below u: the last surviving token
}

const char* to_string(finish_reason r) noexcept {
  switch (r) {
    case finish_reason::stop: return "stop";
    case finish_reason::length: return "length";
    case finish_reason::abort: return "abort";
    case finish_reason::error: return "error";
    case finish_reason::none: return "none";
  }
  return "none";
}

}  // namespace moe
