// net/field_readers.cpp
#include "net/field_readers.hpp"

#include <sstream>

#include <msgpack.hpp>

#include "kernels/tokenizer/utf8.hpp"

namespace moe::net {
namespace {

bool is_valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t start = pos;
    if (utf8::next(s, pos) == U'\uFFFD' && pos - start == 1)  // ill-formed: one byte skipped
      return false;
  }
  return true;
}

std::string describe(const msgpack::object& v) {
  switch (v.type) {
    case msgpack::type::POSITIVE_INTEGER: return std::to_string(v.via.u64);
    case msgpack::type::NEGATIVE_INTEGER: return std::to_string(v.via.i64);
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: {
      std::ostringstream out;
      out << v.via.f64;
      return out.str();
    }
    case msgpack::type::ARRAY: return "an array of " + std::to_string(v.via.array.size);
    case msgpack::type::MAP: return "a map of " + std::to_string(v.via.map.size);
    case msgpack::type::BOOLEAN: return v.via.boolean ? "true" : "false";
    case msgpack::type::STR: return '"' + printable({v.via.str.ptr, v.via.str.size}) + '"';
    default: return std::string(type_name(v));
  }
}

}  // namespace

std::string printable(std::string_view text) {
  constexpr size_t max_bytes = 64;
  std::string out;
  utf8::append_lossy(out, text.substr(0, max_bytes));
  if (text.size() > max_bytes)
    out += "...";
  return out;
}

std::string_view type_name(const msgpack::object& value) noexcept {
  switch (value.type) {
    case msgpack::type::NIL: return "nil";
    case msgpack::type::BOOLEAN: return "bool";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER: return "integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: return "float";
    case msgpack::type::STR: return "str";
    case msgpack::type::BIN: return "bin";
    case msgpack::type::ARRAY: return "array";
    case msgpack::type::MAP: return "map";
    case msgpack::type::EXT: return "ext";
  }
  return "unknown";
}

rpc_error field_error(std::string_view field, std::string_view expected, const msgpack::object& value) {
  return make_error(rpc_errc::validation,
                    std::string(field) + ": expected " + std::string(expected) + ", got " + describe(value));
}

rpc_error field_too_large(std::string_view field, std::string_view what, size_t limit) {
  return make_error(rpc_errc::too_large, std::string(field) + ": " + std::string(what) +
                                           ", over the limit of " + std::to_string(limit));
}

maybe_error read_bool(const msgpack::object& value, std::string_view field, bool& out) {
  if (value.type != msgpack::type::BOOLEAN)
    return field_error(field, "a bool", value);
  out = value.via.boolean;
  return std::nullopt;
}

maybe_error read_float(const msgpack::object& value, std::string_view field, float& out) {
  switch (value.type) {
    case msgpack::type::POSITIVE_INTEGER: out = static_cast<float>(value.via.u64); break;
    case msgpack::type::NEGATIVE_INTEGER: out = static_cast<float>(value.via.i64); break;
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64: out = static_cast<float>(value.via.f64); break;
    default: return field_error(field, "a number", value);
  }
  return std::nullopt;
}

maybe_error read_int(const msgpack::object& value, std::string_view field, int64_t lo, int64_t hi,
                     int64_t& out) {
  const bool in_range =
    (value.type == msgpack::type::POSITIVE_INTEGER && hi >= 0 && value.via.u64 <= static_cast<uint64_t>(hi) &&
     static_cast<int64_t>(value.via.u64) >= lo) ||
    (value.type == msgpack::type::NEGATIVE_INTEGER && value.via.i64 >= lo && value.via.i64 <= hi);
  if (!in_range)
    return field_error(field, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]",
                       value);
  out = value.type == msgpack::type::POSITIVE_INTEGER ? static_cast<int64_t>(value.via.u64) : value.via.i64;
  return std::nullopt;
}

maybe_error read_string(const msgpack::object& value, std::string_view field, size_t max_bytes,
                        std::string& out) {
  if (value.type != msgpack::type::STR)
    return field_error(field, "a string", value);
  const std::string_view s(value.via.str.ptr, value.via.str.size);
  if (s.size() > max_bytes)
    return field_too_large(field, std::to_string(s.size()) + " bytes", max_bytes);
  if (!is_valid_utf8(s))
    return make_error(rpc_errc::validation, std::string(field) + ": not well-formed UTF-8");
  out.assign(s);
  return std::nullopt;
}

}  // namespace moe::net
