// net/server_log.hpp
// The server's log (spdlog, stderr, timestamped): its own events (accept errors, the io thread)
// and, every --log-stats-interval seconds while it serves, one line of what it did meanwhile,
// as vLLM logs its throughput.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <spdlog/logger.h>

namespace moe::net {

/// The "moeserve" logger: stderr, "[2026-12-01 12:00:00.000] [info] ...".
[[nodiscard]] spdlog::logger& server_log();

/// What a stats line reports: counter increments over `seconds`, and the KV blocks in use per
/// rank at the last sample (fractions, prefill ranks first).
struct stats_line_figures {
  double seconds = 0.0;
  int64_t requests = 0;      // admitted
  int64_t failed = 0;        // valid generates answered with an error
  int64_t input_tokens = 0;  // of finished requests
  int64_t output_tokens = 0;
  int64_t connections = 0;                    // open now
  std::map<std::string, int64_t> restarts;    // supervised actors restarted, per kind
  std::map<std::string, double> recovery_ms;  // per kind, how long its latest restart took
  int64_t migrations = 0;                     // of the requests that finished
  int64_t preemptions = 0;                    // of the requests that finished
  std::vector<double> prefill_kv, decode_kv;
};

/// "prompt 120.3 tok/s, generation 45.1 tok/s, 3 requests (0 failed) in 10.0 s, KV in use:
/// prefill 2 % 0 %, decode 37 % 41 %, 4 connections[, 3 actor restarts (decode_rank 2, last
/// took 4.1 ms; request_queue 1, last took 0.3 ms), 2 migrations, 3 preemptions]"
[[nodiscard]] std::string format_stats_line(const stats_line_figures& f);

}  // namespace moe::net
