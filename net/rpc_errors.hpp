// net/rpc_errors.hpp
// The wire API's error value: a map {code, type, message, retryable, retry_after_ms?} with
// HTTP-like codes. Plain data; net/rpc_frame.hpp packs it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moe::net {

/// HTTP-like error codes of the wire API.
enum class rpc_errc : uint16_t {
  invalid_request = 400,  // not a well-formed MessagePack-RPC message or params shape
  auth = 401,             // missing or wrong credentials
  forbidden = 403,        // an admin method on a connection that is not admin
  unknown_method = 404,   // no such method
  too_large = 413,        // a frame, string, array or prompt above its limit
  validation = 422,       // a field of the wrong type or out of range; unknown keys
  overloaded = 429,       // a bounded queue is full: retry after retry_after_ms
  cancelled = 499,        // the client cancelled the request
  internal = 500,         // a bug or a failed rank; the request did not complete
  unavailable = 503,      // no rank can take the request now (starting, draining, failed)
};

/// "invalid_request", "auth", "forbidden", "unknown_method", "too_large", "validation", "overloaded",
/// "cancelled", "internal", "unavailable".
[[nodiscard]] std::string_view type_name(rpc_errc code) noexcept;
/// True for overloaded and unavailable: the same request may succeed later.
[[nodiscard]] bool is_retryable(rpc_errc code) noexcept;

struct rpc_error {
  rpc_errc code = rpc_errc::internal;
  std::string message;  // starts with the field it is about, when there is one
  std::optional<uint32_t> retry_after_ms;
};

[[nodiscard]] rpc_error make_error(rpc_errc code, std::string message);
/// A 429 with a retry hint.
[[nodiscard]] rpc_error make_overloaded(std::string message, uint32_t retry_after_ms);
/// A 503 with a retry hint.
[[nodiscard]] rpc_error make_unavailable(std::string message, uint32_t retry_after_ms);

}  // namespace moe::net
