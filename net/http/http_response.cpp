// net/http/http_response.cpp
#include "net/http/http_response.hpp"

#include <cstdio>

#include "net/http/json_values.hpp"
#include "net/http/openai_response.hpp"

namespace moe::net {

std::string_view reason_phrase(int status) noexcept {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 422: return "Unprocessable Entity";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

namespace {

std::string head(int status, std::string_view content_type, bool keep_alive) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason_phrase(status)) + "\r\n";
  out += "Server: moeserve\r\nContent-Type: ";
  out += content_type;
  out += "\r\n";
  if (!keep_alive)
    out += "Connection: close\r\n";
  return out;
}

}  // namespace

std::string http_response(int status, std::string_view content_type, std::string_view body, bool keep_alive,
                          std::string_view extra_headers) {
  std::string out = head(status, content_type, keep_alive);
  out += extra_headers;
  out += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  out += body;
  return out;
}

std::string http_stream_head(int status, std::string_view content_type, bool keep_alive) {
  return head(status, content_type, keep_alive) +
         "Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n";
}

std::string http_chunk(std::string_view data) {
  if (data.empty())
    return {};
  char size[24];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out = size;
  out += data;
  out += "\r\n";
  return out;
}

std::string http_error_response(const rpc_error& error, bool keep_alive) {
  std::string extra;
  if (error.retry_after_ms && (error.code == rpc_errc::overloaded || error.code == rpc_errc::unavailable))
    extra = "Retry-After: " + std::to_string((*error.retry_after_ms + 999) / 1000) + "\r\n";
  if (error.code == rpc_errc::auth)
    extra += "WWW-Authenticate: Bearer\r\n";
  return http_response(static_cast<int>(error.code), "application/json", dump_json(error_json(error)),
                       keep_alive, extra);
}

}  // namespace moe::net
