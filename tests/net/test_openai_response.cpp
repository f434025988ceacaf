// tests/net/test_openai_response.cpp
// The wire's answers in OpenAI's shapes: a result map as a completion and a chat completion
// (usage, finish_reason, logprobs in each endpoint's shape), token notifications as stream chunks,
// the chunks that end a stream, errors with their OpenAI type and param, and the HTTP responses'
// bytes (Content-Length, chunked framing, Retry-After). Expected JSON is written out by hand.
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "net/http/http_response.hpp"
#include "net/http/openai_response.hpp"
#include "wire.hpp"

using namespace moe;
using namespace moe::net;
using namespace moe::testing;
using json = nlohmann::json;

namespace {

std::shared_ptr<const tokenizer> real_tokenizer() {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json"))
    return nullptr;
  return tokenizer::load(MOE_TOKENIZER_DIR);
}

/// {output_ids: [5, 6], text: "ab", finish_reason: "length", usage: {3, 2}(, logprobs)}
std::string result_bytes(bool with_logprobs) {
  return packed([&](packer& pk) {
    pk.pack_map(with_logprobs ? 5 : 4);
    pk.pack("output_ids").pack(std::vector<int>{5, 6});
    pk.pack("text").pack("ab");
    pk.pack("finish_reason").pack("length");
    pk.pack("usage").pack_map(2).pack("prompt_tokens").pack(3).pack("completion_tokens").pack(2);
    if (with_logprobs) {
      pk.pack("logprobs").pack_array(1).pack_map(3);
      pk.pack("token_id").pack(5).pack("logprob").pack(-0.5);
      pk.pack("top_logprobs").pack_array(2);
      pk.pack_array(2).pack(5).pack(-0.5);
      pk.pack_array(2).pack(7).pack(-1.25);
    }
  });
}

openai_answer answer_for(openai_endpoint endpoint, bool stream = false, bool usage = false,
                         bool logprobs = false) {
  return {.request = {.endpoint = endpoint,
                      .stream = stream,
                      .include_usage = usage,
                      .logprobs = logprobs,
                      .model = "tiny"},
          .id = "cmpl-1",
          .created = 1700000000};
}

}  // namespace

TEST_CASE("openai: a result as a completion and as a chat completion") {
  auto tok = real_tokenizer();
  if (!tok) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR);
    return;
  }
  const msgpack::object_handle r = unpack_one(result_bytes(false));
  const json completion = completion_json(answer_for(openai_endpoint::completions), r.get(), *tok);
  CHECK(completion == json::parse(R"({"id": "cmpl-1", "object": "text_completion", "created": 1700000000,
    "model": "tiny", "choices": [{"index": 0, "text": "ab", "logprobs": null, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})"));
  const json chat = completion_json(answer_for(openai_endpoint::chat), r.get(), *tok);
  CHECK(chat["object"] == "chat.completion");
  CHECK(chat["choices"][0]["message"] == json::parse(R"({"role": "assistant", "content": "ab"})"));
  CHECK(chat["choices"][0]["finish_reason"] == "length");
}

TEST_CASE("openai: logprobs in each endpoint's shape, token strings from the tokenizer") {
  auto tok = real_tokenizer();
  if (!tok) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR);
    return;
  }
  const std::string t5 = tok->decode({5}), t7 = tok->decode({7});
  const msgpack::object_handle r = unpack_one(result_bytes(true));
  const json completion = completion_json(answer_for(openai_endpoint::completions, false, false, true),
                                          r.get(), *tok);
  const json& lp = completion["choices"][0]["logprobs"];
  CHECK(lp["tokens"] == json::array({t5}));
  CHECK(lp["token_logprobs"] == json::array({-0.5}));
  CHECK(lp["top_logprobs"] == json::array({json{{t5, -0.5}, {t7, -1.25}}}));
  CHECK(lp["text_offset"] == json::array({0}));
  const json chat = completion_json(answer_for(openai_endpoint::chat, false, false, true), r.get(), *tok);
  const json& content = chat["choices"][0]["logprobs"]["content"];
  REQUIRE(content.size() == 1);
  CHECK(content[0]["token"] == t5);
  CHECK(content[0]["logprob"] == -0.5);
  CHECK(content[0]["bytes"].size() == t5.size());
  REQUIRE(content[0]["top_logprobs"].size() == 2);
  CHECK(content[0]["top_logprobs"][1]["token"] == t7);
  CHECK(content[0]["top_logprobs"][1]["logprob"] == -1.25);
}

