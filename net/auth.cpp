// net/auth.cpp
#include "net/auth.hpp"

#include <msgpack.hpp>

#include "net/field_readers.hpp"

namespace moe::net {

std::string_view role_name(auth_role role) noexcept {
  switch (role) {
    case auth_role::client: return "client";
    case auth_role::admin: return "admin";
    case auth_role::none: break;
  }
  return "none";
}

auth_role initial_role(const auth_keys& keys) noexcept {
  return keys.api_key.empty() ? auth_role::client : auth_role::none;
}

auth_role role_for(const auth_keys& keys, std::string_view token) noexcept {
  if (keys.api_key.empty() && keys.admin_key.empty())
    return auth_role::client;
  const bool admin = equal_constant_time(token, keys.admin_key);  // both, whatever the first gives
  const bool client = equal_constant_time(token, keys.api_key);
  return admin ? auth_role::admin : client ? auth_role::client : auth_role::none;
}

bool may_call(auth_role role, rpc_method method) noexcept {
  if (method == rpc_method::health || method == rpc_method::auth)
    return true;
  if (is_admin_method(method))
    return role == auth_role::admin;
  return role >= auth_role::client;
}

std::variant<std::string, rpc_error> parse_auth(const msgpack::object& params, size_t max_bytes) {
  if (params.type != msgpack::type::ARRAY || params.via.array.size != 1)
    return make_error(rpc_errc::invalid_request, "params: expected [token]");
  std::string token;
  if (maybe_error err = read_string(params.via.array.ptr[0], "token", max_bytes, token))
    return *err;
  return token;
}

rpc_error unauthenticated(std::string_view method) {
  return make_error(rpc_errc::auth,
                    std::string(method) + ": authenticate first ([0, msgid, \"auth\", [key]])");
}

rpc_error forbidden(std::string_view method) {
  return make_error(rpc_errc::forbidden,
                    std::string(method) + ": admin connections only (auth with the admin key)");
}

rpc_error wrong_token() { return make_error(rpc_errc::auth, "token: matches no key of this server"); }

bool equal_constant_time(std::string_view given, std::string_view key) noexcept {
  if (key.empty())  // an unset key matches nothing
    return false;
  unsigned diff = given.size() != key.size() ? 1u : 0u;
  for (size_t i = 0; i < given.size(); ++i)  // no early exit: OR every difference
    diff |= static_cast<unsigned char>(given[i]) ^ static_cast<unsigned char>(key[i % key.size()]);
  return diff == 0;
}

}  // namespace moe::net
