// net/rpc_frame.cpp
#include "net/rpc_frame.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

namespace moe::net {
namespace {

constexpr size_t feed_chunk_bytes = 64 * 1024;  // frame size is checked at least this often
constexpr size_t head_bytes = 32;               // enough for any [type, msgid] prefix

// Strings and bins are copied into the message's zone, so a kept request never pins the
// decoder's read buffer.
bool never_reference(msgpack::type::object_type, size_t, void*) { return false; }

msgpack::unpack_limit unpack_limits(const frame_limits& l) {
  // An array or str can never hold more elements or bytes than its frame.
  const auto cap = [&](size_t n) { return std::min(n, l.max_frame_bytes); };
  // msgpack-c counts an ext's type byte in its size: + 1 so that max_ext_bytes is the payload's
  return msgpack::unpack_limit(cap(l.max_array_size), cap(l.max_map_size), cap(l.max_str_bytes),
                               cap(l.max_bin_bytes), cap(l.max_ext_bytes + 1), l.max_depth);
}

std::optional<uint32_t> as_msgid(const msgpack::object& o) {
  if (o.type != msgpack::type::POSITIVE_INTEGER || o.via.u64 > std::numeric_limits<uint32_t>::max())
    return std::nullopt;
  return static_cast<uint32_t>(o.via.u64);
}

std::optional<uint64_t> as_uint(const msgpack::object& o) {
  if (o.type != msgpack::type::POSITIVE_INTEGER)
    return std::nullopt;
  return o.via.u64;
}

rpc_decode_error invalid(std::string message, std::optional<uint32_t> msgid, bool from_notification) {
  return rpc_decode_error{.error = make_error(rpc_errc::invalid_request, std::move(message)),
                          .msgid = msgid,
                          .from_notification = from_notification,
                          .close_connection = !msgid && !from_notification};
}

rpc_message classify_request(msgpack::object_handle frame) {
  const msgpack::object_array& a = frame.get().via.array;
  const std::optional<uint32_t> msgid = a.size >= 2 ? as_msgid(a.ptr[1]) : std::nullopt;
  if (!msgid)
    return invalid("msgid: expected an unsigned 32-bit integer", std::nullopt, false);
  if (a.size != 4)
    return invalid("a request is [0, msgid, method, params], got " + std::to_string(a.size) + " elements",
                   msgid, false);
  if (a.ptr[2].type != msgpack::type::STR)
    return invalid("method: expected a string", msgid, false);
  if (a.ptr[3].type != msgpack::type::ARRAY)
    return invalid("params: expected an array", msgid, false);
  rpc_request req{.msgid = *msgid, .method = a.ptr[2].as<std::string>(), .params = a.ptr[3]};
  req.frame = std::move(frame);
  return req;
}

rpc_message classify_notification(msgpack::object_handle frame) {
  const msgpack::object_array& a = frame.get().via.array;
  if (a.size != 3)
    return invalid("a notification is [2, method, params], got " + std::to_string(a.size) + " elements",
                   std::nullopt, true);
  if (a.ptr[1].type != msgpack::type::STR)
    return invalid("method: expected a string", std::nullopt, true);
  if (a.ptr[2].type != msgpack::type::ARRAY)
    return invalid("params: expected an array", std::nullopt, true);
  rpc_notification note{.method = a.ptr[1].as<std::string>(), .params = a.ptr[2]};
  note.frame = std::move(frame);
  return note;
}

rpc_message classify_response(msgpack::object_handle frame) {
  const msgpack::object_array& a = frame.get().via.array;
  const std::optional<uint32_t> msgid = a.size == 4 ? as_msgid(a.ptr[1]) : std::nullopt;
  if (!msgid)  // nobody to answer: a response is never replied to
    return invalid("a response is [1, msgid, error, result]", std::nullopt, false);
  rpc_response resp{.msgid = *msgid, .error = a.ptr[2], .result = a.ptr[3]};
  resp.frame = std::move(frame);
  return resp;
}

/// Reads an unsigned integer at head[pos] (any msgpack int encoding holding a value >= 0).
std::optional<uint64_t> read_uint(std::string_view head, size_t& pos) {
  if (pos >= head.size())
    return std::nullopt;
  const auto byte = [&](size_t i) { return static_cast<uint8_t>(head[i]); };
  const uint8_t tag = byte(pos);
  if (tag <= 0x7f) {
    ++pos;
    return tag;
  }
  size_t width = 0;
  bool is_signed = false;
  switch (tag) {
    case 0xcc: width = 1; break;
    case 0xcd: width = 2; break;
    case 0xce: width = 4; break;
    case 0xcf: width = 8; break;
    case 0xd0:
      width = 1;
      is_signed = true;
      break;
    case 0xd1:
      width = 2;
      is_signed = true;
      break;
    case 0xd2:
      width = 4;
      is_signed = true;
      break;
    case 0xd3:
      width = 8;
      is_signed = true;
      break;
    default: return std::nullopt;
  }
  if (pos + 1 + width > head.size())
    return std::nullopt;
  if (is_signed && (byte(pos + 1) & 0x80))
    return std::nullopt;  // negative
  uint64_t value = 0;
  for (size_t i = 0; i < width; ++i)
    value = (value << 8) | byte(pos + 1 + i);
  pos += 1 + width;
  return value;
}

/// Reads an array header at head[pos]; returns its element count.
std::optional<uint64_t> read_array_header(std::string_view head, size_t& pos) {
  if (pos >= head.size())
    return std::nullopt;
  const uint8_t tag = static_cast<uint8_t>(head[pos]);
  if ((tag & 0xf0) == 0x90) {
    ++pos;
    return tag & 0x0f;
  }
  const size_t width = tag == 0xdc ? 2 : tag == 0xdd ? 4 : 0;
  if (width == 0 || pos + 1 + width > head.size())
    return std::nullopt;
  uint64_t n = 0;
  for (size_t i = 0; i < width; ++i)
    n = (n << 8) | static_cast<uint8_t>(head[pos + 1 + i]);
  pos += 1 + width;
  return n;
}

}  // namespace

rpc_message classify_message(msgpack::object_handle frame) {
  const msgpack::object& root = frame.get();
  if (root.type != msgpack::type::ARRAY || root.via.array.size == 0)
    return invalid("a message is an array [type, ...]", std::nullopt, false);
  switch (as_uint(root.via.array.ptr[0]).value_or(~uint64_t{0})) {
    case 0: return classify_request(std::move(frame));
    case 1: return classify_response(std::move(frame));
    case 2: return classify_notification(std::move(frame));
    default: return invalid("message type: expected 0, 1 or 2", std::nullopt, false);
  }
}

message_header peek_header(std::string_view head) noexcept {
  size_t pos = 0;
  const std::optional<uint64_t> size = read_array_header(head, pos);
  const std::optional<uint64_t> type = size ? read_uint(head, pos) : std::nullopt;
  if (!type)
    return {};
  if (*type == 2 && *size == 3)
    return {.is_notification = true};
  if (*type != 0 || *size != 4)
    return {};
  const std::optional<uint64_t> msgid = read_uint(head, pos);
  if (!msgid || *msgid > std::numeric_limits<uint32_t>::max())
    return {};
  return {.request_msgid = static_cast<uint32_t>(*msgid)};
}

frame_decoder::frame_decoder(frame_limits limits)
    : limits_(limits),
      unpacker_(&never_reference, nullptr, MSGPACK_UNPACKER_INIT_BUFFER_SIZE, unpack_limits(limits)) {}

std::vector<rpc_message> frame_decoder::feed(std::string_view bytes) {
  std::vector<rpc_message> out;
  feed(bytes, out);
  return out;
}

void frame_decoder::feed(std::string_view bytes, std::vector<rpc_message>& out) {
  while (!bytes.empty() && !closed_) {
    const std::string_view piece = bytes.substr(0, feed_chunk_bytes);
    bytes.remove_prefix(piece.size());
    if (head_.size() < head_bytes)
      head_.append(piece.substr(0, head_bytes - head_.size()));
    unpacker_.reserve_buffer(piece.size());
    std::copy(piece.begin(), piece.end(), unpacker_.buffer());
    unpacker_.buffer_consumed(piece.size());
    drain(out);
  }
}

void frame_decoder::drain(std::vector<rpc_message>& out) {
  try {
    for (;;) {
      const size_t before = unpacker_.message_size();
      msgpack::object_handle frame;
      if (!unpacker_.next(frame))
        break;
      const size_t frame_bytes = before - unpacker_.message_size();
      head_.assign(unpacker_.nonparsed_buffer(), std::min(unpacker_.nonparsed_size(), head_bytes));
      emit(std::move(frame), frame_bytes, out);
      if (closed_)
        return;
    }
  } catch (const msgpack::array_size_overflow&) {
    return fail(make_error(rpc_errc::too_large, "an array declares more than " +
                                                  std::to_string(limits_.max_array_size) + " elements"),
                out);
  } catch (const msgpack::map_size_overflow&) {
    return fail(make_error(rpc_errc::too_large,
                           "a map declares more than " + std::to_string(limits_.max_map_size) + " pairs"),
                out);
  } catch (const msgpack::depth_size_overflow&) {
    return fail(make_error(rpc_errc::too_large,
                           "arrays and maps nest deeper than " + std::to_string(limits_.max_depth)),
                out);
  } catch (const msgpack::size_overflow&) {  // str, bin or ext
    return fail(make_error(rpc_errc::too_large, "a string, bin or ext is over its size limit"), out);
  } catch (const std::exception&) {  // parse_error: not MessagePack; bad_alloc
    return fail(make_error(rpc_errc::invalid_request, "malformed MessagePack"), out);
  }
  if (unpacker_.message_size() > limits_.max_frame_bytes)
    fail(make_error(rpc_errc::too_large,
                    "a message is over " + std::to_string(limits_.max_frame_bytes) + " bytes"),
         out);
}

void frame_decoder::emit(msgpack::object_handle frame, size_t frame_bytes, std::vector<rpc_message>& out) {
  rpc_message msg = classify_message(std::move(frame));
  if (frame_bytes > limits_.max_frame_bytes) {  // complete, but over the limit
    const auto* err = std::get_if<rpc_decode_error>(&msg);
    const auto* req = std::get_if<rpc_request>(&msg);
    rpc_decode_error too_large{
      .error = make_error(rpc_errc::too_large,
                          "a message is over " + std::to_string(limits_.max_frame_bytes) + " bytes"),
      .msgid = req   ? std::optional(req->msgid)
               : err ? err->msgid
                     : std::nullopt,
      .from_notification = std::holds_alternative<rpc_notification>(msg) || (err && err->from_notification)};
    too_large.close_connection = !too_large.msgid && !too_large.from_notification;
    msg = std::move(too_large);
  }
  if (const auto* err = std::get_if<rpc_decode_error>(&msg); err && err->close_connection)
    closed_ = true;
  out.push_back(std::move(msg));
}

void frame_decoder::fail(rpc_error error, std::vector<rpc_message>& out) {
  const message_header header = peek_header(head_);
  out.push_back(rpc_decode_error{.error = std::move(error),
                                 .msgid = header.request_msgid,
                                 .from_notification = header.is_notification,
                                 .close_connection = true});
  closed_ = true;
}

msgpack::sbuffer encode_error(uint32_t msgid, const rpc_error& error) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack(error).pack_nil();
  return out;
}

msgpack::sbuffer encode_error_notification(const rpc_error& error) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(3).pack_uint8(2).pack("error").pack_array(1).pack(error);
  return out;
}

std::optional<msgpack::sbuffer> encode_reply(const rpc_decode_error& error) {
  if (error.msgid)
    return encode_error(*error.msgid, error.error);
  if (error.from_notification)
    return encode_error_notification(error.error);
  return std::nullopt;
}

}  // namespace moe::net
