// actors/prefill_balancer.hpp
// The prefill load balancer: takes admitted requests from the request queue, gets each one's
// decode rank from the decode balancer, spawns its session, and sends the prompt to the prefill
// rank that keeps core-attention cost (sum of len^2) and input tokens most even
// (actors/policy/rank_picker.hpp). A prompt loads its rank until the rank reports it prefilled.
// Its policy (deepseek with its two weights, least_tokens, round_robin) and drained ranks change
// live (actors/live_settings.hpp, target "prefill_balancer").
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <memory>

#include "actors/atoms.hpp"
#include "actors/decode_balancer.hpp"
#include "actors/decode_rank.hpp"
#include "actors/live_settings.hpp"
#include "actors/messages.hpp"
#include "actors/prefill_rank.hpp"
#include "kernels/tokenizer/tokenizer.hpp"

namespace moe {

using prefill_balancer_actor = caf::typed_actor<
  // An admitted request and its client (from the request queue); resume_state says how far it
  // got before (empty: it starts). A resume of a request whose session still lives is dropped.
  caf::reacts_to<submit_atom, uint64_t, request_spec, caf::actor, resume_state>,
  // The requests it holds (picking a decode rank, or with a live session): a restarted request
  // queue asks, and is the queue from then on.
  caf::replies_to<bookings_atom>::with<std::vector<uint64_t>>,
  // Fault injection: request `id`'s session exits at once, as in a crash; true if it lives.
  caf::replies_to<kill_atom, uint64_t>::with<bool>,
  // The live sessions: index = request id, restarts = the sessions its request lost before.
  caf::replies_to<actors_atom>::with<std::vector<actor_info>>,
  // The request queue, told (done_atom, id) as requests end (set once, before any submit).
  caf::reacts_to<peers_atom, caf::actor>,
  // A restarted decode balancer: picks in flight are asked again there.
  caf::reacts_to<peers_atom, decode_balancer_actor>,
  // A restarted prefill rank (its prompts are gone: their sessions place them again).
  caf::reacts_to<peers_atom, int64_t, prefill_rank_actor>,
  // A restarted decode rank.
  caf::reacts_to<peers_atom, int64_t, decode_rank_actor>,
  // Session of request `id` lost a rank: place (prompt + tokens so far, the tokens left) again
  // under placement id `pid`; the session gets (route_atom, prefill rank, decode rank).
  // The lost rank counts as down from now on (its down_msg may not be here yet), so that the
  // request is not placed on it again.
  caf::reacts_to<migrate_atom, uint64_t, uint64_t, request_spec, caf::actor, caf::actor_addr>,
  // A prefill rank is done with request `id` (either way).
  caf::reacts_to<done_atom, uint64_t>,
  // The client cancelled request `id` (via the queue): its session ends it.
  caf::reacts_to<cancel_atom, uint64_t>,
  // Request `id` is over (the queue freed its slot): a pick of it still open gives its booking
  // back when answered, and the decode balancer frees what it booked for placements of it that
  // never started (picked for a predecessor of this balancer that died first).
  caf::reacts_to<ended_atom, uint64_t>,
  // Prompts in flight per prefill rank.
  caf::replies_to<stats_atom>::with<std::vector<int64_t>>,
  // The input tokens it sent each rank over its last 256 picks, and their mean / max.
  caf::replies_to<balance_atom>::with<balance_report>, configure_change, configure_restore, config_query>;

struct prefill_balancer_graph {
  std::vector<prefill_rank_actor> prefill_ranks;
  std::vector<decode_rank_actor> decode_ranks;
  decode_balancer_actor decode_balancer;
  caf::actor queue;  // told (done_atom, id) when each request ends
  std::shared_ptr<const tokenizer> tok;
  int64_t max_context = 0;             // KV a request may need: min(prompt + max_tokens, this)
  int64_t max_migrations = 3;          // per request (session_config::max_migrations)
  double new_token_ratio = 1.0;        // share of the tokens left a pick books KV for (topology_config's)
  prefill_balancer_settings settings;  // as started; num_ranks: set from the prefill ranks
  // true: a dead rank's successor comes (in-process), and requests wait for it. False on the
  // front node of a multi-process cluster: a rank lost with its node takes no work until the
  // node rejoins, its requests go to the others (its group's survivors go on alone), and a
  // request with no prefill rank up, or picked for a decode rank just lost, -> unavailable
  bool ranks_restart = true;
};

[[nodiscard]] prefill_balancer_actor spawn_prefill_balancer(caf::actor_system& sys,
                                                            prefill_balancer_graph graph);

}  // namespace moe
