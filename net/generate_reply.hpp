// net/generate_reply.hpp
// What a generate request is answered with: while streaming, the notifications
// [2, "token", [msgid, seq, token_ids, text_delta(, logprobs)]] with seq contiguous from 0; then
// one response whose result map is {output_ids, text, finish_reason, usage, timings(, logprobs)}.
// logprobs only when the request asked: per token {token_id, logprob, top_logprobs: [[id,
// logprob], ...]}, logprobs as float32.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <msgpack.hpp>

#include "kernels/sampling/logprobs.hpp"
#include "kernels/sampling/sampler.hpp"

namespace moe::net {

struct generate_usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

/// Seconds: arrival to the first prefill step, arrival to first token, first token to the last.
struct generate_timings {
  double queue = 0.0;
  double ttft = 0.0;
  double decode = 0.0;
};

struct generate_result {
  std::vector<int32_t> output_ids;
  std::string text;
  finish_reason reason = finish_reason::none;  // stop, length, abort or error
  generate_usage usage;
  generate_timings timings;
  std::optional<std::vector<token_logprobs>> logprobs;  // per output id, when asked
};

/// [2, "token", [msgid, seq, token_ids, text_delta]]; text_delta is whole UTF-8 characters.
/// With `logprobs` (the request asked; one per token id) a 5th element: the per-token array.
[[nodiscard]] msgpack::sbuffer encode_token(uint32_t msgid, uint64_t seq,
                                            const std::vector<int32_t>& token_ids,
                                            std::string_view text_delta,
                                            const std::vector<token_logprobs>* logprobs = nullptr);

/// [1, msgid, nil, {output_ids, text, finish_reason, usage: {prompt_tokens, completion_tokens},
///                  timings: {queue, ttft, decode}, logprobs (when asked)}]
[[nodiscard]] msgpack::sbuffer encode_generate_result(uint32_t msgid, const generate_result& r);

}  // namespace moe::net
