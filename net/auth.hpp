// net/auth.hpp
// Who a connection is: the role the `auth` method grants for a token, given the keys `moeserve
// serve` was started with (--api-key, --admin-key), compared in constant time; and which methods
// a role may call. Plain policy, no sockets.
//
//   no --api-key    a connection starts as client: every method is open, as without auth
//   --api-key K     it starts unauthenticated: every method but health and auth is a 401 until
//                   `auth` with K (client) or the admin key (admin)
//   --admin-key A   `auth` with A makes it admin (client methods too); without it nobody is admin
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include <msgpack/object_fwd.hpp>

#include "net/rpc_errors.hpp"
#include "net/rpc_methods.hpp"

namespace moe::net {

/// Ordered: admin may do whatever client may.
enum class auth_role : uint8_t { none, client, admin };

/// "none", "client", "admin".
[[nodiscard]] std::string_view role_name(auth_role role) noexcept;

/// The keys a server checks; an empty key is not set.
struct auth_keys {
  std::string api_key;
  std::string admin_key;
};

/// A connection's role before it calls auth: client without an api key, else none.
[[nodiscard]] auth_role initial_role(const auth_keys& keys) noexcept;

/// 403 for an admin method on a connection that is not admin.
[[nodiscard]] rpc_error forbidden(std::string_view method);

/// The role `token` grants: admin for the admin key, client for the api key, none for anything
/// else; client for any token when no key is set. Both keys are always compared, each in time
/// that depends on the token's length only.
[[nodiscard]] auth_role role_for(const auth_keys& keys, std::string_view token) noexcept;

/// Whether `role` may call `method`: health and auth always, the rest from client up.
[[nodiscard]] bool may_call(auth_role role, rpc_method method) noexcept;

/// auth's params: [token], a str of at most max_bytes bytes.
[[nodiscard]] std::variant<std::string, rpc_error> parse_auth(const msgpack::object& params,
                                                              size_t max_bytes = 1024);

/// 401 for a method called before auth: "<method>: authenticate first ...".
[[nodiscard]] rpc_error unauthenticated(std::string_view method);
/// 401 for a token that matches no key.
[[nodiscard]] rpc_error wrong_token();

/// Whether two strings are equal, in time that depends on given.size() only (not on where they
/// differ, nor on the key's length).
[[nodiscard]] bool equal_constant_time(std::string_view given, std::string_view key) noexcept;

}  // namespace moe::net
