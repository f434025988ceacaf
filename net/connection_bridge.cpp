// net/connection_bridge.cpp
// NOTE: a session may stream before the queue's submit reply reaches this actor (they come from
// different actors): chunks and results for a request id not known yet wait in `early`.
//
// The bridge holds each request's record (its spec and what was streamed): when the session
// holding it dies, or the request queue restarts, it has the request resumed from there
// (resume_state), so that nothing the cluster accepted is lost and the stream goes on at its seq.
#include "net/connection_bridge.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <algorithm>
#include <exception>
#include <unordered_map>
#include <utility>

#include "actors/errors.hpp"
#include "net/generate_reply.hpp"
#include "net/prompt_tokens.hpp"
#include "net/rpc_frame.hpp"
#include "net/serving_metrics.hpp"

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
constexpr uint32_t unavailable_retry_ms = 1000;
constexpr uint64_t max_resumes = 3;  // sessions of one request crashed; then a 503
// sessions of one request in all (their placement ids: placement_id, max_placements_per_session)
constexpr uint64_t max_sessions = 256 / max_placements_per_session;

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
  clock::time_point arrival, first_token, last_token;
  bool has_first_token = false;
  request_spec spec;        // kept: the request is resumed from it when what holds it is lost
  resume_state progress;    // what was streamed so far
  std::string text;         // the text streamed so far
  caf::actor session;       // holds it now (monitored); null before it attaches or once lost
  bool queue_lost = false;  // its submit went to a queue that died: sent again to the next one
  uint64_t crashes = 0;     // sessions of it that crashed (not ended with their balancer)
};

struct early_messages {
  std::vector<stream_chunk> chunks;
  std::optional<session_result> result;
  caf::actor session;
  caf::actor_addr lost_session;  // it died before the submit reply came
  bool crashed = false;          // (and not with its balancer)
};

struct bridge_state {
  bridge_config cfg;
  std::unordered_map<uint32_t, in_flight> by_msgid;
  std::unordered_map<uint64_t, uint32_t> msgid_of;     // request id -> msgid
  std::unordered_map<uint64_t, early_messages> early;  // before the submit reply
  bool closed = false;
  bool quitting = false;
  caf::actor queue;                        // the request queue that lives now
  bool finding_queue = false;              // it died: its successor is being looked up
  std::vector<uint64_t> ended_unreported;  // ended here meanwhile: their slots, for the successor
  static inline const char* name = "connection_bridge";
};

using bridge_pointer = caf::stateful_actor<bridge_state>*;

double seconds(clock::duration d) { return std::chrono::duration<double>(d).count(); }

void send_cancel(bridge_pointer self, uint64_t request_id) {
  caf::anon_send(self->state.queue, cancel_atom::value, request_id);
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
  if (self->state.closed && self->state.by_msgid.empty() && !self->state.finding_queue)
    quit_now(self);  // (while the queue is replaced it waits, to report what ended meanwhile)
}

/// Answers `msgid` with an error (it is no longer in flight).
void fail(bridge_pointer self, uint32_t msgid, const rpc_error& error) {
  auto& st = self->state;
  st.by_msgid.erase(msgid);
  count_failed(*st.cfg.counters, error.code);
  st.cfg.counters->notify_request_ended();
  if (!st.closed)
    st.cfg.reply(encode_error(msgid, error), msgid);
  maybe_quit(self);
}

void on_chunk(bridge_pointer self, uint32_t msgid, const stream_chunk& chunk) {
  auto& st = self->state;
  in_flight& f = st.by_msgid.at(msgid);
  const auto now = clock::now();
  if (!f.has_first_token) {
    f.first_token = now;
    f.has_first_token = true;
  } else if (st.cfg.counters->histograms && !chunk.token_ids.empty()) {
    observe_token_gap(*st.cfg.counters->histograms, seconds(now - f.last_token), chunk.token_ids.size());
  }
  f.last_token = now;
  f.progress.output_ids.insert(f.progress.output_ids.end(), chunk.token_ids.begin(), chunk.token_ids.end());
  f.progress.logprobs.insert(f.progress.logprobs.end(), chunk.logprobs.begin(), chunk.logprobs.end());
  f.progress.next_seq = chunk.seq + 1;
  f.text += chunk.text_delta;
  if (f.stream && !st.closed)
    st.cfg.reply(encode_token(msgid, chunk.seq, chunk.token_ids, chunk.text_delta,
                              f.logprobs ? &chunk.logprobs : nullptr),
                 std::nullopt);
}

