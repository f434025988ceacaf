// actors/decode_balancer.cpp
#include "actors/decode_balancer.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <algorithm>
#include <cstdio>
#include <caf/typed_event_based_actor.hpp>
#include <deque>
#include <map>
#include <optional>
#include <vector>
#include <random>

#include "actors/errors.hpp"
#include "actors/policy/rank_picker.hpp"

namespace moe {

namespace {

struct booking {
  int64_t rank = 0;
  int64_t num_blocks = 0;
};

struct waiting_pick {
  uint64_t id = 0;
  int64_t num_prompt_tokens = 0;
  int64_t num_blocks = 0;
  caf::typed_response_promise<int64_t> promise;
};

struct decode_balancer_state {
  decode_balancer_config cfg;
  live_settings<decode_balancer_settings> settings;
  int64_t next_turn = 0;  // round_robin: the rank to try first
  std::mt19937_64 rng;    // power_of_two's draws, seeded by the settings' seed
  std::vector<decode_rank_actor> ranks;
  std::vector<decode_load> loads;
  pick_window picks{1};  // per rank once the ranks are known
  std::map<uint64_t, booking> booked;
  std::deque<waiting_pick> waiting;              // FIFO: no request overtakes an earlier one
  int64_t num_rebuilding = 0;                    // ranks yet to report their bookings after a restart
  std::vector<uint64_t> ended_while_rebuilding;  // requests over: applied once the bookings are in
  static inline const char* name = "decode_balancer";
};

using balancer_pointer = decode_balancer_actor::stateful_pointer<decode_balancer_state>;

std::optional<int64_t> try_book(decode_balancer_state& st, uint64_t id, int64_t num_prompt_tokens,
                                int64_t num_blocks) {
  const std::optional<int64_t> rank = pick_decode_rank(st.loads, num_blocks, st.settings.now, st.next_turn,
                                                       st.rng);
  if (!rank)
    return std::nullopt;
  st.next_turn = *rank + 1;
  st.picks.add(*rank, 1.0);
  st.loads[*rank].num_used_blocks += num_blocks;
  ++st.loads[*rank].num_running;
  st.booked[id] = {*rank, num_blocks};
  // the prompt's blocks (and the first token's) wait on the rank for the hand-off
  caf::anon_send(st.ranks[*rank], reserve_atom::value, id, num_prompt_tokens + 1, num_blocks);
  return rank;
}

void book_existing(decode_balancer_state& st, int64_t rank, uint64_t id, int64_t num_blocks) {
  if (!st.booked.emplace(id, booking{rank, num_blocks}).second)
    return;
  st.loads[rank].num_used_blocks += num_blocks;
  ++st.loads[rank].num_running;
}

// Answers waiting picks, oldest first, while they fit (or are booked already).
void serve_waiting(balancer_pointer self) {
  auto& st = self->state;
  while (st.num_rebuilding == 0 && !st.waiting.empty()) {
    waiting_pick& w = st.waiting.front();
    std::optional<int64_t> rank;
    if (auto it = st.booked.find(w.id); it != st.booked.end())
      rank = it->second.rank;
    else
      rank = try_book(st, w.id, w.num_prompt_tokens, w.num_blocks);
    if (!rank)
      break;
    w.promise.deliver(*rank);
    st.waiting.pop_front();
  }
}

// Request `request` is over: its picks still waiting fail as cancelled, and the bookings of
// its placements go, their ranks told (done_atom, placement) to drop their reservations.
void forget_request(decode_balancer_state& st, uint64_t request) {
  for (auto it = st.waiting.begin(); it != st.waiting.end();)
    if (request_of(it->id) == request) {
      it->promise.deliver(caf::make_error(serve_errc::cancelled, "the request is over"));
      it = st.waiting.erase(it);
    } else {
      ++it;
    }
  for (auto it = st.booked.begin(); it != st.booked.end();) {
    if (request_of(it->first) != request) {
      ++it;
      continue;
    }
    const booking b = it->second;
    caf::anon_send(st.ranks[b.rank], done_atom::value, it->first);
    st.loads[b.rank].num_used_blocks -= b.num_blocks;
    --st.loads[b.rank].num_running;
    it = st.booked.erase(it);
  }
}

// One more rank has reported its bookings after a restart; once all have, the requests that
// ended meanwhile are forgotten, and waiting picks are served.
void rank_rebuilt(balancer_pointer self) {
  auto& st = self->state;
  if (--st.num_rebuilding == 0) {
    for (const uint64_t request : st.ended_while_rebuilding)
      forget_request(st, request);
    st.ended_while_rebuilding.clear();
  }
  serve_waiting(self);
}

// Where ranks do not restart: the rank at `addr`, if it is a current one, was lost with its node.
// Its bookings go (their sessions place their requests again); with no rank left up, the picks
// waiting fail as unavailable rather than wait for a node that may not return.
void mark_lost(balancer_pointer self, const caf::actor_addr& addr, const char* how) {
  auto& st = self->state;
  for (size_t r = 0; r < st.ranks.size(); ++r) {
    if (st.ranks[r].address() != addr || !st.loads[r].up)
      continue;
    std::fprintf(stderr, "decode_balancer: decode rank %zu lost (%s): no picks until it is back\n", r, how);
    st.loads[r].up = false;
    st.loads[r].num_used_blocks = 0;
    st.loads[r].num_running = 0;
    for (auto it = st.booked.begin(); it != st.booked.end();)
      it = it->second.rank == static_cast<int64_t>(r) ? st.booked.erase(it) : std::next(it);
  }
  if (std::any_of(st.loads.begin(), st.loads.end(), [](const decode_load& l) { return l.up; }))
    return;
  for (waiting_pick& w : st.waiting)
    w.promise.deliver(
      caf::make_error(serve_errc::unavailable, "every decode rank is down in another process; retry later"));
  st.waiting.clear();
}

}  // namespace

decode_balancer_actor::behavior_type decode_balancer(balancer_pointer self,
                                                     std::vector<decode_rank_actor> ranks,
                                                     const decode_balancer_config& cfg) {
  self->state.cfg = cfg;
  self->state.settings.target = "decode_balancer";
  self->state.settings.now = cfg.settings;
  self->state.settings.now.num_ranks = static_cast<int64_t>(ranks.size());
  self->state.rng.seed(static_cast<uint64_t>(cfg.settings.seed));
  self->state.picks = pick_window(std::max<int64_t>(1, static_cast<int64_t>(ranks.size())));
  self->state.loads.assign(ranks.size(), decode_load{.num_used_blocks = 0,
                                                     .num_blocks = cfg.num_blocks,
                                                     .num_running = 0,
                                                     .max_running = cfg.max_running});
  self->state.ranks = std::move(ranks);
  if (!cfg.ranks_restart) {
    for (const decode_rank_actor& r : self->state.ranks)
      self->monitor(r);
    self->set_down_handler([=](caf::down_msg& dm) {
      const std::string why = self->system().render(dm.reason);
      mark_lost(self, dm.source, why.c_str());
    });
  }
  if (cfg.rebuild) {
    self->state.num_rebuilding = static_cast<int64_t>(self->state.ranks.size());
    for (size_t r = 0; r < self->state.ranks.size(); ++r)
      self->request(self->state.ranks[r], caf::infinite, bookings_atom::value)
        .then(
          [=](const rank_bookings& b) {
            auto& st = self->state;
            for (size_t i = 0; i < b.request_ids.size() && i < b.num_blocks.size(); ++i)
              book_existing(st, static_cast<int64_t>(r), b.request_ids[i], b.num_blocks[i]);
            rank_rebuilt(self);
          },
          [=](caf::error&) { rank_rebuilt(self); });  // a dead rank holds nothing
  }
  return {
    [=](pick_atom, uint64_t id, int64_t num_prompt_tokens, int64_t num_tokens) -> caf::result<int64_t> {
      auto& st = self->state;
      const int64_t num_blocks = (num_tokens + st.cfg.block_size - 1) / st.cfg.block_size;
      if (num_blocks > st.cfg.num_blocks)
        return caf::make_error(serve_errc::invalid, "a request of " + std::to_string(num_tokens) +
                                                      " tokens exceeds a decode rank's KV pool");
      if (auto it = st.booked.find(id); it != st.booked.end() && st.num_rebuilding == 0)
        return it->second.rank;
      if (!st.cfg.ranks_restart &&
          std::none_of(st.loads.begin(), st.loads.end(), [](const decode_load& l) { return l.up; }))
        return caf::make_error(serve_errc::unavailable,
                               "every decode rank is down in another process; retry later");
      if (st.waiting.empty() && st.num_rebuilding == 0)
        if (auto rank = try_book(st, id, num_prompt_tokens, num_blocks))
          return *rank;
      auto promise = self->make_response_promise<int64_t>();
      st.waiting.push_back({id, num_prompt_tokens, num_blocks, promise});
      return promise;
    },
    [=](done_atom, uint64_t id) {
      auto& st = self->state;
      auto it = st.booked.find(id);
      if (it == st.booked.end())
        return;
      st.loads[it->second.rank].num_used_blocks -= it->second.num_blocks;
      --st.loads[it->second.rank].num_running;
      st.booked.erase(it);
      serve_waiting(self);
    },
    [=](ended_atom, uint64_t request) {
      auto& st = self->state;
      if (st.num_rebuilding > 0)  // its booking may be among those the ranks report
        return st.ended_while_rebuilding.push_back(request);
      forget_request(st, request);
      serve_waiting(self);
    },
    [=](peers_atom, int64_t index, decode_rank_actor& rank) {
      auto& st = self->state;
      st.ranks.at(index) = std::move(rank);
      st.loads[index].num_used_blocks = 0;
      st.loads[index].num_running = 0;
      st.loads[index].up = true;
      if (!st.cfg.ranks_restart)
        self->monitor(st.ranks[index]);
      for (auto it = st.booked.begin(); it != st.booked.end();)
        it = it->second.rank == index ? st.booked.erase(it) : std::next(it);
      serve_waiting(self);
    },
    [=](migrate_atom, const caf::actor_addr& lost) {
      if (!self->state.cfg.ranks_restart)
        mark_lost(self, lost, "a session lost it");
    },
    [=](stats_atom) {
      std::vector<int64_t> running;
      for (const decode_load& l : self->state.loads)
        running.push_back(l.num_running);
      return running;
    },
    [=](configure_atom, const config_fields& change) -> caf::result<versioned_config> {
      auto& st = self->state;
      const int64_t seed = st.settings.now.seed;
      caf::expected<versioned_config> v = st.settings.configure(change);
      if (v && st.settings.now.seed != seed)
        st.rng.seed(static_cast<uint64_t>(st.settings.now.seed));
      if (v)
        serve_waiting(self);  // an undrained rank may have room
      return v;
    },
    [=](configure_atom, const versioned_config& earlier) {
      auto& st = self->state;
      st.settings.restore(earlier);
      st.rng.seed(static_cast<uint64_t>(st.settings.now.seed));
      serve_waiting(self);
    },
    [=](config_atom) { return self->state.settings.current(); },
    [=](balance_atom) { return self->state.picks.report(); },
  };
}

decode_balancer_actor spawn_decode_balancer(caf::actor_system& sys, std::vector<decode_rank_actor> ranks,
                                            decode_balancer_config cfg) {
  return sys.spawn(decode_balancer, std::move(ranks), cfg);
}

}  // namespace moe
