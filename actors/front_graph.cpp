// actors/front_graph.cpp
#include "actors/front_graph.hpp"

#include <caf/send.hpp>

namespace moe {
namespace {

template <class Handle>
caf::actor untyped(const Handle& h) {
  return caf::actor_cast<caf::actor>(h);
}

// Ids each request queue instance may give (a restarted one starts above its predecessor's).
constexpr int queue_id_bits = 40;

}  // namespace

std::vector<child_spec> front_child_specs(caf::actor_system& sys, const cluster& c,
                                          const front_graph& front) {
  const request_queue_config& queue_cfg = front.queue_cfg;
  const prefill_balancer_graph& prefill_graph = front.prefill_graph;
  decode_balancer_config decode_cfg = front.decode_cfg;
  std::vector<child_spec> specs;
  // A restarted queue gives ids above its predecessors' and learns from the prefill balancer
  // which requests run; the bridges give back what it held (resume_state::queue_restarted).
  auto queue_starts = std::make_shared<uint64_t>(0);
  specs.push_back({.kind = "request_queue",
                   .restart = restart_policy::permanent,
                   .running = untyped(c.queue),
                   .start =
                     [&sys, queue_cfg, queue_starts](const child_lookup& current) {
                       request_queue_config cfg = queue_cfg;
                       cfg.first_id = (++*queue_starts << queue_id_bits) + 1;
                       cfg.rebuild = true;
                       return untyped(spawn_request_queue(sys, cfg, current("prefill_balancer", 0)));
                     },
                   .introduce = {},  // the prefill balancer learns it when asked its requests
                   .configurable = true});
  const size_t num_prefill = c.prefill_ranks.size(), num_decode = c.decode_ranks.size();
  // A restarted prefill balancer starts empty: the sessions of its predecessor end with it, and
  // their clients resume what they held (the queue tells them: actors/request_queue.hpp).
  specs.push_back(
    {.kind = "prefill_balancer",
     .restart = restart_policy::permanent,
     .running = untyped(c.prefill_balancer),
     .start =
       [&sys, graph = prefill_graph, num_prefill, num_decode](const child_lookup& current) {
         prefill_balancer_graph g = graph;
         for (size_t r = 0; r < num_prefill; ++r)
           g.prefill_ranks.push_back(
             caf::actor_cast<prefill_rank_actor>(current("prefill_rank", static_cast<int64_t>(r))));
         for (size_t r = 0; r < num_decode; ++r)
           g.decode_ranks.push_back(
             caf::actor_cast<decode_rank_actor>(current("decode_rank", static_cast<int64_t>(r))));
         g.decode_balancer = caf::actor_cast<decode_balancer_actor>(current("decode_balancer", 0));
         g.queue = current("request_queue", 0);
         return untyped(spawn_prefill_balancer(sys, std::move(g)));
       },
     .introduce =
       [](const caf::actor& fresh, const child_lookup& current) {
         caf::anon_send(caf::actor_cast<request_queue_actor>(current("request_queue", 0)), route_atom::value,
                        fresh);
       },
     .worker_kind = "session",
     .configurable = true});
  decode_cfg.rebuild = true;  // a restarted one collects the ranks' bookings first
  specs.push_back({.kind = "decode_balancer",
                   .restart = restart_policy::permanent,
                   .running = untyped(c.decode_balancer),
                   .start =
                     [&sys, decode_cfg, num_decode](const child_lookup& current) {
                       std::vector<decode_rank_actor> ranks;
                       for (size_t r = 0; r < num_decode; ++r)
                         ranks.push_back(caf::actor_cast<decode_rank_actor>(
                           current("decode_rank", static_cast<int64_t>(r))));
                       return untyped(spawn_decode_balancer(sys, std::move(ranks), decode_cfg));
                     },
                   .introduce =
                     [](const caf::actor& fresh, const child_lookup& current) {
                       caf::anon_send(caf::actor_cast<prefill_balancer_actor>(current("prefill_balancer", 0)),
                                      peers_atom::value, caf::actor_cast<decode_balancer_actor>(fresh));
                     },
                   .configurable = true});
  return specs;
}

front_graph spawn_front_graph(caf::actor_system& sys, cluster& c, const topology_config& topo,
                              int64_t max_context, std::shared_ptr<const tokenizer> tok, bool ranks_restart) {
  front_graph out{.decode_cfg = {.num_blocks = topo.kv_blocks,
                                 .block_size = topo.page_size,
                                 .max_running = topo.max_running_requests,
                                 .rebuild = false,
                                 .ranks_restart = ranks_restart,
                                 .settings = {}},
                  .queue_cfg = {.max_queued = topo.max_queued_requests,
                                .max_running = topo.max_running_requests * topo.decode_ranks},
                  .prefill_graph = {.prefill_ranks = {},
                                    .decode_ranks = {},
                                    .decode_balancer = {},
                                    .queue = {},
                                    .tok = std::move(tok),
                                    .max_context = max_context,
                                    .max_migrations = topo.max_migrations,
                                    .new_token_ratio = topo.new_token_ratio,
                                    .settings = {},
                                    .ranks_restart = ranks_restart}};
  c.decode_balancer = spawn_decode_balancer(sys, c.decode_ranks, out.decode_cfg);
  for (const decode_rank_actor& r : c.decode_ranks)
    caf::anon_send(r, route_atom::value, untyped(c.decode_balancer));
  // the queue hands requests to the prefill balancer, which learns the queue right after
  prefill_balancer_graph first = out.prefill_graph;
  first.prefill_ranks = c.prefill_ranks;
  first.decode_ranks = c.decode_ranks;
  first.decode_balancer = c.decode_balancer;
  c.prefill_balancer = spawn_prefill_balancer(sys, std::move(first));
  c.queue = spawn_request_queue(sys, out.queue_cfg, untyped(c.prefill_balancer));
  caf::anon_send(c.prefill_balancer, peers_atom::value, untyped(c.queue));
  return out;
}

void introduce_prefill_rank(const child_lookup& current, int64_t index, const caf::actor& rank) {
  caf::anon_send(caf::actor_cast<prefill_balancer_actor>(current("prefill_balancer", 0)), peers_atom::value,
                 index, caf::actor_cast<prefill_rank_actor>(rank));
}

void introduce_decode_rank(const child_lookup& current, int64_t index, const caf::actor& rank) {
  const auto decode = caf::actor_cast<decode_rank_actor>(rank);
  const caf::actor balancer = current("decode_balancer", 0);
  caf::anon_send(decode, route_atom::value, balancer);
  caf::anon_send(caf::actor_cast<decode_balancer_actor>(balancer), peers_atom::value, index, decode);
  caf::anon_send(caf::actor_cast<prefill_balancer_actor>(current("prefill_balancer", 0)), peers_atom::value,
                 index, decode);
}

}  // namespace moe
