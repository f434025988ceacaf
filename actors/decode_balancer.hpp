// actors/decode_balancer.hpp
// The decode load balancer: chooses each admitted request's decode rank before it is prefilled,
// balancing KV-cache usage and running requests per rank (actors/policy/rank_picker.hpp). It
// books the KV a request is asked for (prompt + max_tokens, or a share of max_tokens: the
// topology's new_token_ratio) until the request ends: with the worst case no rank's pool runs out
// mid-generation, with less a rank out of blocks preempts. When no rank has room the pick waits. Each decode rank
// keeps the bookings made on it and reports their end, so a restarted balancer rebuilds them.
// Its policy (deepseek, power_of_two, round_robin) and drained ranks change live
// (actors/live_settings.hpp, target "decode_balancer").
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/atoms.hpp"
#include "actors/decode_rank.hpp"
#include "actors/live_settings.hpp"

namespace moe {

using decode_balancer_actor = caf::typed_actor<
  // Picks the rank for request `id` (a prompt of num_prompt_tokens, up to num_tokens in all):
  // replies its index once the rank has room, and has the rank pre-allocate the prompt's KV.
  // A request already booked (asked again after a restart) gets its rank at once.
  caf::replies_to<pick_atom, uint64_t, int64_t, int64_t>::with<int64_t>,
  // Request `id` ended (its decode rank tells): its booking is freed (waiting picks retry).
  caf::reacts_to<done_atom, uint64_t>,
  // Request `id` (not a placement id) is over: bookings of its placements still held go, their
  // ranks told (done_atom, placement), and its picks still waiting fail as cancelled. Frees
  // what a pick answered to a prefill balancer that died before placing it holds.
  caf::reacts_to<ended_atom, uint64_t>,
  // Decode rank `index` was restarted, empty: its bookings are gone (their sessions place
  // their requests again).
  caf::reacts_to<peers_atom, int64_t, decode_rank_actor>,
  // The rank at this address was lost (the prefill balancer heard it from a session, maybe
  // before this balancer's own monitor did): where ranks do not restart, it takes no picks
  // until it is introduced again (peers_atom); ignored where they restart.
  caf::reacts_to<migrate_atom, caf::actor_addr>,
  // Requests booked per rank.
  caf::replies_to<stats_atom>::with<std::vector<int64_t>>,
  // The requests it sent each rank over its last 256 picks, and their mean / max.
  caf::replies_to<balance_atom>::with<balance_report>, configure_change, configure_restore, config_query>;

struct decode_balancer_config {
  int64_t num_blocks = 0;  // per rank
  int64_t block_size = 64;
  int64_t max_running = 0;  // per rank; 0: unlimited
  bool rebuild = false;     // a restart: first collect the ranks' bookings (picks wait meanwhile)
  // false where the ranks are other processes' (the front node): a rank that goes down takes no
  // picks until its node rejoins and it is introduced again, and with every rank down a pick
  // fails as unavailable (retryable) instead of waiting for a node that may not return
  bool ranks_restart = true;
  decode_balancer_settings settings;  // num_ranks: set from the ranks given
};

[[nodiscard]] decode_balancer_actor spawn_decode_balancer(caf::actor_system& sys,
                                                          std::vector<decode_rank_actor> ranks,
                                                          decode_balancer_config cfg);

}  // namespace moe
