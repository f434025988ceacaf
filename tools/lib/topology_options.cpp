// tools/lib/topology_options.cpp
#include "tools/lib/topology_options.hpp"

#include <sstream>
#include <string>

#include "config/model_config.hpp"

namespace moe::tools {
namespace {

template <class T>
void override_with(T& field, const std::optional<T>& flag) {
  if (flag)
    field = *flag;
}

// "what (default N)", N from topology_config's own default, so the help cannot drift from it.
std::string with_default(const std::string& what, const auto& value) {
  std::ostringstream text;
  text << what << " (default " << value << ")";
  return text.str();
}

}  // namespace

void add_topology_options(CLI::App& app, topology_options& o, bool listen) {
  const topology_config d;
  app.add_option("--config", o.config_file, "topology TOML file (see config/topology.toml)")
    ->check(CLI::ExistingFile);
  app.add_option("--prefill-ranks", o.prefill_ranks, with_default("prefill ranks", d.prefill_ranks));
  app.add_option("--decode-ranks", o.decode_ranks, with_default("decode ranks", d.decode_ranks));
  app.add_option("--ranks-per-node", o.ranks_per_node, with_default("ranks per node", d.ranks_per_node));
  app.add_option("--redundant-experts,--ep-num-redundant-experts", o.redundant_experts,
                 with_default("extra physical expert slots per EP group", d.redundant_experts));
  app
    .add_option("--expert-balancer", o.expert_balancer,
                with_default("EPLB moving expert replicas while serving: hierarchical|global|off",
                             d.expert_balancer))
    ->check(CLI::IsMember({"hierarchical", "global", "off"}));
  app.add_option("--eplb-interval,--eplb-rebalance-num-iterations", o.eplb_interval_steps,
                 with_default("steps of a group between two rebalances; 0: only on admin.rebalance",
                              d.eplb_interval_steps));
  auto* tbo = app
                .add_option("--two-batch-overlap", o.two_batch_overlap,
                            with_default("two micro-batches overlapping EP communication: on|off",
                                         d.two_batch_overlap ? "on" : "off"))
                ->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--enable-two-batch-overlap", o.enable_two_batch_overlap, "same as --two-batch-overlap on")
    ->excludes(tbo);
  app.add_option("--chunked-prefill-size", o.chunked_prefill_size,
                 with_default("prompt tokens per sequence per prefill step", d.chunked_prefill_size));
  app.add_option("--max-prefill-tokens", o.max_prefill_tokens,
                 with_default("token budget of one prefill batch", d.max_prefill_tokens));
  app.add_option("--max-running-requests", o.max_running_requests,
                 with_default("requests decoding at once per decode rank", d.max_running_requests));
  app.add_option("--max-queued-requests", o.max_queued_requests,
                 with_default("waiting requests before 'overloaded'", d.max_queued_requests));
  app.add_option("--kv-blocks", o.kv_blocks, with_default("KV blocks per rank", d.kv_blocks));
  app.add_option("--page-size", o.page_size, with_default("tokens per KV block", d.page_size));
  app.add_option("--max-context", o.max_context, with_default("prompt + generated tokens", d.max_context));
  app
    .add_option("--dispatch-dtype", o.dispatch_dtype,
                with_default("EP dispatch payload: fp8|bf16|fp32", d.dispatch_dtype))
    ->check(CLI::IsMember({"fp8", "bf16", "fp32"}));
  app
    .add_option("--combine", o.combine,
                "EP combine: exact (per expert output, same numbers on any topology) or reduced "
                "(DeepEP: one sum per token and rank, fewer bytes); default " +
                  d.combine)
    ->check(CLI::IsMember({"exact", "reduced"}));
  app
    .add_option("--threads-per-rank", o.threads_per_rank,
                "CPU threads per rank, or auto: the cores this process may use (affinity mask, cgroup "
                "quota) split among the ranks, at least one each (default auto)")
    ->transform(CLI::Transformer({{"auto", "0"}}));
  app
    .add_option("--pin-threads", o.pin_threads,
                with_default("pin each rank's threads to cores of their own: on|off",
                             d.pin_threads ? "on" : "off"))
    ->check(CLI::IsMember({"on", "off"}));
  app
    .add_option("--link-model", o.link_model,
                with_default("charge EP messages link latency and bandwidth: on|off",
                             d.link_model ? "on" : "off"))
    ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--intra-node-latency-us", o.intra_node_latency_us,
                 with_default("microseconds per message (DeepEP, NVLink)", d.intra_node.latency_us));
  app.add_option("--intra-node-bandwidth-gbs", o.intra_node_bandwidth_gb_s,
                 with_default("GB/s, 0 = unlimited (DeepEP, NVLink)", d.intra_node.bandwidth_gb_s));
  app.add_option("--inter-node-latency-us", o.inter_node_latency_us,
                 with_default("microseconds per message (DeepEP, RDMA)", d.inter_node.latency_us));
  app.add_option("--inter-node-bandwidth-gbs", o.inter_node_bandwidth_gb_s,
                 with_default("GB/s, 0 = unlimited (DeepEP, RDMA)", d.inter_node.bandwidth_gb_s));
  app.add_option(
    "--new-token-ratio", o.new_token_ratio,
    with_default("share of max_tokens a request books decode KV for; below 1, a decode rank out of "
                 "blocks preempts its youngest request",
                 d.new_token_ratio));
  app.add_option("--max-restarts", o.max_restarts,
                 with_default("restarts of one actor within --restart-period before the cluster stops as "
                              "crash-looping",
                              d.max_restarts));
  app.add_option("--restart-period", o.restart_period_s,
                 with_default("seconds over which --max-restarts counts", d.restart_period_s));
  app.add_option("--stall-timeout", o.stall_timeout_s,
                 with_default("seconds a rank may hold running requests without a step before the watchdog "
                              "kills (and so restarts) it; 0: no watchdog",
                              d.stall_timeout_s));
  app.add_option("--max-migrations", o.max_migrations,
                 with_default("placements again of one request after lost ranks, then error 503",
                              d.max_migrations));
  if (!listen)
    return;
  app.add_option("--host", o.host, with_default("address to listen on", d.host));
  app.add_option("--port", o.port, with_default("port to listen on", d.port));
  app.add_option("--http-port", o.http_port,
                 "port of the HTTP front (OpenAI's API, /metrics); 0: off (default: --port + 1, or any "
                 "free port when --port is 0)");
}

