// actors/decode_rank.hpp
// A decode rank: takes prefilled requests (kv_handoff), runs continuous-batching decode steps in
// lockstep with its expert-parallel group, streams each step's tokens to the sessions, frees KV
// as requests end. When its KV pool runs out it preempts the youngest request: its session gets
// (preempt_atom, id) and has it recomputed elsewhere or later.
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <memory>

#include "actors/atoms.hpp"
#include "actors/messages.hpp"
#include "actors/rank/ep_member.hpp"
#include "actors/rank/rank_model.hpp"

namespace moe {

struct decode_step_result;  // what a step's sampling produced (internal)

using decode_rank_actor = ep_member_actor::extend<
  // Accepts a request whose latent KV cache was produced by a prefill rank, and tells its
  // session (handoff_atom, request id).
  caf::reacts_to<submit_atom, kv_handoff>,
  // Ends a request with finish_reason::abort and frees its KV blocks (at the step boundary).
  caf::reacts_to<cancel_atom, uint64_t>,
  // The decode balancer booked request `id` here (num_blocks of KV, kept until it ends) and has
  // the hand-off's KV (num_tokens: prompt + first token) pre-allocated.
  caf::reacts_to<reserve_atom, uint64_t, int64_t, int64_t>,
  // Request `id` ended at its session: drops whatever this rank still holds of it, and tells
  // the decode balancer its booking is over.
  caf::reacts_to<done_atom, uint64_t>,
  // The decode balancer to tell (done_atom, id) as booked requests end (again after a restart).
  caf::reacts_to<route_atom, caf::actor>,
  // The balancer's bookings held here, for a restarted balancer (which is told of ends from now).
  caf::replies_to<bookings_atom>::with<rank_bookings>,
  // Its stream sampled a step's tokens (internal).
  caf::reacts_to<step_atom, std::shared_ptr<decode_step_result>>,
  // Running requests and KV occupancy.
  caf::replies_to<stats_atom>::with<rank_stats>>;

/// `group` defaults to a group of one; `links` to instant messages and no trace.
[[nodiscard]] decode_rank_actor spawn_decode_rank(caf::actor_system& sys,
                                                  std::shared_ptr<const model_weights> weights,
                                                  rank_model_config cfg, ep_group group = {},
                                                  cluster_links links = {});

}  // namespace moe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<moe::decode_step_result>)
