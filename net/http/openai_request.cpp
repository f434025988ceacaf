// net/http/openai_request.cpp
#include "net/http/openai_request.hpp"

#include <array>
#include <utility>

#include "net/http/json_values.hpp"

namespace moe::net {
namespace {

using json = nlohmann::json;

/// Keys passed to generate as they are (the wire checks them: vLLM's names are its names).
constexpr std::array passed_through = {
  "temperature",
  "top_p",
  "top_k",
  "min_p",
  "seed",
  "stop",
  "stop_token_ids",
  "presence_penalty",
  "frequency_penalty",
  "repetition_penalty",
  "ignore_eos",
};

bool is_passed_through(std::string_view key) {
  for (const char* k : passed_through)
    if (key == k)
      return true;
  return false;
}

rpc_error bad_field(std::string_view field, std::string_view expected, const json& got) {
  return make_error(rpc_errc::invalid_request, std::string(field) + ": expected " + std::string(expected) +
                                                 ", got " + dump_json(got).substr(0, 64));
}

std::optional<rpc_error> check_object(const json& body) {
  if (!body.is_object())
    return make_error(rpc_errc::invalid_request, "body: expected a JSON object");
  return std::nullopt;
}

std::optional<rpc_error> check_model(const json& body, std::string_view served_model) {
  auto it = body.find("model");
  if (it == body.end() || it->is_null())
    return std::nullopt;
  if (!it->is_string())
    return bad_field("model", "a string", *it);
  if (it->get_ref<const std::string&>() != served_model)
    return unknown_model(it->get_ref<const std::string&>(), served_model);
  return std::nullopt;
}

/// A message's content: a string, or OpenAI's parts [{type: "text", text}] joined.
std::variant<std::string, rpc_error> content_text(const json& content, const std::string& field) {
  if (content.is_string())
    return content.get<std::string>();
  if (!content.is_array())
    return bad_field(field, "a string or an array of text parts", content);
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string part_field = field + "[" + std::to_string(i) + "]";
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string())
      return bad_field(part_field, "{\"type\": \"text\", \"text\": string} (only text parts are served)",
                       part);
    text += part["text"].get<std::string>();
  }
  return text;
}

/// Chat messages as the wire's [{role, content}]: content parts joined, "developer" as
/// "system" (OpenAI's newer name), a message's "name" dropped; anything else is left for the
/// wire's validator to name.
std::variant<json, rpc_error> wire_messages(const json& messages) {
  if (!messages.is_array())
    return bad_field("messages", "an array of messages", messages);
  json out = json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!m.is_object())
      return bad_field(field, "an object", m);
    json wire = json::object();
    for (const auto& [key, value] : m.items()) {
      if (key == "name")
        continue;
      if (key == "content") {
        auto text = content_text(value, field + ".content");
        if (auto* err = std::get_if<rpc_error>(&text))
          return *err;
        wire["content"] = std::get<std::string>(std::move(text));
      } else if (key == "role" && value == "developer") {
        wire["role"] = "system";
      } else {
        wire[key] = value;
      }
    }
    out.push_back(std::move(wire));
  }
  return out;
}

/// completions' prompt: a string, token ids, or a batch of one of them.
std::optional<rpc_error> completion_prompt(const json& prompt, json& wire) {
  const json* p = &prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array()))
    p = &(*p)[0];  // a batch of one
  if (p->is_string()) {
    wire["prompt"] = *p;
    return std::nullopt;
  }
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array()))
    return make_error(rpc_errc::invalid_request,
                      "prompt: a batch of " + std::to_string(p->size()) + " prompts; one prompt per request");
  if (p->is_array()) {
    wire["input_ids"] = *p;  // the wire names a bad id ("input_ids[3]: ...")
    return std::nullopt;
  }
  return bad_field("prompt", "a string or an array of token ids", prompt);
}

/// A field of OpenAI's that is accepted only with its default value.
std::optional<rpc_error> default_only(const json& body, std::string_view key, const json& allowed,
                                      std::string_view what) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null() || *it == allowed)
    return std::nullopt;
  return make_error(rpc_errc::invalid_request,
                    std::string(key) + ": only " + std::string(what) + " is supported");
}

msgpack::sbuffer params_of(const json& map) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(1);
  pack_json(pk, map);
  return out;
}

}  // namespace

rpc_error unknown_model(std::string_view model, std::string_view served_model) {
  return make_error(rpc_errc::unknown_method, "model: \"" + std::string(model) +
                                                "\" does not exist (this server serves \"" +
                                                std::string(served_model) + "\")");
}

