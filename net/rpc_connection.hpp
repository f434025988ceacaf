// net/rpc_connection.hpp
// One client connection, on the server's io thread: reads into a frame_decoder, answers or
// forwards each message by method (once its role allows it, net/auth.hpp), writes responses in
// order through a bounded queue, and closes on a timeout, an undecodable stream, a reader too
// slow for its write buffer or too many wrong auth tokens. Its bridge actor talks to the cluster;
// when the bridge dies (a crash, fault injection) the generates it carried are answered 503
// (retryable; their sessions free what the cluster held) and a new bridge serves what follows.
#pragma once

#include <array>
#include <asio.hpp>
#include <caf/actor.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>

#include "net/auth.hpp"
#include "net/rpc_frame.hpp"
#include "net/rpc_server.hpp"

namespace moe::net {

/// What every connection of one server shares.
struct server_shared {
  std::shared_ptr<asio::io_context> io;
  caf::actor_system& sys;
  std::shared_ptr<const serving_target> target;
  std::shared_ptr<server_counters> counters;
  server_limits limits;
  auth_keys keys;
  bool fault_injection = false;  // admin.actors and admin.kill answer (404 otherwise)
};

class rpc_connection : public std::enable_shared_from_this<rpc_connection> {
 public:
  rpc_connection(asio::ip::tcp::socket socket, std::shared_ptr<const server_shared> shared);
  ~rpc_connection();

  /// Spawns the bridge actor and starts reading (io thread).
  void start();
  /// Closes the socket and cancels the connection's requests (io thread).
  void close();
  /// Shutting down: answers every generate in flight with `error`, then closes once written
  /// (its bridge cancels them all).
  void shed(const rpc_error& error);
  /// From any thread: queues `bytes` for writing; `finished` leaves the in-flight set, and a
  /// `probe`'s answer (ready, stats) the probes in flight.
  void deliver(msgpack::sbuffer bytes, std::optional<uint32_t> finished, bool probe = false);

 private:
  void start_bridge();
  // A bridge died: its generates in flight get a 503 and a new bridge takes the connection on.
  void on_bridge_down(const caf::actor_addr& bridge, const caf::error& reason);
  void read();
  void on_read(std::error_code ec, size_t num_bytes);
  void handle(rpc_message& message);
  void handle_request(rpc_request& request);
  void handle_generate(rpc_request& request);
  void handle_auth(rpc_request& request);
  void write(msgpack::sbuffer bytes);
  void write_next();
  void close_after_writes();
  void forget_in_flight();
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
  std::unordered_set<uint32_t> in_flight_;  // generate msgids not answered yet
  size_t probes_in_flight_ = 0;             // ready / stats asked of the cluster, not answered
  auth_role role_;                          // what the last successful auth granted
  int num_auth_failures_ = 0;
  caf::actor bridge_;
};

}  // namespace moe::net
