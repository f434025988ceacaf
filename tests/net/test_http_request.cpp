// tests/net/test_http_request.cpp
// The HTTP/1.1 request parser: requests in any pieces, pipelined ones, chunked bodies,
// keep-alive by version and header, and each limit's status (431, 413, 400, 501). The bytes are
// written out by hand here, as a client sends them.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "net/http/http_request.hpp"

using namespace moe::net;

namespace {

std::vector<http_request> parse_all(const std::string& bytes, http_limits limits = {}, size_t piece = 0) {
  http_request_parser parser(limits);
  std::vector<http_request> out;
  if (piece == 0) {
    auto err = parser.feed(bytes, out);
    if (err)
      FAIL_CHECK(err->message);
    return out;
  }
  for (size_t i = 0; i < bytes.size(); i += piece) {
    auto err = parser.feed(std::string_view(bytes).substr(i, piece), out);
    if (err)
      FAIL_CHECK(err->message);
  }
  return out;
}

http_parse_error refused(const std::string& bytes, http_limits limits = {}) {
  http_request_parser parser(limits);
  std::vector<http_request> out;
  auto err = parser.feed(bytes, out);
  REQUIRE(err.has_value());
  return *err;
}

const std::string post_body =
  "POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
  "Content-Length: 14\r\nX-Padded:   two words  \r\n\r\n{\"prompt\":\"a\"}";

}  // namespace

TEST_CASE("http: a request's method, target, path, headers and body, in one piece or byte by byte") {
  for (size_t piece : {size_t{0}, size_t{1}, size_t{7}}) {
    CAPTURE(piece);
    const auto requests = parse_all(post_body, {}, piece);
    REQUIRE(requests.size() == 1);
    const http_request& r = requests[0];
    CHECK(r.method == "POST");
    CHECK(r.target == "/v1/completions?x=1");
    CHECK(r.path() == "/v1/completions");
    CHECK(r.body == "{\"prompt\":\"a\"}");
    REQUIRE(r.header("content-type"));
    CHECK(*r.header("content-type") == "application/json");
    REQUIRE(r.header("x-padded"));
    CHECK(*r.header("x-padded") == "two words");  // blanks around a value trimmed
    CHECK(r.header("missing") == nullptr);
    CHECK(r.keep_alive);
  }
}

TEST_CASE("http: pipelined requests come out in order and a partial one is mid_request") {
  const std::string two = "GET /health HTTP/1.1\r\nHost: a\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n";
  http_request_parser parser;
  std::vector<http_request> out;
  REQUIRE_FALSE(parser.feed(two + "GET /rea", out));
  REQUIRE(out.size() == 2);
  CHECK(out[0].path() == "/health");
  CHECK(out[1].path() == "/v1/models");
  CHECK(parser.mid_request());
  REQUIRE_FALSE(parser.feed("dy HTTP/1.1\r\n\r\n", out));
  REQUIRE(out.size() == 3);
  CHECK(out[2].path() == "/ready");
  CHECK_FALSE(parser.mid_request());
}

TEST_CASE("http: a chunked body is joined") {
  const std::string chunked = "POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "5\r\n{\"pro\r\n"
                              "a\r\nmpt\":\"hi\"}\r\n"
                              "0\r\n\r\n";
  const auto requests = parse_all(chunked, {}, 3);
  REQUIRE(requests.size() == 1);
  CHECK(requests[0].body == "{\"prompt\":\"hi\"}");
}

TEST_CASE("http: keep-alive by version and Connection header") {
  auto keep = [](const std::string& version, const std::string& connection) {
    std::string bytes = "GET / " + version + "\r\n";
    if (!connection.empty())
      bytes += "Connection: " + connection + "\r\n";
    const auto requests = parse_all(bytes + "\r\n");
    REQUIRE(requests.size() == 1);
    return requests[0].keep_alive;
  };
  CHECK(keep("HTTP/1.1", ""));
  CHECK_FALSE(keep("HTTP/1.1", "close"));
  CHECK_FALSE(keep("HTTP/1.0", ""));
  CHECK(keep("HTTP/1.0", "keep-alive"));
}

TEST_CASE("http: limits: head bytes and header count are 431, a body over the limit 413") {
  http_limits limits{.max_head_bytes = 256, .max_headers = 4, .max_body_bytes = 16};
  const http_parse_error long_header =
    refused("GET / HTTP/1.1\r\nX-Long: " + std::string(300, 'a') + "\r\n\r\n", limits);
  CHECK(long_header.status == 431);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 5; ++i)
    many += "X-" + std::to_string(i) + ": v\r\n";
  const http_parse_error too_many = refused(many + "\r\n", limits);
  CHECK(too_many.status == 431);
  CHECK(too_many.message.find("4 headers") != std::string::npos);
  // declared: refused at the head, before any body byte is held
  const http_parse_error declared = refused("POST / HTTP/1.1\r\nContent-Length: 17\r\n\r\n", limits);
  CHECK(declared.status == 413);
  const http_parse_error chunked = refused(
    "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n1\r\nx\r\n", limits);
  CHECK(chunked.status == 413);
  // at the limits exactly: accepted
  CHECK(parse_all("POST / HTTP/1.1\r\nContent-Length: 16\r\n\r\n0123456789abcdef", limits).size() == 1);
}

TEST_CASE(
  "http: bytes that are not HTTP are a 400, an upgrade a 501, HTTP/9 a 505, and nothing after is parsed") {
  CHECK(refused("HELLO\r\n\r\n").status == 400);
  CHECK(refused("GET / HTTP/9.9\r\n\r\n").status == 505);
  CHECK(refused("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n").status == 400);
  CHECK(refused("GET / HTTP/1.1\r\nBad Header\r\n\r\n").status == 400);
  CHECK(refused("GET / HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n").status == 501);
  http_request_parser parser;
  std::vector<http_request> out;
  REQUIRE(parser.feed("garbage\r\n\r\n", out));
  REQUIRE(parser.feed("GET / HTTP/1.1\r\n\r\n", out));  // the stream cannot be followed
  CHECK(out.empty());
}
