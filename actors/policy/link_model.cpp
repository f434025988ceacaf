// actors/policy/link_model.cpp
#include "actors/policy/link_model.hpp"

#include <algorithm>
#include <cassert>
#include <stdexcept>

namespace moe {

namespace {

using clock = link_model::clock;

clock::duration to_duration(double us) {
  return std::chrono::round<clock::duration>(std::chrono::duration<double, std::micro>(us));
}

/// Time the sender's port is occupied: bytes / bandwidth (0 when unlimited).
clock::duration serialization_time(const link_spec& spec, size_t num_bytes) {
  if (spec.bandwidth_gb_s <= 0.0)
    return clock::duration::zero();
  return to_duration(static_cast<double>(num_bytes) / (spec.bandwidth_gb_s * 1e3));  // bytes per µs
}

}  // namespace

link_model::link_model(link_model_config cfg, int64_t num_ranks) : cfg_(cfg), num_ranks_(num_ranks) {
  if (cfg_.ranks_per_node <= 0)
    throw std::invalid_argument("link_model: ranks_per_node must be positive");
  if (num_ranks_ <= 0)
    throw std::invalid_argument("link_model: num_ranks must be positive");
  busy_until_.assign(static_cast<size_t>(num_ranks_) * 2, clock::time_point::min());
}

bool link_model::same_node(int64_t a, int64_t b) const noexcept {
  return a / cfg_.ranks_per_node == b / cfg_.ranks_per_node;
}

const link_spec& link_model::spec_between(int64_t a, int64_t b) const noexcept {
  return same_node(a, b) ? cfg_.intra_node : cfg_.inter_node;
}

clock::duration link_model::transfer_time(int64_t src_rank, int64_t dst_rank, size_t num_bytes) const {
  if (src_rank == dst_rank)
    return clock::duration::zero();
  const link_spec& spec = spec_between(src_rank, dst_rank);
  return serialization_time(spec, num_bytes) + to_duration(spec.latency_us);
}

clock::time_point link_model::deliver_at(int64_t src_rank, int64_t dst_rank, size_t num_bytes,
                                         clock::time_point now) {
  assert(src_rank >= 0 && src_rank < num_ranks_ && dst_rank >= 0 && dst_rank < num_ranks_);
  if (src_rank == dst_rank)
    return now;
  const bool intra = same_node(src_rank, dst_rank);
  const link_spec& spec = intra ? cfg_.intra_node : cfg_.inter_node;
  const size_t port_idx = static_cast<size_t>(src_rank) * 2 + (intra ? 0 : 1);
  std::lock_guard lock(mutex_);
  clock::time_point& busy_until = busy_until_[port_idx];
  const clock::time_point departure = std::max(now, busy_until);
  busy_until = departure + serialization_time(spec, num_bytes);
  return busy_until + to_duration(spec.latency_us);
}

}  // namespace moe
