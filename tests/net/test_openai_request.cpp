// tests/net/test_openai_request.cpp
// OpenAI's request bodies as the wire's generate params: what each field becomes once the
// wire's own parse_generate has read the translation, OpenAI's defaults (max_tokens 16 for
// completions), and the HTTP-only refusals (404 model, n, batches, unknown fields) with the field
// each names. Bodies are written as a client (OpenAI's SDK, curl) sends them.
#include <doctest/doctest.h>

#include <string>

#include "net/generate_request.hpp"
#include "net/http/json_values.hpp"
#include "net/http/openai_request.hpp"

using namespace moe;
using namespace moe::net;
using json = nlohmann::json;

namespace {

constexpr const char* served = "tiny";

struct translated {
  openai_request request;
  generate_request wire;
};

translated accepted(const std::string& body, openai_endpoint endpoint) {
  auto t = translate_generate(json::parse(body), endpoint, served);
  if (auto* err = std::get_if<rpc_error>(&t))
    FAIL(err->message);
  auto& g = std::get<translated_generate>(t);
  const msgpack::object_handle oh = msgpack::unpack(g.params.data(), g.params.size());
  auto parsed = parse_generate(oh.get());
  if (auto* err = std::get_if<rpc_error>(&parsed))
    FAIL(err->message);
  return {g.request, std::get<generate_request>(std::move(parsed))};
}

rpc_error refused(const std::string& body, openai_endpoint endpoint) {
  auto t = translate_generate(json::parse(body), endpoint, served);
  if (auto* err = std::get_if<rpc_error>(&t))
    return *err;
  auto& g = std::get<translated_generate>(t);  // refused by the wire's validator instead
  const msgpack::object_handle oh = msgpack::unpack(g.params.data(), g.params.size());
  auto parsed = parse_generate(oh.get());
  REQUIRE(std::holds_alternative<rpc_error>(parsed));
  return std::get<rpc_error>(parsed);
}

constexpr auto completions = openai_endpoint::completions;
constexpr auto chat = openai_endpoint::chat;

}  // namespace

TEST_CASE("openai: a completion's fields as the wire's generate") {
  const translated t = accepted(R"({"model": "tiny", "prompt": "Hello", "max_tokens": 7, "temperature": 0,
    "top_p": 0.5, "top_k": 3, "min_p": 0.1, "seed": 42, "stop": ["a", "b"], "presence_penalty": 0.5,
    "frequency_penalty": 0.25, "repetition_penalty": 1.5, "ignore_eos": true, "stop_token_ids": [7],
    "logprobs": 2, "n": 1, "user": "u1", "echo": false, "best_of": 1, "suffix": null, "logit_bias": {}})",
                                completions);
  CHECK(t.wire.kind == prompt_kind::text);
  CHECK(t.wire.prompt == "Hello");
  CHECK(t.wire.sampling.max_tokens == 7);
  CHECK(t.wire.sampling.temperature == 0.0f);
  CHECK(t.wire.sampling.top_p == 0.5f);
  CHECK(t.wire.sampling.top_k == 3);
  CHECK(t.wire.sampling.min_p == doctest::Approx(0.1f));
  REQUIRE(t.wire.sampling.seed);
  CHECK(*t.wire.sampling.seed == 42u);
  CHECK(t.wire.sampling.stop == std::vector<std::string>{"a", "b"});
  CHECK(t.wire.sampling.presence_penalty == 0.5f);
  CHECK(t.wire.sampling.frequency_penalty == 0.25f);
  CHECK(t.wire.sampling.repetition_penalty == 1.5f);
  CHECK(t.wire.sampling.ignore_eos);
  CHECK(t.wire.sampling.stop_token_ids == std::vector<int32_t>{7});
  REQUIRE(t.wire.sampling.logprobs);
  CHECK(*t.wire.sampling.logprobs == 2);
  CHECK(t.request.logprobs);
  CHECK_FALSE(t.wire.stream);
  CHECK(t.request.model == "tiny");
}

TEST_CASE("openai: completions default to 16 tokens, prompts as ids and batches of one") {
  CHECK(accepted(R"({"prompt": "x"})", completions).wire.sampling.max_tokens == 16);
  const translated ids = accepted(R"({"prompt": [1, 2, 3]})", completions);
  CHECK(ids.wire.kind == prompt_kind::token_ids);
  CHECK(ids.wire.input_ids == std::vector<int32_t>{1, 2, 3});
  CHECK(accepted(R"({"prompt": ["one"]})", completions).wire.prompt == "one");
  CHECK(accepted(R"({"prompt": [[4, 5]]})", completions).wire.input_ids == std::vector<int32_t>{4, 5});
  // an integral float is an integer (JavaScript has one number type)
  CHECK(accepted(R"({"prompt": "x", "max_tokens": 8.0})", completions).wire.sampling.max_tokens == 8);
}

TEST_CASE("openai: stream and stream_options") {
  const translated t =
    accepted(R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": true}})", completions);
  CHECK(t.request.stream);
  CHECK(t.wire.stream);
  CHECK(t.request.include_usage);
  CHECK_FALSE(accepted(R"({"prompt": "x", "stream": false})", completions).wire.stream);
  CHECK(refused(R"({"prompt": "x", "stream_options": {"include_usage": 1}})", completions)
          .message.starts_with("stream_options.include_usage:"));
}

