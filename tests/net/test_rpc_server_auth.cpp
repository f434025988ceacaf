// tests/net/test_rpc_server_auth.cpp
// Keys through the server: without keys everything is open and auth answers client; with an
// api key every method but health is a 401 until auth, a wrong token is a 401 and the third
// closes the connection, the api key and the admin key both open generate.
#include <doctest/doctest.h>

#include "net/server_fixture.hpp"
#include "net/wire.hpp"

using namespace moe;
using namespace moe::testing;

namespace {

std::string auth_bytes(uint32_t msgid, const std::string& token) {
  return request_bytes(msgid, "auth", std::vector<std::string>{token});
}

/// [0, msgid, "generate", [{input_ids: [0, 5, 6], max_tokens: 2, temperature: 0}]]
std::string small_generate(uint32_t msgid) {
  return packed([&](packer& pk) {
    pk.pack_array(4).pack(0).pack(msgid).pack("generate").pack_array(1).pack_map(3);
    pk.pack("input_ids").pack(std::vector<int32_t>{0, 5, 6}).pack("max_tokens").pack(2);
    pk.pack("temperature").pack(0);
  });
}

std::string role_of(const net::rpc_response& r) { return result_map(r).at("role").as<std::string>(); }

const net::auth_keys keys{.api_key = "client-secret", .admin_key = "admin-secret"};

}  // namespace

TEST_CASE_FIXTURE(server_fixture, "without keys everything is open and auth answers client") {
  if (skip_without_tokenizer())
    return;
  start();
  test_client c(server->port());
  CHECK(error_code(ask(c, small_generate(1))) == 0);
  const net::rpc_response r = ask(c, auth_bytes(2, "whatever"));
  REQUIRE(error_code(r) == 0);
  CHECK(role_of(r) == "client");
}

TEST_CASE_FIXTURE(server_fixture, "with an api key only health answers before auth") {
  if (skip_without_tokenizer())
    return;
  start({}, keys);
  test_client c(server->port());
  CHECK(error_code(ask(c, request_bytes(1, "health", std::vector<int>{}))) == 0);
  const net::rpc_response denied = ask(c, small_generate(2));
  REQUIRE(error_code(denied) == 401);
  const auto err = denied.error.as<std::map<std::string, msgpack::object>>();
  CHECK(err.at("type").as<std::string>() == "auth");
  CHECK_FALSE(err.at("retryable").as<bool>());
  for (const char* method : {"models", "stats", "ready"})
    CHECK(error_code(ask(c, request_bytes(3, method, std::vector<int>{}))) == 401);
  CHECK(error_code(ask(c, request_bytes(4, "tokenize", std::vector<std::string>{"hi"}))) == 401);
  CHECK(error_code(ask(c, request_bytes(5, "cancel", std::vector<uint32_t>{2}))) == 401);
  c.send(notification_bytes("cancel", std::vector<uint32_t>{2}));
  const net::rpc_message m = c.next();
  const auto* note = std::get_if<net::rpc_notification>(&m);
  REQUIRE(note != nullptr);
  CHECK(note->method == "error");
  CHECK(note->params.via.array.ptr[0].as<std::map<std::string, msgpack::object>>().at("code").as<int>() ==
        401);
  CHECK(error_code(ask(c, request_bytes(6, "nope", std::vector<int>{}))) == 404);
}

TEST_CASE_FIXTURE(server_fixture,
                  "the api key and the admin key open the connection, a wrong token does not") {
  if (skip_without_tokenizer())
    return;
  start({}, keys);
  test_client client(server->port());
  CHECK(error_code(ask(client, auth_bytes(1, "client-secreT"))) == 401);
  CHECK(error_code(ask(client, small_generate(2))) == 401);
  const net::rpc_response ok = ask(client, auth_bytes(3, "client-secret"));
  REQUIRE(error_code(ok) == 0);
  CHECK(role_of(ok) == "client");
  CHECK(error_code(ask(client, small_generate(4))) == 0);

  test_client admin(server->port());
  const net::rpc_response as_admin = ask(admin, auth_bytes(1, "admin-secret"));
  REQUIRE(error_code(as_admin) == 0);
  CHECK(role_of(as_admin) == "admin");
  CHECK(error_code(ask(admin, small_generate(2))) == 0);  // admin includes client access

  // pipelined: auth is answered before the generate behind it is read
  test_client pipelined(server->port());
  pipelined.send(auth_bytes(1, "client-secret") + small_generate(2));
  CHECK(error_code(pipelined.next_response()) == 0);
  CHECK(error_code(pipelined.next_response()) == 0);
}

TEST_CASE_FIXTURE(server_fixture, "the third wrong token closes the connection after its 401") {
  if (skip_without_tokenizer())
    return;
  start({}, keys);
  test_client c(server->port());
  CHECK(error_code(ask(c, auth_bytes(1, "guess-1"))) == 401);
  CHECK(error_code(ask(c, auth_bytes(2, "guess-2"))) == 401);
  CHECK(error_code(ask(c, auth_bytes(3, "guess-3"))) == 401);
  CHECK(c.closed_by_server());
  test_client fresh(server->port());  // only that connection
  CHECK(error_code(ask(fresh, auth_bytes(1, "client-secret"))) == 0);
}
