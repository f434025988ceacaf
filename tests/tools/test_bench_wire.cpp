// tests/tools/test_bench_wire.cpp
// `moeserve bench`'s messages against the server's own code: its generate frame passes the
// server's validator, and it reads results as the server encodes them, `migrated` included.
#include <doctest/doctest.h>

#include "config/model_config.hpp"
#include "net/generate_reply.hpp"
#include "net/generate_request.hpp"
#include "tools/bench_wire.hpp"

using namespace moe;
using namespace moe::tools;

namespace {

/// The one message `bytes` decode to, as a client's decoder sees it.
net::rpc_message decoded(const msgpack::sbuffer& bytes) {
  net::frame_decoder decoder;
  std::vector<net::rpc_message> messages = decoder.feed(std::string_view(bytes.data(), bytes.size()));
  REQUIRE(messages.size() == 1);
  return std::move(messages.front());
}

net::rpc_response response_of(const msgpack::sbuffer& bytes) {
  net::rpc_message m = decoded(bytes);
  REQUIRE(std::holds_alternative<net::rpc_response>(m));
  return std::get<net::rpc_response>(std::move(m));
}

/// [1, msgid, nil, result] with `fill` packing the result.
template <class Fill>
msgpack::sbuffer response_bytes(uint32_t msgid, Fill&& fill) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack(1).pack(msgid).pack_nil();
  fill(pk);
  return out;
}

}  // namespace

TEST_CASE("the generate frame is what the server's validator accepts, ids or prompt") {
  const bench_request req{.input_ids = {5, 0, 999}, .output_len = 7};
  net::rpc_message m = decoded(generate_frame(42, req, {}));
  REQUIRE(std::holds_alternative<net::rpc_request>(m));
  const auto& request = std::get<net::rpc_request>(m);
  CHECK(request.msgid == 42);
  CHECK(request.method == "generate");
  auto parsed = net::parse_generate(request.params);
  REQUIRE(std::holds_alternative<net::generate_request>(parsed));
  const auto& g = std::get<net::generate_request>(parsed);
  CHECK(g.kind == net::prompt_kind::token_ids);
  CHECK(g.input_ids == std::vector<int32_t>{5, 0, 999});
  CHECK(g.sampling.max_tokens == 7);
  CHECK(g.sampling.ignore_eos);
  CHECK(g.sampling.temperature == 0.0f);
  CHECK(g.stream);

  net::rpc_message text = decoded(generate_frame(43, {.output_len = 3}, {.prompt = "Hello"}));
  auto parsed_text = net::parse_generate(std::get<net::rpc_request>(text).params);
  REQUIRE(std::holds_alternative<net::generate_request>(parsed_text));
  CHECK(std::get<net::generate_request>(parsed_text).prompt == "Hello");
}

TEST_CASE("a token notification gives its msgid and token count, another shape nothing") {
  const net::rpc_message note = decoded(net::encode_token(9, 0, {1, 2, 3}, "abc"));
  const auto token = read_token(std::get<net::rpc_notification>(note));
  REQUIRE(token.has_value());
  CHECK(token->msgid == 9);
  CHECK(token->num_tokens == 3);
  const net::rpc_message odd = decoded(net::encode_notification("token", std::vector<std::string>{"x"}));
  CHECK_FALSE(read_token(std::get<net::rpc_notification>(odd)).has_value());
}

TEST_CASE("results as the server encodes them: usage read, finish abort fails, no migrated key is 0") {
  net::generate_result result{.output_ids = {1, 2},
                              .text = "ab",
                              .reason = finish_reason::length,
                              .usage = {.prompt_tokens = 4, .completion_tokens = 2}};
  bench_record done;
  read_outcome(response_of(net::encode_generate_result(3, result)), done);
  CHECK(done.success);
  CHECK(done.prompt_tokens == 4);
  CHECK(done.output_tokens == 2);
  CHECK_FALSE(done.migrated);  // the server sends no such key yet

  result.reason = finish_reason::abort;
  bench_record aborted;
  read_outcome(response_of(net::encode_generate_result(3, result)), aborted);
  CHECK_FALSE(aborted.success);
  CHECK(aborted.error_kind == "finish_reason");
}

TEST_CASE("migrated: true in a result map is read, and an error map gives its code") {
  bench_record migrated;
  read_outcome(
    response_of(response_bytes(
      1,
      [](auto& pk) {
        pk.pack_map(4).pack("finish_reason").pack("length").pack("migrated").pack(true);
        pk.pack("usage").pack_map(2).pack("prompt_tokens").pack(3).pack("completion_tokens").pack(5);
        pk.pack("output_ids").pack(std::vector<int32_t>{});
      })),
    migrated);
  CHECK(migrated.success);
  CHECK(migrated.migrated);

  bench_record rejected;
  read_outcome(response_of(net::encode_error(2, net::make_overloaded("queue: full", 50))), rejected);
  CHECK_FALSE(rejected.success);
  CHECK(rejected.error_kind == "429");
  CHECK(rejected.error == "queue: full");

  bench_record garbled;
  read_outcome(response_of(response_bytes(1, [](auto& pk) { pk.pack("not a map"); })), garbled);
  CHECK_FALSE(garbled.success);
  CHECK(garbled.error_kind == "protocol");
}

TEST_CASE("models gives the first model, and an error answer is an input_error") {
  const served_model model = read_models(response_of(response_bytes(1, [](auto& pk) {
    pk.pack_array(1).pack_map(3).pack("id").pack("tiny").pack("max_context").pack(128);
    pk.pack("vocab_size").pack(1000);
  })));
  CHECK(model.id == "tiny");
  CHECK(model.vocab_size == 1000);
  CHECK(model.max_context == 128);
  CHECK_THROWS_AS(static_cast<void>(read_models(
                    response_of(net::encode_error(1, net::make_error(net::rpc_errc::internal, "boom"))))),
                  input_error);
}
