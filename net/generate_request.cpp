// net/generate_request.cpp
#include "net/generate_request.hpp"

#include <array>
#include <set>
#include <span>
#include <string_view>
#include <utility>

#include <msgpack.hpp>

#include "net/field_readers.hpp"
#include "net/prompt_fields.hpp"

namespace moe::net {
namespace {

using field_parser = maybe_error (*)(const msgpack::object&, const request_limits&, generate_request&);

maybe_error parse_prompt(const msgpack::object& v, const request_limits& limits, generate_request& req) {
  if (maybe_error err = read_string(v, "prompt", limits.max_prompt_bytes, req.prompt))
    return err;
  if (req.prompt.empty())
    return field_error("prompt", "a non-empty string", v);
  req.kind = prompt_kind::text;
  return std::nullopt;
}

maybe_error parse_messages(const msgpack::object& v, const request_limits& limits, generate_request& req) {
  if (maybe_error err = read_messages(v, limits.max_messages, limits.max_prompt_bytes, req.messages))
    return err;
  req.kind = prompt_kind::chat;
  return std::nullopt;
}

maybe_error parse_input_ids(const msgpack::object& v, const request_limits& limits, generate_request& req) {
  if (maybe_error err = read_token_ids(v, "input_ids", limits.max_input_ids, limits.max_token_id,
                                       req.input_ids))
    return err;
  if (req.input_ids.empty())
    return field_error("input_ids", "a non-empty array", v);
  req.kind = prompt_kind::token_ids;
  return std::nullopt;
}

maybe_error parse_stop(const msgpack::object& v, const request_limits& limits, generate_request& req) {
  std::vector<std::string>& stop = req.sampling.stop;
  if (v.type == msgpack::type::STR) {  // vLLM takes one string or a list of them
    stop.resize(1);
    if (maybe_error err = read_string(v, "stop", limits.max_stop_string_bytes, stop[0]))
      return err;
    return stop[0].empty() ? field_error("stop", "a non-empty string", v) : maybe_error();
  }
  if (v.type != msgpack::type::ARRAY)
    return field_error("stop", "a string or an array of them", v);
  const std::span items(v.via.array.ptr, v.via.array.size);
  if (items.size() > limits.max_stop_strings)
    return field_too_large("stop", std::to_string(items.size()) + " strings", limits.max_stop_strings);
  stop.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string field = "stop[" + std::to_string(i) + "]";
    if (maybe_error err = read_string(items[i], field, limits.max_stop_string_bytes, stop[i]))
      return err;
    if (stop[i].empty())
      return field_error(field, "a non-empty string", items[i]);
  }
  return std::nullopt;
}

maybe_error parse_stop_token_ids(const msgpack::object& v, const request_limits& limits,
                                 generate_request& req) {
  return read_token_ids(v, "stop_token_ids", limits.max_stop_token_ids, limits.max_token_id,
                        req.sampling.stop_token_ids);
}

maybe_error parse_max_tokens(const msgpack::object& v, const request_limits& limits, generate_request& req) {
  int64_t n = 0;
  if (maybe_error err = read_int(v, "max_tokens", 1, limits.max_tokens, n))
    return err;
  req.sampling.max_tokens = static_cast<int32_t>(n);
  return std::nullopt;
}

maybe_error parse_top_k(const msgpack::object& v, const request_limits&, generate_request& req) {
  int64_t k = 0;
  if (maybe_error err = read_int(v, "top_k", -1, std::numeric_limits<int32_t>::max(), k))
    return err;
  req.sampling.top_k = static_cast<int32_t>(k);
  return std::nullopt;
}

maybe_error parse_seed(const msgpack::object& v, const request_limits&, generate_request& req) {
  if (v.type != msgpack::type::POSITIVE_INTEGER)
    return field_error("seed", "an integer in [0, 2^64)", v);
  req.sampling.seed = v.via.u64;
  return std::nullopt;
}

maybe_error parse_logprobs(const msgpack::object& v, const request_limits& limits, generate_request& req) {
  int64_t n = 0;
  if (maybe_error err = read_int(v, "logprobs", 0, limits.max_logprobs, n))
    return err;
  req.sampling.logprobs = static_cast<int32_t>(n);
  return std::nullopt;
}

maybe_error parse_n(const msgpack::object& v, const request_limits&, generate_request&) {
  int64_t n = 0;
  if (read_int(v, "n", 1, 1, n))
    return field_error("n", "1 (one sequence per request)", v);
  return std::nullopt;
}

maybe_error parse_model(const msgpack::object& v, const request_limits&, generate_request& req) {
  return read_string(v, "model", 256, req.model);
}

maybe_error parse_ignore_eos(const msgpack::object& v, const request_limits&, generate_request& req) {
  return read_bool(v, "ignore_eos", req.sampling.ignore_eos);
}

maybe_error parse_stream(const msgpack::object& v, const request_limits&, generate_request& req) {
  return read_bool(v, "stream", req.stream);
}

maybe_error parse_fill_context(const msgpack::object& v, const request_limits&, generate_request& req) {
  return read_bool(v, "fill_context", req.fill_context);
}

/// A known key: parsed by `parse`, or a float of sampling_params (any number here; the ranges
/// are sampling's validate(), as the CLI's).
struct field_parser_entry {
  std::string_view name;
  field_parser parse = nullptr;
  float sampling_params::*number = nullptr;
};

constexpr std::array fields = {
  field_parser_entry{"prompt", parse_prompt},
  field_parser_entry{"messages", parse_messages},
  field_parser_entry{"input_ids", parse_input_ids},
  field_parser_entry{"max_tokens", parse_max_tokens},
  field_parser_entry{"temperature", nullptr, &sampling_params::temperature},
  field_parser_entry{"top_p", nullptr, &sampling_params::top_p},
  field_parser_entry{"top_k", parse_top_k},
  field_parser_entry{"min_p", nullptr, &sampling_params::min_p},
  field_parser_entry{"seed", parse_seed},
  field_parser_entry{"stop", parse_stop},
  field_parser_entry{"stop_token_ids", parse_stop_token_ids},
  field_parser_entry{"presence_penalty", nullptr, &sampling_params::presence_penalty},
  field_parser_entry{"frequency_penalty", nullptr, &sampling_params::frequency_penalty},
  field_parser_entry{"repetition_penalty", nullptr, &sampling_params::repetition_penalty},
  field_parser_entry{"ignore_eos", parse_ignore_eos},
  field_parser_entry{"logprobs", parse_logprobs},
  field_parser_entry{"stream", parse_stream},
  field_parser_entry{"fill_context", parse_fill_context},
  field_parser_entry{"n", parse_n},
  field_parser_entry{"model", parse_model},
};

const field_parser_entry* find_field(std::string_view name) {
  for (const field_parser_entry& f : fields)
    if (f.name == name)
      return &f;
  return nullptr;
}

/// The sampler's "top_p must be in (0, 1], got 0." as "top_p: expected in (0, 1], got 0.".
std::string field_first(const std::string& sampler_error) {
  const size_t at = sampler_error.find(" must be ");
  if (at == std::string::npos || sampler_error.find(' ') != at)
    return sampler_error;
  return sampler_error.substr(0, at) + ": expected " + sampler_error.substr(at + 9);
}

}  // namespace

