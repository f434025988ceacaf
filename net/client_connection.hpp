// net/client_connection.hpp
// What a connection of either front (rpc_connection, http/http_connection) is besides its
// protocol, on the server's io thread: its socket and timer, its place in the connection count,
// its rpc_session, and a bounded queue of bytes written out in order (a reader too slow for
// max_write_buffer is dropped), closing once the queue is written.
#pragma once

#include <asio.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "net/rpc_session.hpp"

namespace moe::net {

class client_connection : public session_sink, public std::enable_shared_from_this<client_connection> {
 public:
  client_connection(asio::ip::tcp::socket socket, std::shared_ptr<const server_shared> shared);
  ~client_connection() override;
  client_connection(const client_connection&) = delete;
  client_connection& operator=(const client_connection&) = delete;

  /// Closes the socket; the session cancels what is in flight (io thread).
  void close();
  /// No more from this client: close once what is queued is written.
  void close_after_writes() override;

 protected:
  /// Starts the connection's session (and its bridge actor).
  void start_session();
  /// Queues `bytes` for writing; past max_write_buffer the connection closes instead.
  void send(std::string bytes);
  /// Writing, and nothing written for `limit`: a reader that stopped reading.
  [[nodiscard]] bool stalled(std::chrono::milliseconds limit) const;
  /// This connection as its own type, for handlers that must keep it alive.
  template <class T>
  [[nodiscard]] std::shared_ptr<T> self() {
    return std::static_pointer_cast<T>(shared_from_this());
  }

  /// Hooks: the queue was written out (not closing); closing and the queue is written (close
  /// by default); the socket was closed.
  virtual void on_written() {}
  virtual void on_written_closing() { close(); }
  virtual void on_closed() {}

  // NOTE: shared_ holds the io_context, so it comes first: members are destroyed in reverse order,
  // and the socket and timer must go while their io_context still exists.
  std::shared_ptr<const server_shared> shared_;
  asio::ip::tcp::socket socket_;
  asio::steady_timer timer_;
  std::shared_ptr<rpc_session> session_;
  bool writing_ = false;
  bool closing_ = false;  // close once the queued bytes are written
  bool closed_ = false;

 private:
  void write_next();

  std::deque<std::string> write_queue_;                   // answers at their exact size
  size_t queued_bytes_ = 0;                               // their bytes + queued_reply_overhead each
  std::chrono::steady_clock::time_point write_progress_;  // a write started or finished
};

}  // namespace moe::net
