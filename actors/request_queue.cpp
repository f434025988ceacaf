// actors/request_queue.cpp
// The admission actor: a bounded FIFO in front of the serving graph.
#include "actors/request_queue.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <algorithm>
#include <deque>
#include <unordered_map>
#include <vector>
#include <utility>

#include "actors/errors.hpp"

namespace moe {

namespace {

struct request_queue_state {
  request_queue_config cfg;
  live_settings<request_queue_settings> settings;  // the limits now
  caf::actor downstream;
  uint64_t next_id = 1;
  struct waiting_request {
    uint64_t id;
    request_spec spec;
    caf::actor client;
    resume_state resumed;
  };
  std::deque<waiting_request> waiting;
  std::unordered_map<uint64_t, caf::actor> running;  // id -> its client (null: not known yet)
  std::vector<waiting_request> held;  // handed down while downstream was down: sent to its successor
  std::vector<uint64_t> ended_held;   // ended while downstream was down: told to its successor
  queue_stats stats;
  static inline const char* name = "request_queue";
};

using queue_pointer = request_queue_actor::stateful_pointer<request_queue_state>;

void hand_down(request_queue_state& st, request_queue_state::waiting_request w) {
  st.running[w.id] = w.client;
  if (!st.downstream)
    return st.held.push_back(std::move(w));
  caf::anon_send(st.downstream, submit_atom::value, w.id, std::move(w.spec), std::move(w.client),
                 std::move(w.resumed));
}

// Downstream (the prefill balancer) died with what it held: each running request's client
// hears it (migrate_atom, id) and resumes the request unless a session of it lives (that
// session ends too, and its client resumes it then). Hand-downs wait for the successor.
void downstream_lost(queue_pointer self) {
  auto& st = self->state;
  st.downstream = {};
  for (const auto& [id, client] : st.running)
    if (client)
      caf::anon_send(client, migrate_atom::value, id);
}

// Request `id` is over: downstream (or its successor) frees what a placement of it that never
// started still holds (a decode rank booked for a pick whose placer died).
void tell_ended(request_queue_state& st, uint64_t id) {
  if (st.downstream)
    caf::anon_send(st.downstream, ended_atom::value, id);
  else
    st.ended_held.push_back(id);
}

// Hands waiting requests downstream while running slots are free.
void start_waiting(queue_pointer self) {
  auto& st = self->state;
  while (!st.waiting.empty() && static_cast<int64_t>(st.running.size()) < st.settings.now.max_running) {
    request_queue_state::waiting_request w = std::move(st.waiting.front());
    st.waiting.pop_front();
    hand_down(st, std::move(w));
  }
}

bool is_waiting(const request_queue_state& st, uint64_t id) {
  return std::any_of(st.waiting.begin(), st.waiting.end(), [id](const auto& w) { return w.id == id; });
}

void resume(queue_pointer self, uint64_t id, request_spec& spec, resume_state& state) {
  auto& st = self->state;
  const bool running = st.running.count(id) > 0;
  if (state.queue_restarted && is_waiting(st, id))
    return;  // still held where it is
  request_queue_state::waiting_request w{
    id, std::move(spec), caf::actor_cast<caf::actor>(self->current_sender()), std::move(state)};
  if (running && w.resumed.queue_restarted) {  // still held downstream: this is its client
    st.running[id] = w.client;
    return;
  }
  if (running)  // its slot is its own still
    return hand_down(st, std::move(w));
  st.waiting.push_front(std::move(w));  // admitted before anything waiting now
  start_waiting(self);
}

request_queue_actor::behavior_type request_queue(queue_pointer self, request_queue_config cfg,
                                                 caf::actor downstream) {
  self->state.cfg = cfg;
  self->state.settings.target = "request_queue";
  self->state.settings.now = {.max_queued = cfg.max_queued, .max_running = cfg.max_running};
  self->state.next_id = cfg.first_id;
  self->state.downstream = std::move(downstream);
  if (cfg.rebuild && self->state.downstream)  // awaited: nothing else is handled before it
    self->request(self->state.downstream, caf::infinite, bookings_atom::value)
      .await(
        [=](const std::vector<uint64_t>& ids) {
          for (const uint64_t id : ids)
            self->state.running.emplace(id, caf::actor{});  // its client says who it is
        },
        [](const caf::error&) {});  // downstream is gone too: nothing runs
  if (self->state.downstream)
    self->monitor(self->state.downstream);
  self->set_down_handler([=](caf::down_msg& dm) {
    if (self->state.downstream && dm.source == self->state.downstream.address())
      downstream_lost(self);
  });
  return {
    [=](submit_atom, request_spec& spec) -> caf::result<uint64_t> {
      auto& st = self->state;
      if (static_cast<int64_t>(st.waiting.size()) >= st.settings.now.max_queued) {
        ++st.stats.num_rejected;
        return caf::make_error(serve_errc::overloaded);
      }
      const uint64_t id = st.next_id++;
      ++st.stats.num_admitted;
      st.waiting.push_back({id, std::move(spec), caf::actor_cast<caf::actor>(self->current_sender()), {}});
      start_waiting(self);
      return id;
    },
    [=](resume_atom, uint64_t id, request_spec& spec, resume_state& state) { resume(self, id, spec, state); },
    [=](route_atom, caf::actor& downstream) {  // downstream's successor
      auto& st = self->state;
      st.downstream = std::move(downstream);
      self->monitor(st.downstream);
      for (const uint64_t id : st.ended_held)
        caf::anon_send(st.downstream, ended_atom::value, id);
      st.ended_held.clear();
      std::vector<request_queue_state::waiting_request> held = std::move(st.held);
      st.held.clear();
      for (auto& w : held)
        hand_down(st, std::move(w));
    },
    [=](done_atom, uint64_t id) {
      auto& st = self->state;
      if (st.running.erase(id) == 0)
        return;  // a stray or repeated done is ignored
      tell_ended(st, id);
      start_waiting(self);
    },
    [=](cancel_atom, uint64_t id) {
      auto& st = self->state;
      auto it = std::find_if(st.waiting.begin(), st.waiting.end(),
                             [id](const auto& w) { return w.id == id; });
      if (it != st.waiting.end()) {
        caf::anon_send(it->client, done_atom::value, session_result{id, {}, {}, finish_reason::abort, {}});
        tell_ended(st, id);  // resumed, it may have been placed before
        st.waiting.erase(it);
      } else if (auto h = std::find_if(st.held.begin(), st.held.end(),
                                       [id](const auto& w) { return w.id == id; });
                 h != st.held.end()) {  // answered here: it never reached downstream
        caf::anon_send(h->client, done_atom::value, session_result{id, {}, {}, finish_reason::abort, {}});
        st.running.erase(id);
        st.held.erase(h);
        tell_ended(st, id);  // placed before its holder died, maybe
        start_waiting(self);
      } else if (st.running.count(id) > 0 && st.downstream) {
        caf::anon_send(st.downstream, cancel_atom::value, id);
      }
    },
    [=](configure_atom, const config_fields& change) -> caf::result<versioned_config> {
      caf::expected<versioned_config> v = self->state.settings.configure(change);
      if (v)
        start_waiting(self);  // a higher max_running starts what waits
      return v;
    },
    [=](configure_atom, const versioned_config& earlier) {
      self->state.settings.restore(earlier);
      start_waiting(self);
    },
    [=](config_atom) { return self->state.settings.current(); },
    [=](stats_atom) {
      auto stats = self->state.stats;
      stats.num_queued = static_cast<int64_t>(self->state.waiting.size());
      stats.num_running = static_cast<int64_t>(self->state.running.size());
      return stats;
    },
  };
}

}  // namespace

request_queue_actor spawn_request_queue(caf::actor_system& sys, request_queue_config cfg,
                                        caf::actor downstream) {
  return sys.spawn(request_queue, cfg, std::move(downstream));
}

}  // namespace moe
