// tests/net/test_rpc_methods.cpp
// Method names, the params of cancel / tokenize / detokenize / the no-params methods, and the
// generate reply encoders, decoded back with msgpack-c alone.
#include <doctest/doctest.h>

#include <map>
#include <tuple>

#include "net/generate_reply.hpp"
#include "net/rpc_methods.hpp"
#include "wire.hpp"

using namespace moe;
using namespace moe::net;
using namespace moe::testing;

namespace {

template <class Fill>
msgpack::object_handle params_of(Fill fill) {
  return unpack_one(packed(fill));
}

template <class T>
rpc_error error_of(const std::variant<T, rpc_error>& result) {
  REQUIRE(std::holds_alternative<rpc_error>(result));
  return std::get<rpc_error>(result);
}

}  // namespace

TEST_CASE("every method name maps to its method and back") {
  for (const char* name : {"generate", "cancel", "tokenize", "detokenize", "models", "health", "ready",
                           "stats", "auth", "admin.actors", "admin.kill"}) {
    const std::optional<rpc_method> method = find_method(name);
    REQUIRE(method);
    CHECK(method_name(*method) == name);
  }
  CHECK_FALSE(find_method("Generate"));
  const rpc_error err = unknown_method("gen");
  CHECK(err.code == rpc_errc::unknown_method);
  CHECK(err.message.rfind("method: unknown \"gen\" (generate, cancel,", 0) == 0);
}

TEST_CASE("cancel takes one uint32 msgid") {
  const auto ok = params_of([](packer& pk) { pk.pack_array(1).pack(17); });
  CHECK(std::get<uint32_t>(parse_cancel(ok.get())) == 17);
  const auto none = params_of([](packer& pk) { pk.pack_array(0); });
  CHECK(error_of(parse_cancel(none.get())).code == rpc_errc::invalid_request);
  const auto negative = params_of([](packer& pk) { pk.pack_array(1).pack(-1); });
  const rpc_error err = error_of(parse_cancel(negative.get()));
  CHECK(err.code == rpc_errc::validation);
  CHECK(err.message.rfind("msgid: ", 0) == 0);
}

TEST_CASE("tokenize takes a string or a map with prompt or messages") {
  const auto text = params_of([](packer& pk) { pk.pack_array(1).pack("hello"); });
  const tokenize_request plain = std::get<tokenize_request>(parse_tokenize(text.get()));
  CHECK(plain.kind == prompt_kind::text);
  CHECK(plain.prompt == "hello");
  CHECK(plain.add_special_tokens);

  const auto chat = params_of([](packer& pk) {
    pk.pack_array(1).pack_map(3).pack("messages");
    pk.pack(std::vector{std::map<std::string, std::string>{{"role", "user"}, {"content", "hi"}}});
    pk.pack("add_special_tokens").pack(false).pack("add_generation_prompt").pack(false);
  });
  const tokenize_request req = std::get<tokenize_request>(parse_tokenize(chat.get()));
  CHECK(req.kind == prompt_kind::chat);
  REQUIRE(req.messages.size() == 1);
  CHECK(req.messages[0].content == "hi");
  CHECK_FALSE(req.add_special_tokens);
  CHECK_FALSE(req.add_generation_prompt);

  const std::tuple<msgpack::object_handle, rpc_errc, std::string> bad[] = {
    {params_of([](packer& pk) { pk.pack_array(1).pack(5); }), rpc_errc::invalid_request, "params"},
    {params_of([](packer& pk) { pk.pack_array(1).pack_map(0); }), rpc_errc::validation, "prompt"},
    {params_of([](packer& pk) { pk.pack_array(1).pack_map(1).pack("text").pack("x"); }), rpc_errc::validation,
     "text"},
    {params_of([](packer& pk) { pk.pack_array(1).pack_map(1).pack("add_special_tokens").pack(1); }),
     rpc_errc::validation, "add_special_tokens"},
    {params_of([](packer& pk) { pk.pack_array(1).pack(std::string(11, 'a')); }), rpc_errc::too_large,
     "prompt"},
  };
  for (const auto& [params, code, field] : bad) {
    const rpc_error err = error_of(parse_tokenize(params.get(), {.max_prompt_bytes = 10}));
    CAPTURE(err.message);
    CHECK(err.code == code);
    CHECK(err.message.rfind(field + ": ", 0) == 0);
  }
}

TEST_CASE("detokenize takes one array of token ids") {
  const auto ok = params_of([](packer& pk) { pk.pack_array(1).pack(std::vector{1, 2, 3}); });
  CHECK(std::get<std::vector<int32_t>>(parse_detokenize(ok.get())) == std::vector<int32_t>{1, 2, 3});
  const auto flat = params_of([](packer& pk) { pk.pack(std::vector{1, 2, 3}); });
  CHECK(error_of(parse_detokenize(flat.get())).code == rpc_errc::invalid_request);
  const auto bad_id = params_of([](packer& pk) { pk.pack_array(1).pack(std::vector{1, 99}); });
  const rpc_error err = error_of(parse_detokenize(bad_id.get(), {.max_token_id = 50}));
  CHECK(err.code == rpc_errc::validation);
  CHECK(err.message.rfind("input_ids[1]: ", 0) == 0);
}

