// net/rpc_connection.hpp
// One MessagePack-RPC client connection, on the server's io thread: reads into a frame_decoder,
// hands each message to its rpc_session (which answers or forwards it by method), writes the
// answers in order through a bounded queue, and closes on a timeout, an undecodable stream, a
// reader too slow for its write buffer or too many wrong auth tokens.
#pragma once

#include <array>
#include <asio.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "net/rpc_frame.hpp"
#include "net/rpc_session.hpp"

namespace moe::net {

class rpc_connection : public session_sink, public std::enable_shared_from_this<rpc_connection> {
 public:
  rpc_connection(asio::ip::tcp::socket socket, std::shared_ptr<const server_shared> shared);
  ~rpc_connection() override;

  /// Starts its session (and bridge actor) and reading (io thread).
  void start();
  /// Closes the socket and cancels the connection's requests (io thread).
  void close();
  /// Shutting down: answers every generate in flight with `error`, then closes once written
  /// (its bridge cancels them all).
  void shed(const rpc_error& error);
  /// Queues `bytes` for writing (io thread; the session's answers).
  void write(msgpack::sbuffer bytes) override;
  void close_after_writes() override;

 private:
  void read();
  void on_read(std::error_code ec, size_t num_bytes);
  void write_next();
  void arm_timer(bool message_started);

  // NOTE: shared_ holds the io_context, so it comes first: members are destroyed in reverse order,
  // and the socket and timer must go while their io_context still exists.
  std::shared_ptr<const server_shared> shared_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  frame_decoder decoder_;
  std::array<char, 16384> read_buffer_{};
  std::vector<rpc_message> messages_;
  std::deque<std::string> write_queue_;  // replies at their exact size (an sbuffer reserves 8 KiB)
  size_t queued_bytes_ = 0;              // their bytes + queued_reply_overhead each
  std::chrono::steady_clock::time_point write_progress_;  // a write started or finished
  bool writing_ = false;
  bool closing_ = false;  // close once the queued replies are written
  bool closed_ = false;
  std::shared_ptr<rpc_session> session_;
};

}  // namespace moe::net
