// net/server_probes.cpp
#include "net/server_probes.hpp"

#include <caf/actor_system.hpp>
#include <caf/after.hpp>
#include <caf/event_based_actor.hpp>
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "actors/errors.hpp"
#include "actors/rank/rank_timings.hpp"
#include "net/rpc_frame.hpp"
#include "net/serving_metrics.hpp"
#include "net/stats_sampler.hpp"

namespace moe::net {
namespace {

using clock = std::chrono::steady_clock;
constexpr auto probe_timeout = std::chrono::seconds(30);

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

struct gathered {
  queue_stats queue;
  std::vector<actor_info> actors;
  std::vector<rank_stats> ranks;
  std::vector<bool> up;  // per rank: it answered (a rank restarting, or lost with its node, did not)
  sampled_stats sampled;
  balance_report prefill_balance, decode_balance;  // zeros while a balancer is being restarted
  std::vector<expert_balancer_stats> experts;      // the expert balancers that answered
  size_t num_pending = 0;
  bool failed = false;
};

void pack_window(msgpack::packer<msgpack::sbuffer>& pk, const window_counters& w) {
  pk.pack_map(5).pack("seconds").pack_double(w.seconds);
  pk.pack("requests").pack(w.requests).pack("input_tokens").pack(w.input_tokens);
  pk.pack("output_tokens").pack(w.output_tokens);
  pk.pack("output_tok_per_s").pack_double(w.seconds > 0 ? w.output_tokens / w.seconds : 0.0);
}

// {picks, balancedness, mean, max, per_rank}: one balancer's last picks
void pack_balance(msgpack::packer<msgpack::sbuffer>& pk, const balance_report& b) {
  pk.pack_map(5).pack("picks").pack(b.num_picks).pack("balancedness").pack_double(b.balancedness);
  pk.pack("mean").pack_double(b.mean).pack("max").pack_double(b.max);
  pk.pack("per_rank").pack(b.per_rank);
}

// {role: {epoch, rebalances, failed, moved_bytes, last_seconds, balancedness: [per MoE layer],
// last_error}}: each EP group's expert balancer
void pack_experts(msgpack::packer<msgpack::sbuffer>& pk, std::vector<expert_balancer_stats> all) {
  std::sort(all.begin(), all.end(),
            [](const auto& a, const auto& b) { return a.role > b.role; });  // prefill first
  pk.pack_map(static_cast<uint32_t>(all.size()));
  for (const expert_balancer_stats& e : all) {
    pk.pack(e.role).pack_map(7).pack("epoch").pack(e.epoch).pack("rebalances").pack(e.rebalances);
    pk.pack("failed").pack(e.failed).pack("moved_bytes").pack(e.moved_bytes);
    pk.pack("last_seconds").pack_double(e.last_seconds).pack("balancedness").pack(e.balancedness);
    pk.pack("last_error").pack(e.last_error);
  }
}

void pack_ranks(msgpack::packer<msgpack::sbuffer>& pk, const gathered& g, size_t num_prefill) {
  pk.pack_array(static_cast<uint32_t>(g.ranks.size()));
  for (size_t i = 0; i < g.ranks.size(); ++i) {
    const rank_stats& r = g.ranks[i];
    const rank_occupancy sampled = i < g.sampled.ranks.size() ? g.sampled.ranks[i] : rank_occupancy{};
    pk.pack_map(15).pack("rank").pack(i).pack("role").pack(i < num_prefill ? "prefill" : "decode");
    pk.pack("up").pack(static_cast<bool>(g.up[i]));  // false: the counts below are zeros, not the rank's
    pk.pack("running").pack(r.num_running).pack("blocks").pack(r.num_blocks);
    pk.pack("free_blocks").pack(r.num_free_blocks);
    pk.pack("occupancy")
      .pack_double(r.num_blocks > 0 ? 1.0 - static_cast<double>(r.num_free_blocks) / r.num_blocks : 0.0);
    pk.pack("occupancy_peak").pack_double(sampled.peak);
    pk.pack("occupancy_avg").pack_double(sampled.average);
    pk.pack("peak_running").pack(sampled.peak_running);
    pk.pack("steps").pack(r.num_steps);
    pk.pack("requests").pack(r.num_requests);
    pk.pack("expert_bytes").pack(r.expert_bytes);
    pk.pack("stage_seconds")
      .pack_map(static_cast<uint32_t>(std::min(r.part_seconds.size(), num_timed_parts)));
    for (size_t p = 0; p < r.part_seconds.size() && p < num_timed_parts; ++p)
      pk.pack(timed_part_names[p]).pack_double(r.part_seconds[p]);
    // decode ranks: the hand-offs' latency histogram (counts per bucket of `bounds`, one more above)
    pk.pack("kv_transfer")
      .pack_map(3)
      .pack("bounds")
      .pack_array(static_cast<uint32_t>(kv_transfer_bounds.size()));
    for (const double b : kv_transfer_bounds)
      pk.pack_double(b);
    pk.pack("counts").pack(r.kv_transfer_counts).pack("sum").pack_double(r.kv_transfer_seconds);
  }
}

// {restarts: {kind: n}, last_restart_s: {kind: seconds since}, last_recovery_ms: {kind: ms the
// latest restart took}, migrations, resumed, preemptions, reprefilled_tokens}: the
// supervised kinds (sessions are not restarted: the bridges resume their requests).
void pack_recovery(msgpack::packer<msgpack::sbuffer>& pk, const server_counters& c,
                   const std::vector<actor_info>& actors) {
  std::map<std::string, int64_t> restarts;
  std::map<std::string, double> since, took;
  for (const actor_info& a : actors) {
    if (a.kind == "session")
      continue;
    restarts[a.kind] += a.restarts;
    if (a.since_restart_s >= 0.0 && (since.count(a.kind) == 0 || a.since_restart_s < since[a.kind])) {
      since[a.kind] = a.since_restart_s;
      took[a.kind] = a.last_recovery_ms;
    }
  }
  pk.pack_map(7);
  pk.pack("restarts").pack(restarts);
  const auto pack_doubles = [&](const char* key, const std::map<std::string, double>& m) {
    pk.pack(key).pack_map(static_cast<uint32_t>(m.size()));
    for (const auto& [kind, x] : m)
      pk.pack(kind).pack_double(x);
  };
  pack_doubles("last_restart_s", since);
  pack_doubles("last_recovery_ms", took);
  pk.pack("migrations").pack(c.num_migrations.load());
  pk.pack("resumed").pack(c.num_resumed.load());
  pk.pack("preemptions").pack(c.num_preemptions.load());
  pk.pack("reprefilled_tokens").pack(c.num_reprefilled_tokens.load());
}

msgpack::sbuffer encode_stats(uint32_t msgid, const serving_target& target, const server_counters& c,
                              const gathered& g) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  const double uptime = seconds_since(c.start);
  const int64_t num_rated = c.num_rated_requests.load();
  pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_map(18);
  pk.pack("uptime_s").pack_double(uptime);
  pk.pack("requests").pack(c.num_requests.load());
  pk.pack("failed").pack(c.num_failed.load());
  pk.pack("cancelled").pack(c.num_cancelled.load());
  pk.pack("input_tokens").pack(c.input_tokens.load());
  pk.pack("prefix_cache_hit_tokens").pack(0);  // no prefix cache yet
  pk.pack("output_tokens").pack(c.output_tokens.load());
  pk.pack("output_tok_per_s").pack_double(uptime > 0 ? c.output_tokens.load() / uptime : 0.0);
  pk.pack("mean_request_output_tok_per_s")
    .pack_double(num_rated > 0 ? c.sum_request_tok_per_s.load() / num_rated : 0.0);
  pk.pack("connections").pack(c.num_connections.load());
  pk.pack("finished")
    .pack_map(4)
    .pack("stop")
    .pack(c.num_stopped.load())
    .pack("length")
    .pack(c.num_length.load());
  pk.pack("abort").pack(c.num_cancelled.load()).pack("error").pack(c.num_failed.load());
  pk.pack("rejected").pack_map(static_cast<uint32_t>(rejected_reasons.size()));
  for (size_t i = 0; i < rejected_reasons.size(); ++i)
    pk.pack(rejected_reasons[i]).pack(c.num_rejected[i].load());
  pk.pack("window");
  pack_window(pk, g.sampled.window);
  pk.pack("queue").pack_map(4);
  pk.pack("queued").pack(g.queue.num_queued).pack("running").pack(g.queue.num_running);
  pk.pack("admitted").pack(g.queue.num_admitted).pack("rejected").pack(g.queue.num_rejected);
  pk.pack("ranks");
  pack_ranks(pk, g, target.handles.prefill_ranks.size());
  pk.pack("balance").pack_map(2).pack("prefill");
  pack_balance(pk, g.prefill_balance);
  pk.pack("decode");
  pack_balance(pk, g.decode_balance);
  pk.pack("experts");
  pack_experts(pk, g.experts);
  pk.pack("recovery");
  pack_recovery(pk, c, g.actors);
  return out;
}

}  // namespace