TEST_CASE("models, health, ready and stats take no params") {
  CHECK_FALSE(check_no_params(params_of([](packer& pk) { pk.pack_array(0); }).get()));
  const auto some = params_of([](packer& pk) { pk.pack_array(1).pack(1); });
  CHECK(check_no_params(some.get())->code == rpc_errc::invalid_request);
}

TEST_CASE("a token notification carries msgid, seq, ids and the text delta") {
  const msgpack::object_handle oh = unpack_one(bytes_of(encode_token(9, 3, {17, 18}, "he")));
  const auto [type, method, params] =
    oh.get()
      .as<std::tuple<int, std::string, std::tuple<uint32_t, uint64_t, std::vector<int32_t>, std::string>>>();
  CHECK(type == 2);
  CHECK(method == "token");
  CHECK(params == std::make_tuple(9u, uint64_t{3}, std::vector<int32_t>{17, 18}, std::string("he")));
}

TEST_CASE("a generate result holds ids, text, finish_reason, usage and float timings") {
  const generate_result r{.output_ids = {5, 6},
                          .text = "ab",
                          .reason = finish_reason::length,
                          .usage = {.prompt_tokens = 7, .completion_tokens = 2},
                          .timings = {.queue = 0.0, .ttft = 2.0, .decode = 0.25}};
  const msgpack::object_handle oh = unpack_one(bytes_of(encode_generate_result(4, r)));
  const msgpack::object_array& a = oh.get().via.array;
  REQUIRE(a.size == 4);
  CHECK(a.ptr[0].as<int>() == 1);
  CHECK(a.ptr[1].as<uint32_t>() == 4);
  CHECK(a.ptr[2].is_nil());
  const auto m = a.ptr[3].as<std::map<std::string, msgpack::object>>();
  CHECK(m.size() == 5);
  CHECK(m.at("output_ids").as<std::vector<int32_t>>() == std::vector<int32_t>{5, 6});
  CHECK(m.at("text").as<std::string>() == "ab");
  CHECK(m.at("finish_reason").as<std::string>() == "length");
  const auto usage = m.at("usage").as<std::map<std::string, int64_t>>();
  CHECK(usage == std::map<std::string, int64_t>{{"prompt_tokens", 7}, {"completion_tokens", 2}});
  const auto timings = m.at("timings").as<std::map<std::string, msgpack::object>>();
  for (const char* key : {"queue", "ttft", "decode"})
    CHECK(timings.at(key).type == msgpack::type::FLOAT64);  // 0.0 and 2.0 stay floats
  CHECK(timings.at("ttft").as<double>() == 2.0);
  CHECK(timings.at("decode").as<double>() == 0.25);
}

TEST_CASE("logprobs, when asked, are a 5th token element and a result key, as float32 maps") {
  const std::vector<token_logprobs> lp = {
    {.token_id = 17, .logprob = -0.5f, .top = {{17, -0.5f}, {3, -1.0f}}},
    {.token_id = 18, .logprob = 0.0f, .top = {}}};
  const msgpack::object_handle note = unpack_one(bytes_of(encode_token(9, 0, {17, 18}, "he", &lp)));
  const msgpack::object_array& params = note.get().via.array.ptr[2].via.array;
  REQUIRE(params.size == 5);
  const auto entries = params.ptr[4].as<std::vector<std::map<std::string, msgpack::object>>>();
  REQUIRE(entries.size() == 2);
  CHECK(entries[0].at("token_id").as<int32_t>() == 17);
  CHECK(entries[0].at("logprob").type == msgpack::type::FLOAT32);
  CHECK(entries[0].at("logprob").as<float>() == -0.5f);
  const auto top = entries[0].at("top_logprobs").as<std::vector<std::tuple<int32_t, float>>>();
  CHECK(top == std::vector<std::tuple<int32_t, float>>{{17, -0.5f}, {3, -1.0f}});
  const auto pair = entries[0].at("top_logprobs").via.array.ptr[1].via.array;
  CHECK(pair.ptr[1].type == msgpack::type::FLOAT32);               // -1.0 stays a float
  CHECK(entries[1].at("logprob").type == msgpack::type::FLOAT32);  // 0.0 too
  CHECK(entries[1].at("top_logprobs").via.array.size == 0);

  generate_result r{.output_ids = {17, 18}, .text = "he", .reason = finish_reason::length};
  r.logprobs = lp;
  const msgpack::object_handle oh = unpack_one(bytes_of(encode_generate_result(4, r)));
  const auto m = oh.get().via.array.ptr[3].as<std::map<std::string, msgpack::object>>();
  CHECK(m.size() == 6);
  CHECK(m.at("logprobs").as<std::vector<msgpack::object>>().size() == 2);
  r.logprobs.reset();
  const msgpack::object_handle without = unpack_one(bytes_of(encode_generate_result(4, r)));
  CHECK(without.get().via.array.ptr[3].via.map.size == 5);
}