topology_config resolve_topology(const topology_options& o) {
  topology_config c = o.config_file.empty() ? topology_config{} : load_topology(o.config_file);
  override_with(c.prefill_ranks, o.prefill_ranks);
  override_with(c.decode_ranks, o.decode_ranks);
  override_with(c.ranks_per_node, o.ranks_per_node);
  override_with(c.redundant_experts, o.redundant_experts);
  override_with(c.expert_balancer, o.expert_balancer);
  override_with(c.eplb_interval_steps, o.eplb_interval_steps);
  if (o.enable_two_batch_overlap)
    c.two_batch_overlap = true;
  if (o.two_batch_overlap)
    c.two_batch_overlap = *o.two_batch_overlap == "on";
  override_with(c.chunked_prefill_size, o.chunked_prefill_size);
  override_with(c.max_prefill_tokens, o.max_prefill_tokens);
  override_with(c.max_running_requests, o.max_running_requests);
  override_with(c.max_queued_requests, o.max_queued_requests);
  override_with(c.kv_blocks, o.kv_blocks);
  override_with(c.page_size, o.page_size);
  override_with(c.max_context, o.max_context);
  override_with(c.dispatch_dtype, o.dispatch_dtype);
  override_with(c.combine, o.combine);
  override_with(c.threads_per_rank, o.threads_per_rank);
  if (o.link_model)
    c.link_model = *o.link_model == "on";
  if (o.pin_threads)
    c.pin_threads = *o.pin_threads == "on";
  override_with(c.intra_node.latency_us, o.intra_node_latency_us);
  override_with(c.intra_node.bandwidth_gb_s, o.intra_node_bandwidth_gb_s);
  override_with(c.inter_node.latency_us, o.inter_node_latency_us);
  override_with(c.inter_node.bandwidth_gb_s, o.inter_node_bandwidth_gb_s);
  override_with(c.new_token_ratio, o.new_token_ratio);
  override_with(c.max_restarts, o.max_restarts);
  override_with(c.restart_period_s, o.restart_period_s);
  override_with(c.stall_timeout_s, o.stall_timeout_s);
  override_with(c.max_migrations, o.max_migrations);
  override_with(c.host, o.host);
  override_with(c.port, o.port);
  override_with(c.http_port, o.http_port);
  validate(c);
  return c;
}

}  // namespace moe::tools