TEST_CASE("openai: stream chunks, the role on chat's first, and the chunks that end a stream") {
  auto tok = real_tokenizer();
  if (!tok) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR);
    return;
  }
  auto token = [](uint64_t seq, const std::string& text) {
    return unpack_one(
      packed([&](packer& pk) { pk.pack_array(4).pack(9).pack(seq).pack(std::vector<int>{5}).pack(text); }));
  };
  const auto first = token(0, "He"), second = token(1, "llo");
  const openai_answer chat = answer_for(openai_endpoint::chat, true, true);
  CHECK(chunk_json(chat, first.get(), *tok)["choices"][0]["delta"] ==
        json::parse(R"({"role": "assistant", "content": "He"})"));
  CHECK(chunk_json(chat, second.get(), *tok)["choices"][0]["delta"] == json::parse(R"({"content": "llo"})"));
  CHECK(chunk_json(chat, second.get(), *tok)["object"] == "chat.completion.chunk");
  const openai_answer completion = answer_for(openai_endpoint::completions, true);
  const json c = chunk_json(completion, second.get(), *tok);
  CHECK(c["choices"][0]["text"] == "llo");
  CHECK(c["choices"][0]["finish_reason"].is_null());
  const msgpack::object_handle r = unpack_one(result_bytes(false));
  const json::array_t ends = final_chunks_json(chat, r.get());
  REQUIRE(ends.size() == 2);  // finish_reason, then usage (include_usage)
  CHECK(ends[0]["choices"][0]["finish_reason"] == "length");
  CHECK(ends[1]["choices"] == json::array());
  CHECK(ends[1]["usage"]["total_tokens"] == 5);
  CHECK(final_chunks_json(completion, r.get()).size() == 1);
}

TEST_CASE("openai: errors: type, param and code, and HTTP bytes with Retry-After") {
  const json e = error_json(make_error(rpc_errc::validation, "max_tokens: expected at most 10, got 99"));
  CHECK(e == json::parse(R"({"error": {"message": "max_tokens: expected at most 10, got 99",
    "type": "invalid_request_error", "param": "max_tokens", "code": "validation"}})"));
  CHECK(error_json(make_error(rpc_errc::auth, "a wrong key"))["error"]["param"].is_null());
  CHECK(error_json(make_error(rpc_errc::auth, "x"))["error"]["type"] == "authentication_error");
  const std::string busy = http_error_response(make_overloaded("queue: full", 1500), true);
  CHECK(busy.starts_with("HTTP/1.1 429 Too Many Requests\r\n"));
  CHECK(busy.find("Retry-After: 2\r\n") != std::string::npos);  // 1.5 s rounded up
  CHECK(busy.find("Connection: close") == std::string::npos);
  const std::string body = busy.substr(busy.find("\r\n\r\n") + 4);
  CHECK(busy.find("Content-Length: " + std::to_string(body.size()) + "\r\n") != std::string::npos);
  CHECK(json::parse(body)["error"]["type"] == "rate_limit_error");
  CHECK(http_error_response(make_error(rpc_errc::validation, "x"), false).find("Connection: close\r\n") !=
        std::string::npos);
  CHECK(http_chunk("hello") == "5\r\nhello\r\n");
  CHECK(http_chunk(std::string(26, 'a')).starts_with("1a\r\n"));
  CHECK(http_chunk("").empty());
  CHECK(sse_event(json{{"a", 1}}) == "data: {\"a\":1}\n\n");
}
