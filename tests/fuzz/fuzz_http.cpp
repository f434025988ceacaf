// tests/fuzz/fuzz_http.cpp
// libFuzzer target over the HTTP front's boundary: the request parser (bytes split at a
// fuzzer-chosen piece size) and, for every request it yields, its body through the JSON reader
// and OpenAI's translations into the wire's params, which the wire's validator then reads. Besides
// ASan/UBSan findings it traps when a documented invariant breaks:
//   - an error's status is one the connection answers (400, 413, 431, 501, 505);
//   - nothing comes out of a parser after an error;
//   - the same bytes fed whole and fed in pieces give the same requests (unless a limit fired);
//   - no request holds more than the limits allow;
//   - every error rendered is a well-formed HTTP response whose JSON body parses.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "net/generate_request.hpp"
#include "net/http/http_request.hpp"
#include "net/http/http_response.hpp"
#include "net/http/json_values.hpp"
#include "net/http/openai_request.hpp"

using namespace moe::net;

namespace {

const http_limits fuzz_limits{.max_head_bytes = 2048, .max_headers = 16, .max_body_bytes = 4096};

void check(bool invariant) {
  if (!invariant)
    __builtin_trap();
}

struct parsed {
  std::vector<http_request> requests;
  std::optional<http_parse_error> error;
};

parsed parse(std::string_view bytes, size_t piece) {
  http_request_parser parser(fuzz_limits);
  parsed out;
  for (size_t i = 0; i < bytes.size() && !out.error; i += piece) {
    const size_t before = out.requests.size();
    out.error = parser.feed(bytes.substr(i, piece), out.requests);
    if (out.error) {
      check(out.requests.size() >= before);
      std::vector<http_request> after;
      check(parser.feed("GET / HTTP/1.1\r\n\r\n", after).has_value() && after.empty());
    }
  }
  return out;
}

void check_error_response(const rpc_error& e) {
  const std::string bytes = http_error_response(e, true);
  const size_t head_end = bytes.find("\r\n\r\n");
  check(bytes.starts_with("HTTP/1.1 ") && head_end != std::string::npos);
  check(!nlohmann::json::parse(bytes.substr(head_end + 4), nullptr, false).is_discarded());
}

void translate(const http_request& r) {
  auto body = parse_json_body(r.body);
  if (auto* err = std::get_if<rpc_error>(&body))
    return check_error_response(*err);
  const nlohmann::json& value = std::get<nlohmann::json>(body);
  for (const openai_endpoint endpoint : {openai_endpoint::completions, openai_endpoint::chat}) {
    auto t = translate_generate(value, endpoint, "tiny");
    if (auto* err = std::get_if<rpc_error>(&t)) {
      check_error_response(*err);
      continue;
    }
    const msgpack::sbuffer& params = std::get<translated_generate>(t).params;
    const msgpack::object_handle oh = msgpack::unpack(params.data(), params.size());
    auto g = parse_generate(oh.get());
    if (auto* err = std::get_if<rpc_error>(&g))
      check_error_response(*err);
  }
  (void)translate_tokenize(value, "tiny");
  (void)translate_detokenize(value, "tiny");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0)
    return 0;
  const size_t piece = 1 + data[0] % 64;
  const std::string_view bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const parsed whole = parse(bytes, bytes.size() + 1);
  const parsed pieces = parse(bytes, piece);
  if (!whole.error && !pieces.error) {
    check(whole.requests.size() == pieces.requests.size());
    for (size_t i = 0; i < whole.requests.size(); ++i) {
      check(whole.requests[i].target == pieces.requests[i].target);
      check(whole.requests[i].body == pieces.requests[i].body);
      check(whole.requests[i].headers == pieces.requests[i].headers);
    }
  }
  for (const parsed* p : {&whole, &pieces}) {
    if (p->error) {
      const int s = p->error->status;
      check(s == 400 || s == 413 || s == 431 || s == 501 || s == 505);
    }
    for (const http_request& r : p->requests) {
      check(r.body.size() <= fuzz_limits.max_body_bytes && r.headers.size() <= fuzz_limits.max_headers);
      translate(r);
    }
  }
  return 0;
}
