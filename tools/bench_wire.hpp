// tools/bench_wire.hpp
// The MessagePack-RPC messages `moeserve bench` sends (generate, models, tokenize, auth, cancel) and how it
// reads the answers (token notifications, results, error maps), as plain functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include <msgpack.hpp>

#include "net/rpc_frame.hpp"
#include "tools/bench_load.hpp"
#include "tools/bench_stats.hpp"

namespace moe::tools {

/// The served model, from the `models` method.
struct served_model {
  std::string id;
  int64_t vocab_size = 0;
  int64_t max_context = 0;
};

/// [0, msgid, "generate", [{input_ids | prompt, max_tokens, ignore_eos: true, stream: true,
/// temperature: 0}]]; the prompt text when the shape has one.
[[nodiscard]] msgpack::sbuffer generate_frame(uint32_t msgid, const bench_request& req,
                                              const load_shape& shape);
/// [0, msgid, "models", []]
[[nodiscard]] msgpack::sbuffer models_frame(uint32_t msgid);
/// [0, msgid, "tokenize", [text]]: the server's count of a --prompt (with BOS, as generate does).
[[nodiscard]] msgpack::sbuffer tokenize_frame(uint32_t msgid, const std::string& text);
/// [0, msgid, "auth", [key]]
[[nodiscard]] msgpack::sbuffer auth_frame(uint32_t msgid, const std::string& key);
/// [0, msgid, "cancel", [generate_msgid]]
[[nodiscard]] msgpack::sbuffer cancel_frame(uint32_t msgid, uint32_t generate_msgid);

/// The error map's code (as text, "429") and message; throws on another shape.
[[nodiscard]] std::pair<std::string, std::string> error_of(const msgpack::object& error);

/// A "token" notification's generate msgid and number of token ids; none for another shape.
struct token_note {
  uint32_t msgid = 0;
  uint32_t num_tokens = 0;
};
[[nodiscard]] std::optional<token_note> read_token(const net::rpc_notification& note);

/// Fills `rec` from a generate's response: the error map (error_kind = its code), or the result
/// map's usage and migrated (success unless finish_reason is abort or error); an unreadable
/// response fails with kind "protocol".
void read_outcome(const net::rpc_response& r, bench_record& rec);

/// The first model of a `models` answer; throws input_error on an error or another shape.
[[nodiscard]] served_model read_models(const net::rpc_response& r);

/// The number of ids of a `tokenize` answer; throws input_error on an error or another shape.
[[nodiscard]] int64_t read_token_count(const net::rpc_response& r);

}  // namespace moe::tools