void on_result(bridge_pointer self, uint32_t msgid, session_result& r) {
  auto& st = self->state;
  in_flight f = std::move(st.by_msgid.at(msgid));
  st.msgid_of.erase(*f.request_id);
  if (r.output_ids.size() < f.progress.output_ids.size()) {  // ended by the queue after a resume
    r.output_ids = std::move(f.progress.output_ids);
    r.logprobs = std::move(f.progress.logprobs);
    r.text = std::move(f.text);
  }
  st.cfg.counters->output_tokens += static_cast<int64_t>(r.output_ids.size());
  st.cfg.counters->num_migrations += r.num_migrations;
  st.cfg.counters->num_preemptions += r.num_preemptions;
  st.cfg.counters->num_reprefilled_tokens += r.num_reprefilled_tokens;
  if (r.reason == finish_reason::error && r.error.starts_with("unavailable"))
    return fail(self, msgid, make_unavailable("generate: " + r.error, unavailable_retry_ms));
  if (r.reason == finish_reason::error)
    return fail(self, msgid, make_error(rpc_errc::internal, "generate: " + r.error));
  if (r.reason == finish_reason::abort)
    ++st.cfg.counters->num_cancelled;
  else if (r.reason == finish_reason::stop)
    ++st.cfg.counters->num_stopped;
  else if (r.reason == finish_reason::length)
    ++st.cfg.counters->num_length;
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
  if (st.cfg.counters->histograms)
    observe_request(*st.cfg.counters->histograms, {.queue_s = result.timings.queue,
                                                   .ttft_s = result.timings.ttft,
                                                   .e2e_s = seconds(now - f.arrival),
                                                   .has_first_token = f.has_first_token});
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

void submit(bridge_pointer self, uint32_t msgid);

// Request `id` ended here, not in a session: its running slot is freed (by the next queue, if
// this one is being replaced: a rebuilt queue may count it as running).
void free_slot(bridge_pointer self, uint64_t id) {
  auto& st = self->state;
  if (st.finding_queue)
    st.ended_unreported.push_back(id);
  else
    caf::anon_send(st.queue, done_atom::value, id);
}

// What held request `msgid` is gone. A request that was to end anyway (cancelled, or its
// connection closed) ends here, its running slot freed; true then.
bool ended_here(bridge_pointer self, uint32_t msgid) {
  auto& st = self->state;
  in_flight& f = st.by_msgid.at(msgid);
  if (!st.closed && !f.cancel_requested)
    return false;
  const uint64_t id = *f.request_id;
  free_slot(self, id);
  session_result aborted{id, {}, {}, finish_reason::abort, {}};
  on_result(self, msgid, aborted);
  return true;
}

// Sends request `f` to the queue to go on from what was streamed (with the others to the next
// queue while one is being looked up).
void send_resume(bridge_pointer self, in_flight& f) {
  f.progress.queue_restarted = false;
  if (!self->state.finding_queue)
    self->send(self->state.queue, resume_atom::value, *f.request_id, f.spec, f.progress);
}

// The session holding `msgid` died (not after answering: then its result is here or on its way).
void session_lost(bridge_pointer self, uint32_t msgid, const caf::actor_addr& lost, bool crashed) {
  auto& st = self->state;
  in_flight& f = st.by_msgid.at(msgid);
  f.session = {};
  const uint64_t id = *f.request_id;
  if (ended_here(self, msgid))
    return;
  // A request whose sessions keep crashing may be what crashes them: it ends. One whose
  // balancer was lost is not at fault, but placement ids allow only so many sessions.
  f.crashes += crashed ? 1 : 0;
  if (f.crashes > max_resumes || f.progress.generation + 1 >= max_sessions) {
    free_slot(self, id);
    st.msgid_of.erase(id);
    return fail(self, msgid,
                make_unavailable("generate: the session holding the request was lost " +
                                   std::to_string(f.progress.generation + 1) + " times",
                                 unavailable_retry_ms));
  }
  ++f.progress.generation;
  ++st.cfg.counters->num_resumed;
  f.progress.lost_session = lost;
  send_resume(self, f);
}

// What held request `id` downstream (the prefill balancer) died. A live session of it dies too,
// and its down resumes it; without one (it was still picking its ranks) it is resumed now.
void holder_lost(bridge_pointer self, uint64_t id) {
  auto& st = self->state;
  auto it = st.msgid_of.find(id);
  if (it == st.msgid_of.end())
    return;
  const uint32_t msgid = it->second;
  in_flight& f = st.by_msgid.at(msgid);
  if (f.session)
    return;  // its session's end resumes it
  // (a resume sent before may have died with the balancer: sent again, the successor takes one)
  if (!ended_here(self, msgid))
    send_resume(self, f);
}

void attach(bridge_pointer self, in_flight& f, caf::actor session) {
  f.session = std::move(session);
  f.progress.lost_session = {};
  self->monitor(f.session);
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
    if (early.session)
      attach(self, f, std::move(early.session));
    for (const stream_chunk& chunk : early.chunks)
      on_chunk(self, msgid, chunk);
    if (early.result)
      on_result(self, msgid, *early.result);
    else if (early.lost_session)
      session_lost(self, msgid, early.lost_session, early.crashed);
  }
  maybe_quit(self);  // closed while this was unanswered
}

