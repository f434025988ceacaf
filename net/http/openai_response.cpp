// net/http/openai_response.cpp
#include "net/http/openai_response.hpp"

#include <span>
#include <string_view>
#include <vector>

#include "net/http/json_values.hpp"

namespace moe::net {
namespace {

using json = nlohmann::json;

const msgpack::object* find(const msgpack::object& map, std::string_view key) {
  if (map.type != msgpack::type::MAP)
    return nullptr;
  for (const msgpack::object_kv& kv : std::span(map.via.map.ptr, map.via.map.size))
    if (kv.key.type == msgpack::type::STR && std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) == key)
      return &kv.val;
  return nullptr;
}

std::span<const msgpack::object> items(const msgpack::object* array) {
  if (!array || array->type != msgpack::type::ARRAY)
    return {};
  return {array->via.array.ptr, array->via.array.size};
}

std::string str(const msgpack::object* value) {
  if (!value || value->type != msgpack::type::STR)
    return {};
  return {value->via.str.ptr, value->via.str.size};
}

int64_t integer(const msgpack::object* value) {
  if (!value)
    return 0;
  if (value->type == msgpack::type::POSITIVE_INTEGER)
    return static_cast<int64_t>(value->via.u64);
  if (value->type == msgpack::type::NEGATIVE_INTEGER)
    return value->via.i64;
  return 0;
}

double number(const msgpack::object* value) {
  if (value && (value->type == msgpack::type::FLOAT32 || value->type == msgpack::type::FLOAT64))
    return value->via.f64;
  return static_cast<double>(integer(value));
}

std::string token_text(const tokenizer& tok, int64_t id) {
  return tok.decode(std::vector<int32_t>{static_cast<int32_t>(id)});
}

json utf8_bytes(const std::string& s) {
  json out = json::array();
  for (const char c : s)
    out.push_back(static_cast<unsigned char>(c));
  return out;
}

/// The wire's per-token logprobs [{token_id, logprob, top_logprobs: [[id, logprob], ...]}] in
/// the endpoint's shape: completions' {tokens, token_logprobs, top_logprobs, text_offset}
/// (offsets from `offset`), chat's {content: [{token, logprob, bytes, top_logprobs}]}.
json logprobs_json(openai_endpoint endpoint, const msgpack::object* logprobs, const tokenizer& tok,
                   size_t offset = 0) {
  if (endpoint == openai_endpoint::chat) {
    json content = json::array();
    for (const msgpack::object& t : items(logprobs)) {
      const std::string token = token_text(tok, integer(find(t, "token_id")));
      json top = json::array();
      for (const msgpack::object& pair : items(find(t, "top_logprobs"))) {
        const auto p = items(&pair);
        if (p.size() != 2)
          continue;
        const std::string alt = token_text(tok, integer(&p[0]));
        top.push_back({{"token", alt}, {"logprob", number(&p[1])}, {"bytes", utf8_bytes(alt)}});
      }
      content.push_back({{"token", token},
                         {"logprob", number(find(t, "logprob"))},
                         {"bytes", utf8_bytes(token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const msgpack::object& t : items(logprobs)) {
    const std::string token = token_text(tok, integer(find(t, "token_id")));
    tokens.push_back(token);
    token_logprobs.push_back(number(find(t, "logprob")));
    json top = json::object();
    for (const msgpack::object& pair : items(find(t, "top_logprobs"))) {
      const auto p = items(&pair);
      if (p.size() == 2)
        top[token_text(tok, integer(&p[0]))] = number(&p[1]);
    }
    top_logprobs.push_back(std::move(top));
    text_offset.push_back(offset);
    offset += token.size();
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(token_logprobs)},
          {"top_logprobs", std::move(top_logprobs)},
          {"text_offset", std::move(text_offset)}};
}

json usage_json(const msgpack::object& result) {
  const msgpack::object* usage = find(result, "usage");
  const int64_t prompt = usage ? integer(find(*usage, "prompt_tokens")) : 0;
  const int64_t completion = usage ? integer(find(*usage, "completion_tokens")) : 0;
  return {
    {"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}};
}

json envelope(const openai_answer& answer, std::string_view object) {
  return {
    {"id", answer.id}, {"object", object}, {"created", answer.created}, {"model", answer.request.model}};
}

bool is_chat(const openai_answer& answer) { return answer.request.endpoint == openai_endpoint::chat; }

/// The field an error message starts with ("max_tokens: expected ...", "stop[2]: ..."), or null.
json param_of(const std::string& message) {
  const size_t colon = message.find(": ");
  if (colon == std::string::npos || colon == 0 || message.find(' ') < colon)
    return nullptr;
  return message.substr(0, colon);
}

std::string_view openai_type(rpc_errc code) {
  switch (code) {
    case rpc_errc::auth: return "authentication_error";
    case rpc_errc::forbidden: return "permission_error";
    case rpc_errc::unknown_method: return "not_found_error";
    case rpc_errc::overloaded: return "rate_limit_error";
    case rpc_errc::internal: return "server_error";
    case rpc_errc::unavailable: return "service_unavailable";
    default: return "invalid_request_error";
  }
}

}  // namespace

json completion_json(const openai_answer& answer, const msgpack::object& result, const tokenizer& tok) {
  const bool chat = is_chat(answer);
  json choice = {{"index", 0}};
  const std::string text = str(find(result, "text"));
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  const msgpack::object* logprobs = find(result, "logprobs");
  choice["logprobs"] = answer.request.logprobs && logprobs
                         ? logprobs_json(answer.request.endpoint, logprobs, tok)
                         : json(nullptr);
  choice["finish_reason"] = str(find(result, "finish_reason"));
  json out = envelope(answer, chat ? "chat.completion" : "text_completion");
  out["choices"] = json::array({std::move(choice)});
  out["usage"] = usage_json(result);
  return out;
}

json chunk_json(const openai_answer& answer, const msgpack::object& token_params, const tokenizer& tok) {
  const auto p = items(&token_params);  // [msgid, seq, token_ids, text_delta(, logprobs)]
  const bool chat = is_chat(answer);
  const std::string delta = p.size() > 3 ? str(&p[3]) : std::string();
  json choice = {{"index", 0}};
  if (chat) {
    choice["delta"] = {{"content", delta}};
    if (p.size() > 1 && integer(&p[1]) == 0)
      choice["delta"]["role"] = "assistant";
  } else {
    choice["text"] = delta;
  }
  choice["logprobs"] = answer.request.logprobs && p.size() > 4
                         ? logprobs_json(answer.request.endpoint, &p[4], tok)
                         : json(nullptr);
  choice["finish_reason"] = nullptr;
  json out = envelope(answer, chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = json::array({std::move(choice)});
  return out;
}

json::array_t final_chunks_json(const openai_answer& answer, const msgpack::object& result) {
  const bool chat = is_chat(answer);
  const std::string_view object = chat ? "chat.completion.chunk" : "text_completion";
  json choice = {{"index", 0}};
  if (chat)
    choice["delta"] = json::object();
  else
    choice["text"] = "";
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = str(find(result, "finish_reason"));
  json last = envelope(answer, object);
  last["choices"] = json::array({std::move(choice)});
  json::array_t out{std::move(last)};
  if (answer.request.include_usage) {
    json usage = envelope(answer, object);
    usage["choices"] = json::array();
    usage["usage"] = usage_json(result);
    out.push_back(std::move(usage));
  }
  return out;
}

json error_json(const rpc_error& error) {
  return {{"error",
           {{"message", error.message},
            {"type", openai_type(error.code)},
            {"param", param_of(error.message)},
            {"code", type_name(error.code)}}}};
}

std::string sse_event(const json& data) { return "data: " + dump_json(data) + "\n\n"; }

json models_json(const msgpack::object& models, int64_t created) {
  json data = json::array();
  for (const msgpack::object& m : items(&models))
    data.push_back({{"id", str(find(m, "id"))},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "moeserve"},
                    {"max_model_len", integer(find(m, "max_context"))},
                    {"vocab_size", integer(find(m, "vocab_size"))}});
  return {{"object", "list"}, {"data", std::move(data)}};
}

json tokenize_json(const msgpack::object& ids, int64_t max_model_len) {
  json tokens = json::array();
  for (const msgpack::object& id : items(&ids))
    tokens.push_back(integer(&id));
  const size_t count = tokens.size();
  return {{"count", count}, {"max_model_len", max_model_len}, {"tokens", std::move(tokens)}};
}

}  // namespace moe::net
