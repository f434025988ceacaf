// net/rpc_frame.hpp
// MessagePack-RPC framing over a byte stream: an incremental decoder that turns bytes arriving in
// any pieces into typed messages, rejecting oversized or malformed input before it allocates, and
// the encoders for responses and notifications.
//
//   request       [0, msgid, method, params]     msgid: uint32, method: str, params: array
//   response      [1, msgid, error, result]      exactly one of error / result is nil
//   notification  [2, method, params]
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <msgpack.hpp>

#include "net/rpc_errors.hpp"

namespace moe::net {

/// What one connection may send. Declared sizes are checked against these when their header is
/// read, before anything is allocated for them.
/// NOTE: a decoded message costs more than its bytes: each array element is a 16-byte object
/// (a 1-byte fixint too) and an array header reserves its declared elements before they arrive.
/// One connection's decoder therefore holds at most about
/// 16 * max_frame_bytes + max_depth * max_array_size * 16 bytes (64 MiB with the defaults).
struct frame_limits {
  size_t max_frame_bytes = size_t{2} << 20;  // one encoded message, complete or partial
  size_t max_array_size = size_t{1} << 18;   // elements of one array (input_ids fit)
  size_t max_map_size = 256;                 // pairs of one map
  size_t max_str_bytes = size_t{2} << 20;    // (no more than max_frame_bytes in effect)
  size_t max_bin_bytes = size_t{2} << 20;
  size_t max_ext_bytes = 256;
  size_t max_depth = 8;  // nested arrays and maps, the message included
};

/// [0, msgid, method, params]. `params` (an array) points into `frame`, which keeps it alive.
struct rpc_request {
  uint32_t msgid = 0;
  std::string method;
  msgpack::object params;
  msgpack::object_handle frame;
};

/// [2, method, params]. `params` (an array) points into `frame`.
struct rpc_notification {
  std::string method;
  msgpack::object params;
  msgpack::object_handle frame;
};

/// [1, msgid, error, result] (what a client reads). Both point into `frame`.
struct rpc_response {
  uint32_t msgid = 0;
  msgpack::object error;
  msgpack::object result;
  msgpack::object_handle frame;
};

/// Input that is not a usable message. Who hears about it:
///   msgid set          -> an error response to that msgid (a request's shape was readable);
///   from_notification  -> an "error" notification (a notification's shape was readable);
///   neither            -> nobody: close_connection is then always true.
/// close_connection: the byte stream cannot be followed past this point (or nobody can be told);
/// send the reply, if any, then close this connection.
struct rpc_decode_error {
  rpc_error error;
  std::optional<uint32_t> msgid;
  bool from_notification = false;
  bool close_connection = false;
};

using rpc_message = std::variant<rpc_request, rpc_notification, rpc_response, rpc_decode_error>;

/// Types one decoded msgpack value as a message (no size checks: the decoder made them).
[[nodiscard]] rpc_message classify_message(msgpack::object_handle frame);

/// What the first bytes of a message say about it, read by hand so that a message the
/// unpacker gave up on (malformed, or a size over a limit) can still be answered.
struct message_header {
  std::optional<uint32_t> request_msgid;  // [0, msgid, ...] with 4 elements
  bool is_notification = false;           // [2, ...] with 3 elements
};
[[nodiscard]] message_header peek_header(std::string_view head) noexcept;

/// Incremental decoder for one connection's byte stream.
class frame_decoder {
 public:
  explicit frame_decoder(frame_limits limits = {});

  /// Appends the messages that `bytes` complete to `out`, in stream order. Bytes may arrive in
  /// any pieces, down to one at a time. After an error with close_connection, ignores all input.
  void feed(std::string_view bytes, std::vector<rpc_message>& out);
  [[nodiscard]] std::vector<rpc_message> feed(std::string_view bytes);

  [[nodiscard]] bool closed() const noexcept { return closed_; }
  /// Bytes held of a message not complete yet.
  [[nodiscard]] size_t partial_bytes() const { return unpacker_.message_size(); }
  [[nodiscard]] const frame_limits& limits() const noexcept { return limits_; }

 private:
  void drain(std::vector<rpc_message>& out);
  void emit(msgpack::object_handle frame, size_t frame_bytes, std::vector<rpc_message>& out);
  void fail(rpc_error error, std::vector<rpc_message>& out);

  frame_limits limits_;
  msgpack::unpacker unpacker_;
  std::string head_;  // first bytes of the message being decoded
  bool closed_ = false;
};

/// [1, msgid, nil, result]
template <class Result>
[[nodiscard]] msgpack::sbuffer encode_result(uint32_t msgid, const Result& result) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack(result);
  return out;
}

/// [1, msgid, error_map, nil]
[[nodiscard]] msgpack::sbuffer encode_error(uint32_t msgid, const rpc_error& error);

/// [2, method, params]; `params` packs as an array (a std::vector, std::tuple, ...).
template <class Params>
[[nodiscard]] msgpack::sbuffer encode_notification(std::string_view method, const Params& params) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(3).pack_uint8(2).pack(method).pack(params);
  return out;
}

/// [2, "error", [error_map]]: how an error caused by a notification is reported.
[[nodiscard]] msgpack::sbuffer encode_error_notification(const rpc_error& error);

/// What decode errors are answered with, if anything (empty when only closing is left).
[[nodiscard]] std::optional<msgpack::sbuffer> encode_reply(const rpc_decode_error& error);

}  // namespace moe::net

namespace msgpack {
MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS) {
  namespace adaptor {

  /// rpc_error packs as {code, type, message, retryable, retry_after_ms?}.
  template <>
  struct pack<moe::net::rpc_error> {
    template <class Stream>
    packer<Stream>& operator()(packer<Stream>& pk, const moe::net::rpc_error& e) const {
      pk.pack_map(e.retry_after_ms ? 5 : 4);
      pk.pack("code").pack(static_cast<uint16_t>(e.code));
      pk.pack("type").pack(moe::net::type_name(e.code));
      pk.pack("message").pack(e.message);
      pk.pack("retryable").pack(moe::net::is_retryable(e.code));
      if (e.retry_after_ms)
        pk.pack("retry_after_ms").pack(*e.retry_after_ms);
      return pk;
    }
  };

  }  // namespace adaptor
}  // MSGPACK_API_VERSION_NAMESPACE(MSGPACK_DEFAULT_API_NS)
}  // namespace msgpack
