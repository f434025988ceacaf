// tools/bench_wire.cpp
#include "tools/bench_wire.hpp"

#include <array>
#include <map>

#include "config/model_config.hpp"

namespace moe::tools {

namespace {

/// [0, msgid, method, args]
template <class Args>
msgpack::sbuffer request_frame(uint32_t msgid, const char* method, const Args& args) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack(0).pack(msgid).pack(method).pack(args);
  return out;
}

}  // namespace

msgpack::sbuffer generate_frame(uint32_t msgid, const bench_request& req, const load_shape& shape) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack(0).pack(msgid).pack("generate").pack_array(1).pack_map(5);
  if (shape.prompt)
    pk.pack("prompt").pack(*shape.prompt);
  else
    pk.pack("input_ids").pack(req.input_ids);
  pk.pack("max_tokens").pack(req.output_len).pack("ignore_eos").pack(true);
  pk.pack("stream").pack(true).pack("temperature").pack(0.0);
  return out;
}

msgpack::sbuffer models_frame(uint32_t msgid) { return request_frame(msgid, "models", std::array<int, 0>{}); }

msgpack::sbuffer tokenize_frame(uint32_t msgid, const std::string& text) {
  return request_frame(msgid, "tokenize", std::array<std::string, 1>{text});
}

msgpack::sbuffer auth_frame(uint32_t msgid, const std::string& key) {
  return request_frame(msgid, "auth", std::array<std::string, 1>{key});
}

msgpack::sbuffer cancel_frame(uint32_t msgid, uint32_t generate_msgid) {
  return request_frame(msgid, "cancel", std::array<uint32_t, 1>{generate_msgid});
}

std::pair<std::string, std::string> error_of(const msgpack::object& error) {
  const auto map = error.as<std::map<std::string, msgpack::object>>();
  return {std::to_string(map.at("code").as<int>()), map.at("message").as<std::string>()};
}

std::optional<token_note> read_token(const net::rpc_notification& note) {
  const auto& params = note.params.via.array;  // the decoder made params an array
  if (params.size < 3 || params.ptr[0].type != msgpack::type::POSITIVE_INTEGER ||
      params.ptr[0].via.u64 > UINT32_MAX || params.ptr[2].type != msgpack::type::ARRAY)
    return std::nullopt;
  return token_note{.msgid = static_cast<uint32_t>(params.ptr[0].via.u64),
                    .num_tokens = params.ptr[2].via.array.size};
}

void read_outcome(const net::rpc_response& r, bench_record& rec) {
  try {
    if (!r.error.is_nil()) {
      std::tie(rec.error_kind, rec.error) = error_of(r.error);
      return;
    }
    const auto result = r.result.as<std::map<std::string, msgpack::object>>();
    const auto usage = result.at("usage").as<std::map<std::string, int64_t>>();
    rec.prompt_tokens = usage.at("prompt_tokens");
    rec.output_tokens = usage.at("completion_tokens");
    const auto migrated = result.find("migrated");
    rec.migrated = migrated != result.end() && migrated->second.type == msgpack::type::BOOLEAN &&
                   migrated->second.via.boolean;
    const auto reason = result.at("finish_reason").as<std::string>();
    if (reason == "abort" || reason == "error") {
      rec.error_kind = "finish_reason";
      rec.error = "finish_reason: " + reason;
      return;
    }
    rec.success = true;
  } catch (const std::exception& e) {
    rec.error_kind = "protocol";
    rec.error = std::string("unreadable response: ") + e.what();
  }
}

served_model read_models(const net::rpc_response& r) {
  if (!r.error.is_nil())
    throw input_error("models: the server answered " + error_of(r.error).second);
  try {
    const auto models = r.result.as<std::vector<std::map<std::string, msgpack::object>>>();
    const auto& first = models.at(0);
    return {.id = first.at("id").as<std::string>(),
            .vocab_size = first.at("vocab_size").as<int64_t>(),
            .max_context = first.at("max_context").as<int64_t>()};
  } catch (const std::exception& e) {
    throw input_error(std::string("models: unreadable answer: ") + e.what());
  }
}

int64_t read_token_count(const net::rpc_response& r) {
  if (!r.error.is_nil())
    throw input_error("--prompt: the server's tokenize answered " + error_of(r.error).second);
  if (r.result.type != msgpack::type::ARRAY)
    throw input_error("--prompt: the server's tokenize answered no list of token ids");
  return static_cast<int64_t>(r.result.via.array.size);
}

}  // namespace moe::tools
