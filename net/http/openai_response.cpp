// net/http/openai_response.cpp
#include "net/http/openai_response.hpp"

#include <span>
#include <string_view>
#include <vector>

#include "net/http/json_values.hpp"
#include "net/http/wire_values.hpp"

namespace moe::net {
namespace {

using json = nlohmann::json;

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
    for (const msgpack::object& t : array_items(logprobs)) {
      const std::string token = token_text(tok, integer_of(find_key(t, "token_id")));
      json top = json::array();
      for (const msgpack::object& pair : array_items(find_key(t, "top_logprobs"))) {
        const auto p = array_items(&pair);
        if (p.size() != 2)
          continue;
        const std::string alt = token_text(tok, integer_of(&p[0]));
        top.push_back({{"token", alt}, {"logprob", number_of(&p[1])}, {"bytes", utf8_bytes(alt)}});
      }
      content.push_back({{"token", token},
                         {"logprob", number_of(find_key(t, "logprob"))},
                         {"bytes", utf8_bytes(token)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top_logprobs = json::array(),
       text_offset = json::array();
  for (const msgpack::object& t : array_items(logprobs)) {
    const std::string token = token_text(tok, integer_of(find_key(t, "token_id")));
    tokens.push_back(token);
    token_logprobs.push_back(number_of(find_key(t, "logprob")));
    json top = json::object();
    for (const msgpack::object& pair : array_items(find_key(t, "top_logprobs"))) {
      const auto p = array_items(&pair);
      if (p.size() == 2)
        top[token_text(tok, integer_of(&p[0]))] = number_of(&p[1]);
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
  const msgpack::object* usage = find_key(result, "usage");
  const int64_t prompt = usage ? integer_of(find_key(*usage, "prompt_tokens")) : 0;
  const int64_t completion = usage ? integer_of(find_key(*usage, "completion_tokens")) : 0;
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
  const std::string text = text_of(find_key(result, "text"));
  if (chat)
    choice["message"] = {{"role", "assistant"}, {"content", text}};
  else
    choice["text"] = text;
  const msgpack::object* logprobs = find_key(result, "logprobs");
  choice["logprobs"] = answer.request.logprobs && logprobs
                         ? logprobs_json(answer.request.endpoint, logprobs, tok)
                         : json(nullptr);
  choice["finish_reason"] = text_of(find_key(result, "finish_reason"));
  json out = envelope(answer, chat ? "chat.completion" : "text_completion");
  out["choices"] = json::array({std::move(choice)});
  out["usage"] = usage_json(result);
  return out;
}

json chunk_json(const openai_answer& answer, const msgpack::object& token_params, const tokenizer& tok) {
  const auto p = array_items(&token_params);  // [msgid, seq, token_ids, text_delta(, logprobs)]
  const bool chat = is_chat(answer);
  const std::string delta = p.size() > 3 ? text_of(&p[3]) : std::string();
  json choice = {{"index", 0}};
  if (chat) {
    choice["delta"] = {{"content", delta}};
    if (p.size() > 1 && integer_of(&p[1]) == 0)
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
  choice["finish_reason"] = text_of(find_key(result, "finish_reason"));
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
  for (const msgpack::object& m : array_items(&models))
    data.push_back({{"id", text_of(find_key(m, "id"))},
                    {"object", "model"},
                    {"created", created},
                    {"owned_by", "moeserve"},
                    {"max_model_len", integer_of(find_key(m, "max_context"))},
                    {"vocab_size", integer_of(find_key(m, "vocab_size"))}});
  return {{"object", "list"}, {"data", std::move(data)}};
}

json tokenize_json(const msgpack::object& ids, int64_t max_model_len) {
  json tokens = json::array();
  for (const msgpack::object& id : array_items(&ids))
    tokens.push_back(integer_of(&id));
  const size_t count = tokens.size();
  return {{"count", count}, {"max_model_len", max_model_len}, {"tokens", std::move(tokens)}};
}

}  // namespace moe::net
