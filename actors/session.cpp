// actors/session.cpp
#include "actors/session.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>

#include "actors/metrics.hpp"
#include "kernels/model/output_text.hpp"

namespace moe {

namespace {

struct session_state {
  session_config cfg;
  std::unique_ptr<text_stream> text;
  session_result result;
  uint64_t next_seq = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now(), first_token;
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
  for (const caf::actor& a : st.cfg.on_done)  // first: a client that hears the end sees them updated
    caf::anon_send(a, done_atom::value, st.cfg.request_id);
  if (st.cfg.metrics) {
    const auto seconds = [&](std::chrono::steady_clock::time_point t) {
      return std::chrono::duration<double>(t - st.start).count();
    };
    const bool any = !st.result.output_ids.empty();
    caf::anon_send(st.cfg.metrics, done_atom::value,
                   request_record{.num_prompt_tokens = static_cast<int64_t>(st.cfg.spec.prompt_ids.size()),
                                  .num_cached_tokens = 0,
                                  .num_output_tokens = static_cast<int64_t>(st.result.output_ids.size()),
                                  .ttft_s = any ? seconds(st.first_token) : 0.0,
                                  .total_s = seconds(std::chrono::steady_clock::now()),
                                  .reason = reason});
  }
  caf::anon_send(st.cfg.client, done_atom::value, std::move(st.result));
  self->quit();
}

session_actor::behavior_type session(session_pointer self, session_config cfg) {
  self->state.text = std::make_unique<text_stream>(cfg.tok, cfg.spec.sampling.stop);
  self->state.result.request_id = cfg.request_id;
  self->state.cfg = std::move(cfg);
  return {
    [=](start_atom, std::chrono::steady_clock::time_point at) {
      auto& prefill_start = self->state.result.prefill_start;
      if (!prefill_start)
        prefill_start = at;
    },
    [=](token_atom, token_chunk& chunk) {
      auto& st = self->state;
      if (st.result.output_ids.empty() && !chunk.token_ids.empty())
        st.first_token = std::chrono::steady_clock::now();
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
          caf::anon_send(st.cfg.decode_rank, cancel_atom::value, st.cfg.request_id);
        send_chunk(self, chunk, std::move(delta));
        return answer(self, finish_reason::stop, {});
      }
      if (chunk.reason != finish_reason::none)
        delta += st.text->finish();
      send_chunk(self, chunk, std::move(delta));
      if (chunk.reason != finish_reason::none)
        answer(self, final_reason(chunk.reason, *st.text), std::move(chunk.error));
    },
    [=](cancel_atom) {
      auto& st = self->state;
      if (st.cfg.prefill_rank)
        caf::anon_send(st.cfg.prefill_rank, cancel_atom::value, st.cfg.request_id);
      if (st.cfg.decode_rank)
        caf::anon_send(st.cfg.decode_rank, cancel_atom::value, st.cfg.request_id);
      token_chunk none;                           // the text held back for stop strings, streamed as
      send_chunk(self, none, st.text->finish());  // a last chunk: the chunks add up to the text
      answer(self, finish_reason::abort, {});
    },
  };
}

}  // namespace

session_actor spawn_session(caf::actor_system& sys, session_config cfg) {
  return sys.spawn(session, std::move(cfg));
}

}  // namespace moe
