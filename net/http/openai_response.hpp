// net/http/openai_response.hpp
// The wire's answers in OpenAI's (and vLLM's) shapes: a generate's result as a completion or a
// chat completion, its "token" notifications as stream chunks (Server-Sent Events), errors as
// {"error": {message, type, param, code}}, models as a list and tokenize/detokenize as vLLM
// answers them. Pure: the HTTP connection hands in the decoded wire values.
#pragma once

#include <cstdint>
#include <string>

#include <msgpack.hpp>
#include <nlohmann/json.hpp>

#include "kernels/tokenizer/tokenizer.hpp"
#include "net/http/openai_request.hpp"
#include "net/rpc_errors.hpp"

namespace moe::net {

/// One answer's identity: "cmpl-<n>" or "chatcmpl-<n>", created (Unix seconds).
struct openai_answer {
  openai_request request;
  std::string id;
  int64_t created = 0;
};

/// A generate's result map {output_ids, text, finish_reason, usage, timings, logprobs?} as a
/// completion (object "text_completion") or chat completion ("chat.completion").
[[nodiscard]] nlohmann::json completion_json(const openai_answer& answer, const msgpack::object& result,
                                             const tokenizer& tok);

/// A "token" notification's params [msgid, seq, token_ids, text_delta(, logprobs)] as one
/// stream chunk ("text_completion" / "chat.completion.chunk"); chat's first one also carries
/// the role.
[[nodiscard]] nlohmann::json chunk_json(const openai_answer& answer, const msgpack::object& token_params,
                                        const tokenizer& tok);

/// The chunks that end a stream, from the result map: the finish reason, then the usage when
/// include_usage was asked.
[[nodiscard]] nlohmann::json::array_t final_chunks_json(const openai_answer& answer,
                                                        const msgpack::object& result);

/// {"error": {message, type, param, code}}: type as OpenAI's ("invalid_request_error", ...),
/// param the field the message starts with, code the wire's error type.
[[nodiscard]] nlohmann::json error_json(const rpc_error& error);

/// One Server-Sent Event: "data: <json>\n\n".
[[nodiscard]] std::string sse_event(const nlohmann::json& data);
inline constexpr const char* sse_done = "data: [DONE]\n\n";

/// models' result [{id, max_context, vocab_size}] as {"object": "list", "data": [{id, object,
/// created, owned_by, max_model_len (vLLM's), vocab_size}]}.
[[nodiscard]] nlohmann::json models_json(const msgpack::object& models, int64_t created);

/// tokenize's result (ids) as vLLM's {count, max_model_len, tokens}.
[[nodiscard]] nlohmann::json tokenize_json(const msgpack::object& ids, int64_t max_model_len);

}  // namespace moe::net
