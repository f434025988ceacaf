// net/http/http_request.hpp
// HTTP/1.1 requests from a byte stream, parsed by Node's C parser (libhttp-parser): an
// incremental parser that turns bytes arriving in any pieces, pipelined requests included, into
// whole requests, and refuses what breaks the limits before it holds more than they allow: a
// request head (request line and headers) over max_head_bytes or with more than max_headers
// headers is a 431, a body over max_body_bytes (declared by Content-Length, or chunked) a 413,
// bytes that are not HTTP a 400, a version other than 1.x a 505. No sockets: the connection
// (net/http/) feeds it.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace moe::net {

/// What one HTTP connection may send in one request.
struct http_limits {
  size_t max_head_bytes = size_t{16} << 10;  // request line + headers, as received
  size_t max_headers = 64;
  size_t max_body_bytes = size_t{2} << 20;  // as the wire's max_frame_bytes
};

/// One request. Header names are lower-cased; values as sent (surrounding blanks trimmed).
struct http_request {
  std::string method;  // "GET", "POST", ...
  std::string target;  // "/v1/completions?x=1": the request-target as sent
  int version_minor = 1;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;        // chunked bodies joined
  bool keep_alive = true;  // HTTP/1.1 unless "Connection: close"; HTTP/1.0 only with keep-alive
  /// The first header named `name` (lower case), or null.
  [[nodiscard]] const std::string* header(std::string_view name) const;
  /// The target without its query string.
  [[nodiscard]] std::string_view path() const;
};

/// Why the stream cannot go on: the status to answer (400, 413, 431, 501, 505) before closing.
struct http_parse_error {
  int status = 400;
  std::string message;
};

class http_request_parser {
 public:
  explicit http_request_parser(http_limits limits = {});
  ~http_request_parser();
  http_request_parser(const http_request_parser&) = delete;
  http_request_parser& operator=(const http_request_parser&) = delete;

  /// Parses `bytes`, appending each request completed to `out`. After an error nothing more
  /// is parsed: the connection answers it and closes.
  [[nodiscard]] std::optional<http_parse_error> feed(std::string_view bytes, std::vector<http_request>& out);
  /// A request has begun and is not complete (its head's deadline runs: slow clients).
  [[nodiscard]] bool mid_request() const noexcept;

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace moe::net
