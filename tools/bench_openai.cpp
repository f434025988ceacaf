// tools/bench_openai.cpp
#include "tools/bench_openai.hpp"

#include <http_parser.h>

#include <nlohmann/json.hpp>

#include "config/model_config.hpp"

namespace moe::tools {

namespace {

using json = nlohmann::json;

std::string head(const std::string& method, const std::string& path, const std::string& host,
                 const std::string& api_key) {
  std::string out = method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nAccept: */*\r\n";
  if (!api_key.empty())
    out += "Authorization: Bearer " + api_key + "\r\n";
  return out;
}

}  // namespace

std::string models_http_request(const std::string& host, const std::string& base_path,
                                const std::string& api_key) {
  return head("GET", base_path + "/models", host, api_key) + "\r\n";
}

std::string completion_http_request(const std::string& host, const std::string& base_path,
                                    const std::string& api_key, const std::string& model,
                                    const bench_request& req, const load_shape& shape) {
  json body = {{"model", model},   {"max_tokens", req.output_len},
               {"temperature", 0}, {"ignore_eos", true},
               {"stream", true},   {"stream_options", {{"include_usage", true}}}};
  if (shape.prompt)
    body["prompt"] = *shape.prompt;
  else
    body["prompt"] = req.input_ids;
  const std::string text = body.dump();
  return head("POST", base_path + "/completions", host, api_key) +
         "Content-Type: application/json\r\nContent-Length: " + std::to_string(text.size()) + "\r\n\r\n" +
         text;
}

struct http_response_reader::state {
  http_parser parser{};
  http_parser_settings settings{};
  std::vector<http_event>* out = nullptr;
  bool sse = false;
  std::string line;  // an SSE line not ended yet
  std::string body;  // a body that is not SSE
  std::string event_data;
  std::string header_field, header_value;  // the header being read (in pieces)
  bool header_value_last = false;

  static state& of(http_parser* p) { return *static_cast<state*>(p->data); }

  /// A whole header read: the body is SSE when its Content-Type says so.
  void header_done() {
    std::string lower;
    for (const char c : header_field)
      lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    if (lower == "content-type" && header_value.find("text/event-stream") != std::string::npos)
      sse = true;
    header_field.clear();
    header_value.clear();
  }

  void sse_bytes(const char* at, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      const char c = at[i];
      if (c != '\n') {
        line.push_back(c);
        continue;
      }
      if (!line.empty() && line.back() == '\r')
        line.pop_back();
      if (line.empty()) {  // the event ends
        if (!event_data.empty())
          out->push_back(
            {http_event::kind::data, static_cast<int>(parser.status_code), std::move(event_data)});
        event_data.clear();
      } else if (line.starts_with("data:")) {
        std::string_view v = std::string_view(line).substr(5);
        if (!v.empty() && v.front() == ' ')
          v.remove_prefix(1);
        if (!event_data.empty())
          event_data.push_back('\n');
        event_data.append(v);
      }
      line.clear();
    }
  }

  state() {
    http_parser_init(&parser, HTTP_RESPONSE);
    parser.data = this;
    settings.on_message_begin = [](http_parser* p) {
      state& s = of(p);
      s.sse = false;
      s.line.clear();
      s.body.clear();
      s.event_data.clear();
      s.header_field.clear();
      s.header_value.clear();
      s.header_value_last = false;
      return 0;
    };
    settings.on_header_field = [](http_parser* p, const char* at, size_t n) {
      state& s = of(p);
      if (s.header_value_last)
        s.header_done();
      s.header_value_last = false;
      s.header_field.append(at, n);
      return 0;
    };
    settings.on_header_value = [](http_parser* p, const char* at, size_t n) {
      state& s = of(p);
      s.header_value_last = true;
      s.header_value.append(at, n);
      return 0;
    };
    settings.on_headers_complete = [](http_parser* p) {
      state& s = of(p);
      s.header_done();
      s.out->push_back({http_event::kind::head, static_cast<int>(p->status_code), {}});
      return 0;
    };
    settings.on_body = [](http_parser* p, const char* at, size_t n) {
      state& s = of(p);
      if (s.sse)
        s.sse_bytes(at, n);
      else
        s.body.append(at, n);
      return 0;
    };
    settings.on_message_complete = [](http_parser* p) {
      state& s = of(p);
      if (s.sse && !s.event_data.empty())
        s.out->push_back({http_event::kind::data, static_cast<int>(p->status_code), std::move(s.event_data)});
      s.out->push_back({http_event::kind::body_end, static_cast<int>(p->status_code), std::move(s.body)});
      s.event_data.clear();
      s.body.clear();
      return 0;
    };
  }
};

http_response_reader::http_response_reader() : state_(std::make_unique<state>()) {}

http_response_reader::~http_response_reader() = default;

std::optional<std::string> http_response_reader::feed(std::string_view bytes, std::vector<http_event>& out) {
  state& s = *state_;
  s.out = &out;
  const size_t parsed = http_parser_execute(&s.parser, &s.settings, bytes.data(), bytes.size());
  s.out = nullptr;
  const auto err = static_cast<http_errno>(s.parser.http_errno);
  if (err != HPE_OK || parsed != bytes.size())
    return std::string("not an HTTP response: ") + http_errno_description(err);
  return std::nullopt;
}

served_model read_models_json(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].is_object() || !j["data"][0].contains("id") || !j["data"][0]["id"].is_string())
    throw input_error("models: expected {\"data\": [{\"id\": ...}]}, got " + body.substr(0, 200));
  const json& m = j["data"][0];
  served_model out{.id = m["id"].get<std::string>()};
  auto integer = [](const json& v) { return v.is_number_integer() ? v.get<int64_t>() : int64_t{0}; };
  if (m.contains("vocab_size"))
    out.vocab_size = integer(m["vocab_size"]);
  if (m.contains("max_model_len"))
    out.max_context = integer(m["max_model_len"]);
  if (m.contains("meta") && m["meta"].is_object()) {  // llama-server
    if (out.vocab_size == 0 && m["meta"].contains("n_vocab"))
      out.vocab_size = integer(m["meta"]["n_vocab"]);
    if (out.max_context == 0 && m["meta"].contains("n_ctx_train"))
      out.max_context = integer(m["meta"]["n_ctx_train"]);
  }
  return out;
}

completion_chunk read_completion_chunk(const std::string& data) {
  completion_chunk c;
  if (data == "[DONE]") {
    c.done = true;
    return c;
  }
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    c.error = "an unreadable event: " + data.substr(0, 200);
    return c;
  }
  if (j.contains("error")) {
    const json& e = j["error"];
    c.error = e.is_object() && e.contains("message") && e["message"].is_string()
                ? e["message"].get<std::string>()
                : e.dump();
    return c;
  }
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const json& choice = j["choices"][0];
    if (choice.contains("text") && choice["text"].is_string() &&
        !choice["text"].get_ref<const std::string&>().empty())
      c.has_text = true;
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
      c.finish_reason = choice["finish_reason"].get<std::string>();
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    const json& u = j["usage"];
    if (u.contains("prompt_tokens") && u["prompt_tokens"].is_number_integer())
      c.prompt_tokens = u["prompt_tokens"].get<int64_t>();
    if (u.contains("completion_tokens") && u["completion_tokens"].is_number_integer())
      c.completion_tokens = u["completion_tokens"].get<int64_t>();
  }
  return c;
}

std::string read_error_message(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (!j.is_discarded() && j.is_object() && j.contains("error")) {
    const json& e = j["error"];
    if (e.is_object() && e.contains("message") && e["message"].is_string())
      return e["message"].get<std::string>();
    if (e.is_string())
      return e.get<std::string>();
  }
  return body.substr(0, 200);
}

}  // namespace moe::tools
