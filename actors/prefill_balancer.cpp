// actors/prefill_balancer.cpp
#include "actors/prefill_balancer.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <map>
#include <set>

#include "actors/policy/rank_picker.hpp"
#include "actors/session.hpp"

namespace moe {

namespace {

struct prefill_balancer_state {
  prefill_balancer_graph graph;
  std::vector<prefill_load> loads;
  std::map<uint64_t, std::pair<int64_t, int64_t>> in_flight;  // id -> (rank, prompt tokens)
  std::map<uint64_t, caf::actor> sessions;                    // live sessions (monitored)
  std::map<caf::actor_addr, uint64_t> session_ids;
  std::map<uint64_t, caf::actor> picking;      // waiting for the decode balancer: id -> client
  std::set<uint64_t> cancelled_while_picking;  // answered already; drop when the pick comes
  static inline const char* name = "prefill_balancer";
};

using balancer_pointer = prefill_balancer_actor::stateful_pointer<prefill_balancer_state>;

// The request has its decode rank: spawn the session and hand the prompt to a prefill rank.
void start_request(balancer_pointer self, uint64_t id, request_spec spec, const caf::actor& client,
                   int64_t decode_idx) {
  auto& st = self->state;
  const caf::actor decode = caf::actor_cast<caf::actor>(st.graph.decode_ranks[decode_idx]);
  const int64_t n = static_cast<int64_t>(spec.prompt_ids.size());
  const int64_t rank = pick_prefill_rank(st.loads, n);
  // built step by step: a nested braced temporary here tripped AddressSanitizer under GCC 12
  session_config cfg;
  cfg.request_id = id;
  cfg.spec = spec;
  cfg.tok = st.graph.tok;
  cfg.client = client;
  cfg.decode_rank = decode;
  cfg.prefill_rank = caf::actor_cast<caf::actor>(st.graph.prefill_ranks[rank]);
  cfg.on_done.push_back(st.graph.queue);
  cfg.on_done.push_back(caf::actor_cast<caf::actor>(st.graph.decode_balancer));
  cfg.on_done.push_back(decode);
  cfg.metrics = st.graph.metrics;
  const caf::actor session = caf::actor_cast<caf::actor>(spawn_session(self->system(), std::move(cfg)));
  self->monitor(session);
  st.sessions[id] = session;
  st.session_ids[session.address()] = id;
  st.loads[rank].attention_cost += static_cast<double>(n) * static_cast<double>(n);
  st.loads[rank].num_tokens += n;
  st.in_flight[id] = {rank, n};
  caf::anon_send(st.graph.prefill_ranks[rank], submit_atom::value,
                 prefill_job{id, std::move(spec), decode, session, caf::actor_cast<caf::actor>(self)});
}

}  // namespace

prefill_balancer_actor::behavior_type prefill_balancer(balancer_pointer self, prefill_balancer_graph graph) {
  self->state.loads.resize(graph.prefill_ranks.size());
  self->state.graph = std::move(graph);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    auto it = st.session_ids.find(dm.source);
    if (it != st.session_ids.end()) {
      st.sessions.erase(it->second);
      st.session_ids.erase(it);
    }
  });
  return {
    [=](submit_atom, uint64_t id, request_spec& spec, caf::actor& client) {
      const auto& st = self->state;
      const int64_t n = static_cast<int64_t>(spec.prompt_ids.size());
      const int64_t wanted = n + spec.sampling.max_tokens;  // the worst case, booked until the end
      self->state.picking[id] = client;
      self
        ->request(st.graph.decode_balancer, caf::infinite, pick_atom::value, id, n,
                  std::min(wanted, st.graph.max_context))
        .then(
          [=](int64_t decode_idx) mutable {
            auto& st = self->state;
            st.picking.erase(id);
            if (st.cancelled_while_picking.erase(id)) {  // give the booking back
              caf::anon_send(st.graph.decode_balancer, done_atom::value, id);
              caf::anon_send(st.graph.decode_ranks[decode_idx], done_atom::value, id);  // its pre-allocation
              return;
            }
            start_request(self, id, std::move(spec), client, decode_idx);
          },
          [=](caf::error& err) mutable {
            self->state.picking.erase(id);
            if (self->state.cancelled_while_picking.erase(id))
              return;
            // no decode rank can ever hold it: answer through a session, as every request ends
            const caf::actor session = caf::actor_cast<caf::actor>(
              spawn_session(self->system(), {.request_id = id,
                                             .spec = spec,
                                             .tok = self->state.graph.tok,
                                             .client = client,
                                             .decode_rank = {},
                                             .on_done = {self->state.graph.queue}}));
            caf::anon_send(session, token_atom::value,
                           token_chunk{id, {}, finish_reason::error, self->system().render(err)});
          });
    },
    [=](peers_atom, caf::actor& queue) { self->state.graph.queue = std::move(queue); },
    [=](done_atom, uint64_t id) {
      auto& st = self->state;
      auto it = st.in_flight.find(id);
      if (it == st.in_flight.end())
        return;
      const auto [rank, n] = it->second;
      st.loads[rank].attention_cost -= static_cast<double>(n) * static_cast<double>(n);
      st.loads[rank].num_tokens -= n;
      st.in_flight.erase(it);
    },
    [=](cancel_atom, uint64_t id) {
      auto& st = self->state;
      if (auto it = st.sessions.find(id); it != st.sessions.end())
        caf::anon_send(it->second, cancel_atom::value);
      else if (auto p = st.picking.find(id);
               p != st.picking.end() && st.cancelled_while_picking.insert(id).second) {
        caf::anon_send(p->second, done_atom::value, session_result{id, {}, {}, finish_reason::abort, {}});
        caf::anon_send(st.graph.queue, done_atom::value, id);
      }
    },
    [=](stats_atom) {
      std::vector<int64_t> per_rank(self->state.loads.size(), 0);
      for (const auto& [id, where] : self->state.in_flight)
        ++per_rank[where.first];
      return per_rank;
    },
  };
}

prefill_balancer_actor spawn_prefill_balancer(caf::actor_system& sys, prefill_balancer_graph graph) {
  return sys.spawn(prefill_balancer, std::move(graph));
}

}  // namespace moe
