// tools/bench_stats.hpp
// What `moeserve bench` measured per request, the summary over a run (numpy's percentiles),
// and the report printed in `vllm bench serve`'s layout, as text and as JSON.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench_load.hpp"

namespace moe::tools {

/// One request as the client saw it. Times are seconds from sending the generate.
struct bench_record {
  bool success = false;
  int64_t prompt_tokens = 0;  // usage.prompt_tokens of the result
  int64_t output_tokens = 0;  // usage.completion_tokens of the result
  double ttft_s = 0.0;        // send -> first "token" notification
  double e2e_s = 0.0;         // send -> final result
  /// One gap per output token after the first: a notification carrying k tokens adds the time
  /// since the previous notification once, then k - 1 zeros (vLLM counts one gap per chunk).
  std::vector<double> itl_s;
  bool migrated = false;  // the result map carried migrated: true
  /// Failed only: the server's error code ("429", "500", ...), or "closed" (the connection
  /// went away), "cancelled" (still running after --duration and the grace period),
  /// "finish_reason" (a result that ended in abort or error), "protocol" (an unreadable reply).
  std::string error_kind;
  std::string error;  // failed only: the message
};

/// mean, median, standard deviation (population) and P99 of a metric, in milliseconds.
struct latency_summary {
  double mean_ms = 0.0;
  double median_ms = 0.0;
  double std_ms = 0.0;
  double p99_ms = 0.0;
};

struct bench_metrics {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t rejected = 0;  // failed with error code 429 (overloaded)
  int64_t migrated = 0;  // completed with migrated: true
  double duration_s = 0.0;
  int64_t total_input_tokens = 0;  // of completed requests
  int64_t total_output_tokens = 0;
  double request_throughput = 0.0;      // completed / duration
  double output_throughput = 0.0;       // output tokens / duration
  double total_token_throughput = 0.0;  // (input + output tokens) / duration
  latency_summary ttft, tpot, itl, e2el;
  std::map<std::string, int64_t> errors;  // failed requests by error_kind
  std::vector<std::string> first_errors;  // "[kind] message" of the first few failures
};

/// How the load was shaped (the report and the JSON say it).
struct run_settings {
  double request_rate = 0.0;  // infinity: every request at once
  std::optional<int64_t> max_concurrency;
  load_shape shape;
  uint64_t seed = 0;
};

/// numpy.percentile's default (linear): the value at rank p/100 * (n - 1) of the sorted values,
/// interpolated between its neighbours; 0 for no values (as vLLM's `values or 0`).
[[nodiscard]] double percentile(std::vector<double> values, double p);

/// The summary of `seconds` in milliseconds; all zero for no values.
[[nodiscard]] latency_summary summarize_ms(const std::vector<double>& seconds);

/// TTFT and E2EL over completed requests, TPOT = (e2e - ttft) / (output_tokens - 1) over those
/// with more than one output token, ITL over every gap of every completed request.
[[nodiscard]] bench_metrics compute_metrics(const std::vector<bench_record>& records, double duration_s);

/// The "Serving Benchmark Result" block, labels as `vllm bench serve` prints them.
[[nodiscard]] std::string format_report(const bench_metrics& m, const run_settings& s);

/// Failures by kind and the first messages; empty when nothing failed.
[[nodiscard]] std::string format_errors(const bench_metrics& m);

/// The numbers as a JSON object (vLLM's key names where it has one), per-request arrays included.
[[nodiscard]] std::string metrics_json(const bench_metrics& m, const run_settings& s,
                                       const std::vector<bench_record>& records);

}  // namespace moe::tools
