// actors/request_queue.cpp
// The admission actor: a bounded FIFO in front of the serving graph.
#include "actors/request_queue.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <algorithm>
#include <deque>
#include <unordered_set>
#include <utility>

#include "actors/errors.hpp"

namespace moe {

namespace {

struct request_queue_state {
  request_queue_config cfg;
  caf::actor downstream;
  uint64_t next_id = 1;
  struct waiting_request {
    uint64_t id;
    request_spec spec;
    caf::actor client;
  };
  std::deque<waiting_request> waiting;
  std::unordered_set<uint64_t> running;
  queue_stats stats;
  static inline const char* name = "request_queue";
};

using queue_pointer = request_queue_actor::stateful_pointer<request_queue_state>;

// Hands waiting requests downstream while running slots are free.
void start_waiting(queue_pointer self) {
  auto& st = self->state;
  while (!st.waiting.empty() && static_cast<int64_t>(st.running.size()) < st.cfg.max_running) {
    auto [id, spec, client] = std::move(st.waiting.front());
    st.waiting.pop_front();
    st.running.insert(id);
    caf::anon_send(st.downstream, submit_atom::value, id, std::move(spec), std::move(client));
  }
}

request_queue_actor::behavior_type request_queue(queue_pointer self, request_queue_config cfg,
                                                 caf::actor downstream) {
  self->state.cfg = cfg;
  self->state.downstream = std::move(downstream);
  return {
    [=](submit_atom, request_spec& spec) -> caf::result<uint64_t> {
      auto& st = self->state;
      if (static_cast<int64_t>(st.waiting.size()) >= st.cfg.max_queued) {
        ++st.stats.num_rejected;
        return caf::make_error(serve_errc::overloaded);
      }
      const uint64_t id = st.next_id++;
      ++st.stats.num_admitted;
      st.waiting.push_back({id, std::move(spec), caf::actor_cast<caf::actor>(self->current_sender())});
      start_waiting(self);
      return id;
    },
    [=](done_atom, uint64_t id) {
      if (self->state.running.erase(id) > 0)  // a stray or repeated done is ignored
        start_waiting(self);
    },
    [=](cancel_atom, uint64_t id) {
      auto& st = self->state;
      auto it = std::find_if(st.waiting.begin(), st.waiting.end(),
                             [id](const auto& w) { return w.id == id; });
      if (it != st.waiting.end()) {
        caf::anon_send(it->client, done_atom::value, session_result{id, {}, {}, finish_reason::abort, {}});
        st.waiting.erase(it);
      } else if (st.running.count(id) > 0) {
        caf::anon_send(st.downstream, cancel_atom::value, id);
      }
    },
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
