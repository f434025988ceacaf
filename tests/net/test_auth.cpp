// tests/net/test_auth.cpp
// The auth policy: starting roles, the role each token grants for every combination of keys,
// which methods a role may call, auth's params, and the constant-time comparison's answers.
#include <doctest/doctest.h>

#include "net/auth.hpp"
#include "net/wire.hpp"

using namespace moe::net;
using namespace moe::testing;

TEST_CASE("without an api key a connection starts as client, with one it must authenticate") {
  CHECK(initial_role({}) == auth_role::client);
  CHECK(initial_role({.api_key = "", .admin_key = "a"}) == auth_role::client);
  CHECK(initial_role({.api_key = "k", .admin_key = ""}) == auth_role::none);
  CHECK(initial_role({.api_key = "k", .admin_key = "a"}) == auth_role::none);
}

TEST_CASE("a token grants admin for the admin key, client for the api key, else nothing") {
  const auth_keys both{.api_key = "client-key", .admin_key = "admin-key"};
  CHECK(role_for(both, "client-key") == auth_role::client);
  CHECK(role_for(both, "admin-key") == auth_role::admin);
  CHECK(role_for(both, "client-ke") == auth_role::none);    // a prefix
  CHECK(role_for(both, "client-key ") == auth_role::none);  // one byte more
  CHECK(role_for(both, "") == auth_role::none);
  const auth_keys client_only{.api_key = "k", .admin_key = ""};
  CHECK(role_for(client_only, "k") == auth_role::client);
  CHECK(role_for(client_only, "") == auth_role::none);  // an unset admin key matches nothing
  const auth_keys admin_only{.api_key = "", .admin_key = "a"};
  CHECK(role_for(admin_only, "a") == auth_role::admin);
  CHECK(role_for(admin_only, "") == auth_role::none);
  CHECK(role_for(admin_only, "b") == auth_role::none);
  CHECK(role_for({}, "anything") == auth_role::client);  // no keys: nothing to check
}

TEST_CASE("health and auth are open to all, every other method from client up") {
  for (const char* name : {"generate", "cancel", "tokenize", "detokenize", "models", "ready", "stats"}) {
    CAPTURE(name);
    const rpc_method method = *find_method(name);
    CHECK_FALSE(may_call(auth_role::none, method));
    CHECK(may_call(auth_role::client, method));
    CHECK(may_call(auth_role::admin, method));
  }
  CHECK(may_call(auth_role::none, rpc_method::health));
  CHECK(may_call(auth_role::none, rpc_method::auth));
  CHECK(role_name(auth_role::client) == "client");
  CHECK(role_name(auth_role::admin) == "admin");
}

TEST_CASE("auth takes one string token") {
  const auto ok = unpack_one(packed([](packer& pk) { pk.pack_array(1).pack("secret"); }));
  const auto token = parse_auth(ok.get());
  REQUIRE(std::holds_alternative<std::string>(token));
  CHECK(std::get<std::string>(token) == "secret");
  const auto number = unpack_one(packed([](packer& pk) { pk.pack_array(1).pack(5); }));
  const auto bad = parse_auth(number.get());
  REQUIRE(std::holds_alternative<rpc_error>(bad));
  CHECK(std::get<rpc_error>(bad).code == rpc_errc::validation);
  CHECK(std::get<rpc_error>(bad).message.rfind("token: ", 0) == 0);
  const auto none = unpack_one(packed([](packer& pk) { pk.pack_array(0); }));
  CHECK(std::get<rpc_error>(parse_auth(none.get())).code == rpc_errc::invalid_request);
  const auto long_token =
    unpack_one(packed([](packer& pk) { pk.pack_array(1).pack(std::string(2000, 'x')); }));
  CHECK(std::get<rpc_error>(parse_auth(long_token.get())).code == rpc_errc::too_large);
  CHECK(unauthenticated("generate").code == rpc_errc::auth);
  CHECK(wrong_token().code == rpc_errc::auth);
}

TEST_CASE("equal_constant_time: equal only for the same bytes, never for an unset key") {
  CHECK(equal_constant_time("abc", "abc"));
  CHECK_FALSE(equal_constant_time("abd", "abc"));
  CHECK_FALSE(equal_constant_time("ab", "abc"));
  CHECK_FALSE(equal_constant_time("abcabc", "abc"));  // the key repeated is not the key
  CHECK_FALSE(equal_constant_time("", "abc"));
  CHECK_FALSE(equal_constant_time("", ""));
  CHECK_FALSE(equal_constant_time("x", ""));
}
