// actors/prefill_balancer.cpp
#include "actors/prefill_balancer.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <algorithm>
#include <cmath>
#include <map>
#include <deque>
#include <set>

#include "actors/policy/rank_picker.hpp"
#include "actors/session.hpp"

namespace moe {

namespace {

struct prefill_balancer_state {
  prefill_balancer_graph graph;
  live_settings<prefill_balancer_settings> settings;
  int64_t next_turn = 0;  // round_robin: the rank to try first
  std::vector<prefill_load> loads;
  pick_window picks{1};                                       // per rank once the ranks are known
  std::map<uint64_t, std::pair<int64_t, int64_t>> in_flight;  // id -> (rank, prompt tokens)
  std::map<uint64_t, caf::actor> sessions;                    // live sessions (monitored)
  std::map<uint64_t, uint64_t> session_generation;            // id -> sessions it lost before
  std::map<caf::actor_addr, uint64_t> session_ids;
  // Waiting for the decode balancer. A pick is asked again of a restarted balancer (which
  // answers a request it has booked already with that rank); `attempt` tells the answers apart.
  struct pending_pick {
    request_spec spec;  // a first placement's: the client's; a migration's: what is left
    caf::actor client;
    uint64_t attempt = 0;
    caf::actor session;     // placed again after a lost rank: keyed by its placement id
    bool deferred = false;  // its ranks were down: asked again once they are back
    uint64_t request_id = 0;
    resume_state resumed;  // a first placement's progress under an earlier session
  };
  std::vector<bool> decode_down;  // dead, not yet restarted (a prefill rank's: loads[r].up)
  std::map<uint64_t, pending_pick> picking;
  std::set<uint64_t> cancelled_while_picking;  // answered already; drop when the pick comes
  // The requests that ended last, told again to a restarted decode balancer: one told to its
  // predecessor as it died would leave that request's booking to no one.
  std::deque<uint64_t> recently_ended;
  static inline const char* name = "prefill_balancer";
};

using balancer_pointer = prefill_balancer_actor::stateful_pointer<prefill_balancer_state>;

// Ended requests kept to tell a restarted decode balancer again (more than can run at once).
constexpr size_t max_recently_ended = 4096;

// The prefill rank for a prompt of n tokens, under the settings now.
int64_t pick_rank(prefill_balancer_state& st, int64_t n) {
  const int64_t rank = pick_prefill_rank(st.loads, n, st.settings.now, st.next_turn);
  st.next_turn = rank + 1;
  st.picks.add(rank, static_cast<double>(n));
  return rank;
}

// A prompt of n tokens (placement `pid`) loads prefill rank `rank` until the rank reports it done.
void load_rank(prefill_balancer_state& st, uint64_t pid, int64_t rank, int64_t n) {
  st.loads[rank].attention_cost += static_cast<double>(n) * static_cast<double>(n);
  st.loads[rank].num_tokens += n;
  st.in_flight[pid] = {rank, n};
}

// The request has its decode rank: spawn the session and hand the prompt (with the tokens an
// earlier session streamed) to a prefill rank, as placement `pid`.
void start_request(balancer_pointer self, uint64_t pid, prefill_balancer_state::pending_pick pick,
                   int64_t decode_idx) {
  auto& st = self->state;
  const uint64_t id = pick.request_id;
  const caf::actor decode = caf::actor_cast<caf::actor>(st.graph.decode_ranks[decode_idx]);
  request_spec rest = continued(pick.spec, pick.resumed.output_ids);
  const int64_t n = static_cast<int64_t>(rest.prompt_ids.size());
  const int64_t rank = pick_rank(st, n);
  const bool nothing_left = rest.sampling.max_tokens <= 0;
  // built step by step: a nested braced temporary here tripped AddressSanitizer under GCC 12
  session_config cfg;
  cfg.request_id = id;
  cfg.spec = std::move(pick.spec);
  cfg.tok = st.graph.tok;
  cfg.client = pick.client;
  cfg.decode_rank = decode;
  cfg.prefill_rank = nothing_left ? caf::actor{} : caf::actor_cast<caf::actor>(st.graph.prefill_ranks[rank]);
  cfg.on_done.push_back(st.graph.queue);  // the decode rank hears the end too (and tells the balancer)
  cfg.placer = caf::actor_cast<caf::actor>(self);
  cfg.max_migrations = st.graph.max_migrations;
  st.session_generation[id] = pick.resumed.generation;
  cfg.resumed = std::move(pick.resumed);
  const caf::actor session = caf::actor_cast<caf::actor>(spawn_session(self->system(), std::move(cfg)));
  self->monitor(session);
  st.sessions[id] = session;
  st.session_ids[session.address()] = id;
  if (nothing_left)  // every token it may have was streamed: the session ends it at once
    return;
  load_rank(st, pid, rank, n);
  caf::anon_send(st.graph.prefill_ranks[rank], submit_atom::value,
                 prefill_job{pid, std::move(rest), decode, session, caf::actor_cast<caf::actor>(self)});
}

// A request placed again after a lost rank (placement id `pid`): prompt + its tokens so far to a
// prefill rank, its KV to decode rank `decode_idx`; its session learns both.
void place_again(balancer_pointer self, uint64_t pid, request_spec spec, const caf::actor& session,
                 int64_t decode_idx) {
  auto& st = self->state;
  const caf::actor decode = caf::actor_cast<caf::actor>(st.graph.decode_ranks[decode_idx]);
  const int64_t n = static_cast<int64_t>(spec.prompt_ids.size());
  const int64_t rank = pick_rank(st, n);
  load_rank(st, pid, rank, n);
  const caf::actor prefill = caf::actor_cast<caf::actor>(st.graph.prefill_ranks[rank]);
  caf::anon_send(session, route_atom::value, prefill, decode);
  caf::anon_send(st.graph.prefill_ranks[rank], submit_atom::value,
                 prefill_job{pid, std::move(spec), decode, session, caf::actor_cast<caf::actor>(self)});
}

// The rank at `addr` (if it is one of the current ones) is dead until its successor is introduced.
void mark_down(prefill_balancer_state& st, const caf::actor_addr& addr) {
  for (size_t r = 0; r < st.graph.prefill_ranks.size(); ++r)
    if (st.graph.prefill_ranks[r].address() == addr)
      st.loads[r].up = false;
  for (size_t r = 0; r < st.graph.decode_ranks.size(); ++r)
    if (st.graph.decode_ranks[r].address() == addr)
      st.decode_down[r] = true;
}

// Request `id`'s first placement (by its client, not a migration), while it picks a decode rank.
std::map<uint64_t, prefill_balancer_state::pending_pick>::iterator first_pick_of(prefill_balancer_state& st,
                                                                                 uint64_t id) {
  return std::find_if(st.picking.begin(), st.picking.end(),
                      [id](const auto& p) { return !p.second.session && p.second.request_id == id; });
}

bool holds_pick(prefill_balancer_state& st, uint64_t id) { return first_pick_of(st, id) != st.picking.end(); }

// Request `id`'s pick (its `attempt`) failed with `err`: its session, or one made for it,
// answers with the error (the decode balancer's death only waits for its successor).
void pick_failed(balancer_pointer self, uint64_t id, uint64_t attempt, const caf::error& err) {
  auto& st = self->state;
  auto it = st.picking.find(id);
  if (it == st.picking.end() || it->second.attempt != attempt)
    return;
  if (err == caf::sec::request_receiver_down)
    return;  // the balancer died: asked again when its successor is introduced
  // "unavailable: ..." the servers answer as a retryable 503
  const std::string text = err == serve_errc::unavailable ? "unavailable: " + error_text(err)
                                                          : self->system().render(err);
  prefill_balancer_state::pending_pick pick = std::move(it->second);
  st.picking.erase(it);
  if (pick.session) {  // it fitted once: the session answers with the error
    caf::anon_send(pick.session, token_atom::value, token_chunk{id, {}, finish_reason::error, text});
    return;
  }
  if (st.cancelled_while_picking.erase(id))
    return;
  // no decode rank can ever hold it: answer through a session, as every request ends
  const caf::actor session =
    caf::actor_cast<caf::actor>(spawn_session(self->system(), {.request_id = pick.request_id,
                                                               .spec = pick.spec,
                                                               .tok = st.graph.tok,
                                                               .client = pick.client,
                                                               .decode_rank = {},
                                                               .on_done = {st.graph.queue}}));
  caf::anon_send(session, token_atom::value, token_chunk{pick.request_id, {}, finish_reason::error, text});
}

// Asks the decode balancer for request `id`'s rank; the answer starts the request, or gives
// the booking back when the client cancelled meanwhile.
void ask_pick(balancer_pointer self, uint64_t id) {
  auto& st = self->state;
  const auto p = st.picking.find(id);
  const int64_t so_far = static_cast<int64_t>(p->second.resumed.output_ids.size());
  const int64_t n = static_cast<int64_t>(p->second.spec.prompt_ids.size()) + so_far;
  // the worst case times the ratio, booked until the end (beyond it, preemption)
  const int64_t left = std::max<int64_t>(p->second.spec.sampling.max_tokens - so_far, 1);
  const int64_t wanted = n + std::max<int64_t>(1, static_cast<int64_t>(std::ceil(st.graph.new_token_ratio *
                                                                                 static_cast<double>(left))));
  const uint64_t attempt = p->second.attempt;
  self
    ->request(st.graph.decode_balancer, caf::infinite, pick_atom::value, id, n,
              std::min(wanted, st.graph.max_context))
    .then(
      [=](int64_t decode_idx) {
        auto& st = self->state;
        auto it = st.picking.find(id);
        if (it == st.picking.end() || it->second.attempt != attempt)
          return;  // asked again of a newer balancer
        // Ranks that restart: any prefill rank down waits for its successor. Ranks of other
        // processes: the survivors of a lost node go on alone (elastic EP), so only a decode
        // rank down itself, or no prefill rank up at all, keeps a request from being placed.
        const auto down = [](const prefill_load& l) { return !l.up; };
        const bool any_prefill_down = std::any_of(st.loads.begin(), st.loads.end(), down);
        const bool every_prefill_down = std::all_of(st.loads.begin(), st.loads.end(), down);
        const bool ranks_down = st.decode_down.at(decode_idx) ||
                                (st.graph.ranks_restart ? any_prefill_down : every_prefill_down);
        const bool cancelled = it->second.session ? st.session_ids.count(it->second.session.address()) == 0
                                                  : st.cancelled_while_picking.count(id) > 0;
        if (ranks_down && !cancelled && !st.graph.ranks_restart) {  // back only when their node rejoins
          // the booking goes back as a cancelled pick's does (a lost rank's goes when its node rejoins)
          caf::anon_send(st.graph.decode_ranks[decode_idx], done_atom::value, id);
          return pick_failed(
            self, id, attempt,
            caf::make_error(serve_errc::unavailable,
                            "a rank of the cluster is down in another process; retry later"));
        }
        if (ranks_down && !cancelled) {  // placed on a dead rank, it would only be lost again
          it->second.deferred = true;
          return;
        }
        prefill_balancer_state::pending_pick pick = std::move(it->second);
        st.picking.erase(it);
        st.cancelled_while_picking.erase(id);
        const bool gone = cancelled;
        if (gone) {  // give the booking back (its rank tells the balancer)
          caf::anon_send(st.graph.decode_ranks[decode_idx], done_atom::value, id);
          return;
        }
        if (pick.session)
          return place_again(self, id, std::move(pick.spec), pick.session, decode_idx);
        start_request(self, id, std::move(pick), decode_idx);
      },
      [=](caf::error& err) { pick_failed(self, id, attempt, err); });
}

// Ranks are back: picks held while they were down are asked again (a booking the decode
// balancer still holds answers at once; one on a restarted rank was dropped with it).
void retry_deferred(balancer_pointer self) {
  for (auto& [id, p] : self->state.picking)
    if (p.deferred) {
      p.deferred = false;
      ++p.attempt;
      ask_pick(self, id);
    }
}

}  // namespace

prefill_balancer_actor::behavior_type prefill_balancer(balancer_pointer self, prefill_balancer_graph graph) {
  self->state.settings.target = "prefill_balancer";
  self->state.settings.now = graph.settings;
  self->state.settings.now.num_ranks = static_cast<int64_t>(graph.prefill_ranks.size());
  self->state.loads.resize(graph.prefill_ranks.size());
  self->state.picks = pick_window(std::max<int64_t>(1, static_cast<int64_t>(graph.prefill_ranks.size())));
  self->state.decode_down.assign(graph.decode_ranks.size(), false);
  self->state.graph = std::move(graph);
  for (const auto& r : self->state.graph.prefill_ranks)
    self->monitor(r);
  for (const auto& r : self->state.graph.decode_ranks)
    self->monitor(r);
  self->set_down_handler([=](caf::down_msg& dm) {
    auto& st = self->state;
    auto it = st.session_ids.find(dm.source);
    if (it != st.session_ids.end()) {
      const uint64_t id = it->second;
      st.session_ids.erase(it);
      auto s = st.sessions.find(id);
      if (s == st.sessions.end() || s->second.address() != dm.source)
        return;  // a later session holds the request now
      st.sessions.erase(s);
      st.session_generation.erase(id);
      // It told the queue when it ended, unless that queue is gone (restarted): tell this one.
      // A crashed session told no one; its client resumes the request, keeping its slot.
      if (!dm.reason || dm.reason == caf::exit_reason::normal)
        caf::anon_send(st.graph.queue, done_atom::value, id);
      return;
    }
    mark_down(st, dm.source);
  });
  return {
    [=](submit_atom, uint64_t id, request_spec& spec, caf::actor& client, resume_state& resumed) {
      auto& st = self->state;
      if (auto s = st.sessions.find(id); s != st.sessions.end()) {
        if (s->second.address() != resumed.lost_session)
          return;              // its session lives: it goes on there
        st.sessions.erase(s);  // dead, its down not here yet
        st.session_generation.erase(id);
      }
      if (holds_pick(st, id))
        return;
      const uint64_t pid = placement_id(id, resumed.generation * max_placements_per_session);
      st.picking[pid] = {.spec = std::move(spec),
                         .client = std::move(client),
                         .attempt = 0,
                         .session = {},
                         .deferred = false,
                         .request_id = id,
                         .resumed = std::move(resumed)};
      ask_pick(self, pid);
    },
    [=](bookings_atom) {
      auto& st = self->state;
      st.graph.queue = caf::actor_cast<caf::actor>(self->current_sender());  // a restarted queue
      std::vector<uint64_t> ids;
      for (const auto& [id, session] : st.sessions)
        ids.push_back(id);
      for (const auto& [pid, p] : st.picking)
        if (!p.session && st.cancelled_while_picking.count(pid) == 0)
          ids.push_back(p.request_id);
      return ids;
    },
    [=](kill_atom, uint64_t id) {
      auto s = self->state.sessions.find(id);
      if (s == self->state.sessions.end())
        return false;
      caf::anon_send_exit(s->second, caf::exit_reason::kill);
      return true;
    },
    [=](actors_atom) {
      std::vector<actor_info> out;
      for (const auto& [id, session] : self->state.sessions)
        out.push_back({.kind = "session",
                       .index = static_cast<int64_t>(id),
                       .restarts = static_cast<int64_t>(self->state.session_generation[id])});
      return out;
    },
    [=](peers_atom, caf::actor& queue) { self->state.graph.queue = std::move(queue); },
    [=](peers_atom, decode_balancer_actor& balancer) {
      auto& st = self->state;
      st.graph.decode_balancer = std::move(balancer);
      for (const uint64_t id : st.recently_ended)  // it applies them once it has the ranks' bookings
        caf::anon_send(st.graph.decode_balancer, ended_atom::value, id);
      for (auto& [id, p] : st.picking) {  // the old balancer's answers will not come
        ++p.attempt;
        ask_pick(self, id);
      }
    },
    [=](peers_atom, int64_t index, prefill_rank_actor& rank) {  // restarted: empty
      auto& st = self->state;
      st.graph.prefill_ranks.at(index) = std::move(rank);
      self->monitor(st.graph.prefill_ranks[index]);
      st.loads[index] = {};  // up again
      for (auto it = st.in_flight.begin(); it != st.in_flight.end();)
        it = it->second.first == index ? st.in_flight.erase(it) : std::next(it);
      retry_deferred(self);
    },
    [=](peers_atom, int64_t index, decode_rank_actor& rank) {
      auto& st = self->state;
      st.graph.decode_ranks.at(index) = std::move(rank);
      self->monitor(st.graph.decode_ranks[index]);
      st.decode_down[index] = false;
      retry_deferred(self);
    },
    [=](migrate_atom, uint64_t id, uint64_t pid, request_spec& rest, caf::actor& session,
        const caf::actor_addr& lost_rank) {
      auto& st = self->state;
      mark_down(st, lost_rank);
      // ranks that do not restart: the decode balancer learns the loss before this request's
      // pick (messages from one sender arrive in order), so that it picks a rank still up
      if (!st.graph.ranks_restart && lost_rank)
        caf::anon_send(st.graph.decode_balancer, migrate_atom::value, lost_rank);
      if (st.sessions.count(id) == 0)
        return;  // ended meanwhile
      st.picking[pid] = {.spec = std::move(rest),
                         .client = {},
                         .attempt = 0,
                         .session = std::move(session),
                         .deferred = false,
                         .request_id = id,
                         .resumed = {}};
      ask_pick(self, pid);
    },
    [=](configure_atom, const config_fields& change) -> caf::result<versioned_config> {
      return self->state.settings.configure(change);
    },
    [=](configure_atom, const versioned_config& earlier) { self->state.settings.restore(earlier); },
    [=](config_atom) { return self->state.settings.current(); },
    [=](balance_atom) { return self->state.picks.report(); },
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
      else if (auto p = first_pick_of(st, id);
               p != st.picking.end() && st.cancelled_while_picking.insert(p->first).second) {
        caf::anon_send(p->second.client, done_atom::value,
                       session_result{id, {}, {}, finish_reason::abort, {}});
        caf::anon_send(st.graph.queue, done_atom::value, id);
      }
    },
    [=](ended_atom, uint64_t id) {
      auto& st = self->state;
      if (auto p = first_pick_of(st, id); p != st.picking.end())
        st.cancelled_while_picking.insert(p->first);  // answered already, or by no one
      caf::anon_send(st.graph.decode_balancer, ended_atom::value, id);
      st.recently_ended.push_back(id);
      if (st.recently_ended.size() > max_recently_ended)
        st.recently_ended.pop_front();
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
