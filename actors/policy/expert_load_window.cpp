// actors/policy/expert_load_window.cpp
#include "actors/policy/expert_load_window.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moe {

expert_load_window::expert_load_window(int64_t num_layers, int64_t num_experts, int64_t window_steps,
                                       int64_t num_buckets)
    : num_layers_(num_layers), num_experts_(num_experts), window_steps_(window_steps),
      num_buckets_(num_buckets) {
  if (num_layers < 0 || num_experts <= 0 || num_buckets <= 0)
    throw std::invalid_argument("expert_load_window: needs layers >= 0, experts > 0 and buckets > 0");
  reset(window_steps);
}

void expert_load_window::reset(int64_t window_steps) {
  if (window_steps <= 0)
    throw std::invalid_argument("expert_load_window: window_steps must be > 0, got " +
                                std::to_string(window_steps));
  window_steps_ = window_steps;
  const int64_t buckets = std::min(num_buckets_, window_steps);
  bucket_steps_ = (window_steps + buckets - 1) / buckets;
  ring_.assign(static_cast<size_t>(buckets),
               bucket{std::vector<int64_t>(static_cast<size_t>(num_layers_ * num_experts_), 0), 0});
  newest_ = 0;
}

void expert_load_window::add_step(std::span<const int64_t> counts) {
  if (static_cast<int64_t>(counts.size()) != num_layers_ * num_experts_)
    throw std::invalid_argument("expert_load_window: a step's counts must be num_layers * num_experts");
  if (ring_[newest_].steps == bucket_steps_) {  // full: the oldest bucket makes room
    newest_ = (newest_ + 1) % ring_.size();
    std::fill(ring_[newest_].counts.begin(), ring_[newest_].counts.end(), 0);
    ring_[newest_].steps = 0;
  }
  bucket& b = ring_[newest_];
  for (size_t i = 0; i < counts.size(); ++i)
    b.counts[i] += counts[i];
  ++b.steps;
}

matrix<int64_t> expert_load_window::total() const {
  matrix<int64_t> out(num_layers_, num_experts_, 0);
  for (const bucket& b : ring_)
    for (size_t i = 0; i < b.counts.size(); ++i)
      out.data[i] += b.counts[i];
  return out;
}

int64_t expert_load_window::steps_covered() const noexcept {
  int64_t steps = 0;
  for (const bucket& b : ring_)
    steps += b.steps;
  return steps;
}

double balancedness(std::span<const double> rank_tokens) {
  if (rank_tokens.empty())
    return 0.0;
  double sum = 0.0, most = 0.0;
  for (const double t : rank_tokens) {
    sum += t;
    most = std::max(most, t);
  }
  return most > 0.0 ? sum / static_cast<double>(rank_tokens.size()) / most : 0.0;
}

std::vector<double> tokens_per_rank(std::span<const double> expert_tokens,
                                    std::span<const int32_t> slot_expert, int64_t num_ranks) {
  std::vector<double> out(static_cast<size_t>(num_ranks), 0.0);
  if (num_ranks <= 0 || slot_expert.empty())
    return out;
  std::vector<int64_t> replicas(expert_tokens.size(), 0);
  for (const int32_t e : slot_expert)
    if (e >= 0 && static_cast<size_t>(e) < replicas.size())
      ++replicas[static_cast<size_t>(e)];
  const size_t per_rank = slot_expert.size() / static_cast<size_t>(num_ranks);
  for (size_t s = 0; s < slot_expert.size(); ++s) {
    const int32_t e = slot_expert[s];
    if (e >= 0 && static_cast<size_t>(e) < replicas.size())
      out[s / per_rank] += expert_tokens[static_cast<size_t>(e)] /
                           static_cast<double>(replicas[static_cast<size_t>(e)]);
  }
  return out;
}

}  // namespace moe
