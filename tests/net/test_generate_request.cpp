// tests/net/test_generate_request.cpp
// generate's params: what is accepted into generate_request, and for every rejected input the
// error code and the field its message names.
#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "net/generate_request.hpp"
#include "wire.hpp"

using namespace moe;
using namespace moe::net;
using namespace moe::testing;

namespace {

generate_request accepted(const params_builder& params, const request_limits& limits = {}) {
  const msgpack::object_handle oh = params.build();
  auto result = parse_generate(oh.get(), limits);
  if (const auto* err = std::get_if<rpc_error>(&result))
    FAIL_CHECK(err->message);
  REQUIRE(std::holds_alternative<generate_request>(result));
  return std::get<generate_request>(std::move(result));
}

rpc_error rejected(const params_builder& params, const request_limits& limits = {}) {
  const msgpack::object_handle oh = params.build();
  auto result = parse_generate(oh.get(), limits);
  REQUIRE(std::holds_alternative<rpc_error>(result));
  return std::get<rpc_error>(result);
}

params_builder prompt(std::string text = "Hello") { return params_builder().add("prompt", text); }

std::map<std::string, std::string> message(std::string role, std::string content) {
  return {{"role", std::move(role)}, {"content", std::move(content)}};
}

/// The message starts with `field` followed by ": ".
bool names(const rpc_error& err, const std::string& field) { return err.message.rfind(field + ": ", 0) == 0; }

}  // namespace

TEST_CASE("a bare prompt takes vLLM's defaults") {
  const generate_request req = accepted(prompt("Hi there"));
  CHECK(req.kind == prompt_kind::text);
  CHECK(req.prompt == "Hi there");
  CHECK(req.sampling.max_tokens == 16);
  CHECK(req.sampling.temperature == 1.0f);
  CHECK(req.sampling.top_k == -1);
  CHECK_FALSE(req.sampling.seed);
  CHECK_FALSE(req.stream);
  CHECK_FALSE(req.sampling.logprobs);
}

TEST_CASE("every sampling name is read into sampling_params") {
  const generate_request req = accepted(prompt()
                                          .add("max_tokens", 100)
                                          .add("temperature", 0.5)
                                          .add("top_p", 0.9)
                                          .add("top_k", 40)
                                          .add("min_p", 0.05)
                                          .add("seed", uint64_t{1} << 40)
                                          .add("stop", std::vector<std::string>{"\n", "END"})
                                          .add("stop_token_ids", std::vector<int>{1, 2})
                                          .add("presence_penalty", 0.5)
                                          .add("frequency_penalty", -0.5)
                                          .add("repetition_penalty", 1.25)
                                          .add("ignore_eos", true)
                                          .add("logprobs", 5)
                                          .add("stream", true)
                                          .add("n", 1)
                                          .add("model", "deepseek-v3"));
  const sampling_params& s = req.sampling;
  CHECK(s.max_tokens == 100);
  CHECK(s.temperature == 0.5f);
  CHECK(s.top_p == 0.9f);
  CHECK(s.top_k == 40);
  CHECK(s.min_p == 0.05f);
  CHECK(s.seed == uint64_t{1} << 40);
  CHECK(s.stop == std::vector<std::string>{"\n", "END"});
  CHECK(s.stop_token_ids == std::vector<int32_t>{1, 2});
  CHECK(s.presence_penalty == 0.5f);
  CHECK(s.frequency_penalty == -0.5f);
  CHECK(s.repetition_penalty == 1.25f);
  CHECK(s.ignore_eos);
  CHECK(req.sampling.logprobs == 5);
  CHECK(req.stream);
  CHECK(req.model == "deepseek-v3");
}

TEST_CASE("integers are numbers (msgpack-c packs 1.0 as 1) and nil means not given") {
  const generate_request req = accepted(prompt()
                                          .add("temperature", 0)
                                          .add("top_p", 1)
                                          .add_nil("max_tokens")
                                          .add_nil("seed")
                                          .add_nil("stop")
                                          .add_nil("messages"));
  CHECK(req.sampling.temperature == 0.0f);
  CHECK(req.sampling.top_p == 1.0f);
  CHECK(req.sampling.max_tokens == 16);
  CHECK_FALSE(req.sampling.seed);
  CHECK(req.kind == prompt_kind::text);
}

TEST_CASE("stop may be one string") {
  CHECK(accepted(prompt().add("stop", "###")).sampling.stop == std::vector<std::string>{"###"});
}

TEST_CASE("messages become a chat, input_ids a token prompt") {
  const generate_request chat = accepted(
    params_builder().add("messages", std::vector{message("system", "Be brief."), message("user", "Hi"),
                                                 message("assistant", "Hello"), message("user", "Bye")}));
  CHECK(chat.kind == prompt_kind::chat);
  REQUIRE(chat.messages.size() == 4);
  CHECK(chat.messages[0].role == "system");
  CHECK(chat.messages[3].content == "Bye");

  const generate_request ids = accepted(params_builder().add("input_ids", std::vector{0, 5, 128000}));
  CHECK(ids.kind == prompt_kind::token_ids);
  CHECK(ids.input_ids == std::vector<int32_t>{0, 5, 128000});
}

