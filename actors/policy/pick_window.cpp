// actors/policy/pick_window.cpp
#include "actors/policy/pick_window.hpp"

#include <algorithm>
#include <stdexcept>

#include "actors/policy/expert_load_window.hpp"  // balancedness

namespace moe {

pick_window::pick_window(int64_t num_ranks, size_t capacity) : num_ranks_(num_ranks), capacity_(capacity) {
  if (num_ranks <= 0 || capacity == 0)
    throw std::invalid_argument("pick_window: needs ranks > 0 and capacity > 0");
  ring_.reserve(capacity);
}

void pick_window::add(int64_t rank, double load) {
  if (rank < 0 || rank >= num_ranks_)
    return;
  if (ring_.size() < capacity_)
    return ring_.push_back({rank, load});
  ring_[next_] = {rank, load};
  next_ = (next_ + 1) % capacity_;
}

balance_report pick_window::report() const {
  balance_report r;
  r.num_picks = static_cast<int64_t>(ring_.size());
  r.per_rank.assign(static_cast<size_t>(num_ranks_), 0.0);
  for (const pick& p : ring_)
    r.per_rank[static_cast<size_t>(p.rank)] += p.load;
  double sum = 0.0;
  for (const double l : r.per_rank)
    sum += l;
  r.mean = sum / static_cast<double>(num_ranks_);
  r.max = *std::max_element(r.per_rank.begin(), r.per_rank.end());
  r.balancedness = balancedness(r.per_rank);
  return r;
}

}  // namespace moe