std::variant<translated_generate, rpc_error> translate_generate(const json& body, openai_endpoint endpoint,
                                                                std::string_view served_model) {
  if (auto err = check_object(body))
    return *err;
  if (auto err = check_model(body, served_model))
    return *err;
  const bool chat = endpoint == openai_endpoint::chat;
  translated_generate out;
  out.request.endpoint = endpoint;
  out.request.model = served_model;
  json wire = json::object();
  std::optional<int64_t> top_logprobs;
  bool chat_logprobs = false;
  for (const auto& [key, value] : body.items()) {
    if (key == "model" || key == "user")
      continue;
    if (is_passed_through(key)) {
      wire[key] = value;
    } else if (key == "prompt" && !chat) {
      if (auto err = completion_prompt(value, wire))
        return *err;
    } else if (key == "messages" && chat) {
      auto messages = wire_messages(value);
      if (auto* err = std::get_if<rpc_error>(&messages))
        return *err;
      wire["messages"] = std::get<json>(std::move(messages));
    } else if (key == "max_tokens" || (key == "max_completion_tokens" && chat)) {
      if (!value.is_null() && (key == "max_completion_tokens" || !body.contains("max_completion_tokens") ||
                               body["max_completion_tokens"].is_null())) {
        wire["max_tokens"] = value;  // max_completion_tokens wins: OpenAI's newer name
        out.request.max_tokens_given = true;
      }
    } else if (key == "stream") {
      if (!value.is_null() && !value.is_boolean())
        return bad_field("stream", "a boolean", value);
      out.request.stream = value.is_boolean() && value.get<bool>();
    } else if (key == "stream_options") {
      if (value.is_null())
        continue;
      if (!value.is_object())
        return bad_field("stream_options", "an object", value);
      for (const auto& [option, v] : value.items()) {
        if (option == "include_usage" && v.is_boolean())
          out.request.include_usage = v.get<bool>();
        else if (option == "continuous_usage_stats" && v.is_boolean() && !v.get<bool>())
          continue;
        else
          return bad_field("stream_options." + option,
                           option == "include_usage" ? "a boolean" : "include_usage", v);
      }
    } else if (key == "n") {
      if (!value.is_null() && value != 1)
        return make_error(rpc_errc::invalid_request, "n: only 1 is supported (one choice per request)");
    } else if (key == "logprobs") {
      if (value.is_null())
        continue;
      if (chat) {
        if (!value.is_boolean())
          return bad_field("logprobs", "a boolean", value);
        chat_logprobs = value.get<bool>();
      } else {
        if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 20)
          return bad_field("logprobs", "an integer in [0, 20]", value);
        wire["logprobs"] = value;
        out.request.logprobs = true;
      }
    } else if (key == "top_logprobs" && chat) {
      if (value.is_null())
        continue;
      if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 20)
        return bad_field("top_logprobs", "an integer in [0, 20]", value);
      top_logprobs = value.get<int64_t>();
    } else if (key == "echo") {
      if (auto err = default_only(body, key, false, "false"))
        return *err;
    } else if (key == "best_of") {
      if (auto err = default_only(body, key, 1, "1"))
        return *err;
    } else if (key == "suffix") {
      if (auto err = default_only(body, key, json(), "null"))
        return *err;
    } else if (key == "logit_bias") {
      if (auto err = default_only(body, key, json::object(), "an empty map"))
        return *err;
    } else {
      return make_error(rpc_errc::invalid_request, std::string(key) + ": unrecognized request argument");
    }
  }
  if (top_logprobs && !chat_logprobs)
    return make_error(rpc_errc::invalid_request, "top_logprobs: needs logprobs: true");
  if (chat_logprobs) {
    wire["logprobs"] = top_logprobs.value_or(0);
    out.request.logprobs = true;
  }
  if (chat && !wire.contains("messages"))
    return make_error(rpc_errc::invalid_request, "messages: required");
  if (!chat && !wire.contains("prompt") && !wire.contains("input_ids"))
    return make_error(rpc_errc::invalid_request, "prompt: required");
  if (chat && !out.request.max_tokens_given)
    wire["fill_context"] = true;  // OpenAI's chat default: the rest of the context
  wire["stream"] = out.request.stream;
  out.params = params_of(wire);
  return out;
}

std::variant<msgpack::sbuffer, rpc_error> translate_tokenize(const json& body,
                                                             std::string_view served_model) {
  if (auto err = check_object(body))
    return *err;
  if (auto err = check_model(body, served_model))
    return *err;
  json wire = body;
  wire.erase("model");
  if (auto it = wire.find("messages"); it != wire.end()) {
    auto messages = wire_messages(*it);
    if (auto* err = std::get_if<rpc_error>(&messages))
      return *err;
    *it = std::get<json>(std::move(messages));
  }
  return params_of(wire);
}

std::variant<msgpack::sbuffer, rpc_error> translate_detokenize(const json& body,
                                                               std::string_view served_model) {
  if (auto err = check_object(body))
    return *err;
  if (auto err = check_model(body, served_model))
    return *err;
  for (const auto& [key, value] : body.items())
    if (key != "model" && key != "tokens")
      return make_error(rpc_errc::invalid_request, key + ": unrecognized request argument");
  auto it = body.find("tokens");
  if (it == body.end())
    return make_error(rpc_errc::invalid_request, "tokens: required");
  return params_of(*it);  // [ids]: detokenize's params
}

}  // namespace moe::net
