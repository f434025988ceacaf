// tools/ctl_values.cpp
#include "tools/ctl_values.hpp"

#include <algorithm>
#include <charconv>
#include <toml++/toml.h>

#include "config/model_config.hpp"  // input_error

namespace moe::tools {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
    s.remove_suffix(1);
  return s;
}

bool read_int(std::string_view s, int64_t& out) {
  s = trim(s);
  if (!s.empty() && s.front() == '+')
    s.remove_prefix(1);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

bool read_double(std::string_view s, double& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size() && !s.empty();
}

// "1,2", "[1, 2]" or "[]" as integers; false when it is not such a list.
bool read_int_list(std::string_view s, std::vector<int64_t>& out) {
  const bool bracketed = s.size() >= 2 && s.front() == '[' && s.back() == ']';
  if (bracketed)
    s = s.substr(1, s.size() - 2);
  else if (s.find(',') == std::string_view::npos)
    return false;
  if (trim(s).empty())
    return bracketed;
  while (true) {
    const size_t comma = s.find(',');
    int64_t v = 0;
    if (!read_int(s.substr(0, comma), v))
      return false;
    out.push_back(v);
    if (comma == std::string_view::npos)
      return true;
    s.remove_prefix(comma + 1);
  }
}

config_value value_of(std::string_view v) {
  if (v == "true")
    return true;
  if (v == "false")
    return false;
  if (int64_t i = 0; read_int(v, i))
    return i;
  if (double d = 0; read_double(v, d))
    return d;
  if (std::vector<int64_t> list; read_int_list(v, list))
    return list;
  return std::string(v);
}

[[noreturn]] void toml_error(std::string_view origin, const toml::node& node, const std::string& what) {
  throw input_error(std::string(origin) + ":" + std::to_string(node.source().begin.line) + ": " + what);
}

config_value toml_value(std::string_view origin, const std::string& key, const toml::node& node) {
  if (const auto* b = node.as_boolean())
    return b->get();
  if (const auto* i = node.as_integer())
    return i->get();
  if (const auto* f = node.as_floating_point())
    return f->get();
  if (const auto* s = node.as_string())
    return s->get();
  if (const auto* a = node.as_array()) {
    std::vector<int64_t> list;
    for (const toml::node& item : *a) {
      const auto* i = item.as_integer();
      if (i == nullptr)
        toml_error(origin, item, key + ": expected a list of integers");
      list.push_back(i->get());
    }
    return list;
  }
  toml_error(origin, node, key + ": expected a boolean, number, string or list of integers");
}

}  // namespace

config_field parse_assignment(std::string_view arg) {
  const size_t eq = arg.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw input_error("\"" + std::string(arg) + "\": expected KEY=VALUE");
  return {std::string(arg.substr(0, eq)), value_of(arg.substr(eq + 1))};
}

std::vector<target_change> parse_config_toml(std::string_view text, std::string_view origin) {
  toml::table root;
  try {
    root = toml::parse(text, origin);
  } catch (const toml::parse_error& e) {
    throw input_error(std::string(origin) + ":" + std::to_string(e.source().begin.line) + ": " +
                      std::string(e.description()));
  }
  std::vector<target_change> out;
  for (const auto& [name, node] : root) {
    const auto* table = node.as_table();
    if (table == nullptr)
      toml_error(origin, node,
                 std::string(name.str()) + ": expected a table of a target's fields, e.g. [decode_balancer]");
    target_change change{std::string(name.str()), {}};
    for (const auto& [key, value] : *table)
      change.fields.push_back({std::string(key.str()), toml_value(origin, std::string(key.str()), value)});
    out.push_back(std::move(change));
  }
  // toml++ keeps a table's keys sorted; the file's order of tables is their source order
  std::stable_sort(out.begin(), out.end(), [&](const target_change& a, const target_change& b) {
    return root[a.target].node()->source().begin.line < root[b.target].node()->source().begin.line;
  });
  return out;
}

void pack_change(msgpack::packer<msgpack::sbuffer>& pk, const target_change& change) {
  pk.pack_array(1).pack_map(static_cast<uint32_t>(change.fields.size() + 1));
  pk.pack("target").pack(change.target);
  for (const config_field& f : change.fields) {
    pk.pack(f.key);
    std::visit([&](const auto& v) { pk.pack(v); }, f.value);
  }
}

nlohmann::json to_json(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL: return nullptr;
    case msgpack::type::BOOLEAN: return o.via.boolean;
    case msgpack::type::POSITIVE_INTEGER: return o.via.u64;
    case msgpack::type::NEGATIVE_INTEGER: return o.via.i64;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return o.via.f64;
    case msgpack::type::STR: return std::string(o.via.str.ptr, o.via.str.size);
    case msgpack::type::BIN: {
      nlohmann::json bytes = nlohmann::json::array();
      for (uint32_t i = 0; i < o.via.bin.size; ++i)
        bytes.push_back(static_cast<uint8_t>(o.via.bin.ptr[i]));
      return bytes;
    }
    case msgpack::type::ARRAY: {
      nlohmann::json a = nlohmann::json::array();
      for (uint32_t i = 0; i < o.via.array.size; ++i)
        a.push_back(to_json(o.via.array.ptr[i]));
      return a;
    }
    case msgpack::type::MAP: {
      nlohmann::json m = nlohmann::json::object();
      for (uint32_t i = 0; i < o.via.map.size; ++i) {
        const msgpack::object& k = o.via.map.ptr[i].key;
        const std::string key = k.type == msgpack::type::STR ? std::string(k.via.str.ptr, k.via.str.size)
                                                             : to_json(k).dump();
        m[key] = to_json(o.via.map.ptr[i].val);
      }
      return m;
    }
    default: return nullptr;  // extensions: nothing the server sends
  }
}

}  // namespace moe::tools
