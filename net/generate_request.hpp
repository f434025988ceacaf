// net/generate_request.hpp
// The `generate` method's params, validated into a plain struct: one of prompt / messages /
// input_ids, vLLM's sampling names, stream and logprobs. Independent of the tokenizer: the
// prompt's token count is checked later, with check_context().
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <msgpack/object_fwd.hpp>

#include "kernels/sampling/sampler.hpp"
#include "kernels/tokenizer/tokenizer.hpp"
#include "net/rpc_errors.hpp"

namespace moe::net {

/// What one generate request may ask for. Sizes over a limit are 413, values out of range 422.
struct request_limits {
  size_t max_prompt_bytes = size_t{1} << 20;  // prompt, or all message contents together (UTF-8)
  size_t max_messages = 256;
  size_t max_input_ids = 163840;                               // DeepSeek-V3's context
  int64_t max_token_id = std::numeric_limits<int32_t>::max();  // the vocabulary is checked later
  int32_t max_tokens = 32768;
  size_t max_stop_strings = 16;
  size_t max_stop_string_bytes = 256;
  size_t max_stop_token_ids = 64;
  int32_t max_logprobs = 20;
};

enum class prompt_kind : uint8_t { text, chat, token_ids };

struct generate_request {
  prompt_kind kind = prompt_kind::text;
  std::string prompt;                  // kind text
  std::vector<chat_message> messages;  // kind chat: roles system, user, assistant
  std::vector<int32_t> input_ids;      // kind token_ids
  sampling_params sampling;            // vLLM names and defaults, logprobs (0..20) included
  bool stream = false;                 // "token" notifications before the response
  /// max_tokens becomes what the context leaves after the prompt, at most max_tokens (given, or
  /// else request_limits::max_tokens): OpenAI's chat default, set by the HTTP front.
  bool fill_context = false;
  std::string model;  // "" when not given
};

/// Validates `params` ([ {key: value, ...} ]). Keys are vLLM's names; nil means "not given";
/// an unknown key is a 422 naming it (a typo such as "max_token" must not pass silently).
/// Every error's message starts with the field it is about, e.g. "stop[2]: ...".
[[nodiscard]] std::variant<generate_request, rpc_error> parse_generate(const msgpack::object& params,
                                                                       const request_limits& limits = {});

/// vLLM's context check once the prompt is tokenized: 413 when the prompt alone fills the
/// context, 422 (naming max_tokens) when prompt + max_tokens does not fit.
[[nodiscard]] std::optional<rpc_error> check_context(size_t num_prompt_tokens, int32_t max_tokens,
                                                     size_t max_model_len);

}  // namespace moe::net
