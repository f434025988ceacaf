// actors/policy/link_model.hpp
// Injected cost of cross-rank messages, so compute/communication overlap shows on a CPU where
// in-process sends are nearly free (docs/ARCHITECTURE.md "Measure, don't assume").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "config/link_spec.hpp"

namespace moe {

/// Ranks are grouped into nodes (node = rank / ranks_per_node); same-node messages use
/// `intra_node`, others `inter_node`.
struct link_model_config {
  int64_t ranks_per_node = 8;
  link_spec intra_node, inter_node;
  // Benchmarks: only even EP steps' messages take the link, odd steps' go at once, so one run
  // holds neighbouring steps with and without it (bench-cluster --overlap).
  bool even_steps_only = false;
};

/// Delivery times of messages between ranks. Each sender has one port per link class
/// (intra/inter) that sends one message at a time: a message departs at
/// max(now, port busy_until), occupies the port for bytes/bandwidth, and arrives `latency` after
/// it leaves the port. Thread-safe.
class link_model {
 public:
  using clock = std::chrono::steady_clock;

  /// Throws std::invalid_argument unless ranks_per_node > 0 and num_ranks > 0.
  link_model(link_model_config cfg, int64_t num_ranks);

  /// When a message of `num_bytes` sent from `src_rank` to `dst_rank` at `now` arrives; reserves
  /// the sender's port. src == dst: `now` (no link involved).
  [[nodiscard]] clock::time_point deliver_at(int64_t src_rank, int64_t dst_rank, size_t num_bytes,
                                             clock::time_point now);
  /// Pure cost of one message on an idle link (no reservation): latency + bytes/bandwidth.
  [[nodiscard]] clock::duration transfer_time(int64_t src_rank, int64_t dst_rank, size_t num_bytes) const;
  [[nodiscard]] bool same_node(int64_t a, int64_t b) const noexcept;
  /// Whether the messages of EP step `step` take the link (all steps unless even_steps_only).
  [[nodiscard]] bool carries(int64_t step) const noexcept { return !cfg_.even_steps_only || step % 2 == 0; }

 private:
  [[nodiscard]] const link_spec& spec_between(int64_t a, int64_t b) const noexcept;

  link_model_config cfg_;
  int64_t num_ranks_;
  std::mutex mutex_;
  std::vector<clock::time_point> busy_until_;  // [num_ranks, 2]: per sender, intra then inter port
};

}  // namespace moe
