// net/serving_metrics.cpp
#include "net/serving_metrics.hpp"

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "net/http/wire_values.hpp"

#include <span>
#include <vector>

namespace moe::net {

namespace {

// vLLM's buckets (vllm/engine/metrics.py)
const prometheus::Histogram::BucketBoundaries ttft_buckets = {0.001, 0.005, 0.01,  0.02,  0.04, 0.06,
                                                              0.08,  0.1,   0.25,  0.5,   0.75, 1.0,
                                                              2.5,   5.0,   7.5,   10.0,  20.0, 40.0,
                                                              80.0,  160.0, 640.0, 2560.0};
const prometheus::Histogram::BucketBoundaries itl_buckets = {
  0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
const prometheus::Histogram::BucketBoundaries request_buckets = {0.3,   0.5,    0.8,   1.0,   1.5,   2.0,
                                                                 2.5,   5.0,    10.0,  15.0,  20.0,  30.0,
                                                                 40.0,  50.0,   60.0,  120.0, 240.0, 480.0,
                                                                 960.0, 1920.0, 7680.0};

double at(const msgpack::object& map, std::initializer_list<std::string_view> path) {
  const msgpack::object* v = &map;
  for (const std::string_view key : path) {
    v = find_key(*v, key);
    if (!v)
      return 0.0;
  }
  return number_of(v);
}

std::string text(const msgpack::object& v) { return text_of(&v); }

/// One scrape's counters and gauges, set from `stats`.
struct scrape {
  std::string model;
  prometheus::Registry registry;  // Merge: a family registered again is the same family

  void counter(const std::string& name, const std::string& help, double value,
               prometheus::Labels labels = {}) {
    labels.emplace("model_name", model);
    prometheus::BuildCounter()
      .Name("moeserve:" + name)
      .Help(help)
      .Register(registry)
      .Add(labels)
      .Increment(value);
  }
  // A histogram whose buckets were counted elsewhere: `counts` per bucket of `bounds`, one more above.
  void histogram(const std::string& name, const std::string& help, const std::vector<double>& bounds,
                 const std::vector<double>& counts, double sum) {
    prometheus::BuildHistogram()
      .Name("moeserve:" + name)
      .Help(help)
      .Register(registry)
      .Add({{"model_name", model}}, bounds)
      .ObserveMultiple(counts, sum);
  }
  void gauge(const std::string& name, const std::string& help, double value, prometheus::Labels labels = {}) {
    labels.emplace("model_name", model);
    prometheus::BuildGauge().Name("moeserve:" + name).Help(help).Register(registry).Add(labels).Set(value);
  }
};

// Histogram buckets counted by the ranks, added up over them.
struct bucket_counts {
  std::vector<double> bounds, counts;
  double sum = 0.0;
};

// Adds one rank's {bounds, counts, sum} (counts one longer than bounds; none on a prefill rank).
void add_kv_transfers(bucket_counts& total, const msgpack::object* h) {
  if (!h)
    return;
  const auto bounds = array_items(find_key(*h, "bounds"));
  const auto counts = array_items(find_key(*h, "counts"));
  if (counts.size() != bounds.size() + 1)
    return;
  if (total.bounds.empty()) {
    for (const msgpack::object& b : bounds)
      total.bounds.push_back(number_of(&b));
    total.counts.assign(counts.size(), 0.0);
  }
  if (total.counts.size() != counts.size())
    return;
  for (size_t i = 0; i < counts.size(); ++i)
    total.counts[i] += number_of(&counts[i]);
  total.sum += at(*h, {"sum"});
}

}  // namespace

struct request_histograms {
  prometheus::Registry registry;
  prometheus::Histogram* ttft = nullptr;
  prometheus::Histogram* itl = nullptr;
  prometheus::Histogram* e2e = nullptr;
  prometheus::Histogram* queue = nullptr;
};

std::shared_ptr<request_histograms> make_request_histograms() {
  auto h = std::make_shared<request_histograms>();
  auto add = [&](const char* name, const char* help, const prometheus::Histogram::BucketBoundaries& buckets) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(h->registry).Add({}, buckets);
  };
  h->ttft = add("moeserve:time_to_first_token_seconds",
                "Seconds from a request's arrival to its first token.", ttft_buckets);
  h->itl = add("moeserve:inter_token_latency_seconds",
               "Seconds between a request's successive output tokens.", itl_buckets);
  h->e2e = add("moeserve:e2e_request_latency_seconds", "Seconds from a request's arrival to its answer.",
               request_buckets);
  h->queue = add("moeserve:request_queue_time_seconds",
                 "Seconds from a request's arrival to its first prefill step.", request_buckets);
  return h;
}

void observe_request(request_histograms& h, const request_times& t) {
  h.queue->Observe(t.queue_s);
  if (t.has_first_token)
    h.ttft->Observe(t.ttft_s);
  h.e2e->Observe(t.e2e_s);
}

void observe_token_gap(request_histograms& h, double gap_s, size_t num_tokens) {
  for (size_t i = 0; i < num_tokens; ++i)
    h.itl->Observe(gap_s / static_cast<double>(num_tokens));
}

size_t rejected_index(rpc_errc code) noexcept {
  switch (code) {
    case rpc_errc::overloaded: return 0;
    case rpc_errc::unavailable: return 1;
    case rpc_errc::too_large: return 2;
    case rpc_errc::validation: return 3;
    case rpc_errc::internal: return 4;
    default: return 5;
  }
}

void count_failed(server_counters& c, rpc_errc code, int64_t n) {
  c.num_failed += n;
  c.num_rejected[rejected_index(code)] += n;
}

std::string render_metrics(const msgpack::object& stats, const request_histograms* histograms,
                           std::string_view model_name) {
  scrape s;
  s.model = model_name;
  const auto& st = stats;
  s.gauge("num_requests_running", "Requests on the ranks (prefilling or decoding).",
          at(st, {"queue", "running"}));
  s.gauge("num_requests_waiting", "Requests in the queue, not admitted yet.", at(st, {"queue", "queued"}));
  s.counter("prompt_tokens_total", "Prompt tokens of the requests admitted.", at(st, {"input_tokens"}));
  s.counter("generation_tokens_total", "Tokens generated.", at(st, {"output_tokens"}));
  s.counter("request_success_total", "Requests that finished, by finish reason.",
            at(st, {"finished", "stop"}), {{"finished_reason", "stop"}});
  s.counter("request_success_total", "Requests that finished, by finish reason.",
            at(st, {"finished", "length"}), {{"finished_reason", "length"}});
  s.counter("request_success_total", "Requests that finished, by finish reason.",
            at(st, {"finished", "abort"}), {{"finished_reason", "abort"}});
  for (const msgpack::object_kv& kv : map_items(find_key(st, "rejected")))
    s.counter("requests_rejected_total", "Generate requests answered with an error, by its type.",
              number_of(&kv.val), {{"reason", text(kv.key)}});
  s.counter("num_preemptions_total", "Requests preempted by a decode rank out of KV blocks.",
            at(st, {"recovery", "preemptions"}));
  s.counter("migrations_total", "Placements again of requests whose rank or session was lost.",
            at(st, {"recovery", "migrations"}));
  s.gauge("connections", "Open client connections (MessagePack-RPC and HTTP).", at(st, {"connections"}));
  bucket_counts kv_transfer;  // the decode ranks' hand-offs, added up
  for (const msgpack::object& rank : array_items(find_key(st, "ranks"))) {
    const prometheus::Labels labels{{"rank", std::to_string(static_cast<int64_t>(at(rank, {"rank"})))},
                                    {"role", text_of(find_key(rank, "role"))}};
    const msgpack::object* up = find_key(rank, "up");
    const bool answered = up == nullptr || up->type != msgpack::type::BOOLEAN || up->via.boolean;
    s.gauge("rank_up", "1 while a rank answers; 0 while it is restarted or lost with its node.",
            answered ? 1.0 : 0.0, labels);
    if (!answered)
      continue;  // its counters resume when it answers (a restarted rank's start from zero)
    s.gauge("kv_cache_usage_perc", "KV cache blocks in use on a rank (1 = full).", at(rank, {"occupancy"}),
            labels);
    s.gauge("rank_requests_running", "Requests running on a rank.", at(rank, {"running"}), labels);
    s.counter("rank_steps_total", "Forward steps a rank has run.", at(rank, {"steps"}), labels);
    for (const msgpack::object_kv& kv : map_items(find_key(rank, "stage_seconds"))) {  // bounded: 8 parts
      prometheus::Labels with_stage = labels;
      with_stage.emplace("stage", text(kv.key));
      s.counter("rank_stage_seconds_total",
                "Seconds a rank's stream spent per step stage (PEER_WAIT: waiting for peers' payloads).",
                number_of(&kv.val), with_stage);
    }
    add_kv_transfers(kv_transfer, find_key(rank, "kv_transfer"));
  }
  if (!kv_transfer.bounds.empty())
    s.histogram("kv_transfer_seconds",
                "Seconds from a prefill rank sending a request's KV to its decode rank having written it.",
                kv_transfer.bounds, kv_transfer.counts, kv_transfer.sum);
  const msgpack::object* recovery = find_key(st, "recovery");
  for (const msgpack::object_kv& kv : map_items(recovery ? find_key(*recovery, "restarts") : nullptr))
    s.counter("actor_restarts_total", "Restarts of supervised actors, by kind.", number_of(&kv.val),
              {{"kind", text(kv.key)}});
  for (const msgpack::object_kv& kv : map_items(find_key(st, "experts"))) {
    const std::string role = text(kv.key);
    s.counter("rebalances_total", "Expert rebalances (EPLB) put in force, by EP group.",
              at(kv.val, {"rebalances"}), {{"role", role}});
    s.counter("rebalances_failed_total", "Expert rebalances that failed or timed out.",
              at(kv.val, {"failed"}), {{"role", role}});
    s.counter("expert_moved_bytes_total", "Bytes of expert weights copied between ranks.",
              at(kv.val, {"moved_bytes"}), {{"role", role}});
    const auto layers = array_items(find_key(kv.val, "balancedness"));
    for (size_t layer = 0; layer < layers.size(); ++layer)  // bounded: one per MoE layer
      s.gauge("expert_balancedness", "Mean over max tokens per rank of a MoE layer (1 = even).",
              number_of(&layers[layer]), {{"role", role}, {"layer", std::to_string(layer)}});
  }
  std::vector<prometheus::MetricFamily> families = s.registry.Collect();
  if (histograms) {
    std::vector<prometheus::MetricFamily> h = histograms->registry.Collect();
    families.insert(families.end(), std::make_move_iterator(h.begin()), std::make_move_iterator(h.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace moe::net
