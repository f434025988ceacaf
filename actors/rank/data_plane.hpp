// actors/rank/data_plane.hpp
// How a rank's expert-parallel payloads (dispatch, combine) reach a peer rank in another process
// when a real transport carries them: UCX active messages (Debian's libucx-dev: shared memory
// within a host, TCP or RDMA between hosts), one UCP worker per process, progressed by a thread
// of its own that sleeps on the worker's event descriptor while nothing moves. The control plane
// (CAF's middleman, behind the cluster token) hands each node's contact (its worker address and
// a random key) to its peers in the roster; a payload goes as (kind, the destination rank's actor
// id, the receiver's key) plus its CAF serialization (kernel_inspect.hpp: shapes checked on
// arrival), and the receiving process gives it to the rank as the message (dispatch_atom,
// payload) the middleman would have delivered. Where UCX was not found at build
// time, start_ucx_plane throws input_error saying so and payloads go as messages.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <cstdint>
#include <memory>
#include <string>

#include "kernels/model/expert_parallel.hpp"

namespace moe {

/// What the plane moved since it started.
struct data_plane_stats {
  uint64_t messages_sent = 0;
  uint64_t bytes_sent = 0;  // serialized payload bytes
  uint64_t messages_received = 0;
  uint64_t bytes_received = 0;
  uint64_t dropped = 0;  // failed sends, and arrivals for no attached rank or that did not decode
};

class data_plane {
 public:
  virtual ~data_plane() = default;
  /// How peers reach this plane, for the roster: its key (random, 128 bits) and its worker's
  /// address, as text. A payload that does not carry the key is dropped, so only peers the
  /// token-gated control plane introduced can send one.
  [[nodiscard]] virtual std::string address() const = 0;
  /// Payloads addressed to `rank` (by its actor id) are delivered to it from now on.
  virtual void attach(const caf::actor& rank) = 0;
  /// Sends `payload` to `dest`, a rank of the process whose plane is at `peer_address`. A send
  /// that fails (the peer is gone) is dropped and counted: the peer's loss reaches its group by
  /// the control plane's monitors.
  virtual void send(const std::string& peer_address, const caf::actor& dest, const ep_dispatch& payload) = 0;
  virtual void send(const std::string& peer_address, const caf::actor& dest, const ep_combine& payload) = 0;
  [[nodiscard]] virtual data_plane_stats stats() const = 0;
};

/// Whether this moeserve was built with UCX.
[[nodiscard]] bool ucx_plane_built() noexcept;

/// Whether a cluster file's `data_plane` ("ucx", "middleman" or "auto") asks for the UCX plane
/// here: "ucx", or "auto" where UCX was built.
[[nodiscard]] inline bool wants_ucx_plane(const std::string& data_plane) noexcept {
  return data_plane == "ucx" || (data_plane == "auto" && ucx_plane_built());
}

/// Starts this process's UCX plane (UCX_TLS and the other UCX_* variables apply). Its network
/// transports use only the interface that holds `bind_host` (the node's address in the cluster
/// file), unless UCX_NET_DEVICES is set or no interface holds it. Throws input_error where UCX
/// was not built, std::runtime_error where it does not start.
[[nodiscard]] std::shared_ptr<data_plane> start_ucx_plane(caf::actor_system& sys,
                                                          const std::string& bind_host);

}  // namespace moe
