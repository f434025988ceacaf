// net/rpc_errors.cpp
#include "net/rpc_errors.hpp"

#include <utility>

namespace moe::net {

std::string_view type_name(rpc_errc code) noexcept {
  switch (code) {
    case rpc_errc::invalid_request: return "invalid_request";
    case rpc_errc::auth: return "auth";
    case rpc_errc::forbidden: return "forbidden";
    case rpc_errc::unknown_method: return "unknown_method";
    case rpc_errc::too_large: return "too_large";
    case rpc_errc::validation: return "validation";
    case rpc_errc::overloaded: return "overloaded";
    case rpc_errc::cancelled: return "cancelled";
    case rpc_errc::internal: return "internal";
    case rpc_errc::unavailable: return "unavailable";
  }
  return "internal";
}

bool is_retryable(rpc_errc code) noexcept {
  return code == rpc_errc::overloaded || code == rpc_errc::unavailable;
}

rpc_error make_error(rpc_errc code, std::string message) {
  return rpc_error{.code = code, .message = std::move(message)};
}

rpc_error make_overloaded(std::string message, uint32_t retry_after_ms) {
  return rpc_error{
    .code = rpc_errc::overloaded, .message = std::move(message), .retry_after_ms = retry_after_ms};
}

rpc_error make_unavailable(std::string message, uint32_t retry_after_ms) {
  return rpc_error{
    .code = rpc_errc::unavailable, .message = std::move(message), .retry_after_ms = retry_after_ms};
}

}  // namespace moe::net
