// net/rpc_session.hpp
// What one client may do, whatever carries its bytes: its role (net/auth.hpp), its generates in
// flight and the bridge actor that carries them into the cluster, its ready/stats probes. It
// answers each MessagePack-RPC message by method, as bytes handed to its sink, on the server's
// io thread. The wire's connection (rpc_connection) and the HTTP front's (http/http_connection)
// each hold one, so that both fronts keep the same limits, auth and cancel-on-disconnect.
// When the bridge dies (a crash, fault injection) the generates it carried are answered 503
// (retryable; their sessions free what the cluster held) and a new bridge serves what follows.
#pragma once

#include <asio.hpp>
#include <caf/actor.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_set>

#include "net/auth.hpp"
#include "net/connection_bridge.hpp"
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

/// Where a session's answers go (io thread only).
class session_sink {
 public:
  virtual ~session_sink() = default;
  /// One encoded response or notification.
  virtual void write(msgpack::sbuffer bytes) = 0;
  /// No more from this client: close once what is queued is written (too many wrong tokens).
  virtual void close_after_writes() = 0;
};

class rpc_session : public std::enable_shared_from_this<rpc_session> {
 public:
  rpc_session(std::shared_ptr<const server_shared> shared, std::weak_ptr<session_sink> sink);
  ~rpc_session();
  rpc_session(const rpc_session&) = delete;
  rpc_session& operator=(const rpc_session&) = delete;

  /// Spawns the bridge actor.
  void start();
  /// Answers (or forwards) one decoded message.
  void handle(rpc_message& message);
  /// The client is gone: cancels its requests (the bridge frees what they held); nothing more
  /// is written.
  void close();
  /// Shutting down: answers every generate in flight with `error` (a late answer is dropped).
  void shed(const rpc_error& error);
  /// Generates or probes in flight: the connection is not idle.
  [[nodiscard]] bool busy() const noexcept { return !in_flight_.empty() || probes_in_flight_ > 0; }
  /// The role its requests are judged by: set by `auth` on the wire, per request over HTTP.
  [[nodiscard]] auth_role role() const noexcept { return role_; }
  void set_role(auth_role role) noexcept { role_ = role; }

 private:
  void start_bridge();
  /// Replies for this session; a probe's (ready, stats) also leaves the probes in flight.
  [[nodiscard]] reply_fn replies(bool probe = false);
  void on_bridge_down(const caf::actor_addr& bridge, const caf::error& reason);
  void deliver(msgpack::sbuffer bytes, std::optional<uint32_t> finished, bool probe);
  void handle_request(rpc_request& request);
  void handle_generate(rpc_request& request);
  void handle_auth(rpc_request& request);
  void write(msgpack::sbuffer bytes);
  void forget_in_flight();

  std::shared_ptr<const server_shared> shared_;
  std::weak_ptr<session_sink> sink_;
  std::unordered_set<uint32_t> in_flight_;  // generate msgids not answered yet
  size_t probes_in_flight_ = 0;             // ready / stats asked of the cluster, not answered
  auth_role role_;                          // what the last successful auth granted
  int num_auth_failures_ = 0;
  bool closed_ = false;
  caf::actor bridge_;
};

}  // namespace moe::net
