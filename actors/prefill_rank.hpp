// actors/prefill_rank.hpp
// A prefill rank: prefills queued prompts in steps (each prompt in chunks of at most chunk_size
// tokens, at most max_prefill_tokens per step, two micro-batches of equal attention cost) in
// lockstep with its expert-parallel group, samples each prompt's first token and hands the latent
// KV to the request's decode rank (PD disaggregation).
#pragma once

#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>

#include "actors/atoms.hpp"
#include "actors/messages.hpp"
#include "actors/rank/ep_member.hpp"
#include "actors/rank/rank_model.hpp"

namespace moe {

struct prefill_step_result;  // what a step's sampling produced (internal)

using prefill_rank_actor = ep_member_actor::extend<
  // Prefills a request; its KV goes to job.decode_rank, its first token to job.session.
  caf::reacts_to<submit_atom, prefill_job>,
  // Drops request `id` and frees its KV (at once, or when the step holding it ends).
  caf::reacts_to<cancel_atom, uint64_t>,
  // Its stream sampled the first tokens of the prompts a step finished (internal).
  caf::reacts_to<step_atom, std::shared_ptr<prefill_step_result>>,
  // Prompts queued or in progress, and KV occupancy.
  caf::replies_to<stats_atom>::with<rank_stats>>;

/// `group` defaults to a group of one; `links` to instant messages and no trace.
[[nodiscard]] prefill_rank_actor spawn_prefill_rank(caf::actor_system& sys,
                                                    std::shared_ptr<const model_weights> weights,
                                                    rank_model_config cfg, ep_group group = {},
                                                    cluster_links links = {});

}  // namespace moe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<moe::prefill_step_result>)
