// tools/chaos_run.hpp
// `moeserve chaos`'s run against a server started with --fault-injection: a bounded greedy load
// through the wire, once without faults (the reference outputs) and once while a second
// connection kills actors of the given kinds in turn (a random one of each) at random moments;
// what came back is
// checked request by request (lost, duplicated or missing seq, greedy mismatches) and the KV
// left in use counted once all is idle.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace moe::tools {

struct chaos_options {
  int64_t num_requests = 200;
  int64_t concurrency = 16;  // generates in flight at once (one connection)
  int32_t max_tokens = 16;
  int64_t prompt_len = 8;
  int64_t num_kills = 20;
  std::vector<std::string> kinds;  // admin.kill kinds to choose from
  double interval_s = 0.3;         // mean time between kills (uniform in 0.5x .. 1.5x)
  uint64_t seed = 1;
};

struct pass_report {
  int64_t sent = 0, completed = 0;
  std::map<int, int64_t> failed_by_code;  // answered with an error
  int64_t retried = 0;                    // answered 503 retryable, and sent again
  int64_t lost = 0;                       // no answer at all
  int64_t bad_streams = 0;                // seq not contiguous from 0, or the stream differs from output_ids
  int64_t mismatches = 0;                 // output_ids differ from the reference pass's
  int64_t output_tokens = 0;
  std::vector<bool> completed_idx;  // per request: answered with a result

  /// Answered with an error other than a retryable 503 (the promise's only allowed error).
  [[nodiscard]] int64_t failed_not_503() const {
    int64_t n = 0;
    for (const auto& [code, count] : failed_by_code)
      n += code == 503 ? 0 : count;
    return n;
  }
  double wall_s = 0.0;
};

struct kind_report {
  int64_t kills = 0;
  std::vector<double> recovery_s;  // kill to successor (a session: its request's new session)
};

struct chaos_report {
  pass_report reference, chaos;
  std::map<std::string, kind_report> kinds;
  int64_t leaked_blocks = 0;            // KV blocks still in use once idle, over every rank
  int64_t running_left = 0;             // the queue's running count once idle
  int64_t resumed = 0, migrations = 0;  // from stats' recovery
  int64_t preemptions = 0, reprefilled_tokens = 0;
};

/// Runs both passes against 127.0.0.1:`port`, authenticating as admin with `admin_key` (may be
/// empty when the server has no keys). Prompt ids are drawn from [1, vocab_size).
[[nodiscard]] chaos_report run_chaos(uint16_t port, const std::string& admin_key, int64_t vocab_size,
                                     const chaos_options& opts);

}  // namespace moe::tools
