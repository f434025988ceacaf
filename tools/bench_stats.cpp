// tools/bench_stats.cpp
#include "tools/bench_stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <numeric>

namespace moe::tools {

namespace {

constexpr size_t max_error_messages = 5;
constexpr int report_width = 50;

/// `text` centred in `report_width` columns of `fill` (Python's "{:fill^50}": the odd column
/// goes right).
std::string centered(const std::string& text, char fill) {
  const size_t pad = report_width - std::min<size_t>(text.size(), report_width);
  return std::string(pad / 2, fill) + text + std::string(pad - pad / 2, fill) + "\n";
}

/// "{:<40} {:<10}": the label padded to 40 columns, a space, the value padded to 10.
std::string row(const std::string& label, const std::string& value) {
  char line[128];
  std::snprintf(line, sizeof line, "%-40s %-10s\n", label.c_str(), value.c_str());
  return line;
}

std::string integer(int64_t value) { return std::to_string(value); }

std::string fixed2(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f", value);
  return text;
}

std::string latency_section(const std::string& header, const std::string& name, const latency_summary& s) {
  return centered(header, '-') + row("Mean " + name + " (ms):", fixed2(s.mean_ms)) +
         row("Median " + name + " (ms):", fixed2(s.median_ms)) +
         row("P99 " + name + " (ms):", fixed2(s.p99_ms));
}

void put_summary(nlohmann::json& j, const std::string& name, const latency_summary& s) {
  j["mean_" + name + "_ms"] = s.mean_ms;
  j["median_" + name + "_ms"] = s.median_ms;
  j["std_" + name + "_ms"] = s.std_ms;
  j["p99_" + name + "_ms"] = s.p99_ms;
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty())
    return 0.0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

latency_summary summarize_ms(const std::vector<double>& seconds) {
  if (seconds.empty())
    return {};
  const auto n = static_cast<double>(seconds.size());
  const double mean = std::accumulate(seconds.begin(), seconds.end(), 0.0) / n;
  double sum_sq = 0.0;  // population variance, numpy's std
  for (double x : seconds)
    sum_sq += (x - mean) * (x - mean);
  return {.mean_ms = mean * 1e3,
          .median_ms = percentile(seconds, 50.0) * 1e3,
          .std_ms = std::sqrt(sum_sq / n) * 1e3,
          .p99_ms = percentile(seconds, 99.0) * 1e3};
}

bench_metrics compute_metrics(const std::vector<bench_record>& records, double duration_s) {
  bench_metrics m{.duration_s = duration_s};
  std::vector<double> ttfts, tpots, itls, e2els;
  for (const bench_record& r : records) {
    if (!r.success) {
      ++m.failed;
      m.rejected += r.error_kind == "429" ? 1 : 0;
      ++m.errors[r.error_kind];
      if (m.first_errors.size() < max_error_messages)
        m.first_errors.push_back("[" + r.error_kind + "] " + r.error);
      continue;
    }
    ++m.completed;
    m.migrated += r.migrated ? 1 : 0;
    m.total_input_tokens += r.prompt_tokens;
    m.total_output_tokens += r.output_tokens;
    ttfts.push_back(r.ttft_s);
    e2els.push_back(r.e2e_s);
    if (r.output_tokens > 1)
      tpots.push_back((r.e2e_s - r.ttft_s) / static_cast<double>(r.output_tokens - 1));
    itls.insert(itls.end(), r.itl_s.begin(), r.itl_s.end());
  }
  if (duration_s > 0.0) {
    m.request_throughput = static_cast<double>(m.completed) / duration_s;
    m.output_throughput = static_cast<double>(m.total_output_tokens) / duration_s;
    m.total_token_throughput = static_cast<double>(m.total_input_tokens + m.total_output_tokens) / duration_s;
  }
  m.ttft = summarize_ms(ttfts);
  m.tpot = summarize_ms(tpots);
  m.itl = summarize_ms(itls);
  m.e2el = summarize_ms(e2els);
  return m;
}

std::string format_report(const bench_metrics& m, const run_settings& s) {
  std::string out = centered(" Serving Benchmark Result ", '=');
  out += row("Successful requests:", integer(m.completed));
  out += row("Failed requests:", integer(m.failed));
  out += row("Rejected (overloaded):", integer(m.rejected));
  out += row("Migrated:", integer(m.migrated));
  if (s.max_concurrency)
    out += row("Maximum request concurrency:", integer(*s.max_concurrency));
  if (std::isfinite(s.request_rate))
    out += row("Request rate configured (RPS):", fixed2(s.request_rate));
  out += row("Benchmark duration (s):", fixed2(m.duration_s));
  out += row("Total input tokens:", integer(m.total_input_tokens));
  out += row("Total generated tokens:", integer(m.total_output_tokens));
  out += row("Request throughput (req/s):", fixed2(m.request_throughput));
  out += row("Output token throughput (tok/s):", fixed2(m.output_throughput));
  out += row("Total token throughput (tok/s):", fixed2(m.total_token_throughput));
  out += latency_section("Time to First Token", "TTFT", m.ttft);
  out += latency_section("Time per Output Token (excl. 1st token)", "TPOT", m.tpot);
  out += latency_section("Inter-token Latency", "ITL", m.itl);
  out += latency_section("End-to-end Latency", "E2EL", m.e2el);
  out += std::string(report_width, '=') + "\n";
  return out;
}

std::string format_errors(const bench_metrics& m) {
  if (m.failed == 0)
    return {};
  std::string out = "Failed requests by error:";
  for (const auto& [kind, count] : m.errors)
    out += " " + kind + " x" + std::to_string(count);
  out += " (first " + std::to_string(m.first_errors.size()) + " shown)\n";
  for (size_t i = 0; i < m.first_errors.size(); ++i)
    out += "Error " + std::to_string(i) + ": " + m.first_errors[i] + "\n";
  return out;
}

std::string metrics_json(const bench_metrics& m, const run_settings& s,
                         const std::vector<bench_record>& records) {
  nlohmann::json j;
  j["request_rate"] = std::isfinite(s.request_rate) ? nlohmann::json(s.request_rate) : nlohmann::json("inf");
  j["max_concurrency"] = s.max_concurrency ? nlohmann::json(*s.max_concurrency) : nlohmann::json();
  j["input_len"] = s.shape.prompt ? nlohmann::json() : nlohmann::json(s.shape.input_len);
  j["output_len"] = s.shape.output_len;
  j["range_ratio"] = s.shape.range_ratio;
  j["seed"] = s.seed;
  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["rejected"] = m.rejected;
  j["migrated"] = m.migrated;
  j["total_input_tokens"] = m.total_input_tokens;
  j["total_output_tokens"] = m.total_output_tokens;
  j["request_throughput"] = m.request_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_token_throughput"] = m.total_token_throughput;
  put_summary(j, "ttft", m.ttft);
  put_summary(j, "tpot", m.tpot);
  put_summary(j, "itl", m.itl);
  put_summary(j, "e2el", m.e2el);
  j["errors_by_kind"] = m.errors;
  auto& input_lens = j["input_lens"] = nlohmann::json::array();
  auto& output_lens = j["output_lens"] = nlohmann::json::array();
  auto& ttfts = j["ttfts"] = nlohmann::json::array();
  auto& itls = j["itls"] = nlohmann::json::array();
  auto& latencies = j["latencies"] = nlohmann::json::array();
  auto& errors = j["errors"] = nlohmann::json::array();
  for (const bench_record& r : records) {
    input_lens.push_back(r.prompt_tokens);
    output_lens.push_back(r.output_tokens);
    ttfts.push_back(r.ttft_s);
    itls.push_back(r.itl_s);
    latencies.push_back(r.e2e_s);
    errors.push_back(r.success ? std::string() : "[" + r.error_kind + "] " + r.error);
  }
  return j.dump() + "\n";
}

}  // namespace moe::tools
