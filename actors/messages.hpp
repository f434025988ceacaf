// actors/messages.hpp
// Plain structs carried by actor messages.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "actors/kernel_inspect.hpp"
#include "actors/policy/pick_window.hpp"
#include "kernels/model/expert_parallel.hpp"
#include "kernels/model/kv_handoff.hpp"

#include "kernels/sampling/logprobs.hpp"
#include "kernels/sampling/sampler.hpp"

namespace moe {

/// What a client asks for, once validated at the boundary.
struct request_spec {
  std::vector<int32_t> prompt_ids;
  sampling_params sampling;
  /// The last `num_generated` prompt ids are output tokens of an earlier placement (decode steps
  /// made them): a prefill rank runs them in the decode form, so that the next tokens are the
  /// ones those decode steps would have given.
  int64_t num_generated = 0;
};

/// What the ranks are asked for after the tokens `so_far` of `spec`: they join the prompt (as
/// generated), and max_tokens is less by as many.
[[nodiscard]] inline request_spec continued(const request_spec& spec, const std::vector<int32_t>& so_far) {
  request_spec rest = spec;
  rest.prompt_ids.insert(rest.prompt_ids.end(), so_far.begin(), so_far.end());
  rest.sampling.max_tokens -= static_cast<int32_t>(so_far.size());
  rest.num_generated += static_cast<int64_t>(so_far.size());
  return rest;
}

/// The id the ranks know a request by on its `attempt`-th placement (0: the first, the client's
/// id itself): each placement after a lost rank or a preemption has its own, so a late message
/// from an earlier placement cannot be taken for the current one's. A session's placements
/// cycle through its max_placements_per_session ids: one is used again only after that many
/// newer placements, each of which started after the ranks were told to drop the one before.
[[nodiscard]] constexpr uint64_t placement_id(uint64_t request_id, uint64_t attempt) noexcept {
  return request_id + (attempt << 56);
}

/// The request a placement id belongs to.
[[nodiscard]] constexpr uint64_t request_of(uint64_t placement) noexcept {
  return placement & ((uint64_t{1} << 56) - 1);
}

/// How far a request got before the session holding it was lost (or the queue restarted):
/// its client, who streamed that far, has it go on from there with a fresh session.
struct resume_state {
  std::vector<int32_t> output_ids;       // streamed so far
  std::vector<token_logprobs> logprobs;  // one per output id when the request asked, else empty
  uint64_t next_seq = 0;                 // the next chunk's seq
  uint64_t generation = 0;               // sessions lost so far (placement ids stay unique)
  caf::actor_addr lost_session;          // the session that died (null: none did)
  /// Resumed because the request queue restarted, not because a session died: a request the
  /// cluster still runs goes on where it is.
  bool queue_restarted = false;
};

/// Placement ids a session cycles through; a request's later sessions' ids start above them.
constexpr uint64_t max_placements_per_session = 16;

/// The request queue's counters.
struct queue_stats {
  int64_t num_queued = 0;    // admitted, waiting for a running slot
  int64_t num_running = 0;   // handed downstream, not done yet
  int64_t num_admitted = 0;  // since start
  int64_t num_rejected = 0;  // answered "overloaded"
};

/// A request handed to a prefill rank, with where its KV goes and where its tokens go.
struct prefill_job {
  uint64_t request_id = 0;
  request_spec spec;
  caf::actor decode_rank;  // receives the kv_handoff
  caf::actor session;      // receives token_chunks
  caf::actor balancer;     // gets (done_atom, request_id) when prefill is over (may be null)
};

/// A prefilled request handed to a decode rank: its latent KV, its first output token and its
/// sampling state (RNG and penalty counts continue where prefill left them).
struct kv_handoff {
  uint64_t request_id = 0;
  request_spec spec;
  kv_pages pages;  // [layers, prompt tokens, kv_dim]
  int32_t first_token = 0;
  std::shared_ptr<sampler> pick;
  caf::actor session;
  /// When the prefill rank sent it: wall-clock (system_clock) nanoseconds, so that a decode rank
  /// in another process measures the hand-off (on another host, within the clocks' skew).
  int64_t sent_at_ns = 0;
};

/// Output tokens of one request; reason != none on the last chunk.
struct token_chunk {
  uint64_t request_id = 0;
  std::vector<int32_t> token_ids;
  finish_reason reason = finish_reason::none;
  std::string error;                     // with finish_reason::error
  std::vector<token_logprobs> logprobs;  // one per token id when the request asked, else empty
};

/// What a session streams to its client: seq counts from 0 without gaps.
struct stream_chunk {
  uint64_t request_id = 0;
  uint64_t seq = 0;
  std::vector<int32_t> token_ids;
  std::string text_delta;
  std::vector<token_logprobs> logprobs;  // one per token id when the request asked, else empty
};

/// A session's final answer.
struct session_result {
  uint64_t request_id = 0;
  std::vector<int32_t> output_ids;
  std::string text;
  finish_reason reason = finish_reason::none;
  std::string error;
  std::vector<token_logprobs> logprobs;  // one per output id when the request asked, else empty
  /// When its first prompt chunk entered a prefill step; unset if it never did (cancelled
  /// while waiting, refused).
  std::optional<std::chrono::steady_clock::time_point> prefill_start;
  int64_t num_migrations = 0;          // placements again after a lost rank
  int64_t num_preemptions = 0;         // placements again after its decode rank ran out of KV
  int64_t num_reprefilled_tokens = 0;  // prompt + output tokens prefilled again (both of the above)
};

/// A rank's load, as balancers see it.
struct rank_stats {
  int64_t num_running = 0;
  int64_t num_blocks = 0;
  int64_t num_free_blocks = 0;
  int64_t num_steps = 0;
  int64_t num_preemptions = 0;              // requests preempted for lack of KV blocks (decode ranks)
  int64_t num_requests = 0;                 // taken so far: prompts to prefill, requests admitted to decode
  bool step_in_flight = false;              // a step has begun and not finished (with or without requests)
  int64_t peer_wait_ms = 0;                 // how long the step has been blocked on peers' payloads; 0: not
  int64_t expert_bytes = 0;                 // memory of the routed experts the rank holds (its own copies)
  std::vector<double> part_seconds;         // its stream's time per timed_part (actors/rank/rank_timings.hpp)
  std::vector<int64_t> kv_transfer_counts;  // decode: hand-offs per kv_transfer_bounds bucket
  double kv_transfer_seconds = 0.0;         // decode: their latencies' sum
};

/// Tokens a rank's gate routed to each logical expert of each MoE layer (before a replica is
/// chosen) over its window of steps (actors/policy/expert_load_window.hpp).
struct expert_load {
  int64_t num_layers = 0;  // MoE layers, in layer order
  int64_t num_experts = 0;
  int64_t window_steps = 0;     // the window asked for
  int64_t steps_covered = 0;    // the steps counted now (to within one bucket of window_steps)
  std::vector<int64_t> counts;  // [num_layers * num_experts]
};

/// The expert placement a rank computes with: its epoch (0: as started) and, per layer, the
/// physical slot -> logical expert row (empty for dense layers).
struct placement_report {
  uint64_t epoch = 0;
  std::vector<std::vector<int32_t>> slot_expert;
  int64_t membership_first_step = 0;  // the group membership it holds in (a placement change's key)
  int64_t num_steps_run = 0;          // steps this rank began since it started
};

/// A new expert placement for an expert-parallel group: its epoch (above the one in force), the
/// group membership it was planned for (ep_membership::first_step), and every layer's placement
/// (empty on dense layers).
struct placement_change {
  uint64_t epoch = 0;
  int64_t membership_first_step = 0;
  std::shared_ptr<const std::vector<layer_placement>> placements;
};

/// One routed expert's weights on their way from a rank that holds it to one that will
/// (encode_expert's bytes, kernels/model/held_experts.hpp).
struct expert_blob {
  int64_t layer = 0;
  int32_t expert = 0;
  std::vector<uint8_t> bytes;
};

/// The id of the NCCL communicator a group's membership of `first_step` uses (group rank 0
/// makes it; actors/rank/collective_channel.hpp): ncclUniqueId's bytes.
struct collective_id {
  int64_t first_step = 0;
  std::vector<uint8_t> bytes;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, collective_id& x) {
  return f(caf::meta::type_name("collective_id"), x.first_step, x.bytes);
}

/// What one rebalance of an expert-parallel group did (or, with `error`, why it did nothing).
struct rebalance_report {
  std::string role;               // "prefill" | "decode"
  uint64_t epoch = 0;             // the placement in force after it
  int64_t moved_experts = 0;      // replicas copied to a rank that did not hold them
  int64_t moved_bytes = 0;        // their weights' bytes
  int64_t plain_moved_bytes = 0;  // what the plan would have copied without minimal movement
  double seconds = 0.0;
  std::vector<double> balancedness_before, balancedness_after;  // per MoE layer, of the window's load
  std::string error;
};

/// An expert balancer's counters, for stats.
struct expert_balancer_stats {
  std::string role;
  uint64_t epoch = 0;
  int64_t rebalances = 0;
  int64_t failed = 0;
  int64_t moved_bytes = 0;  // in all
  double last_seconds = 0.0;
  std::vector<double> balancedness;  // per MoE layer, of the current placement under the last load seen
  std::string last_error;
};

/// The decode balancer's bookings a decode rank holds (reserved, joining or running), as a
/// restarted balancer rebuilds them: request ids and each one's booked KV blocks.
struct rank_bookings {
  std::vector<uint64_t> request_ids;
  std::vector<int64_t> num_blocks;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_bookings& x) {
  return f(caf::meta::type_name("rank_bookings"), x.request_ids, x.num_blocks);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rank_stats& x) {
  return f(caf::meta::type_name("rank_stats"), x.num_running, x.num_blocks, x.num_free_blocks, x.num_steps,
           x.num_preemptions, x.num_requests, x.step_in_flight, x.peer_wait_ms, x.expert_bytes,
           x.part_seconds, x.kv_transfer_counts, x.kv_transfer_seconds);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, balance_report& x) {
  return f(caf::meta::type_name("balance_report"), x.num_picks, x.per_rank, x.mean, x.max, x.balancedness);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, placement_report& x) {
  return f(caf::meta::type_name("placement_report"), x.epoch, x.slot_expert, x.membership_first_step,
           x.num_steps_run);
}

/// An expert's bytes as one raw blob (at most 4 GiB); a negative layer or expert is refused.
caf::error inspect(caf::serializer& f, expert_blob& x);
caf::error inspect(caf::deserializer& f, expert_blob& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_blob& x) {
  return f(caf::meta::type_name("expert_blob"), x.layer, x.expert);
}

/// The epoch, the membership it was planned for and the placements (a flag, then every layer's);
/// placements that are not consistent() are refused.
caf::error inspect(caf::serializer& f, placement_change& x);
caf::error inspect(caf::deserializer& f, placement_change& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, placement_change& x) {
  return f(caf::meta::type_name("placement_change"), x.epoch, x.membership_first_step);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, rebalance_report& x) {
  return f(caf::meta::type_name("rebalance_report"), x.role, x.epoch, x.moved_experts, x.moved_bytes,
           x.plain_moved_bytes, x.seconds, x.balancedness_before, x.balancedness_after, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_balancer_stats& x) {
  return f(caf::meta::type_name("expert_balancer_stats"), x.role, x.epoch, x.rebalances, x.failed,
           x.moved_bytes, x.last_seconds, x.balancedness, x.last_error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, expert_load& x) {
  return f(caf::meta::type_name("expert_load"), x.num_layers, x.num_experts, x.window_steps, x.steps_covered,
           x.counts);
}

// Messages between the front end and the ranks, and from prefill to decode ranks: what crosses
// a process in a multi-process cluster (actors/messages.cpp; kernel types: kernel_inspect.hpp).

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, request_spec& x) {
  return f(caf::meta::type_name("request_spec"), x.prompt_ids, x.sampling, x.num_generated);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, prefill_job& x) {
  return f(caf::meta::type_name("prefill_job"), x.request_id, x.spec, x.decode_rank, x.session, x.balancer);
}

/// finish_reason travels as its one-byte value; an unknown value is an error, not a cast.
caf::error inspect(caf::serializer& f, token_chunk& x);
caf::error inspect(caf::deserializer& f, token_chunk& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, token_chunk& x) {
  return f(caf::meta::type_name("token_chunk"), x.request_id, x.token_ids, x.error, x.logprobs);
}

/// Without its sampler: deserializing builds one as the prefill rank had it after the first token.
caf::error inspect(caf::serializer& f, kv_handoff& x);
caf::error inspect(caf::deserializer& f, kv_handoff& x);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, kv_handoff& x) {
  return f(caf::meta::type_name("kv_handoff"), x.request_id, x.spec, x.pages, x.first_token, x.session,
           x.sent_at_ns);
}

/// The sampler a request's decoding continues with after `first_token`: the one its prefill
/// rank built (from the prompt less the tokens generated before) and drew `first_token` with.
[[nodiscard]] std::shared_ptr<sampler> sampler_after_prefill(const request_spec& spec, int32_t first_token);

/// A live actor, as admin.actors lists it: a supervised child (restarts counted by its
/// supervisor) or a worker (a session: restarts = the sessions its request lost before it).
struct actor_info {
  std::string kind;
  int64_t index = 0;
  int64_t restarts = 0;
  double since_restart_s = -1.0;   // seconds since its last restart; -1: never restarted
  double last_recovery_ms = -1.0;  // how long its last restart took, from the supervisor hearing
                                   // of the death to the successor started and introduced; -1: none
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, queue_stats& x) {
  return f(caf::meta::type_name("queue_stats"), x.num_queued, x.num_running, x.num_admitted, x.num_rejected);
}

}  // namespace moe

// In-process only for now: front-end-local, or not yet sent between processes.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::stream_chunk)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::session_result)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::resume_state)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::vector<moe::actor_info>)
