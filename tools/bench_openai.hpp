// tools/bench_openai.hpp
// What `moeserve bench --backend openai` sends to any OpenAI-compatible server (moeserve's HTTP
// front, llama.cpp's llama-server, vLLM) and how it reads the answers: HTTP/1.1 requests for
// GET /v1/models and a streamed POST /v1/completions, and a reader that turns a response's bytes
// (any pieces, chunked or not; libhttp-parser) into its status and Server-Sent Events.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools/bench_load.hpp"
#include "tools/bench_stats.hpp"
#include "tools/bench_wire.hpp"

namespace moe::tools {

/// GET <base_path>/models.
[[nodiscard]] std::string models_http_request(const std::string& host, const std::string& base_path,
                                              const std::string& api_key);
/// POST <base_path>/completions: the request's token ids (or the shape's prompt text) as the
/// prompt, max_tokens its output length, ignore_eos, temperature 0, stream with the usage chunk.
[[nodiscard]] std::string completion_http_request(const std::string& host, const std::string& base_path,
                                                  const std::string& api_key, const std::string& model,
                                                  const bench_request& req, const load_shape& shape);

/// One response's pieces, in order: its head (status), each SSE event's data, its end.
struct http_event {
  enum class kind : uint8_t { head, data, body_end } what = kind::head;
  int status = 0;
  std::string data;  // data: the event's payload; body_end: a body that was not SSE (an error)
};

/// Reads the responses of one connection, one after another.
class http_response_reader {
 public:
  http_response_reader();
  ~http_response_reader();
  http_response_reader(const http_response_reader&) = delete;
  http_response_reader& operator=(const http_response_reader&) = delete;
  /// Appends the events `bytes` complete; an error text when the bytes are not HTTP.
  [[nodiscard]] std::optional<std::string> feed(std::string_view bytes, std::vector<http_event>& out);

 private:
  struct state;
  std::unique_ptr<state> state_;
};

/// The first model of /v1/models: its id; vocab and context where the server says (moeserve's
/// vocab_size and max_model_len, vLLM's max_model_len, llama-server's meta.n_vocab and
/// meta.n_ctx_train); 0 where it does not. Throws input_error on another shape.
[[nodiscard]] served_model read_models_json(const std::string& body);

/// What one SSE event of a completion stream says.
struct completion_chunk {
  bool done = false;                                        // data: [DONE]
  bool has_text = false;                                    // a choice with non-empty text: a token arrived
  std::optional<int64_t> prompt_tokens, completion_tokens;  // its usage, if any
  std::optional<std::string> finish_reason;
  std::optional<std::string> error;  // {"error": {...}} in the stream
};
[[nodiscard]] completion_chunk read_completion_chunk(const std::string& data);

/// An error response's message ({"error": {"message"}} as OpenAI's, vLLM's and llama-server's).
[[nodiscard]] std::string read_error_message(const std::string& body);

}  // namespace moe::tools