void on_rejected(bridge_pointer self, uint32_t msgid, const caf::error& e, const caf::actor_addr& queue) {
  auto& st = self->state;
  if (e == caf::sec::request_receiver_down && st.by_msgid.count(msgid) > 0) {  // the queue died
    if (st.finding_queue || st.queue.address() == queue)
      st.by_msgid.at(msgid).queue_lost = true;  // sent to its successor
    else
      submit(self, msgid);
    return;
  }
  if (e == serve_errc::overloaded)
    return fail(self, msgid, make_overloaded("generate: the request queue is full", overloaded_retry_ms));
  fail(self, msgid,
       make_error(rpc_errc::unavailable,
                  "generate: the cluster did not admit the request (" + self->system().render(e) + ")"));
}

void submit(bridge_pointer self, uint32_t msgid) {
  auto& st = self->state;
  const caf::actor_addr queue = st.queue.address();
  self->request(st.queue, submit_timeout, submit_atom::value, st.by_msgid.at(msgid).spec)
    .then([=](uint64_t request_id) { on_admitted(self, msgid, request_id); },
          [=](caf::error& e) { on_rejected(self, msgid, e, queue); });
}

void start(bridge_pointer self, generate_job& job) {
  auto& st = self->state;
  const serving_target& target = *st.cfg.target;
  auto ids = prompt_ids_of(job.req, *target.tok, target.vocab_size);
  if (auto* err = std::get_if<rpc_error>(&ids))
    return fail(self, job.msgid, *err);
  auto& prompt_ids = std::get<std::vector<int32_t>>(ids);
  if (job.req.fill_context && prompt_ids.size() < target.max_context)  // what the context leaves
    job.req.sampling.max_tokens = static_cast<int32_t>(std::min<size_t>(
      static_cast<size_t>(job.req.sampling.max_tokens), target.max_context - prompt_ids.size()));
  if (auto err = check_context(prompt_ids.size(), job.req.sampling.max_tokens, target.max_context))
    return fail(self, job.msgid, *err);
  const uint32_t msgid = job.msgid;
  st.by_msgid[msgid] = in_flight{.stream = job.req.stream,
                                 .logprobs = job.req.sampling.logprobs.has_value(),
                                 .prompt_tokens = static_cast<int64_t>(prompt_ids.size()),
                                 .arrival = job.arrival,
                                 .spec = request_spec{std::move(prompt_ids), std::move(job.req.sampling)}};
  if (st.finding_queue)
    st.by_msgid[msgid].queue_lost = true;  // submitted once the next queue is known
  else
    submit(self, msgid);
}

