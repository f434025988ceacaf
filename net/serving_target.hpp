// net/serving_target.hpp
// What the RPC server serves (a running cluster, its tokenizer, the context it allows) and the
// counters it keeps since start, shared by its io thread and its bridge actors.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "actors/cluster.hpp"

namespace moe::net {

struct request_histograms;  // net/serving_metrics.hpp

struct serving_target {
  cluster handles;
  std::shared_ptr<const tokenizer> tok;
  int64_t vocab_size = 0;  // the model's (prompt ids must be below it)
  size_t max_context = 0;  // prompt + max_tokens must fit
  std::string model_name;
};

/// Counters since start; any thread adds to them.
struct server_counters {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::atomic<int64_t> num_requests{0};   // generate requests admitted
  std::atomic<int64_t> num_failed{0};     // valid generates answered with an error (429, 413, 500, ...)
  std::atomic<int64_t> num_cancelled{0};  // ended with finish_reason abort
  std::atomic<int64_t> num_stopped{0};    // ended with finish_reason stop (EOS, a stop string or id)
  std::atomic<int64_t> num_length{0};     // ended with finish_reason length
  /// Failed generates by the wire's error type (net/serving_metrics.hpp: rejected_reasons).
  std::array<std::atomic<int64_t>, 6> num_rejected{};
  std::atomic<int64_t> input_tokens{0};
  std::atomic<int64_t> output_tokens{0};
  std::atomic<double> sum_request_tok_per_s{0.0};  // decode tok/s of each request with 2+ tokens
  std::atomic<int64_t> num_rated_requests{0};
  std::atomic<int64_t> num_connections{0};  // open now
  std::atomic<int64_t> num_accepted{0};     // connections since start
  std::atomic<int64_t> num_migrations{0};   // placements again of finished requests (a rank or session lost)
  std::atomic<int64_t> num_resumed{0};      // requests resumed by a new session after theirs died
  std::atomic<int64_t> num_preemptions{0};  // of finished requests, by decode ranks out of KV blocks
  std::atomic<int64_t> num_reprefilled_tokens{0};   // prefilled again after a migration or preemption
  std::atomic<int64_t> num_generates_in_flight{0};  // accepted by a connection, not answered yet
  std::atomic<bool> draining{false};                // shutting down: new generates get a 503
  /// Latency histograms (TTFT, inter-token, end to end, queue), observed by the bridges; null:
  /// none kept.
  std::shared_ptr<request_histograms> histograms;

  /// Wakes wait_for callers; a bridge calls it once a request's counters are final, a
  /// connection once a generate is answered or it is gone.
  void notify_request_ended() const {
    { std::lock_guard<std::mutex> guard(mu_); }  // a waiter between its check and its wait sees it
    cv_.notify_all();
  }

  /// Waits until `pred` holds (checked after each request ends) or `timeout` passes; returns pred().
  template <class Pred>
  bool wait_for(std::chrono::milliseconds timeout, Pred pred) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, pred);
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

}  // namespace moe::net
