// net/serving_metrics.hpp
// What the server measures of its requests beyond the counters of server_counters: latency
// histograms with vLLM's buckets (time to first token, inter-token latency, end to end, queue
// time), and the Prometheus text of GET /metrics, rendered by prometheus-cpp from one `stats`
// result and the histograms. `stats`, /metrics and the periodic log line read the same counters.
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include <msgpack.hpp>

#include "net/rpc_errors.hpp"
#include "net/serving_target.hpp"

namespace moe::net {

struct request_histograms;

[[nodiscard]] std::shared_ptr<request_histograms> make_request_histograms();

/// A request's times, in seconds from its arrival.
struct request_times {
  double queue_s = 0.0;  // to its first prefill step
  double ttft_s = 0.0;   // to its first token (none: not observed)
  double e2e_s = 0.0;    // to its answer
  bool has_first_token = false;
};
void observe_request(request_histograms& h, const request_times& t);
/// `num_tokens` tokens arrived `gap_s` after the previous ones: each counts gap / num_tokens.
void observe_token_gap(request_histograms& h, double gap_s, size_t num_tokens);

/// The wire's error types a failed generate is counted under in server_counters::num_rejected
/// (and `stats`' rejected, and requests_rejected_total{reason}).
inline constexpr std::array<std::string_view, 6> rejected_reasons = {"overloaded", "unavailable", "too_large",
                                                                     "validation", "internal",    "other"};
[[nodiscard]] size_t rejected_index(rpc_errc code) noexcept;
/// A valid generate answered with an error: num_failed and num_rejected by its type.
void count_failed(server_counters& c, rpc_errc code, int64_t n = 1);

/// The Prometheus text format (0.0.4) of a `stats` result and the histograms, names under
/// "moeserve:" (vLLM's where one exists).
[[nodiscard]] std::string render_metrics(const msgpack::object& stats, const request_histograms* histograms,
                                         std::string_view model_name);

}  // namespace moe::net
