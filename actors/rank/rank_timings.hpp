// actors/rank/rank_timings.hpp
// What a rank's stream spent its time on, per stage, and how long its KV hand-offs took: added
// to by the work on the stream (atomics, no lock), read by the rank actor for stats. Counters
// since the rank started, as Prometheus wants them (rates and means are the scraper's job).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <vector>

namespace moe {

/// The parts of a rank's step its stream times: the pipeline's stages, sampling, and the time a
/// stage waited for peers' payloads before it could run (not part of the stage's own time).
enum class timed_part : uint8_t { attn_0, attn_1, shared, mlp, combine, logits, sample, peer_wait };
inline constexpr size_t num_timed_parts = 8;

/// "ATTN-0", "ATTN-1", "SHARED", "MLP", "COMBINE", "LOGITS", "SAMPLE", "PEER_WAIT", by index.
inline constexpr std::array<std::string_view, num_timed_parts> timed_part_names = {
  "ATTN-0", "ATTN-1", "SHARED", "MLP", "COMBINE", "LOGITS", "SAMPLE", "PEER_WAIT"};

/// Upper bounds (seconds) of the KV hand-off latency buckets; one more bucket holds the rest.
inline constexpr std::array<double, 14> kv_transfer_bounds = {
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0};

/// Wall-clock (system_clock) nanoseconds since the epoch: a time two processes agree on.
[[nodiscard]] inline int64_t wall_clock_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
           std::chrono::system_clock::now().time_since_epoch())
    .count();
}

class rank_timings {
 public:
  void add(timed_part part, int64_t nanoseconds) noexcept;
  /// A KV hand-off that took `seconds` from the prefill rank's send to its pages written here.
  void add_kv_transfer(double seconds) noexcept;

  /// Seconds per timed part, in timed_part order.
  [[nodiscard]] std::vector<double> part_seconds() const;
  /// Hand-offs per bucket of kv_transfer_bounds (not cumulative; the last: above the last bound).
  [[nodiscard]] std::vector<int64_t> kv_transfer_counts() const;
  [[nodiscard]] double kv_transfer_seconds() const noexcept;  // their sum

 private:
  std::array<std::atomic<int64_t>, num_timed_parts> part_ns_{};
  std::array<std::atomic<int64_t>, kv_transfer_bounds.size() + 1> kv_counts_{};
  std::atomic<int64_t> kv_ns_{0};
};

}  // namespace moe
