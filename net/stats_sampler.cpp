// net/stats_sampler.cpp
#include "net/stats_sampler.hpp"

#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <deque>

#include "actors/supervisor.hpp"

#include "net/server_log.hpp"

namespace moe::net {
namespace {

using clock = std::chrono::steady_clock;
using tick_atom = caf::atom_constant<caf::atom("tick")>;
using log_atom = caf::atom_constant<caf::atom("logstats")>;

struct snapshot {
  clock::time_point time;
  int64_t requests = 0, input_tokens = 0, output_tokens = 0, failed = 0, migrations = 0;
  std::map<std::string, int64_t> restarts;  // per kind
  int64_t preemptions = 0;
};

snapshot take(const server_counters& c, clock::time_point now,
              const std::map<std::string, int64_t>& restarts) {
  return {now,
          c.num_requests.load(),
          c.input_tokens.load(),
          c.output_tokens.load(),
          c.num_failed.load(),
          c.num_migrations.load() + c.num_resumed.load(),
          restarts,
          c.num_preemptions.load()};
}

struct sampler_state {
  std::shared_ptr<const serving_target> target;
  std::shared_ptr<const server_counters> counters;
  std::vector<rank_occupancy> ranks;
  std::vector<int64_t> num_samples;
  std::deque<snapshot> snapshots;             // oldest first, spanning at most the window
  snapshot last_log;                          // the counters at the last stats line
  std::map<std::string, int64_t> restarts;    // of the supervised actors per kind, at the last sample
  std::map<std::string, double> recovery_ms;  // per kind, how long its latest restart took
  static inline const char* name = "stats_sampler";
};

using sampler_pointer = caf::stateful_actor<sampler_state>*;

void add_sample(sampler_pointer self, size_t rank_idx, const rank_stats& s) {
  auto& st = self->state;
  rank_occupancy& r = st.ranks[rank_idx];
  const double occupancy = s.num_blocks > 0 ? 1.0 - static_cast<double>(s.num_free_blocks) / s.num_blocks
                                            : 0.0;
  const auto n = static_cast<double>(++st.num_samples[rank_idx]);
  r.average += (occupancy - r.average) / n;
  r.peak = std::max(r.peak, occupancy);
  r.latest = occupancy;
  r.peak_running = std::max(r.peak_running, s.num_running);
}

void sample(sampler_pointer self, std::chrono::milliseconds interval, std::chrono::seconds window) {
  auto& st = self->state;
  const cluster& c = st.target->handles;
  for (size_t i = 0; i < st.ranks.size(); ++i) {
    auto on_stats = [=](const rank_stats& s) { add_sample(self, i, s); };
    auto on_error = [](caf::error&) {};  // a missed sample is skipped
    self->request(c.supervisor, interval, stats_atom::value, rank_kind(c, i), rank_index(c, i))
      .then(on_stats, on_error);
  }
  self->request(c.supervisor, interval, actors_atom::value)
    .then(
      [=](const std::vector<actor_info>& actors) {
        std::map<std::string, int64_t> by_kind;
        std::map<std::string, double> since, took;
        for (const actor_info& a : actors) {
          if (a.kind == "session")  // a session's request is resumed (counted so), not restarted
            continue;
          by_kind[a.kind] += a.restarts;
          if (a.since_restart_s >= 0.0 && (since.count(a.kind) == 0 || a.since_restart_s < since[a.kind])) {
            since[a.kind] = a.since_restart_s;  // the kind's latest restart
            took[a.kind] = a.last_recovery_ms;
          }
        }
        self->state.restarts = std::move(by_kind);
        self->state.recovery_ms = std::move(took);
      },
      [](caf::error&) {});
  const auto now = clock::now();
  st.snapshots.push_back(take(*st.counters, now, st.restarts));
  while (st.snapshots.size() > 1 && now - st.snapshots[1].time >= window)
    st.snapshots.pop_front();
}

// The restarts per kind from `before` to `now`, the kinds with any.
std::map<std::string, int64_t> restarts_since(const std::map<std::string, int64_t>& before,
                                              const std::map<std::string, int64_t>& now) {
  std::map<std::string, int64_t> out;
  for (const auto& [kind, n] : now) {
    const auto b = before.find(kind);
    // counts only grow: the supervisor keeps them across restarts
    if (const int64_t d = n - (b == before.end() ? 0 : b->second); d > 0)
      out[kind] = d;
  }
  return out;
}

// A stats line when anything moved since the last one: counters, or KV still in use.
void log_stats(sampler_pointer self) {
  auto& st = self->state;
  const snapshot now = take(*st.counters, clock::now(), st.restarts);
  const snapshot& last = st.last_log;
  stats_line_figures f{.seconds = std::chrono::duration<double>(now.time - last.time).count(),
                       .requests = now.requests - last.requests,
                       .failed = now.failed - last.failed,
                       .input_tokens = now.input_tokens - last.input_tokens,
                       .output_tokens = now.output_tokens - last.output_tokens,
                       .connections = st.counters->num_connections.load(),
                       .restarts = restarts_since(last.restarts, now.restarts),
                       .recovery_ms = st.recovery_ms,
                       .migrations = now.migrations - last.migrations,
                       .preemptions = now.preemptions - last.preemptions};
  bool kv_in_use = false;
  for (size_t i = 0; i < st.ranks.size(); ++i) {
    (i < st.target->handles.prefill_ranks.size() ? f.prefill_kv : f.decode_kv).push_back(st.ranks[i].latest);
    kv_in_use = kv_in_use || st.ranks[i].latest > 0.0;
  }
  st.last_log = now;  // each line covers one interval, even after idle ones
  if (f.requests == 0 && f.failed == 0 && f.input_tokens == 0 && f.output_tokens == 0 && !kv_in_use &&
      f.restarts.empty())
    return;  // idle: nothing to say
  server_log().info(format_stats_line(f));
}

sampled_stats summary(const sampler_state& st) {
  sampled_stats out{.ranks = st.ranks};
  if (st.snapshots.empty())
    return out;
  const snapshot& first = st.snapshots.front();
  const server_counters& c = *st.counters;
  out.window = {std::chrono::duration<double>(clock::now() - first.time).count(),
                c.num_requests.load() - first.requests, c.input_tokens.load() - first.input_tokens,
                c.output_tokens.load() - first.output_tokens};
  return out;
}

caf::behavior stats_sampler(caf::stateful_actor<sampler_state>* self,
                            std::shared_ptr<const serving_target> target,
                            std::shared_ptr<const server_counters> counters, sampler_config cfg) {
  const std::chrono::milliseconds interval = cfg.interval;
  const std::chrono::seconds window = cfg.window, log_interval = cfg.log_interval;
  const size_t num_ranks = target->handles.prefill_ranks.size() + target->handles.decode_ranks.size();
  self->state.ranks.resize(num_ranks);
  self->state.num_samples.resize(num_ranks);
  self->state.target = std::move(target);
  self->state.counters = std::move(counters);
  self->state.last_log = take(*self->state.counters, clock::now(), {});
  self->send(self, tick_atom::value);
  if (log_interval.count() > 0)
    self->delayed_send(self, log_interval, log_atom::value);
  return {
    [=](tick_atom) {
      sample(self, interval, window);
      self->delayed_send(self, interval, tick_atom::value);
    },
    [=](log_atom) {
      log_stats(self);
      self->delayed_send(self, log_interval, log_atom::value);
    },
    [=](sampled_atom) { return summary(self->state); },
  };
}

}  // namespace

caf::actor spawn_stats_sampler(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                               std::shared_ptr<const server_counters> counters, sampler_config cfg) {
  return sys.spawn(stats_sampler, std::move(target), std::move(counters), cfg);
}

caf::actor supervise_stats_sampler(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                                   std::shared_ptr<const server_counters> counters, sampler_config cfg) {
  caf::actor first = spawn_stats_sampler(sys, target, counters, cfg);
  const supervisor_actor& supervisor = target->handles.supervisor;
  if (!supervisor)
    return first;
  child_spec spec{.kind = stats_sampler_kind,
                  .index = 0,
                  .restart = restart_policy::transient,  // the server's stop ends it
                  .running = first,
                  .start = [&sys, target, counters, cfg](
                             const child_lookup&) { return spawn_stats_sampler(sys, target, counters, cfg); },
                  .introduce = {},
                  .worker_kind = {}};
  caf::scoped_actor self{sys};
  self->request(supervisor, std::chrono::seconds(10), start_atom::value, std::move(spec))
    .receive([](const caf::actor&) {},
             [](const caf::error&) {});  // the cluster stopped: it runs unsupervised, stopped with the server
  return first;
}

void stop_stats_sampler(caf::actor_system& sys, const serving_target& target, const caf::actor& first) {
  caf::actor current = first;
  if (target.handles.supervisor) {
    caf::scoped_actor self{sys};
    self
      ->request(target.handles.supervisor, std::chrono::seconds(10), lookup_atom::value,
                std::string(stats_sampler_kind), int64_t{0})
      .receive([&](const caf::actor& now) { current = now ? now : first; }, [](const caf::error&) {});
  }
  caf::anon_send_exit(current, caf::exit_reason::user_shutdown);
  if (current != first)
    caf::anon_send_exit(first, caf::exit_reason::user_shutdown);  // long gone; harmless
}

}  // namespace moe::net
