// actors/policy/expert_load_window.hpp
// Tokens routed to each logical expert of each MoE layer (counted where the gate chose them,
// before a replica is picked) over a sliding window of steps: what EPLB plans from. The window
// is kept as a ring of buckets of whole steps, so its memory does not grow with its length
// (DeepSeek-V3: 58 layers x 256 experts x 8 buckets of int64: 0.9 MB): the total covers the
// last window_steps steps to within one bucket (from window - bucket + 1 up to window steps).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "actors/policy/eplb.hpp"  // matrix

namespace moe {

class expert_load_window {
 public:
  /// Throws std::invalid_argument unless every argument is > 0 (num_layers may be 0: no MoE).
  expert_load_window(int64_t num_layers, int64_t num_experts, int64_t window_steps, int64_t num_buckets = 8);

  /// One step's counts, [num_layers * num_experts] row-major; ends the step.
  void add_step(std::span<const int64_t> counts);
  /// Starts over with another window length (the counts so far are dropped).
  void reset(int64_t window_steps);

  /// The counts over the window, [num_layers, num_experts].
  [[nodiscard]] matrix<int64_t> total() const;
  /// Steps the total covers now.
  [[nodiscard]] int64_t steps_covered() const noexcept;
  [[nodiscard]] int64_t window_steps() const noexcept { return window_steps_; }
  [[nodiscard]] int64_t num_layers() const noexcept { return num_layers_; }
  [[nodiscard]] int64_t num_experts() const noexcept { return num_experts_; }

 private:
  struct bucket {
    std::vector<int64_t> counts;
    int64_t steps = 0;
  };
  int64_t num_layers_, num_experts_, window_steps_, num_buckets_, bucket_steps_ = 1;
  std::vector<bucket> ring_;  // ring_[newest_] fills; the others are full or not used yet
  size_t newest_ = 0;
};

/// Per-rank balance of one layer's routed load: mean over ranks / max over ranks (1: even; 0
/// when nothing was routed). `rank_tokens` [num_ranks].
[[nodiscard]] double balancedness(std::span<const double> rank_tokens);

/// Tokens each rank of an EP group receives for one layer under `placement`-like slot tables:
/// a logical expert's count split evenly over its replicas. slot_expert [num_ranks * slots_per_rank].
[[nodiscard]] std::vector<double> tokens_per_rank(std::span<const double> expert_tokens,
                                                  std::span<const int32_t> slot_expert, int64_t num_ranks);

}  // namespace moe
