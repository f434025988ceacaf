// tools/transport_ucx.hpp
// The UCX side of `moeserve bench-transport`: one UCP worker with one endpoint to a peer
// process's worker, tag messages between them (data, acknowledgement, stop), progressed by the
// calling thread (busy polling: UCX starts no thread of its own here). The transports are
// UCX_TLS's names ("sm": shared memory within a host, "tcp": between hosts, "rc"/"dc": RDMA).
// Built where Debian's libucx-dev was found at configure time (MOE_HAVE_UCX); elsewhere
// ucx_built() is false and constructing a ucx_link throws input_error saying so.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace moe::tools {

/// Whether this moeserve was built with UCX.
[[nodiscard]] bool ucx_built() noexcept;
/// The UCX library's version, e.g. "1.13.1" ("" where not built).
[[nodiscard]] std::string ucx_version();

/// One endpoint to one peer: address() goes to the peer (over a pipe), the peer's address to
/// connect(); then tag messages flow both ways. A wait for an acknowledgement or a send throws
/// std::runtime_error after `timeout`.
class ucx_link {
 public:
  /// A UCP context and worker restricted to the transports `tls` (as UCX_TLS takes them).
  explicit ucx_link(const std::string& tls, std::chrono::seconds timeout = std::chrono::seconds(60));
  ~ucx_link();
  ucx_link(const ucx_link&) = delete;
  ucx_link& operator=(const ucx_link&) = delete;

  /// This worker's address, hex-encoded (one line).
  [[nodiscard]] std::string address() const;
  /// Opens the endpoint to the worker whose address() is `peer_hex`.
  void connect(const std::string& peer_hex);
  /// The transports UCX chose for the endpoint, e.g. "posix/memory cma/memory" (after connect).
  [[nodiscard]] std::string transports() const;

  /// Starts sending `bytes` as one data message; `bytes` must stay valid until flush() or the
  /// next wait_ack() that returns after the peer received it.
  void send_data(std::span<const std::byte> bytes);
  /// Waits for the peer's next acknowledgement, progressing the sends meanwhile.
  [[nodiscard]] uint64_t wait_ack();
  /// Waits until every started send has completed.
  void flush();

  /// Waits for the next data message and receives it into `out` (resized to it); false when the
  /// peer sent stop, or when `still_wanted` (polled while idle) returns false.
  [[nodiscard]] bool wait_data(std::vector<std::byte>& out, bool (*still_wanted)());
  /// Sends an acknowledgement and waits until it left.
  void send_ack(uint64_t value);
  /// Tells the peer there is no more data, and waits until that left.
  void send_stop();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace moe::tools