msgpack::sbuffer encode_models(uint32_t msgid, const serving_target& target) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_array(1).pack_map(3);
  pk.pack("id").pack(target.model_name);
  pk.pack("max_context").pack(target.max_context);
  pk.pack("vocab_size").pack(target.vocab_size);
  return out;
}

msgpack::sbuffer encode_health(uint32_t msgid, const server_counters& counters) {
  msgpack::sbuffer out;
  msgpack::packer<msgpack::sbuffer> pk(out);
  pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_map(2);
  pk.pack("status").pack("ok").pack("uptime_s").pack_double(seconds_since(counters.start));
  return out;
}

// Calls `f` with the request queue that lives now (restarted or not), or `on_error`.
template <class F, class OnError>
void with_queue(caf::event_based_actor* self, const cluster& c, F f, OnError on_error) {
  self->request(c.supervisor, probe_timeout, lookup_atom::value, std::string("request_queue"), int64_t{0})
    .then(
      [=](const caf::actor& queue) mutable {
        if (!queue) {
          caf::error none = caf::make_error(serve_errc::unavailable, "the request queue is restarting");
          return on_error(none);
        }
        f(caf::actor_cast<request_queue_actor>(queue));
      },
      on_error);
}

// Asks child (kind, index) of the cluster, the instance living now, question `q`: `got` takes
// its `Reply`; `done` runs after, also when none lives (being restarted) or it does not answer.
template <class Reply, class Atom, class Got, class Done>
void ask_child(caf::event_based_actor* self, const cluster& c, const std::string& kind, int64_t index, Atom q,
               Got got, Done done) {
  using answering = caf::typed_actor<typename caf::replies_to<Atom>::template with<Reply>>;
  self->request(c.supervisor, probe_timeout, lookup_atom::value, kind, index)
    .then(
      [=](const caf::actor& child) {
        if (!child)
          return done();
        self->request(caf::actor_cast<answering>(child), probe_timeout, q)
          .then(
            [=](const Reply& r) {
              got(r);
              done();
            },
            [=](caf::error&) { done(); });
      },
      [=](caf::error&) { done(); });
}