// Every request of this connection ends now with a 503: nothing will answer them.
void fail_all(bridge_pointer self, const std::string& message) {
  std::vector<uint32_t> pending;
  for (const auto& [msgid, f] : self->state.by_msgid)
    pending.push_back(msgid);
  for (const uint32_t msgid : pending)
    fail(self, msgid, make_unavailable(message, unavailable_retry_ms));
  quit_now(self);
}

// The request queue's successor: it gets back what this bridge sent its predecessor.
void on_new_queue(bridge_pointer self, caf::actor queue) {
  auto& st = self->state;
  st.queue = std::move(queue);
  st.finding_queue = false;
  self->monitor(st.queue);
  for (const uint64_t id : st.ended_unreported)
    caf::anon_send(st.queue, done_atom::value, id);
  st.ended_unreported.clear();
  if (st.by_msgid.empty())
    return maybe_quit(self);
  std::vector<uint32_t> resubmit;
  for (auto& [msgid, f] : st.by_msgid) {
    if (f.request_id) {
      // a request whose session died is resumed as such; the others stay where they are
      f.progress.queue_restarted = !f.progress.lost_session;
      self->send(st.queue, resume_atom::value, *f.request_id, f.spec, f.progress);
      if (f.cancel_requested || st.closed)
        send_cancel(self, *f.request_id);
    } else if (f.queue_lost) {
      f.queue_lost = false;
      resubmit.push_back(msgid);
    }
  }
  for (const uint32_t msgid : resubmit)
    submit(self, msgid);
}

void on_down(bridge_pointer self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (dm.source == st.queue.address()) {
    const caf::actor supervisor = caf::actor_cast<caf::actor>(st.cfg.target->handles.supervisor);
    if (!supervisor)  // nothing restarts it
      return fail_all(self, "the cluster stopped before the request finished");
    st.finding_queue = true;
    self
      ->request(supervisor, caf::infinite, lookup_atom::value, std::string("request_queue"), int64_t{0},
                dm.source)
      .then([=](caf::actor& queue) { on_new_queue(self, std::move(queue)); },
            [=](caf::error&) { fail_all(self, "the cluster stopped before the request finished"); });
    return;
  }
  if (!dm.reason || dm.reason == caf::exit_reason::normal)
    return;                                                   // a session that answered
  const bool crashed = dm.reason != serve_errc::unavailable;  // else it ended with its balancer
  for (auto& [msgid, f] : st.by_msgid)
    if (f.session && f.session.address() == dm.source)
      return session_lost(self, msgid, dm.source, crashed);
  for (auto& [id, early] : st.early)
    if (early.session && early.session.address() == dm.source) {
      early.session = {};
      early.lost_session = dm.source;
      early.crashed = crashed;
    }
}

caf::behavior connection_bridge(caf::stateful_actor<bridge_state>* self, bridge_config cfg) {
  self->state.cfg = std::move(cfg);
  self->state.queue = caf::actor_cast<caf::actor>(self->state.cfg.target->handles.queue);
  // The queue dying (a crash: its successor takes the requests back; the cluster stopping:
  // serve's shutdown, or a failure that takes its supervisor down, and then nothing will answer
  // them: their clients get a 503 now and a closed connection's bridge quits now, instead of
  // waiting out submit_timeout or close_grace).
  self->monitor(self->state.queue);
  self->set_down_handler([=](caf::down_msg& dm) { on_down(self, dm); });
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
      it->second.cancel_requested = true;
      if (it->second.request_id)
        send_cancel(self, *it->second.request_id);  // (again to the next queue, if this one dies)
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
    [=](attach_atom, uint64_t request_id, caf::actor& session) {
      auto& st = self->state;
      auto it = st.msgid_of.find(request_id);
      if (it == st.msgid_of.end()) {
        st.early[request_id].session = session;
        self->monitor(session);
      } else {
        attach(self, st.by_msgid.at(it->second), std::move(session));
      }
    },
    [=](migrate_atom, uint64_t request_id) { holder_lost(self, request_id); },
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
