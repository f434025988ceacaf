// net/rpc_connection.hpp
// One MessagePack-RPC client connection, on the server's io thread: reads into a frame_decoder,
// hands each message to its rpc_session (which answers or forwards it by method), writes the
// answers in order (client_connection's bounded queue), and closes on a timeout, an undecodable
// stream, a reader too slow for its write buffer or too many wrong auth tokens.
#pragma once

#include <array>
#include <vector>

#include "net/client_connection.hpp"
#include "net/rpc_frame.hpp"

namespace moe::net {

class rpc_connection : public client_connection {
 public:
  rpc_connection(asio::ip::tcp::socket socket, std::shared_ptr<const server_shared> shared);

  /// Starts its session (and bridge actor) and reading (io thread).
  void start();
  /// Shutting down: answers every generate in flight with `error`, then closes once written
  /// (its bridge cancels them all).
  void shed(const rpc_error& error);
  /// Queues `bytes` for writing (io thread; the session's answers).
  void write(msgpack::sbuffer bytes) override;

 private:
  void read();
  void on_read(std::error_code ec, size_t num_bytes);
  void arm_timer(bool message_started);

  frame_decoder decoder_;
  std::array<char, 16384> read_buffer_{};
  std::vector<rpc_message> messages_;
};

}  // namespace moe::net
