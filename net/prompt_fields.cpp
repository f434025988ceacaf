// net/prompt_fields.cpp
#include "net/prompt_fields.hpp"

#include <span>
#include <string>

#include <msgpack.hpp>

namespace moe::net {
namespace {

maybe_error read_message(const msgpack::object& v, const std::string& field, size_t max_bytes,
                         chat_message& out) {
  if (v.type != msgpack::type::MAP)
    return field_error(field, "a map {role, content}", v);
  bool has_role = false;
  bool has_content = false;
  for (const msgpack::object_kv& kv : std::span(v.via.map.ptr, v.via.map.size)) {
    const std::string_view key = kv.key.type == msgpack::type::STR
                                   ? std::string_view(kv.key.via.str.ptr, kv.key.via.str.size)
                                   : std::string_view();
    if (key == "role") {
      const std::string_view role = kv.val.type == msgpack::type::STR
                                      ? std::string_view(kv.val.via.str.ptr, kv.val.via.str.size)
                                      : std::string_view();
      if (role != "system" && role != "user" && role != "assistant")
        return field_error(field + ".role", "\"system\", \"user\" or \"assistant\"", kv.val);
      out.role = role;
      has_role = true;
    } else if (key == "content") {
      if (maybe_error err = read_string(kv.val, field + ".content", max_bytes, out.content))
        return err;
      has_content = true;
    } else {
      return make_error(rpc_errc::validation,
                        field + "." + printable(key) + ": unknown key (a message has role, content)");
    }
  }
  if (!has_role)
    return make_error(rpc_errc::validation, field + ".role: required");
  if (!has_content)
    return make_error(rpc_errc::validation, field + ".content: required");
  return std::nullopt;
}

}  // namespace

maybe_error read_messages(const msgpack::object& v, size_t max_messages, size_t max_content_bytes,
                          std::vector<chat_message>& out) {
  if (v.type != msgpack::type::ARRAY)
    return field_error("messages", "an array of maps", v);
  const std::span items(v.via.array.ptr, v.via.array.size);
  if (items.empty())
    return field_error("messages", "a non-empty array", v);
  if (items.size() > max_messages)
    return field_too_large("messages", std::to_string(items.size()) + " messages", max_messages);
  size_t total_bytes = 0;
  out.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (maybe_error err = read_message(items[i], field, max_content_bytes, out[i]))
      return err;
    total_bytes += out[i].content.size();
  }
  if (total_bytes > max_content_bytes)
    return field_too_large("messages", "contents total " + std::to_string(total_bytes) + " bytes",
                           max_content_bytes);
  return std::nullopt;
}

maybe_error read_token_ids(const msgpack::object& v, std::string_view field, size_t max_count, int64_t max_id,
                           std::vector<int32_t>& out) {
  if (v.type != msgpack::type::ARRAY)
    return field_error(field, "an array of token ids", v);
  const std::span items(v.via.array.ptr, v.via.array.size);
  if (items.size() > max_count)
    return field_too_large(field, std::to_string(items.size()) + " ids", max_count);
  out.resize(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    int64_t id = 0;
    const std::string item_field = std::string(field) + "[" + std::to_string(i) + "]";
    if (maybe_error err = read_int(items[i], item_field, 0, max_id, id))
      return err;
    out[i] = static_cast<int32_t>(id);
  }
  return std::nullopt;
}

}  // namespace moe::net
