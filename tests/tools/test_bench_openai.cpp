// tests/tools/test_bench_openai.cpp
// `moeserve bench --backend openai`: the HTTP requests it sends, its response reader over bytes in
// any pieces (chunked SSE, a plain JSON error, two responses on one connection), and what it reads
// of the /v1/models and completion chunk shapes of moeserve, vLLM and llama-server (written out
// here as those servers send them).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "config/model_config.hpp"
#include "tools/bench_openai.hpp"

using namespace moe::tools;

namespace {

std::vector<http_event> read_all(const std::string& bytes, size_t piece) {
  http_response_reader reader;
  std::vector<http_event> out;
  for (size_t i = 0; i < bytes.size(); i += piece) {
    auto err = reader.feed(std::string_view(bytes).substr(i, piece), out);
    REQUIRE_FALSE(err);
  }
  return out;
}

std::string chunk(const std::string& data) {
  char size[16];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

}  // namespace

TEST_CASE("bench openai: a streamed completion request") {
  const std::string r = completion_http_request("127.0.0.1:8766", "/v1", "sk", "tiny", {{1, 2, 3}, 5}, {});
  CHECK(r.starts_with("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:8766\r\n"));
  CHECK(r.find("Authorization: Bearer sk\r\n") != std::string::npos);
  const std::string body = r.substr(r.find("\r\n\r\n") + 4);
  CHECK(r.find("Content-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
  CHECK(body.find("\"prompt\":[1,2,3]") != std::string::npos);
  CHECK(body.find("\"max_tokens\":5") != std::string::npos);
  CHECK(body.find("\"include_usage\":true") != std::string::npos);
  CHECK(models_http_request("h:1", "/v1", "").find("Authorization") == std::string::npos);
}

TEST_CASE("bench openai: SSE over chunked bodies in any pieces, then an error response on the same stream") {
  const std::string sse = "data: {\"a\":1}\n\ndata: [DONE]\n\n";
  const std::string stream =
    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
    chunk(sse.substr(0, 7)) + chunk(sse.substr(7)) + "0\r\n\r\n";
  const std::string error_body = "{\"error\":{\"message\":\"queue full\"}}";
  const std::string error =
    "HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nContent-Length: " +
    std::to_string(error_body.size()) + "\r\n\r\n" + error_body;
  for (size_t piece : {size_t{1}, size_t{5}, size_t{4096}}) {
    CAPTURE(piece);
    const auto events = read_all(stream + error, piece);
    REQUIRE(events.size() == 6);
    CHECK(events[0].what == http_event::kind::head);
    CHECK(events[0].status == 200);
    CHECK(events[1].data == "{\"a\":1}");
    CHECK(events[2].data == "[DONE]");
    CHECK(events[3].what == http_event::kind::body_end);
    CHECK(events[4].status == 429);
    CHECK(events[5].what == http_event::kind::body_end);
    CHECK(read_error_message(events[5].data) == "queue full");
  }
}

TEST_CASE("bench openai: models of moeserve, vLLM and llama-server") {
  const auto ours = read_models_json(
    R"({"object":"list","data":[{"id":"tiny","object":"model","max_model_len":1024,"vocab_size":129280}]})");
  CHECK(ours.id == "tiny");
  CHECK(ours.max_context == 1024);
  CHECK(ours.vocab_size == 129280);
  const auto vllm = read_models_json(
    R"({"object":"list","data":[{"id":"m","object":"model","owned_by":"vllm","max_model_len":4096}]})");
  CHECK(vllm.vocab_size == 0);  // --vocab-size then
  const auto llama = read_models_json(
    R"({"object":"list","data":[{"id":"x.gguf","object":"model","owned_by":"llamacpp","meta":{"n_vocab":32000,"n_ctx_train":4096}}]})");
  CHECK(llama.vocab_size == 32000);
  CHECK(llama.max_context == 4096);
  CHECK_THROWS_AS((void)read_models_json("{\"data\": []}"), moe::input_error);
}

TEST_CASE("bench openai: completion chunks: text, usage, finish reason, errors, done") {
  const auto text = read_completion_chunk(R"({"choices":[{"index":0,"text":"Hi","finish_reason":null}]})");
  CHECK(text.has_text);
  CHECK_FALSE(text.finish_reason);
  const auto empty = read_completion_chunk(R"({"choices":[{"index":0,"text":"","finish_reason":"length"}]})");
  CHECK_FALSE(empty.has_text);
  CHECK(empty.finish_reason == "length");
  const auto usage = read_completion_chunk(
    R"({"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}})");
  CHECK(usage.prompt_tokens == 7);
  CHECK(usage.completion_tokens == 3);
  CHECK(read_completion_chunk(R"({"error":{"message":"boom"}})").error == "boom");
  CHECK(read_completion_chunk("[DONE]").done);
  CHECK(read_completion_chunk("not json").error);
}