void spawn_stats_probe(caf::actor_system& sys, std::shared_ptr<const serving_target> target,
                       std::shared_ptr<server_counters> counters, uint32_t msgid, const reply_fn& reply) {
  sys.spawn([=](caf::event_based_actor* self) {
    const cluster& c = target->handles;
    auto g = std::make_shared<gathered>();
    g->ranks.resize(c.prefill_ranks.size() + c.decode_ranks.size());
    g->up.assign(g->ranks.size(), false);
    g->num_pending = 7 + g->ranks.size();
    auto one_done = [=] {
      if (--g->num_pending > 0)
        return;
      reply(g->failed ? encode_error(msgid, make_error(rpc_errc::unavailable,
                                                       "stats: the queue or the supervisor did not answer"))
                      : encode_stats(msgid, *target, *counters, *g),
            std::nullopt);
    };
    auto on_error = [=](caf::error&) {
      g->failed = true;
      one_done();
    };
    with_queue(
      self, c,
      [=](const request_queue_actor& queue) {
        self->request(queue, probe_timeout, stats_atom::value)
          .then(
            [=](const queue_stats& q) {
              g->queue = q;
              one_done();
            },
            on_error);
      },
      on_error);
    self->request(c.supervisor, probe_timeout, actors_atom::value)
      .then(
        [=](std::vector<actor_info>& actors) {
          g->actors = std::move(actors);
          one_done();
        },
        on_error);
    self
      ->request(c.supervisor, probe_timeout, lookup_atom::value, std::string(stats_sampler_kind), int64_t{0})
      .then(
        [=](const caf::actor& sampler) {
          if (!sampler) {  // being restarted
            g->failed = true;
            return one_done();
          }
          self->request(sampler, probe_timeout, sampled_atom::value)
            .then(
              [=](sampled_stats& s) {
                g->sampled = std::move(s);
                one_done();
              },
              on_error);
        },
        on_error);
    for (const bool prefill : {true, false})  // a balancer being restarted reports zeros
      ask_child<balance_report>(
        self, c, prefill ? "prefill_balancer" : "decode_balancer", 0, balance_atom::value,
        [=](const balance_report& b) { (prefill ? g->prefill_balance : g->decode_balance) = b; }, one_done);
    for (const int64_t index : {0, 1})  // none without routed experts, or restarting
      ask_child<expert_balancer_stats>(
        self, c, "expert_balancer", index, stats_atom::value,
        [=](const expert_balancer_stats& e) { g->experts.push_back(e); }, one_done);
    // a rank that does not answer (restarting, or lost with its node) is reported down: the
    // stats, and /metrics, answer all the same
    for (size_t i = 0; i < g->ranks.size(); ++i) {
      auto on_rank = [=](const rank_stats& r) {
        g->ranks[i] = r;
        g->up[i] = true;
        one_done();
      };
      self->request(c.supervisor, probe_timeout, stats_atom::value, rank_kind(c, i), rank_index(c, i))
        .then(on_rank, [=](caf::error&) { one_done(); });
    }
  });
}