TEST_CASE("params that are not [ {map} ] are an invalid request") {
  for (const std::string& bytes : {packed([](packer& pk) { pk.pack_array(0); }),
                                   packed([](packer& pk) { pk.pack_array(1).pack("Hello"); }),
                                   packed([](packer& pk) { pk.pack_array(2).pack_map(0).pack_map(0); }),
                                   packed([](packer& pk) { pk.pack_map(1).pack("prompt").pack("Hello"); })}) {
    const msgpack::object_handle oh = unpack_one(bytes);
    const auto result = parse_generate(oh.get());
    REQUIRE(std::holds_alternative<rpc_error>(result));
    const rpc_error& err = std::get<rpc_error>(result);
    CHECK(err.code == rpc_errc::invalid_request);
    CHECK(names(err, "params"));
  }
}

TEST_CASE("each invalid generate field is rejected with its code and name") {
  struct bad_case {
    params_builder params;
    rpc_errc code;
    std::string field;
  };
  const rpc_errc e422 = rpc_errc::validation;
  const rpc_errc e413 = rpc_errc::too_large;
  const std::vector<bad_case> cases = {
    // Which prompt.
    {params_builder().add("max_tokens", 5), e422, "prompt"},
    {params_builder().add_nil("prompt"), e422, "prompt"},
    {prompt().add("input_ids", std::vector{1}), e422, "prompt"},
    {prompt().add("messages", std::vector{message("user", "x")}), e422, "prompt"},
    // Keys.
    {prompt().add("max_token", 5), e422, "max_token"},
    {prompt().add("best_of", 2), e422, "best_of"},
    {prompt().add("temperature", 0.5).add("temperature", 0.7), e422, "temperature"},
    // prompt
    {params_builder().add("prompt", 5), e422, "prompt"},
    {params_builder().add("prompt", ""), e422, "prompt"},
    {params_builder().add("prompt", std::string("ab\xff", 3)), e422, "prompt"},
    {params_builder().add("prompt", std::string(101, 'a')), e413, "prompt"},
    // messages
    {params_builder().add("messages", "hi"), e422, "messages"},
    {params_builder().add("messages", std::vector<int>{}), e422, "messages"},
    {params_builder().add("messages", std::vector{message("user", "a"), message("user", "b"),
                                                  message("user", "c"), message("user", "d")}),
     e413, "messages"},
    {params_builder().add("messages", std::vector{1}), e422, "messages[0]"},
    {params_builder().add("messages", std::vector{message("user", "a"), message("tool", "b")}), e422,
     "messages[1].role"},
    {params_builder().add("messages", std::vector{std::map<std::string, int>{{"role", 1}}}), e422,
     "messages[0].role"},
    {params_builder().add("messages", std::vector{std::map<std::string, std::string>{{"role", "user"}}}),
     e422, "messages[0].content"},
    {params_builder().add("messages", std::vector{std::map<std::string, std::string>{{"content", "x"}}}),
     e422, "messages[0].role"},
    {params_builder().add("messages", std::vector{std::map<std::string, int>{{"role", 0}, {"content", 1}}}),
     e422, "messages[0].content"},
    {params_builder().add("messages", std::vector{std::map<std::string, std::string>{
                                        {"role", "user"}, {"content", "x"}, {"name", "bob"}}}),
     e422, "messages[0].name"},
    {params_builder().add("messages", std::vector{message("user", std::string(60, 'a')),
                                                  message("user", std::string(60, 'b'))}),
     e413, "messages"},
    // input_ids
    {params_builder().add("input_ids", "1 2 3"), e422, "input_ids"},
    {params_builder().add("input_ids", std::vector<int>{}), e422, "input_ids"},
    {params_builder().add("input_ids", std::vector{1, -2}), e422, "input_ids[1]"},
    {params_builder().add("input_ids", std::vector{1, 2, 3, 1000}), e422, "input_ids[3]"},
    {params_builder().add("input_ids", std::vector<double>{1.5}), e422, "input_ids[0]"},
    {params_builder().add("input_ids", std::vector<int>(11, 1)), e413, "input_ids"},
    // Sampling numbers: the type, then the sampler's ranges.
    {prompt().add("max_tokens", 0), e422, "max_tokens"},
    {prompt().add("max_tokens", 1001), e422, "max_tokens"},
    {prompt().add("max_tokens", 2.5), e422, "max_tokens"},
    {prompt().add("temperature", "hot"), e422, "temperature"},
    {prompt().add("temperature", -0.5), e422, "temperature"},
    {prompt().add("top_p", 0), e422, "top_p"},
    {prompt().add("top_p", 1.5), e422, "top_p"},
    {prompt().add("top_k", -2), e422, "top_k"},
    {prompt().add("top_k", int64_t{1} << 40), e422, "top_k"},
    {prompt().add("top_k", 0.5), e422, "top_k"},
    {prompt().add("min_p", 1.5), e422, "min_p"},
    {prompt().add("min_p", true), e422, "min_p"},
    {prompt().add("repetition_penalty", 0), e422, "repetition_penalty"},
    {prompt().add("presence_penalty", 2.5), e422, "presence_penalty"},
    {prompt().add("frequency_penalty", -3), e422, "frequency_penalty"},
    {prompt().add("seed", -1), e422, "seed"},
    {prompt().add("seed", "42"), e422, "seed"},
    {prompt().add("logprobs", 21), e422, "logprobs"},
    {prompt().add("logprobs", -1), e422, "logprobs"},
    {prompt().add("logprobs", true), e422, "logprobs"},
    {prompt().add("n", 2), e422, "n"},
    {prompt().add("ignore_eos", 1), e422, "ignore_eos"},
    {prompt().add("stream", "yes"), e422, "stream"},
    {prompt().add("model", 3), e422, "model"},
    // stop and stop_token_ids
    {prompt().add("stop", 5), e422, "stop"},
    {prompt().add("stop", ""), e422, "stop"},
    {prompt().add("stop", std::string(9, 's')), e413, "stop"},
    {prompt().add("stop", std::vector<std::string>{"a", "b", "c"}), e413, "stop"},
    {prompt().add("stop", std::vector<std::string>{"a", ""}), e422, "stop[1]"},
    {prompt().add("stop", std::vector<std::string>{"a", std::string(9, 's')}), e413, "stop[1]"},
    {prompt().add_raw("stop", [](packer& pk) { pk.pack_array(2).pack("a").pack(7); }), e422, "stop[1]"},
    {prompt().add("stop_token_ids", 5), e422, "stop_token_ids"},
    {prompt().add("stop_token_ids", std::vector{1, -1}), e422, "stop_token_ids[1]"},
    {prompt().add("stop_token_ids", std::vector{1, 2, 3}), e413, "stop_token_ids"},
  };
  const request_limits limits{.max_prompt_bytes = 100,
                              .max_messages = 3,
                              .max_input_ids = 10,
                              .max_token_id = 999,
                              .max_tokens = 1000,
                              .max_stop_strings = 2,
                              .max_stop_string_bytes = 8,
                              .max_stop_token_ids = 2};
  for (const bad_case& c : cases) {
    const rpc_error err = rejected(c.params, limits);
    CAPTURE(err.message);
    CHECK(err.code == c.code);
    CHECK(names(err, c.field));
  }
}

