// tools/lib/cluster_client.hpp
// Running requests through an in-process cluster from a tool (generate, bench-cluster): spawns
// the graph from a topology, submits with bounded concurrency, collects streamed chunks and
// final answers with per-request timings, and writes the Chrome trace when asked.
#pragma once

#include <functional>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "actors/cluster.hpp"
#include "actors/messages.hpp"

namespace moe::tools {

struct cluster_request_result {
  session_result result;
  int64_t num_prompt_tokens = 0;
  double ttft_s = 0.0;                // submit -> first streamed chunk
  double total_s = 0.0;               // submit -> final answer
  std::vector<double> token_times_s;  // submit -> each streamed chunk
};

struct cluster_run {
  std::vector<cluster_request_result> requests;  // in the order given
  double wall_s = 0.0;
  int64_t num_rejected = 0;  // "overloaded" answers (resubmitted)
};

/// `count` greedy requests of `prompt_len` random token ids (the first is 0) and exactly
/// `output_len` output tokens (EOS ignored), the same for one `seed`.
[[nodiscard]] std::vector<request_spec> random_requests(int64_t count, int64_t prompt_len, int64_t output_len,
                                                        int64_t vocab, uint64_t seed);

/// Runs `specs` through `c` with at most `concurrency` requests in flight; `on_text` (may be
/// empty) receives request 0's text deltas as they stream. Throws std::runtime_error when the
/// cluster answers nothing for `timeout_s`.
[[nodiscard]] cluster_run run_requests(caf::actor_system& sys, const cluster& c,
                                       const std::vector<request_spec>& specs, int64_t concurrency,
                                       const std::function<void(std::string_view)>& on_text = {},
                                       double timeout_s = 600.0);

}  // namespace moe::tools
