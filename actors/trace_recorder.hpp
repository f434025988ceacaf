// actors/trace_recorder.hpp
// Chrome-trace recording of compute and communication spans per rank (as DeepSeek's
// profile-data), and the overlap summary benchmarks print: overlap is claimed only where the
// trace shows it (docs/ARCHITECTURE.md "Measure, don't assume"). No CAF.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace moe {

/// A rank's two lanes: its compute stream and its communication (dispatch/combine, KV transfer).
enum class trace_lane : uint8_t { compute, comm };

/// One busy interval on one lane of one rank, e.g. name "ATTN-0 mb1 L3", category "decode".
struct trace_span {
  int64_t rank = 0;
  trace_lane lane = trace_lane::compute;
  std::string name;
  std::string category;  // "decode", "prefill"
  std::chrono::steady_clock::time_point begin, end;
};

/// Collects spans from any thread; writes them as Trace Event Format JSON (chrome://tracing,
/// Perfetto): pid = rank, tid = lane (0 compute, 1 comm), ts/dur in µs from the earliest span.
class trace_recorder {
 public:
  explicit trace_recorder(bool enabled = true);

  /// When false every add() is a no-op; callers may skip building spans.
  [[nodiscard]] bool enabled() const noexcept;
  /// The process name shown for `rank`, e.g. "prefill_rank 0" (default "rank N").
  void name_rank(int64_t rank, std::string name);
  void add(trace_span span);
  /// A copy of all spans, sorted by begin.
  [[nodiscard]] std::vector<trace_span> spans() const;
  /// Throws std::runtime_error when `file` cannot be written.
  void write_json(const std::filesystem::path& file) const;
  [[nodiscard]] std::string to_json() const;

 private:
  const bool enabled_;
  mutable std::mutex mutex_;
  std::vector<trace_span> spans_;
  std::map<int64_t, std::string> rank_names_;
};

/// Busy time of lanes within a window, in seconds.
struct lane_summary {
  double wall_s = 0;     // to - from
  double compute_s = 0;  // union of compute spans (overlaps counted once)
  double comm_s = 0;     // union of comm spans
  double overlap_s = 0;  // time both lanes are busy (intersection of the two unions)
};

/// One rank's lanes over [from, to); spans partially outside the window are clipped.
[[nodiscard]] lane_summary summarize(const std::vector<trace_span>& spans, int64_t rank,
                                     std::chrono::steady_clock::time_point from,
                                     std::chrono::steady_clock::time_point to);
/// Summed over every rank that has a span in `spans` (so wall_s = num_ranks * (to - from)).
[[nodiscard]] lane_summary summarize_all(const std::vector<trace_span>& spans,
                                         std::chrono::steady_clock::time_point from,
                                         std::chrono::steady_clock::time_point to);

}  // namespace moe