TEST_CASE("error messages say what was expected and what came") {
  const request_limits limits{.max_tokens = 1000};
  CHECK(rejected(prompt().add("max_tokens", 1001), limits).message ==
        "max_tokens: expected an integer in [1, 1000], got 1001");
  CHECK(rejected(prompt().add("temperature", "hot")).message ==
        "temperature: expected a number, got \"hot\"");
  CHECK(rejected(prompt().add("temperature", -0.5)).message ==
        "temperature: expected a finite non-negative number, got -0.5.");
  CHECK(rejected(params_builder().add("messages", std::vector{message("tool", "x")})).message ==
        "messages[0].role: expected \"system\", \"user\" or \"assistant\", got \"tool\"");
  CHECK(rejected(prompt().add("stream", "yes")).message == "stream: expected a bool, got \"yes\"");
  CHECK(rejected(prompt().add("top_k", 2.5)).message ==
        "top_k: expected an integer in [-1, 2147483647], got 2.5");
  CHECK(rejected(params_builder().add("input_ids", std::vector<int>{})).message ==
        "input_ids: expected a non-empty array, got an array of 0");
  CHECK(rejected(prompt().add("n", 2)).message == "n: expected 1 (one sequence per request), got 2");
}

TEST_CASE("a key that is not a string is rejected") {
  const msgpack::object_handle oh = unpack_one(
    packed([](packer& pk) { pk.pack_array(1).pack_map(2).pack("prompt").pack("Hello").pack(7).pack(1); }));
  const auto result = parse_generate(oh.get());
  REQUIRE(std::holds_alternative<rpc_error>(result));
  CHECK(std::get<rpc_error>(result).message == "params: expected string keys, got 7");
}

TEST_CASE("an unknown key that is not UTF-8 is quoted safely") {
  const rpc_error err = rejected(prompt().add(std::string("k\xff", 2), 1));
  CHECK(err.code == rpc_errc::validation);
  CHECK(err.message == "k\xEF\xBF\xBD: unknown key");
}

TEST_CASE("check_context: the prompt must leave room for max_tokens") {
  CHECK_FALSE(check_context(100, 28, 128));
  const std::optional<rpc_error> full = check_context(128, 1, 128);
  REQUIRE(full);
  CHECK(full->code == rpc_errc::too_large);
  CHECK(names(*full, "prompt"));
  const std::optional<rpc_error> over = check_context(100, 29, 128);
  REQUIRE(over);
  CHECK(over->code == rpc_errc::validation);
  CHECK(names(*over, "max_tokens"));
}
