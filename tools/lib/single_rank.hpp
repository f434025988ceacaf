// tools/lib/single_rank.hpp
// The "1 rank" baseline of bench-cluster: the same requests through one model_runner on all of
// the backend's threads, no disaggregation and no expert parallelism, with continuous batching as
// vLLM schedules it: every forward call carries each running request's next token, then prompt
// chunks of admitted ones up to a token budget, so prompts join while others decode.
#pragma once

#include <cstdint>
#include <vector>

#include "actors/messages.hpp"
#include "kernels/model/forward.hpp"
#include "tools/lib/cluster_client.hpp"

namespace moe::tools {

struct single_rank_options {
  int64_t concurrency = 1;     // requests in flight
  int64_t token_budget = 512;  // tokens per forward call (decode tokens first)
};

/// Runs `specs` to completion (max_tokens each, or a stop token id) and times them as
/// run_requests does: a request is submitted when a slot frees; TTFT ends at its first token.
/// Reserves a request's KV (prompt + max_tokens) on admission and frees it when it finishes.
/// Throws input_error for specs it does not serve (stop strings, EOS without ignore_eos, an
/// empty prompt) and when the KV pool cannot hold `concurrency` requests.
[[nodiscard]] cluster_run run_single_rank(model_runner& runner, const std::vector<request_spec>& specs,
                                          const single_rank_options& options);

}  // namespace moe::tools
