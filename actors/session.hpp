// actors/session.hpp
// One request's owner: receives its tokens from whichever rank produces them, turns them into
// text (stop strings included), numbers every streamed chunk, and answers the client once. It
// monitors its ranks: when one is lost mid-request it has the request placed again (prompt and
// the tokens so far, re-prefilled elsewhere) and the stream goes on at the same seq. It tells its
// client it holds the request (attach_atom), so that a client who sees it die can have the
// request resumed by a new one (resume_state), and it ends the request if its client dies.
#pragma once

#include <caf/typed_actor.hpp>
#include <chrono>
#include <memory>

#include "actors/atoms.hpp"
#include "actors/messages.hpp"
#include "kernels/tokenizer/tokenizer.hpp"

namespace moe {

using session_actor = caf::typed_actor<
  // The prefill rank put the request's first prompt chunk into a step at this wall-clock time,
  // in ns (the end of its queueing; session_result::prefill_start): a time another process
  // shares (actors/rank/rank_timings.hpp's wall_clock_ns).
  caf::reacts_to<start_atom, int64_t>,
  // Output tokens from a rank; the chunk with a finish reason is the last.
  caf::reacts_to<token_atom, token_chunk>,
  // The decode rank has placement `id`'s KV hand-off: from now on the prefill rank's loss does
  // not matter to it (before, it does: the session has the first token, the KV may be lost).
  caf::reacts_to<handoff_atom, uint64_t>,
  // The client cancelled: answer finish_reason::abort now, tell the ranks to free its KV.
  caf::reacts_to<cancel_atom>,
  // Placed again after a lost rank: its new prefill and decode ranks.
  caf::reacts_to<route_atom, caf::actor, caf::actor>,
  // Its decode rank ran out of KV blocks and dropped placement `id` (vLLM's recompute
  // preemption): it is placed again, prompt + tokens so far re-prefilled, not counted against
  // max_migrations.
  caf::reacts_to<preempt_atom, uint64_t>>;

struct session_config {
  uint64_t request_id = 0;
  request_spec spec;
  std::shared_ptr<const tokenizer> tok;
  // Gets (attach_atom, request_id, session) first, then (token_atom, stream_chunk)..., then
  // (done_atom, session_result).
  caf::actor client;
  caf::actor decode_rank;           // told to cancel when a stop string ends the text early, and
                                    // (done_atom, placement id) at the end
  caf::actor prefill_rank;          // told to cancel when the client cancels (may be null)
  std::vector<caf::actor> on_done;  // each gets (done_atom, request_id) at the end
  // Gets (migrate_atom, request_id, placement id, what is left of the request, session, the
  // lost rank) when
  // its prefill rank dies before the hand-off reached the decode rank or its decode rank dies: prompt + tokens so
  // far, max_tokens less those. Null: a lost rank ends the request with an error. When the
  // placer dies the session exits (serve_errc::unavailable) without answering, for its client
  // to resume the request.
  caf::actor placer;
  int64_t max_migrations = 3;  // then the request ends with an error ("unavailable: ...")
  // How far an earlier session got (empty: the request starts here). The ranks are asked for
  // prompt + these tokens; the stream goes on at its next_seq.
  resume_state resumed;
};

/// The session quits after its final answer.
[[nodiscard]] session_actor spawn_session(caf::actor_system& sys, session_config cfg);

}  // namespace moe
