// net/http/http_response.hpp
// HTTP/1.1 responses as bytes: a whole one (Content-Length), the head of a chunked one (a
// Server-Sent Events stream) and its chunks, and an error in OpenAI's shape with the wire's
// status code (Retry-After on a 429 or 503).
#pragma once

#include <string>
#include <string_view>

#include "net/rpc_errors.hpp"

namespace moe::net {

/// "OK", "Bad Request", ... ("Unknown" for a code not listed).
[[nodiscard]] std::string_view reason_phrase(int status) noexcept;

/// A whole response. `extra_headers`: more header lines, each ending in "\r\n".
[[nodiscard]] std::string http_response(int status, std::string_view content_type, std::string_view body,
                                        bool keep_alive, std::string_view extra_headers = {});

/// The head of a chunked response (text/event-stream for SSE); chunks follow.
[[nodiscard]] std::string http_stream_head(int status, std::string_view content_type, bool keep_alive);
/// One chunk of a chunked body (none for empty data: that would end the body).
[[nodiscard]] std::string http_chunk(std::string_view data);
inline constexpr std::string_view http_last_chunk = "0\r\n\r\n";

/// `error` as a JSON response ({"error": {...}}) with its code as the status; a 429 or 503
/// says Retry-After (whole seconds, rounded up).
[[nodiscard]] std::string http_error_response(const rpc_error& error, bool keep_alive);

}  // namespace moe::net