std::string missing_parts(const cluster& c, const std::vector<actor_info>& actors) {
  std::vector<std::pair<std::string, int64_t>> expected = {
    {"request_queue", 0}, {"prefill_balancer", 0}, {"decode_balancer", 0}};
  for (size_t i = 0; i < c.prefill_ranks.size() + c.decode_ranks.size(); ++i)
    expected.emplace_back(rank_kind(c, i), rank_index(c, i));
  std::string out;
  for (const auto& [kind, index] : expected) {
    const bool live = std::any_of(actors.begin(), actors.end(),
                                  [&, &kind = kind, index = index](const actor_info& a) {
                                    return a.kind == kind && a.index == index;
                                  });
    if (!live)
      out += (out.empty() ? "" : ", ") + kind + " " + std::to_string(index);
  }
  return out;
}

std::string not_serving(const cluster& c, const std::vector<actor_info>& actors, bool ranks_remote) {
  const std::string missing = missing_parts(c, actors);
  if (missing.empty())
    return "";
  if (!ranks_remote)
    return "restarting: " + missing;
  cluster front_only;  // the parts this process restarts
  std::string restarting = missing_parts(front_only, actors);
  if (!restarting.empty())
    return "restarting: " + restarting;
  const auto any_live = [&](const char* kind) {
    return std::any_of(actors.begin(), actors.end(), [&](const actor_info& a) { return a.kind == kind; });
  };
  std::string lost;
  for (const auto& [kind, role, count] : {std::tuple{"prefill_rank", "prefill", c.prefill_ranks.size()},
                                          std::tuple{"decode_rank", "decode", c.decode_ranks.size()}})
    if (count > 0 && !any_live(kind))
      lost += std::string(lost.empty() ? "" : ", ") + "every " + role + " rank";
  return lost.empty() ? "" : "lost with their nodes: " + lost;
}

