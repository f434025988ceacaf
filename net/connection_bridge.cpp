// net/connection_bridge.cpp
// NOTE: a session may stream before the queue's submit reply reaches this actor (they come from
// different actors): chunks and results for a request id not known yet wait in `early`.
#include "net/connection_bridge.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <exception>
#include <unordered_map>
#include <utility>

#include "actors/errors.hpp"
#include "net/generate_reply.hpp"
#include "net/prompt_tokens.hpp"
#include "net/rpc_frame.hpp"

namespace moe::net {
namespace {

using clock = std::chrono::steady_clock;
using close_atom = caf::atom_constant<caf::atom("close")>;
using close_grace_atom = caf::atom_constant<caf::atom("closegrace")>;
constexpr auto submit_timeout = std::chrono::seconds(30);
// After its connection closed, how long a bridge waits for its cancelled requests' results (they
// come at once; this only bounds a lost one).
constexpr auto close_grace = std::chrono::seconds(10);
constexpr uint32_t overloaded_retry_ms = 100;

struct generate_job {
  uint32_t msgid = 0;
  generate_request req;
  clock::time_point arrival;
};

}  // namespace
}  // namespace moe::net

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::net::generate_job)

namespace moe::net {
namespace {

struct in_flight {
  bool stream = false;
  bool logprobs = false;  // the request asked for them
  bool cancel_requested = false;
  std::optional<uint64_t> request_id;
  int64_t prompt_tokens = 0;
  clock::time_point arrival, first_token;
  bool has_first_token = false;
};

struct early_messages {
  std::vector<stream_chunk> chunks;
  std::optional<session_result> result;
};

struct bridge_state {
  bridge_config cfg;
  std::unordered_map<uint32_t, in_flight> by_msgid;
  std::unordered_map<uint64_t, uint32_t> msgid_of;     // request id -> msgid
  std::unordered_map<uint64_t, early_messages> early;  // before the submit reply
  bool closed = false;
  bool quitting = false;
  static inline const char* name = "connection_bridge";
};

using bridge_pointer = caf::stateful_actor<bridge_state>*;

double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }

void send_cancel(bridge_pointer self, uint64_t request_id) {
  caf::anon_send(self->state.cfg.target->handles.queue, cancel_atom::value, request_id);
}

void quit_now(bridge_pointer self) {
  if (self->state.quitting)
    return;
  self->state.quitting = true;
  self->quit();
}

// Once closed, the bridge stays until every request it cancelled has answered: submits still
// unanswered must learn their ids to be cancelled, and the aborted results carry the counts
// (cancelled requests, output tokens) the server's stats report.
void maybe_quit(bridge_pointer self) {
  if (self->state.closed && self->state.by_msgid.empty())
    quit_now(self);
}

/// Answers `msgid` with an error (it is no longer in flight).
void fail(bridge_pointer self, uint32_t msgid, const rpc_error& error) {
  auto& st = self->state;
  st.by_msgid.erase(msgid);
  ++st.cfg.counters->num_failed;
  st.cfg.counters->notify_request_ended();
  if (!st.closed)
    st.cfg.reply(encode_error(msgid, error), msgid);
  maybe_quit(self);
}

void on_chunk(bridge_pointer self, uint32_t msgid, const stream_chunk& chunk) {
  auto& st = self->state;
  in_flight& f = st.by_msgid.at(msgid);
  if (!f.has_first_token) {
    f.first_token = clock::now();
    f.has_first_token = true;
  }
  if (f.stream && !st.closed)
    st.cfg.reply(encode_token(msgid, chunk.seq, chunk.token_ids, chunk.text_delta,
                              f.logprobs ? &chunk.logprobs : nullptr),
                 std::nullopt);
}

void on_result(bridge_pointer self, uint32_t msgid, session_result& r) {
  auto& st = self->state;
  const in_flight f = st.by_msgid.at(msgid);
  st.msgid_of.erase(*f.request_id);
  st.cfg.counters->output_tokens += static_cast<int64_t>(r.output_ids.size());
  if (r.reason == finish_reason::error)
    return fail(self, msgid, make_error(rpc_errc::internal, "generate: " + r.error));
  if (r.reason == finish_reason::abort)
    ++st.cfg.counters->num_cancelled;
  const auto now = clock::now();
  const auto first = f.has_first_token ? f.first_token : now;
  const auto prefill_start = r.prefill_start.value_or(now);  // never started: queued throughout
  generate_result result{.output_ids = std::move(r.output_ids),
                         .text = std::move(r.text),
                         .reason = r.reason,
                         .usage = {.prompt_tokens = f.prompt_tokens},
                         .timings = {seconds(prefill_start - f.arrival), seconds(first - f.arrival),
                                     seconds(now - first)}};
  if (f.logprobs)
    result.logprobs = std::move(r.logprobs);
  result.usage.completion_tokens = static_cast<int64_t>(result.output_ids.size());
  if (result.usage.completion_tokens > 1 && result.timings.decode > 0) {
    st.cfg.counters->sum_request_tok_per_s += static_cast<double>(result.usage.completion_tokens - 1) /
                                              result.timings.decode;
    ++st.cfg.counters->num_rated_requests;
  }
  st.by_msgid.erase(msgid);
  st.cfg.counters->notify_request_ended();
  if (!st.closed)
    st.cfg.reply(encode_generate_result(msgid, result), msgid);
  maybe_quit(self);
}

void on_admitted(bridge_pointer self, uint32_t msgid, uint64_t request_id) {
  auto& st = self->state;
  in_flight& f = st.by_msgid.at(msgid);
  f.request_id = request_id;
  st.msgid_of[request_id] = msgid;
  ++st.cfg.counters->num_requests;
  st.cfg.counters->input_tokens += f.prompt_tokens;
  if (f.cancel_requested || st.closed)
    send_cancel(self, request_id);
  if (auto it = st.early.find(request_id); it != st.early.end()) {
    early_messages early = std::move(it->second);
    st.early.erase(it);
    for (const stream_chunk& chunk : early.chunks)
      on_chunk(self, msgid, chunk);
    if (early.result)
      on_result(self, msgid, *early.result);
  }
  maybe_quit(self);  // closed while this was unanswered
}

void on_rejected(bridge_pointer self, uint32_t msgid, const caf::error& e) {
  if (e == serve_errc::overloaded)
    return fail(self, msgid, make_overloaded("generate: the request queue is full", overloaded_retry_ms));
  fail(self, msgid,
       make_error(rpc_errc::unavailable,
                  "generate: the cluster did not admit the request (" + self->system().render(e) + ")"));
}

void start(bridge_pointer self, generate_job& job) {
  auto& st = self->state;
  const serving_target& target = *st.cfg.target;
  auto ids = prompt_ids_of(job.req, *target.tok, target.vocab_size);
  if (auto* err = std::get_if<rpc_error>(&ids))
    return fail(self, job.msgid, *err);
  auto& prompt_ids = std::get<std::vector<int32_t>>(ids);
  if (auto err = check_context(prompt_ids.size(), job.req.sampling.max_tokens, target.max_context))
    return fail(self, job.msgid, *err);
  const uint32_t msgid = job.msgid;
  st.by_msgid[msgid] = in_flight{.stream = job.req.stream,
                                 .logprobs = job.req.sampling.logprobs.has_value(),
                                 .prompt_tokens = static_cast<int64_t>(prompt_ids.size()),
                                 .arrival = job.arrival};
  self
    ->request(target.handles.queue, submit_timeout, submit_atom::value,
              request_spec{std::move(prompt_ids), std::move(job.req.sampling)})
    .then([=](uint64_t request_id) { on_admitted(self, msgid, request_id); },
          [=](caf::error& e) { on_rejected(self, msgid, e); });
}

caf::behavior connection_bridge(caf::stateful_actor<bridge_state>* self, bridge_config cfg) {
  self->state.cfg = std::move(cfg);
  // The cluster stopping (serve's shutdown, or a failure that takes its supervisor down) ends
  // every request it held: nothing will answer them, so their clients get a 503 now and a closed
  // connection's bridge quits now, instead of waiting out submit_timeout or close_grace (serve
  // took 10 s to exit after SIGTERM with requests in flight).
  self->monitor(self->state.cfg.target->handles.queue);
  self->set_down_handler([=](caf::down_msg&) {
    std::vector<uint32_t> pending;
    for (const auto& [msgid, f] : self->state.by_msgid)
      pending.push_back(msgid);
    for (const uint32_t msgid : pending)
      fail(self, msgid, make_error(rpc_errc::unavailable, "the cluster stopped before the request finished"));
    quit_now(self);
  });
  return {
    [=](submit_atom, generate_job& job) {
      try {
        start(self, job);
      } catch (const std::exception& e) {  // a bug must not kill the bridge
        fail(self, job.msgid, make_error(rpc_errc::internal, std::string("generate: ") + e.what()));
      }
    },
    [=](cancel_atom, uint32_t msgid) {
      auto it = self->state.by_msgid.find(msgid);
      if (it == self->state.by_msgid.end())
        return;
      if (it->second.request_id)
        send_cancel(self, *it->second.request_id);
      else
        it->second.cancel_requested = true;  // cancelled once admitted
    },
    [=](close_atom) {
      auto& st = self->state;
      st.closed = true;
      self->delayed_send(self, close_grace, close_grace_atom::value);
      for (auto& [msgid, f] : st.by_msgid) {
        if (f.request_id)
          send_cancel(self, *f.request_id);
        else
          f.cancel_requested = true;
      }
      maybe_quit(self);
    },
    [=](close_grace_atom) { quit_now(self); },
    [=](token_atom, stream_chunk& chunk) {
      auto it = self->state.msgid_of.find(chunk.request_id);
      if (it == self->state.msgid_of.end())
        self->state.early[chunk.request_id].chunks.push_back(std::move(chunk));
      else
        on_chunk(self, it->second, chunk);
    },
    [=](done_atom, session_result& r) {
      auto it = self->state.msgid_of.find(r.request_id);
      if (it == self->state.msgid_of.end())
        self->state.early[r.request_id].result = std::move(r);
      else
        on_result(self, it->second, r);
    },
  };
}

}  // namespace

caf::actor spawn_connection_bridge(caf::actor_system& sys, bridge_config cfg) {
  return sys.spawn(connection_bridge, std::move(cfg));
}

void bridge_generate(const caf::actor& bridge, uint32_t msgid, generate_request req,
                     std::chrono::steady_clock::time_point arrival) {
  caf::anon_send(bridge, submit_atom::value, generate_job{msgid, std::move(req), arrival});
}

void bridge_cancel(const caf::actor& bridge, uint32_t msgid) {
  caf::anon_send(bridge, cancel_atom::value, msgid);
}

void bridge_close(const caf::actor& bridge) { caf::anon_send(bridge, close_atom::value); }

}  // namespace moe::net
