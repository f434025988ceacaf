// actors/request_queue.hpp
// Admission: gives each request an id, holds at most `max_queued` waiting requests (answering
// "overloaded" at once when full), and hands at most `max_running` downstream at a time. A
// restarted queue rebuilds its running set from downstream and takes back from the clients
// (who keep every request they sent) what it held when it died. Both limits change live
// (actors/live_settings.hpp, target "request_queue"): lowering one refuses new work or holds
// it back, never drops what was admitted.
#pragma once

#include <caf/typed_actor.hpp>
#include <caf/replies_to.hpp>

#include "actors/atoms.hpp"
#include "actors/live_settings.hpp"
#include "actors/messages.hpp"

namespace moe {

using request_queue_actor = caf::typed_actor<
  // Admits a request: replies with its id, or serve_errc::overloaded when the queue is full.
  caf::replies_to<submit_atom, request_spec>::with<uint64_t>,
  // The sender's request `id` goes on from `state` (admitted before: never refused): its
  // session was lost, or this queue restarted (resume_state::queue_restarted). A request still
  // running downstream stays there after a restart; after a lost session it goes downstream
  // again at once, keeping its running slot.
  caf::reacts_to<resume_atom, uint64_t, request_spec, resume_state>,
  // Downstream's successor (a restarted prefill balancer): what was handed down while there
  // was none goes to it. When downstream dies, each running request's client is told
  // (migrate_atom, id) so that it resumes what no live session holds.
  caf::reacts_to<route_atom, caf::actor>,
  // A request handed downstream has finished (any way): frees its running slot, and tells
  // downstream (ended_atom, id) (its successor, if there is none now), so that a decode rank
  // booked for a placement that never started (its placer died first) gives the booking back.
  caf::reacts_to<done_atom, uint64_t>,
  // Cancels request `id`: a waiting one is answered at once (done_atom, session_result with
  // finish_reason::abort) to its client; a running one's cancel goes downstream.
  caf::reacts_to<cancel_atom, uint64_t>,
  // Current counters.
  caf::replies_to<stats_atom>::with<queue_stats>, configure_change, configure_restore, config_query>;

struct request_queue_config {
  int64_t max_queued = 256;
  int64_t max_running = 64;
  uint64_t first_id = 1;  // ids given from here on (a restarted queue's lie above its predecessors')
  // Restarted: before anything else, ask downstream (bookings_atom -> std::vector<uint64_t>)
  // which requests it runs; they hold running slots.
  bool rebuild = false;
};

/// Spawns the queue; admitted requests go to `downstream` as (submit_atom, id, request_spec,
/// client, resume_state) in admission order (client: who submitted it; resume_state empty
/// unless it was resumed), and (done_atom, id) on this queue frees the running slot when each
/// ends.
[[nodiscard]] request_queue_actor spawn_request_queue(caf::actor_system& sys, request_queue_config cfg,
                                                      caf::actor downstream);

}  // namespace moe
