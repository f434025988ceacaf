// tools/bench_runner.hpp
// The load generator of `moeserve bench`: streaming generates over a pool of TCP connections to
// a running server, issued from one Asio io thread at a request rate under a concurrency cap,
// with what each request saw recorded.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "tools/bench_load.hpp"
#include "tools/bench_stats.hpp"
#include "tools/bench_openai.hpp"
#include "tools/bench_wire.hpp"

namespace moe::tools {

struct bench_config {
  std::string host = "127.0.0.1";
  uint16_t port = 8765;
  std::optional<int64_t> num_prompts = 64;  // none: as many as `duration_s` allows
  std::optional<double> duration_s;         // stop issuing after this
  double grace_s = 10.0;                    // then wait this long before cancelling the rest
  double request_rate = std::numeric_limits<double>::infinity();  // requests per second
  std::optional<int64_t> max_concurrency;                         // requests in flight at most; none: no cap
  int64_t num_connections = 8;  // requests go to the one with fewest in flight
  load_shape shape;
  uint64_t seed = 0;    // prompts, lengths and arrivals
  std::string api_key;  // non-empty: every connection sends `auth` first (openai: a Bearer header)
  /// moeserve: MessagePack-RPC, requests multiplexed on each connection; openai: HTTP/1.1
  /// streamed /v1/completions of any OpenAI-compatible server, one request per connection at a
  /// time (so the connections are the concurrency).
  std::string backend = "moeserve";
  std::string base_path = "/v1";  // openai: where completions and models are
  int64_t vocab_size = 0;         // openai: the ids' range when the server does not say; 0: ask it
};

/// Where a run stands (reported about once a second).
struct bench_progress {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t rejected = 0;
  int64_t in_flight = 0;
  double elapsed_s = 0.0;
  bool finished = false;  // the last report of the run
};

struct bench_run {
  served_model model;
  std::vector<bench_record> records;  // in issue order
  double duration_s = 0.0;            // first request sent -> last one finished
};

/// Runs the load until `num_prompts` are answered or `duration_s` (+ grace) has passed.
/// Throws input_error when it cannot connect, when the lengths do not fit the model's context,
/// or when the server closes before answering `models` or does not answer it in 10 s.
[[nodiscard]] bench_run run_bench(const bench_config& cfg,
                                  const std::function<void(const bench_progress&)>& on_progress = {});

}  // namespace moe::tools
