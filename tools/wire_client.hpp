// tools/wire_client.hpp
// A blocking MessagePack-RPC client over TCP for the verbs that drive a server from threads of
// their own (chaos): send bytes, read the next message with a deadline.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>

#include "net/rpc_frame.hpp"

namespace moe::tools {

class wire_client {
 public:
  /// Connects to host:port; throws input_error when it cannot.
  wire_client(const std::string& host, uint16_t port);

  void send(std::string_view bytes);
  void send(const msgpack::sbuffer& bytes) { send(std::string_view(bytes.data(), bytes.size())); }

  /// The next message, or none once `timeout` passes without one; throws input_error when the
  /// server closed the connection.
  [[nodiscard]] std::optional<net::rpc_message> next(std::chrono::milliseconds timeout);

  /// Sends a request and returns its response (notifications meanwhile are dropped); throws
  /// input_error after `timeout` without it.
  [[nodiscard]] net::rpc_response call(const msgpack::sbuffer& request, uint32_t msgid,
                                       std::chrono::milliseconds timeout);

 private:
  bool read_more(std::chrono::milliseconds timeout);

  asio::io_context io_;
  asio::ip::tcp::socket socket_;
  net::frame_decoder decoder_;
  std::deque<net::rpc_message> pending_;
};

/// [0, msgid, method, params] with params packed by `fill`.
template <class Fill>
[[nodiscard]] msgpack::sbuffer request_frame(uint32_t msgid, std::string_view method, size_t num_params,
                                             Fill&& fill) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack(0).pack(msgid).pack(method).pack_array(static_cast<uint32_t>(num_params));
  fill(pk);
  return out;
}

}  // namespace moe::tools
