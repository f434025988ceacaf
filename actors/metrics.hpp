// actors/metrics.hpp
// Aggregates what finished requests report (DeepSeek's production statistics: input tokens,
// prefix-cache hits, output tokens, output speed per request) since start and over a recent
// window; answers stats for the `stats` RPC and benchmarks.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>

#include "actors/atoms.hpp"
#include "kernels/model/output_text.hpp"

namespace moe {

/// One finished request, as its session saw it.
struct request_record {
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;  // prefix-cache hits (zero until a prefix cache exists)
  int64_t num_output_tokens = 0;
  double ttft_s = 0.0;   // session start -> first output token
  double total_s = 0.0;  // session start -> final answer
  finish_reason reason = finish_reason::none;
};

/// Totals over a span of time.
struct usage_totals {
  int64_t num_requests = 0;
  int64_t num_errors = 0;  // finish_reason::error
  int64_t num_aborted = 0;
  int64_t num_input_tokens = 0;
  int64_t num_cached_tokens = 0;
  int64_t num_output_tokens = 0;
  double mean_ttft_s = 0.0;
  double mean_output_tok_per_s = 0.0;  // per request, after its first token
};

struct metrics_snapshot {
  usage_totals since_start;
  usage_totals window;  // the last window_s seconds
  double window_s = 0.0;
  double uptime_s = 0.0;
};

using metrics_actor = caf::typed_actor<
  // A request ended.
  caf::reacts_to<done_atom, request_record>,
  // Totals since start and over the window.
  caf::replies_to<stats_atom>::with<metrics_snapshot>>;

[[nodiscard]] metrics_actor spawn_metrics(caf::actor_system& sys, double window_s = 60.0);

}  // namespace moe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::request_record)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::metrics_snapshot)
