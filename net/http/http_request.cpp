// net/http/http_request.cpp
#include "net/http/http_request.hpp"

#include <http_parser.h>

#include <algorithm>
#include <cctype>

namespace moe::net {

const std::string* http_request::header(std::string_view name) const {
  for (const auto& [key, value] : headers)
    if (key == name)
      return &value;
  return nullptr;
}

std::string_view http_request::path() const {
  const std::string_view t = target;
  return t.substr(0, t.find('?'));
}

struct http_request_parser::state {
  http_limits limits;
  http_parser parser{};
  http_parser_settings settings{};
  http_request current;
  size_t head_bytes = 0;
  bool in_request = false;
  bool value_last = false;  // the last header callback was a value (a new field begins a header)
  std::vector<http_request>* out = nullptr;
  std::optional<http_parse_error> error;

  static state& of(http_parser* p) { return *static_cast<state*>(p->data); }

  // Counts head bytes; false (stop) past the limit.
  bool head(size_t n) {
    head_bytes += n;
    if (head_bytes <= limits.max_head_bytes)
      return true;
    error = http_parse_error{431,
                             "the request head is over " + std::to_string(limits.max_head_bytes) + " bytes"};
    return false;
  }

  state(http_limits l) : limits(l) {
    http_parser_init(&parser, HTTP_REQUEST);
    parser.data = this;
    settings.on_message_begin = [](http_parser* p) {
      state& s = of(p);
      s.current = {};
      s.head_bytes = 0;
      s.value_last = false;
      s.in_request = true;
      return 0;
    };
    settings.on_url = [](http_parser* p, const char* at, size_t n) {
      state& s = of(p);
      if (!s.head(n))
        return 1;
      s.current.target.append(at, n);
      return 0;
    };
    settings.on_header_field = [](http_parser* p, const char* at, size_t n) {
      state& s = of(p);
      if (!s.head(n))
        return 1;
      if (s.current.headers.empty() || s.value_last) {
        if (s.current.headers.size() == s.limits.max_headers) {
          s.error = http_parse_error{431, "more than " + std::to_string(s.limits.max_headers) + " headers"};
          return 1;
        }
        s.current.headers.emplace_back();
      }
      s.value_last = false;
      std::string& name = s.current.headers.back().first;
      for (size_t i = 0; i < n; ++i)
        name.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(at[i]))));
      return 0;
    };
    settings.on_header_value = [](http_parser* p, const char* at, size_t n) {
      state& s = of(p);
      if (!s.head(n))
        return 1;
      s.value_last = true;
      s.current.headers.back().second.append(at, n);
      return 0;
    };
    settings.on_headers_complete = [](http_parser* p) {
      state& s = of(p);
      if (p->http_major != 1) {
        s.error = http_parse_error{505, "HTTP/" + std::to_string(p->http_major) + "." +
                                          std::to_string(p->http_minor) +
                                          " is not supported (HTTP/1.x only)"};
        return -1;
      }
      if ((p->flags & F_CONTENTLENGTH) && p->content_length > s.limits.max_body_bytes) {
        s.error = http_parse_error{413, "the body's Content-Length " + std::to_string(p->content_length) +
                                          " is over " + std::to_string(s.limits.max_body_bytes) + " bytes"};
        return -1;  // http_parser: an error (1 would mean "no body")
      }
      http_request& r = s.current;
      r.method = http_method_str(static_cast<http_method>(p->method));
      r.version_minor = p->http_minor;
      r.keep_alive = http_should_keep_alive(p) != 0;
      for (auto& [name, value] : r.headers) {  // trim the value's blanks
        const size_t b = value.find_first_not_of(" \t");
        const size_t e = value.find_last_not_of(" \t");
        value = b == std::string::npos ? std::string() : value.substr(b, e - b + 1);
      }
      return 0;
    };
    settings.on_body = [](http_parser* p, const char* at, size_t n) {
      state& s = of(p);
      if (s.current.body.size() + n > s.limits.max_body_bytes) {
        s.error = http_parse_error{413,
                                   "the body is over " + std::to_string(s.limits.max_body_bytes) + " bytes"};
        return 1;
      }
      s.current.body.append(at, n);
      return 0;
    };
    settings.on_message_complete = [](http_parser* p) {
      state& s = of(p);
      s.in_request = false;
      s.out->push_back(std::move(s.current));
      s.current = {};
      return 0;
    };
  }
};

http_request_parser::http_request_parser(http_limits limits) : state_(std::make_unique<state>(limits)) {}

http_request_parser::~http_request_parser() = default;

std::optional<http_parse_error> http_request_parser::feed(std::string_view bytes,
                                                          std::vector<http_request>& out) {
  state& s = *state_;
  if (s.error)
    return s.error;
  s.out = &out;
  const size_t parsed = http_parser_execute(&s.parser, &s.settings, bytes.data(), bytes.size());
  s.out = nullptr;
  if (s.error)
    return s.error;
  const auto err = static_cast<http_errno>(s.parser.http_errno);
  if (err == HPE_HEADER_OVERFLOW)
    s.error = http_parse_error{431, "the request head is too large"};
  else if (err != HPE_OK)
    s.error = http_parse_error{400, std::string("not an HTTP/1.x request: ") + http_errno_description(err)};
  else if (s.parser.upgrade)
    s.error = http_parse_error{501, "protocol upgrades (and CONNECT) are not supported"};
  else if (parsed != bytes.size())
    s.error = http_parse_error{400, "not an HTTP/1.x request"};
  return s.error;
}

bool http_request_parser::mid_request() const noexcept { return state_->in_request; }

}  // namespace moe::net
