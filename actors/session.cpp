// actors/session.cpp
#include "actors/session.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <algorithm>
#include <chrono>

#include "actors/errors.hpp"
#include "actors/rank/rank_timings.hpp"
#include "kernels/model/output_text.hpp"

namespace moe {

namespace {

struct session_state {
  session_config cfg;
  std::unique_ptr<text_stream> text;
  session_result result;
  uint64_t next_seq = 0;
  uint64_t first_attempt = 0;  // this session's first placement (earlier sessions had those below)
  uint64_t placements = 0;     // this session's placements so far, less one
  uint64_t preemptions = 0;    // of those, after its decode rank ran out of KV
  uint64_t placement = 0;      // the id the current placement's ranks know it by
  bool handed_off = false;     // the current placement's KV is on its decode rank
  bool placing = false;        // waiting for the placer's (route_atom, ...)
  static inline const char* name = "session";
};

using session_pointer = session_actor::stateful_pointer<session_state>;

void send_chunk(session_pointer self, token_chunk& chunk, std::string delta) {
  auto& st = self->state;
  if (chunk.token_ids.empty() && delta.empty())
    return;
  caf::anon_send(st.cfg.client, token_atom::value,
                 stream_chunk{st.cfg.request_id, st.next_seq++, std::move(chunk.token_ids), std::move(delta),
                              std::move(chunk.logprobs)});
}

void answer(session_pointer self, finish_reason reason, std::string error) {
  auto& st = self->state;
  st.result.reason = reason;
  st.result.error = std::move(error);
  st.result.text = st.text->text();
  st.result.num_migrations = static_cast<int64_t>(st.placements - st.preemptions + st.cfg.resumed.generation);
  st.result.num_preemptions = static_cast<int64_t>(st.preemptions);
  for (const caf::actor& a : st.cfg.on_done)  // first: a client that hears the end sees them updated
    caf::anon_send(a, done_atom::value, st.cfg.request_id);
  if (st.cfg.decode_rank)
    caf::anon_send(st.cfg.decode_rank, done_atom::value, st.placement);
  caf::anon_send(st.cfg.client, done_atom::value, std::move(st.result));
  self->quit();
}

void watch(session_pointer self) {
  auto& st = self->state;
  if (st.cfg.prefill_rank)
    self->monitor(st.cfg.prefill_rank);
  if (st.cfg.decode_rank)
    self->monitor(st.cfg.decode_rank);
}

// The current placement's ranks drop it; the decode rank also gives its booking back when
// `give_back_booking` (else the final answer's done does).
void leave_ranks(session_pointer self, bool give_back_booking) {
  auto& st = self->state;
  if (st.cfg.prefill_rank)
    caf::anon_send(st.cfg.prefill_rank, cancel_atom::value, st.placement);
  if (st.cfg.decode_rank && give_back_booking)
    caf::anon_send(st.cfg.decode_rank, done_atom::value, st.placement);
  else if (st.cfg.decode_rank)
    caf::anon_send(st.cfg.decode_rank, cancel_atom::value, st.placement);
}

// Has the placer place the request again under a new placement id (prompt + tokens so far,
// re-prefilled); `lost_rank` (null: none) is not used for it.
void place_again(session_pointer self, const caf::actor_addr& lost_rank) {
  auto& st = self->state;
  leave_ranks(self, true);  // what the old placement still holds on surviving ranks goes
  self->demonitor(st.cfg.prefill_rank);
  self->demonitor(st.cfg.decode_rank);
  st.cfg.prefill_rank = {};
  st.cfg.decode_rank = {};
  ++st.placements;
  st.placement = placement_id(st.cfg.request_id,
                              st.first_attempt + st.placements % max_placements_per_session);
  st.handed_off = false;
  st.placing = true;
  request_spec rest = continued(st.cfg.spec, st.result.output_ids);
  st.result.num_reprefilled_tokens += static_cast<int64_t>(rest.prompt_ids.size());
  caf::anon_send(st.cfg.placer, migrate_atom::value, st.cfg.request_id, st.placement, std::move(rest),
                 caf::actor_cast<caf::actor>(self), lost_rank);
}

// A rank the request needs is gone: place it again, or give up.
void migrate(session_pointer self, const std::string& lost, const caf::actor_addr& lost_rank) {
  auto& st = self->state;
  const uint64_t migrations = st.placements - st.preemptions;
  if (!st.cfg.placer || migrations >= static_cast<uint64_t>(st.cfg.max_migrations)) {
    token_chunk none;
    send_chunk(self, none, st.text->finish());
    return answer(self, finish_reason::error,
                  "unavailable: its " + lost + " was lost after " + std::to_string(migrations) +
                    " migrations (at most " + std::to_string(st.cfg.max_migrations) + ")");
  }
  place_again(self, lost_rank);
}

// The client is gone: free what the ranks hold and end, answering no one.
void abandon(session_pointer self) {
  auto& st = self->state;
  leave_ranks(self, false);
  static_cast<void>(st.text->finish());  // held back for stop strings: no one to stream it to
  answer(self, finish_reason::abort, {});
}

// The prefill balancer that placed it is gone (its successor knows nothing of this session):
// the session ends as a crash does, answering no one and keeping the running slot; its ranks
// free what they hold, and its client resumes the request from what was streamed.
void lost_placer(session_pointer self) {
  leave_ranks(self, true);
  self->quit(caf::make_error(serve_errc::unavailable, "the prefill balancer was lost"));
}

// Continues where an earlier session of the request stopped: its tokens count as output, its
// text as streamed (a stop string may still span the boundary), its seq goes on.
void take_over(session_pointer self) {
  auto& st = self->state;
  const resume_state& r = st.cfg.resumed;
  st.result.output_ids = r.output_ids;
  st.result.logprobs = r.logprobs;
  for (const int32_t id : r.output_ids)
    static_cast<void>(st.text->push(id));  // streamed already
  st.next_seq = r.next_seq;
  st.first_attempt = r.generation * max_placements_per_session;
  st.placement = placement_id(st.cfg.request_id, st.first_attempt);
  if (r.generation > 0 || !r.output_ids.empty())  // an earlier session's prefill is done again
    st.result.num_reprefilled_tokens =
      static_cast<int64_t>(st.cfg.spec.prompt_ids.size() + r.output_ids.size());
  if (st.cfg.spec.sampling.max_tokens <= static_cast<int32_t>(r.output_ids.size()))  // nothing is left
    caf::anon_send(self, token_atom::value, token_chunk{st.placement, {}, finish_reason::length, {}});
}

session_actor::behavior_type session(session_pointer self, session_config cfg) {
  self->state.text = std::make_unique<text_stream>(cfg.tok, cfg.spec.sampling.stop);
  self->state.result.request_id = cfg.request_id;
  self->state.placement = cfg.request_id;
  self->state.cfg = std::move(cfg);
  take_over(self);
  watch(self);
  if (const caf::actor& client = self->state.cfg.client) {
    caf::anon_send(client, attach_atom::value, self->state.cfg.request_id, caf::actor_cast<caf::actor>(self));
    self->monitor(client);
  }
  if (self->state.cfg.placer)
    self->monitor(self->state.cfg.placer);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    if (st.cfg.client && dm.source == st.cfg.client.address())
      abandon(self);
    else if (st.cfg.placer && dm.source == st.cfg.placer.address())
      lost_placer(self);
    else if (st.cfg.decode_rank && dm.source == st.cfg.decode_rank.address())
      migrate(self, "decode rank", dm.source);
    else if (st.cfg.prefill_rank && dm.source == st.cfg.prefill_rank.address() && !st.handed_off)
      migrate(self, "prefill rank", dm.source);
  });
  return {
    [=](start_atom, int64_t at_wall_ns) {  // wall clock: the prefill rank may be in another process
      auto& prefill_start = self->state.result.prefill_start;
      if (!prefill_start)  // on this process's steady clock, as the bridges' arrival times
        prefill_start = std::chrono::steady_clock::now() -
                        std::chrono::nanoseconds(std::max<int64_t>(0, wall_clock_ns() - at_wall_ns));
    },
    [=](token_atom, token_chunk& chunk) {
      auto& st = self->state;
      // from a placement given up; while placing, only the placer's error for the new one
      if (chunk.request_id != st.placement || (st.placing && chunk.reason != finish_reason::error))
        return;
      std::string delta;
      for (size_t i = 0; i < chunk.token_ids.size(); ++i) {
        const int32_t id = chunk.token_ids[i];
        st.result.output_ids.push_back(id);
        if (i < chunk.logprobs.size())
          st.result.logprobs.push_back(chunk.logprobs[i]);
        if (chunk.reason == finish_reason::stop && id == chunk.token_ids.back())
          break;  // a stop token's text is not output
        delta += st.text->push(id);
        if (st.text->stopped())
          break;
      }
      if (st.text->stopped()) {  // a stop string: the rank may go on
        if (chunk.reason == finish_reason::none && st.cfg.decode_rank)
          caf::anon_send(st.cfg.decode_rank, cancel_atom::value, st.placement);
        send_chunk(self, chunk, std::move(delta));
        return answer(self, finish_reason::stop, {});
      }
      if (chunk.reason != finish_reason::none)
        delta += st.text->finish();
      send_chunk(self, chunk, std::move(delta));
      if (chunk.reason != finish_reason::none)
        answer(self, final_reason(chunk.reason, *st.text), std::move(chunk.error));
    },
    [=](handoff_atom, uint64_t id) {
      auto& st = self->state;
      if (id == st.placement && !st.placing)
        st.handed_off = true;
    },
    [=](cancel_atom) {
      auto& st = self->state;
      leave_ranks(self, false);
      token_chunk none;                           // the text held back for stop strings, streamed as
      send_chunk(self, none, st.text->finish());  // a last chunk: the chunks add up to the text
      answer(self, finish_reason::abort, {});
    },
    [=](route_atom, caf::actor& prefill, caf::actor& decode) {
      auto& st = self->state;
      st.cfg.prefill_rank = std::move(prefill);
      st.cfg.decode_rank = std::move(decode);
      st.placing = false;
      watch(self);  // a rank already gone answers at once: placed again
    },
    [=](preempt_atom, uint64_t id) {
      auto& st = self->state;
      if (id != st.placement || st.placing)
        return;            // from a placement given up
      if (!st.cfg.placer)  // no one to place it again: its KV is gone, as with a lost rank
        return migrate(self, "KV on its decode rank", {});
      ++st.preemptions;
      place_again(self, {});
    },
  };
}

}  // namespace

session_actor spawn_session(caf::actor_system& sys, session_config cfg) {
  return sys.spawn(session, std::move(cfg));
}

}  // namespace moe
