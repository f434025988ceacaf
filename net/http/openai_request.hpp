// net/http/openai_request.hpp
// OpenAI's (and vLLM's) request bodies as the wire's params: /v1/completions and
// /v1/chat/completions become the `generate` params map (vLLM's names, checked by the wire's own
// parse_generate), /tokenize and /detokenize the wire's tokenize / detokenize params. What only
// HTTP has is checked here: the model's name (404), n, batches, stream_options and chat's
// logprobs / top_logprobs. Pure: no sockets.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "net/rpc_errors.hpp"

namespace moe::net {

enum class openai_endpoint : uint8_t { completions, chat };

/// What the answer's shape depends on.
struct openai_request {
  openai_endpoint endpoint = openai_endpoint::completions;
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage: a last chunk with the usage
  bool logprobs = false;          // asked for: the answer carries them in the endpoint's shape
  bool max_tokens_given = false;  // max_tokens or max_completion_tokens
  std::string model;              // as the answer names it: the served model's name
};

struct translated_generate {
  openai_request request;
  msgpack::sbuffer params;  // [ {generate's keys} ]
};

/// `body` of a completions or chat request as generate's params. `served_model`: the one name
/// a request may give (another is a 404). OpenAI's defaults where they differ from the wire's:
/// max_tokens 16 for completions, the rest of the context for chat (the wire's fill_context).
[[nodiscard]] std::variant<translated_generate, rpc_error> translate_generate(const nlohmann::json& body,
                                                                              openai_endpoint endpoint,
                                                                              std::string_view served_model);

/// vLLM's /tokenize body {prompt | messages, add_special_tokens?, add_generation_prompt?,
/// model?} as tokenize's params.
[[nodiscard]] std::variant<msgpack::sbuffer, rpc_error> translate_tokenize(const nlohmann::json& body,
                                                                           std::string_view served_model);
/// vLLM's /detokenize body {tokens, model?} as detokenize's params.
[[nodiscard]] std::variant<msgpack::sbuffer, rpc_error> translate_detokenize(const nlohmann::json& body,
                                                                             std::string_view served_model);

/// 404 for a model this server does not serve (OpenAI's "model_not_found").
[[nodiscard]] rpc_error unknown_model(std::string_view model, std::string_view served_model);

}  // namespace moe::net