std::variant<generate_request, rpc_error> parse_generate(const msgpack::object& params,
                                                         const request_limits& limits) {
  if (params.type != msgpack::type::ARRAY || params.via.array.size != 1 ||
      params.via.array.ptr[0].type != msgpack::type::MAP)
    return make_error(rpc_errc::invalid_request, "params: expected [ {map} ]");
  const msgpack::object_map& map = params.via.array.ptr[0].via.map;
  generate_request req;
  std::set<std::string_view> seen;
  int num_prompts = 0;
  bool max_tokens_given = false;
  for (const msgpack::object_kv& kv : std::span(map.ptr, map.size)) {
    if (kv.key.type != msgpack::type::STR)
      return field_error("params", "string keys", kv.key);
    const std::string_view key(kv.key.via.str.ptr, kv.key.via.str.size);
    const field_parser_entry* field = find_field(key);
    if (!field)
      return make_error(rpc_errc::validation, printable(key) + ": unknown key");
    if (!seen.insert(field->name).second)
      return make_error(rpc_errc::validation, std::string(key) + ": given twice");
    if (kv.val.type == msgpack::type::NIL)
      continue;  // null: not given
    if (maybe_error err = field->number ? read_float(kv.val, field->name, req.sampling.*field->number)
                                        : field->parse(kv.val, limits, req))
      return *err;
    if (key == "prompt" || key == "messages" || key == "input_ids")
      ++num_prompts;
    max_tokens_given = max_tokens_given || key == "max_tokens";
  }
  if (num_prompts == 0)
    return make_error(rpc_errc::validation, "prompt: one of prompt, messages or input_ids is required");
  if (num_prompts > 1)
    return make_error(rpc_errc::validation, "prompt: give only one of prompt, messages or input_ids");
  if (req.fill_context && !max_tokens_given)
    req.sampling.max_tokens = limits.max_tokens;  // the cap; the bridge lowers it to what fits
  if (const std::string err = validate(req.sampling); !err.empty())
    return make_error(rpc_errc::validation, field_first(err));
  return req;
}

std::optional<rpc_error> check_context(size_t num_prompt_tokens, int32_t max_tokens, size_t max_model_len) {
  if (num_prompt_tokens >= max_model_len)
    return make_error(rpc_errc::too_large, "prompt: " + std::to_string(num_prompt_tokens) +
                                             " tokens, the context holds " + std::to_string(max_model_len));
  if (num_prompt_tokens + static_cast<size_t>(max_tokens) > max_model_len)
    return make_error(rpc_errc::validation,
                      "max_tokens: expected at most " + std::to_string(max_model_len - num_prompt_tokens) +
                        " (the prompt is " + std::to_string(num_prompt_tokens) + " tokens of a " +
                        std::to_string(max_model_len) + "-token context), got " + std::to_string(max_tokens));
  return std::nullopt;
}

}  // namespace moe::net