void spawn_ready_probe(caf::actor_system& sys, std::shared_ptr<const serving_target> target, uint32_t msgid,
                       const reply_fn& reply) {
  sys.spawn([=](caf::event_based_actor* self) -> caf::behavior {
    const auto t0 = clock::now();
    auto not_ready = [=](const std::string& why) {
      reply(encode_error(msgid, make_error(rpc_errc::unavailable, "ready: " + why)), std::nullopt);
      self->quit();
    };
    request_spec spec;
    const int32_t bos = target->tok->bos_id();
    spec.prompt_ids = {bos < target->vocab_size ? bos : 0};
    spec.sampling.max_tokens = 1;
    spec.sampling.temperature = 0.0f;
    spec.sampling.ignore_eos = true;
    auto refused = [=](caf::error& e) { not_ready("not admitted (" + self->system().render(e) + ")"); };
    // every supervised part must live (none being restarted), then a real generation
    self->request(target->handles.supervisor, probe_timeout, actors_atom::value)
      .then(
        [=](const std::vector<actor_info>& actors) {
          const bool remote = static_cast<bool>(target->handles.node_watch);
          if (const std::string why = not_serving(target->handles, actors, remote); !why.empty())
            return not_ready(why);
          with_queue(
            self, target->handles,
            [=](const request_queue_actor& queue) {
              self->request(queue, probe_timeout, submit_atom::value, spec).then([](uint64_t) {}, refused);
            },
            refused);
        },
        refused);
    return {
      [](attach_atom, uint64_t, const caf::actor&) {},
      [](token_atom, const stream_chunk&) {},
      [=](done_atom, const session_result& r) {
        if (r.reason == finish_reason::error || r.output_ids.empty())
          return not_ready("the generation failed: " + r.error);
        msgpack::sbuffer out;
        msgpack::packer<msgpack::sbuffer> pk(out);
        pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_map(2);
        pk.pack("ready").pack(true).pack("latency_s").pack_double(seconds_since(t0));
        reply(std::move(out), std::nullopt);
        self->quit();
      },
      caf::after(probe_timeout) >> [=] { not_ready("no answer in time"); },
    };
  });
}

void spawn_admin_actors(caf::actor_system& sys, std::shared_ptr<const serving_target> target, uint32_t msgid,
                        const reply_fn& reply) {
  sys.spawn([=](caf::event_based_actor* self) {
    self->request(target->handles.supervisor, probe_timeout, actors_atom::value)
      .then(
        [=](const std::vector<actor_info>& actors) {
          msgpack::sbuffer out;
          msgpack::packer<msgpack::sbuffer> pk(out);
          pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_array(
            static_cast<uint32_t>(actors.size()));
          for (const actor_info& a : actors) {
            pk.pack_map(3);
            pk.pack("kind").pack(a.kind).pack("index").pack(a.index).pack("restarts").pack(a.restarts);
          }
          reply(std::move(out), std::nullopt);
        },
        [=](caf::error& e) {
          reply(encode_error(msgid, make_error(rpc_errc::unavailable,
                                               "admin.actors: the supervisor did not answer (" +
                                                 self->system().render(e) + ")")),
                std::nullopt);
        });
  });
}

void spawn_admin_kill(caf::actor_system& sys, std::shared_ptr<const serving_target> target, uint32_t msgid,
                      const std::string& kind, int64_t index, const reply_fn& reply) {
  sys.spawn([=](caf::event_based_actor* self) {
    self->request(target->handles.supervisor, probe_timeout, kill_atom::value, kind, index)
      .then(
        [=](bool killed) {
          if (!killed)
            return reply(encode_error(msgid, make_error(rpc_errc::validation, "index: no live " + kind + " " +
                                                                                std::to_string(index))),
                         std::nullopt);
          msgpack::sbuffer out;
          msgpack::packer<msgpack::sbuffer> pk(out);
          pk.pack_array(4).pack_uint8(1).pack_uint32(msgid).pack_nil().pack_map(1);
          pk.pack("killed").pack(true);
          reply(std::move(out), std::nullopt);
        },
        [=](caf::error& e) {
          reply(encode_error(msgid,
                             make_error(rpc_errc::unavailable, "admin.kill: the supervisor did not answer (" +
                                                                 self->system().render(e) + ")")),
                std::nullopt);
        });
  });
}

}  // namespace moe::net
