// kernels/sampling/logprobs.hpp
// Log-probabilities of an output token under the model's raw distribution (vLLM's default
// "raw_logprobs": log_softmax of the logits before penalties, temperature, top-k/top-p/min-p),
// with the most likely alternatives. Pure; the ranks call it on their stream, only for requests
// that ask for logprobs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/sampling/sampler.hpp"

namespace moe {

/// A token id and its log-probability.
struct logprob_entry {
  int32_t token_id = 0;
  float logprob = 0.0f;
};

/// One output token: its own log-probability and the top alternatives.
struct token_logprobs {
  int32_t token_id = 0;
  float logprob = 0.0f;
  std::vector<logprob_entry> top;  // most likely first, lowest id first on ties
};

/// log_softmax(logits) at `token_id` and at the `num_top` most likely tokens (all of them when
/// num_top >= vocab; none when 0). `logits` is one raw row [vocab], not yet touched by the
/// sampler. Computed in double around the largest logit (log-sum-exp), so no exp overflows;
/// a NaN logit counts as -inf (a row without a finite largest logit gives NaN logprobs).
[[nodiscard]] token_logprobs logprobs_of(std::span<const float> logits, int32_t token_id, int32_t num_top);

/// A sampled token and, when its request asked (sampling_params::logprobs), its logprobs.
struct picked_token {
  int32_t token_id = 0;
  std::vector<token_logprobs> logprobs;  // empty, or the one entry for token_id
};

/// What a rank does with one raw logits row: samples it (sampler::sample(span) copies it only
/// when the sampler must edit it), accepts the token, and takes its logprobs from the untouched
/// row when asked.
[[nodiscard]] picked_token pick_token(sampler& pick, std::span<const float> logits,
                                      std::optional<int32_t> num_top);

}  // namespace moe
