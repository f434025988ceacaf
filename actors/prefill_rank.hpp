// actors/prefill_rank.hpp
// A prefill rank: runs each prompt's chunked prefill on its stream, samples the first token and
// hands the latent KV to the request's decode rank (PD disaggregation).
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/atoms.hpp"
#include "actors/messages.hpp"
#include "actors/rank_model.hpp"

namespace moe {

using prefill_rank_actor = caf::typed_actor<
    // Prefills a request; its KV goes to job.decode_rank, its first token to job.session.
    caf::reacts_to<submit_atom, prefill_job>,
    // Its stream finished a job; the pool's free KV blocks after it (internal).
    caf::reacts_to<done_atom, uint64_t, int64_t>,
    // Jobs queued or running, and KV occupancy.
    caf::replies_to<stats_atom>::with<rank_stats>>;

[[nodiscard]] prefill_rank_actor spawn_prefill_rank(caf::actor_system& sys,
                                                    std::shared_ptr<const model_weights> weights,
                                                    rank_model_config cfg);

}  // namespace moe
