// net/server_log.cpp
#include "net/server_log.hpp"

#include <cmath>
#include <cstdio>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace moe::net {

spdlog::logger& server_log() {
  static const std::shared_ptr<spdlog::logger> log = [] {
    auto l = std::make_shared<spdlog::logger>("moeserve", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    l->flush_on(spdlog::level::info);
    return l;
  }();
  return *log;
}

namespace {

std::string percents(const std::vector<double>& fractions) {
  std::string out;
  for (const double f : fractions)
    out += " " + std::to_string(static_cast<int>(std::lround(100.0 * f))) + " %";
  return out;
}

}  // namespace

std::string format_stats_line(const stats_line_figures& f) {
  const double s = f.seconds > 0.0 ? f.seconds : 1.0;
  char head[160];
  std::snprintf(head, sizeof head,
                "prompt %.1f tok/s, generation %.1f tok/s, %lld request%s (%lld failed) in %.1f s",
                static_cast<double>(f.input_tokens) / s, static_cast<double>(f.output_tokens) / s,
                static_cast<long long>(f.requests), f.requests == 1 ? "" : "s",
                static_cast<long long>(f.failed), f.seconds);
  std::string line = std::string(head) + ", KV in use: prefill" + percents(f.prefill_kv) + ", decode" +
                     percents(f.decode_kv) + ", " + std::to_string(f.connections) +
                     (f.connections == 1 ? " connection" : " connections");
  int64_t restarts = 0;
  std::string by_kind;
  for (const auto& [kind, n] : f.restarts) {
    if (n <= 0)
      continue;
    restarts += n;
    by_kind += (by_kind.empty() ? "" : "; ") + kind + " " + std::to_string(n);
    if (const auto took = f.recovery_ms.find(kind); took != f.recovery_ms.end() && took->second >= 0.0) {
      char ms[48];
      std::snprintf(ms, sizeof ms, ", last took %.1f ms", took->second);
      by_kind += ms;
    }
  }
  if (restarts > 0)
    line += ", " + std::to_string(restarts) + (restarts == 1 ? " actor restart (" : " actor restarts (") +
            by_kind + ")";
  if (f.migrations > 0)
    line += ", " + std::to_string(f.migrations) + (f.migrations == 1 ? " migration" : " migrations");
  if (f.preemptions > 0)
    line += ", " + std::to_string(f.preemptions) + (f.preemptions == 1 ? " preemption" : " preemptions");
  return line;
}

}  // namespace moe::net
