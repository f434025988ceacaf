// net/rpc_server.hpp
// The server's two fronts on one io thread: MessagePack-RPC (one rpc_connection per client) and
// HTTP (one http_connection per client: OpenAI's API, vLLM's extras, the admin methods), each
// connection with its rpc_session and one bridge actor into the cluster; the connection budget
// is shared by both.
#pragma once

#include <caf/fwd.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "net/auth.hpp"
#include "net/generate_request.hpp"
#include "net/http/http_request.hpp"
#include "net/rpc_frame.hpp"
#include "net/serving_target.hpp"

namespace moe::net {

/// Per-server and per-connection limits (flags of `moeserve serve`).
struct server_limits {
  size_t max_connections = 256;
  size_t max_in_flight = 64;                             // generate requests per connection
  std::chrono::milliseconds idle_timeout{300'000};       // nothing in flight, nothing read
  std::chrono::milliseconds read_timeout{30'000};        // a started message must complete
  size_t max_write_buffer = size_t{16} << 20;            // unsent bytes; beyond: disconnect
  int max_auth_failures = 3;                             // wrong auth tokens; at this many: disconnect
  std::chrono::milliseconds keep_alive_timeout{60'000};  // HTTP: between requests
  frame_limits frames;
  http_limits http;  // HTTP: request head and body sizes
  request_limits requests;
};

struct server_config {
  std::string host = "127.0.0.1";
  uint16_t port = 0;                  // 0: an ephemeral port
  std::optional<uint16_t> http_port;  // the HTTP front's; none: off, 0: an ephemeral port
  server_limits limits;
  auth_keys keys;                                  // none set: no auth needed
  std::chrono::milliseconds stats_interval{1000};  // rank occupancy samples
  std::chrono::seconds stats_window{60};           // stats' "window" counters
  std::chrono::seconds log_stats_interval{0};      // a stats line on stderr this often; 0: none
  bool fault_injection = false;                    // admin.actors / admin.kill (admin connections)
};

class rpc_server {
 public:
  /// Binds and starts serving on its own io thread; throws input_error when it cannot bind.
  rpc_server(caf::actor_system& sys, serving_target target, server_config cfg);
  ~rpc_server();
  rpc_server(const rpc_server&) = delete;
  rpc_server& operator=(const rpc_server&) = delete;

  /// The bound port (the ephemeral one when asked for port 0).
  [[nodiscard]] uint16_t port() const noexcept;
  [[nodiscard]] std::string address() const;  // "127.0.0.1:8765"
  /// The HTTP front's bound port; 0 when it is off.
  [[nodiscard]] uint16_t http_port() const noexcept;
  [[nodiscard]] const server_counters& counters() const noexcept;
  /// Shuts down gracefully (SIGTERM): new generates get a retryable 503 at once; those in flight
  /// have up to `grace` to finish; then the rest get a retryable 503 and every connection
  /// closes once its answers are written. Returns the generates that were cut off. stop() next.
  int64_t drain(std::chrono::milliseconds grace);
  /// Stops accepting, closes every connection (cancelling their requests), joins the io thread.
  void stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace moe::net