TEST_CASE("openai: chat messages, content parts, max_completion_tokens and logprobs") {
  const translated t = accepted(R"({"messages": [
      {"role": "developer", "content": "Be brief."},
      {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}]}],
    "max_tokens": 5, "max_completion_tokens": 9, "logprobs": true, "top_logprobs": 3})",
                                chat);
  REQUIRE(t.wire.kind == prompt_kind::chat);
  REQUIRE(t.wire.messages.size() == 2);
  CHECK(t.wire.messages[0].role == "system");
  CHECK(t.wire.messages[0].content == "Be brief.");
  CHECK(t.wire.messages[1].role == "user");
  CHECK(t.wire.messages[1].content == "Hi there");
  CHECK(t.wire.sampling.max_tokens == 9);  // max_completion_tokens wins
  CHECK(t.request.max_tokens_given);
  REQUIRE(t.wire.sampling.logprobs);
  CHECK(*t.wire.sampling.logprobs == 3);
  CHECK(t.request.logprobs);
  const translated no_top = accepted(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})",
                                     chat);
  CHECK_FALSE(no_top.request.max_tokens_given);  // the server fills in the context's rest
  CHECK(no_top.wire.fill_context);
  CHECK(no_top.wire.sampling.max_tokens == request_limits{}.max_tokens);  // the cap the bridge lowers
  CHECK_FALSE(t.wire.fill_context);
  REQUIRE(no_top.wire.sampling.logprobs);
  CHECK(*no_top.wire.sampling.logprobs == 0);
  CHECK_FALSE(accepted(R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false})", chat)
                .wire.sampling.logprobs);
}

TEST_CASE("openai: refusals name their field with the wire's codes") {
  auto check = [](const std::string& body, openai_endpoint endpoint, rpc_errc code,
                  const std::string& field) {
    const rpc_error e = refused(body, endpoint);
    CAPTURE(body);
    CAPTURE(e.message);
    CHECK(e.code == code);
    CHECK(e.message.starts_with(field + ":"));
  };
  check(R"({"model": "gpt-4", "prompt": "x"})", completions, rpc_errc::unknown_method, "model");
  check(R"({"prompt": "x", "n": 2})", completions, rpc_errc::invalid_request, "n");
  check(R"({"prompt": ["a", "b"]})", completions, rpc_errc::invalid_request, "prompt");
  check(R"({"prompt": "x", "best_of": 3})", completions, rpc_errc::invalid_request, "best_of");
  check(R"({"prompt": "x", "echo": true})", completions, rpc_errc::invalid_request, "echo");
  check(R"({"prompt": "x", "max_token": 3})", completions, rpc_errc::invalid_request, "max_token");
  check(R"({"max_tokens": 3})", completions, rpc_errc::invalid_request, "prompt");
  check(R"({"prompt": "x"})", chat, rpc_errc::invalid_request, "prompt");  // chat has messages
  check(R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", chat,
        rpc_errc::invalid_request, "top_logprobs");
  check(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", chat,
        rpc_errc::invalid_request, "messages[0].content[0]");
  // the wire's validator, through the translation
  check(R"({"prompt": "x", "max_tokens": 0})", completions, rpc_errc::validation, "max_tokens");
  check(R"({"prompt": "x", "temperature": "hot"})", completions, rpc_errc::validation, "temperature");
  check(R"({"prompt": "x", "top_p": 0})", completions, rpc_errc::validation, "top_p");
  check(R"({"prompt": "x", "seed": -1})", completions, rpc_errc::validation, "seed");
  check(R"({"messages": [{"role": "robot", "content": "x"}]})", chat, rpc_errc::validation,
        "messages[0].role");
}

TEST_CASE("openai: tokenize and detokenize bodies as the wire's params") {
  auto t = translate_tokenize(
    json::parse(R"({"model": "tiny", "prompt": "Hi", "add_special_tokens": false})"), served);
  REQUIRE(std::holds_alternative<msgpack::sbuffer>(t));
  const auto& tb = std::get<msgpack::sbuffer>(t);
  const json tokenize_params = to_json(msgpack::unpack(tb.data(), tb.size()).get());
  CHECK(tokenize_params == json::parse(R"([{"prompt": "Hi", "add_special_tokens": false}])"));
  auto d = translate_detokenize(json::parse(R"({"tokens": [1, 2]})"), served);
  REQUIRE(std::holds_alternative<msgpack::sbuffer>(d));
  const auto& db = std::get<msgpack::sbuffer>(d);
  CHECK(to_json(msgpack::unpack(db.data(), db.size()).get()) == json::parse("[[1, 2]]"));
  auto bad = translate_detokenize(json::parse(R"({"ids": [1]})"), served);
  REQUIRE(std::holds_alternative<rpc_error>(bad));
  CHECK(std::get<rpc_error>(bad).message.starts_with("ids:"));
  auto other = translate_tokenize(json::parse(R"({"model": "big", "prompt": "x"})"), served);
  REQUIRE(std::holds_alternative<rpc_error>(other));
  CHECK(std::get<rpc_error>(other).code == rpc_errc::unknown_method);
}

TEST_CASE("openai: JSON bodies: not JSON, and nesting past the limit, are 400s before anything is built") {
  auto bad = parse_json_body("{\"prompt\": ");
  REQUIRE(std::holds_alternative<rpc_error>(bad));
  CHECK(std::get<rpc_error>(bad).code == rpc_errc::invalid_request);
  auto deep = parse_json_body(std::string(100000, '[') + std::string(100000, ']'));
  REQUIRE(std::holds_alternative<rpc_error>(deep));
  CHECK(std::get<rpc_error>(deep).message.find("nested") != std::string::npos);
  // brackets inside strings do not count
  auto in_string = parse_json_body(R"({"stop": ["[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["]})");
  CHECK(std::holds_alternative<json>(in_string));
}
