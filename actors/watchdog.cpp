// actors/watchdog.cpp
#include "actors/watchdog.hpp"

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <cstdio>
#include <optional>

#include "actors/errors.hpp"
#include "actors/policy/progress_watch.hpp"

namespace moe {

namespace {

using tick_atom = caf::atom_constant<caf::atom("wdtick")>;
using clock = std::chrono::steady_clock;

struct watched_child {
  std::string kind;
  int64_t index = 0;
  progress_watch watch;
  progress_sample last{};
};

struct watchdog_state {
  supervisor_actor supervisor;
  watchdog_config cfg;
  std::vector<watched_child> children;
  static inline const char* name = "watchdog";
};

using watchdog_pointer = caf::stateful_actor<watchdog_state>*;

void judge(watchdog_pointer self, size_t i, std::optional<progress_sample> sample) {
  auto& st = self->state;
  watched_child& c = st.children[i];
  const auto now = clock::now();
  if (sample)
    c.last = *sample;
  if (!c.watch.stalled(sample, now))
    return;
  std::fprintf(stderr,
               "watchdog: %s %lld made no progress for %lld ms (%lld requests running, step %lld%s%s, "
               "waiting on peers for %lld ms): killing it\n",
               c.kind.c_str(), static_cast<long long>(c.index),
               static_cast<long long>(st.cfg.stall_timeout.count()),
               static_cast<long long>(c.last.num_running), static_cast<long long>(c.last.num_steps),
               c.last.step_in_flight ? " in flight" : "", sample ? "" : ", not answering",
               static_cast<long long>(c.last.peer_wait_ms));
  self->request(st.supervisor, st.cfg.period, kill_atom::value, c.kind, c.index)
    .then([](bool) {}, [](caf::error&) {});
  c.watch.reset(now);  // its successor starts afresh
}

void check_all(watchdog_pointer self) {
  auto& st = self->state;
  // An answer may take up to the stall timeout (a loaded machine, a sanitizer): only no answer
  // for that long counts as not answering.
  for (size_t i = 0; i < st.children.size(); ++i)
    self
      ->request(st.supervisor, st.cfg.stall_timeout, stats_atom::value, st.children[i].kind,
                st.children[i].index)
      .then(
        [=](const rank_stats& s) {
          judge(self, i, progress_sample{s.num_running, s.num_steps, s.step_in_flight, s.peer_wait_ms});
        },
        [=](caf::error& e) {
          if (e == serve_errc::unavailable)  // being restarted: its successor starts afresh
            self->state.children[i].watch.reset(clock::now());
          else
            judge(self, i, std::nullopt);
        });
}

caf::behavior watchdog(watchdog_pointer self, supervisor_actor supervisor, watchdog_config cfg) {
  auto& st = self->state;
  st.supervisor = std::move(supervisor);
  for (const auto& [kind, index] : cfg.watched)
    st.children.push_back({kind, index, progress_watch(cfg.stall_timeout, clock::now()), {}});
  st.cfg = std::move(cfg);
  self->monitor(st.supervisor);
  self->set_down_handler([=](caf::down_msg&) { self->quit(); });
  self->send(self, tick_atom::value);
  return {
    [=](tick_atom) {
      check_all(self);
      self->delayed_send(self, self->state.cfg.period, tick_atom::value);
    },
  };
}

}  // namespace

caf::actor spawn_watchdog(caf::actor_system& sys, supervisor_actor supervisor, watchdog_config cfg) {
  return sys.spawn(watchdog, std::move(supervisor), std::move(cfg));
}

}  // namespace moe
