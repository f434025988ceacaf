// kernels/sampling/sampler.hpp
// Picks the next token from one row of logits with vLLM's sampling semantics.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace moe {

/// vLLM SamplingParams names and defaults. temperature 0 means greedy; the sampler raises one in
/// (0, 0.01) to 0.01, as vLLM does.
struct sampling_params {
  float temperature = 1.0f;
  float top_p = 1.0f;               // (0, 1]
  int32_t top_k = -1;               // -1 (or 0): all tokens
  float min_p = 0.0f;               // [0, 1]
  float repetition_penalty = 1.0f;  // > 0; applies to prompt and output tokens
  float presence_penalty = 0.0f;    // [-2, 2]; output tokens only
  float frequency_penalty = 0.0f;   // [-2, 2]; output tokens only
  std::optional<uint64_t> seed;
  int32_t max_tokens = 16;  // >= 1
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;  // stop strings, not included in the output text
  bool ignore_eos = false;
  std::optional<int32_t> logprobs;  // >= 0: each output token's logprob and this many
                                    // top alternatives (logprobs.hpp); unset: none
};

/// Checks ranges as vLLM does; returns an error message naming the field, or "" when valid.
[[nodiscard]] std::string validate(const sampling_params& p);

/// Per-request sampling state: the RNG and the token counts the penalties need.
class sampler {
 public:
  sampler(sampling_params params, const std::vector<int32_t>& prompt_ids);

  /// Applies penalties, temperature, min-p, top-k and top-p to `logits` ([vocab], modified in
  /// place) and draws the next token (argmax when greedy; lowest id on ties).
  [[nodiscard]] int32_t sample(std::vector<float>& logits);
  /// The same on a read-only row: greedy without penalties reads it in place, else a copy.
  [[nodiscard]] int32_t sample(std::span<const float> logits);
  /// Records a generated token (for presence/frequency/repetition penalties).
  void accept(int32_t token_id);

  /// The state after `generated` were sampled and accepted: their counts, and the RNG as after
  /// their draws (one per token when temperature > 0, as sample() draws). A request placed
  /// again goes on with the numbers a seeded run without the move would have drawn.
  void resume_after(std::span<const int32_t> generated);
  [[nodiscard]] const sampling_params& params() const noexcept { return params_; }

 private:
  sampling_params params_;
  std::mt19937_64 rng_;
  std::unordered_map<int32_t, int32_t> output_counts_;
  std::vector<uint8_t> seen_;  // [vocab] prompt or output token, lazily sized
  std::vector<int32_t> prompt_ids_;
};

/// Where generation stops (vLLM semantics): "stop" on EOS (unless ignore_eos), a stop token id or
/// a stop string (text truncated before it); "length" at max_tokens or the context limit.
enum class finish_reason : uint8_t { none, stop, length, abort, error };
[[nodiscard]] const char* to_string(finish_reason r) noexcept;

}  // namespace moe
