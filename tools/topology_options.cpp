// tools/topology_options.cpp
#include "tools/topology_options.hpp"

#include "config/model_config.hpp"

namespace moe::tools {
namespace {

template <class T>
void override_with(T& field, const std::optional<T>& flag) {
  if (flag)
    field = *flag;
}

}  // namespace

void add_topology_options(CLI::App& app, topology_options& o) {
  app.add_option("--config", o.config_file, "topology TOML file (see config/topology.toml)")
      ->check(CLI::ExistingFile);
  app.add_option("--prefill-ranks", o.prefill_ranks, "prefill ranks (default 2)");
  app.add_option("--decode-ranks", o.decode_ranks, "decode ranks (default 2)");
  app.add_option("--ranks-per-node", o.ranks_per_node, "ranks per node (default 8)");
  app.add_option("--redundant-experts,--ep-num-redundant-experts", o.redundant_experts,
                 "extra physical expert slots per EP group (default 0)");
  auto* tbo = app.add_option("--two-batch-overlap", o.two_batch_overlap,
                             "two micro-batches overlapping EP communication: on|off (default on)")
                  ->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--enable-two-batch-overlap", o.enable_two_batch_overlap,
               "same as --two-batch-overlap on")
      ->excludes(tbo);
  app.add_option("--chunked-prefill-size", o.chunked_prefill_size,
                 "prompt tokens per sequence per prefill step (default 512)");
  app.add_option("--max-prefill-tokens", o.max_prefill_tokens,
                 "token budget of one prefill batch (default 4096)");
  app.add_option("--max-running-requests", o.max_running_requests,
                 "requests decoding at once per decode rank (default 64)");
  app.add_option("--max-queued-requests", o.max_queued_requests,
                 "waiting requests before 'overloaded' (default 256)");
  app.add_option("--kv-blocks", o.kv_blocks, "KV blocks per rank (default 1024)");
  app.add_option("--page-size", o.page_size, "tokens per KV block (default 64)");
  app.add_option("--max-context", o.max_context, "prompt + generated tokens (default 8192)");
  app.add_option("--dispatch-dtype", o.dispatch_dtype, 
                 "EP dispatch payload: fp8|bf16|fp32 (default fp8)")
      ->check(CLI::IsMember({"fp8", "bf16", "fp32"}));
  app.add_option("--combine", o.combine,
                 "EP combine: exact (per expert output, same numbers on any topology) or reduced "
                 "(DeepEP: one sum per token and rank, fewer bytes); default exact")
      ->check(CLI::IsMember({"exact", "reduced"}));
  app.add_option("--threads-per-rank", o.threads_per_rank, "CPU threads per rank (default 1)");
  app.add_option("--link-model", o.link_model,
                 "charge EP messages link latency and bandwidth: on|off (default off)")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_option("--intra-node-latency-us", o.intra_node_latency_us, "default 77 (DeepEP, NVLink)");
  app.add_option("--intra-node-bandwidth-gbs", o.intra_node_bandwidth_gb_s,
                 "GB/s, 0 = unlimited; default 153 (DeepEP, NVLink)");
  app.add_option("--inter-node-latency-us", o.inter_node_latency_us, "default 118 (DeepEP, RDMA)");
  app.add_option("--inter-node-bandwidth-gbs", o.inter_node_bandwidth_gb_s,
                 "GB/s, 0 = unlimited; default 43 (DeepEP, RDMA)");
  app.add_option("--host", o.host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", o.port, "port to listen on (default 8765)");
}

topology_config resolve_topology(const topology_options& o) {
  topology_config c = o.config_file.empty() ? topology_config{} : load_topology(o.config_file);
  override_with(c.prefill_ranks, o.prefill_ranks);
  override_with(c.decode_ranks, o.decode_ranks);
  override_with(c.ranks_per_node, o.ranks_per_node);
  override_with(c.redundant_experts, o.redundant_experts);
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
  override_with(c.intra_node.latency_us, o.intra_node_latency_us);
  override_with(c.intra_node.bandwidth_gb_s, o.intra_node_bandwidth_gb_s);
  override_with(c.inter_node.latency_us, o.inter_node_latency_us);
  override_with(c.inter_node.bandwidth_gb_s, o.inter_node_bandwidth_gb_s);
  override_with(c.host, o.host);
  override_with(c.port, o.port);
  validate(c);
  return c;
}

}  // namespace moe::tools
