// tests/tools/test_bench_stats.cpp
// `moeserve bench`'s numbers against hand-computed ones: numpy's linear percentiles, the
// summary of a run, and the report's labels and layout as `vllm bench serve` prints them.
#include <doctest/doctest.h>

#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tools/bench_stats.hpp"

using namespace moe::tools;

TEST_CASE("percentile interpolates linearly between ranks, as numpy's default") {
  // rank = p/100 * (n - 1) into the sorted values, then linear between its two neighbours
  const std::vector<double> four = {4, 1, 3, 2};  // sorted: 1 2 3 4
  CHECK(percentile(four, 0) == doctest::Approx(1.0));
  CHECK(percentile(four, 50) == doctest::Approx(2.5));   // rank 1.5: 2 + 0.5 * (3 - 2)
  CHECK(percentile(four, 99) == doctest::Approx(3.97));  // rank 2.97: 3 + 0.97 * (4 - 3)
  CHECK(percentile(four, 100) == doctest::Approx(4.0));
  const std::vector<double> five = {40, 15, 50, 20, 35};  // sorted: 15 20 35 40 50
  CHECK(percentile(five, 40) == doctest::Approx(29.0));   // rank 1.6: 20 + 0.6 * (35 - 20)
  CHECK(percentile(five, 50) == doctest::Approx(35.0));   // rank 2: the middle value
  CHECK(percentile(five, 99) == doctest::Approx(49.6));   // rank 3.96: 40 + 0.96 * (50 - 40)
  CHECK(percentile({7.0}, 99) == doctest::Approx(7.0));
  CHECK(percentile({}, 99) == 0.0);  // vLLM's `values or 0`
}

TEST_CASE("summary in ms: mean, median, population std and P99") {
  // 1, 2, 3, 10 ms: mean 16/4 = 4; median rank 1.5 -> 2.5; deviations -3 -2 -1 6, squares sum
  // to 50, / 4 = 12.5, sqrt = 3.5355; P99 rank 2.97 -> 3 + 0.97 * 7 = 9.79
  const latency_summary s = summarize_ms({0.001, 0.002, 0.003, 0.010});
  CHECK(s.mean_ms == doctest::Approx(4.0));
  CHECK(s.median_ms == doctest::Approx(2.5));
  CHECK(s.std_ms == doctest::Approx(3.5355339));
  CHECK(s.p99_ms == doctest::Approx(9.79));
  const latency_summary none = summarize_ms({});
  CHECK(none.mean_ms == 0.0);
  CHECK(none.p99_ms == 0.0);
}

namespace {

/// Three completed requests and two failed ones over 2 s.
std::vector<bench_record> sample_run() {
  bench_record a{.success = true,
                 .prompt_tokens = 10,
                 .output_tokens = 5,
                 .ttft_s = 0.1,
                 .e2e_s = 0.5,
                 .itl_s = {0.1, 0.1, 0.1, 0.1}};
  bench_record b{.success = true, .prompt_tokens = 20, .output_tokens = 1, .ttft_s = 0.2, .e2e_s = 0.2};
  bench_record c{.success = true,
                 .prompt_tokens = 30,
                 .output_tokens = 3,
                 .ttft_s = 0.3,
                 .e2e_s = 0.7,
                 .itl_s = {0.4, 0.0},
                 .migrated = true};  // its last two tokens came together
  bench_record d{.error_kind = "429", .error = "queue: full"};
  bench_record e{.error_kind = "closed", .error = "the server closed the connection"};
  return {a, b, c, d, e};
}

}  // namespace

TEST_CASE("run metrics: counts, throughputs and each latency over the right requests") {
  const bench_metrics m = compute_metrics(sample_run(), 2.0);
  CHECK(m.completed == 3);
  CHECK(m.failed == 2);
  CHECK(m.rejected == 1);
  CHECK(m.migrated == 1);
  CHECK(m.total_input_tokens == 60);  // completed only
  CHECK(m.total_output_tokens == 9);
  CHECK(m.request_throughput == doctest::Approx(1.5));       // 3 / 2 s
  CHECK(m.output_throughput == doctest::Approx(4.5));        // 9 / 2 s
  CHECK(m.total_token_throughput == doctest::Approx(34.5));  // 69 / 2 s
  // TTFT 0.1 0.2 0.3: mean = median = 200 ms; P99 rank 1.98 -> 0.2 + 0.98 * 0.1 = 0.298
  CHECK(m.ttft.mean_ms == doctest::Approx(200.0));
  CHECK(m.ttft.median_ms == doctest::Approx(200.0));
  CHECK(m.ttft.p99_ms == doctest::Approx(298.0));
  // TPOT only where output > 1: a (0.5 - 0.1) / 4 = 0.1, c (0.7 - 0.3) / 2 = 0.2;
  // P99 rank 0.99 -> 0.1 + 0.99 * 0.1 = 0.199
  CHECK(m.tpot.mean_ms == doctest::Approx(150.0));
  CHECK(m.tpot.median_ms == doctest::Approx(150.0));
  CHECK(m.tpot.p99_ms == doctest::Approx(199.0));
  // ITL, every gap: 0 0.1 0.1 0.1 0.1 0.4 -> mean 0.8 / 6; median rank 2.5 -> 0.1;
  // P99 rank 4.95 -> 0.1 + 0.95 * 0.3 = 0.385
  CHECK(m.itl.mean_ms == doctest::Approx(133.333333));
  CHECK(m.itl.median_ms == doctest::Approx(100.0));
  CHECK(m.itl.p99_ms == doctest::Approx(385.0));
  // E2EL 0.2 0.5 0.7: mean 1.4 / 3; median 0.5; P99 rank 1.98 -> 0.5 + 0.98 * 0.2 = 0.696
  CHECK(m.e2el.mean_ms == doctest::Approx(466.666667));
  CHECK(m.e2el.median_ms == doctest::Approx(500.0));
  CHECK(m.e2el.p99_ms == doctest::Approx(696.0));
  CHECK(m.errors == std::map<std::string, int64_t>{{"429", 1}, {"closed", 1}});
  REQUIRE(m.first_errors.size() == 2);
  CHECK(m.first_errors[0] == "[429] queue: full");
}

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    lines.push_back(line);
  return lines;
}

}  // namespace

TEST_CASE("the report has every label of vllm bench serve in its layout") {
  const bench_metrics m = compute_metrics(sample_run(), 2.0);
  const std::string report =
    format_report(m, {.request_rate = std::numeric_limits<double>::infinity(), .max_concurrency = 8});
  const std::vector<std::string> lines = lines_of(report);
  // "{:<40} {:<10}": the label padded to 40, a space, the value padded to 10
  const std::vector<std::string> want = {
    "============ Serving Benchmark Result ============",
    "Successful requests:                     3         ",
    "Failed requests:                         2         ",
    "Rejected (overloaded):                   1         ",
    "Migrated:                                1         ",
    "Maximum request concurrency:             8         ",
    "Benchmark duration (s):                  2.00      ",
    "Total input tokens:                      60        ",
    "Total generated tokens:                  9         ",
    "Request throughput (req/s):              1.50      ",
    "Output token throughput (tok/s):         4.50      ",
    "Total token throughput (tok/s):          34.50     ",
    "---------------Time to First Token----------------",
    "Mean TTFT (ms):                          200.00    ",
    "Median TTFT (ms):                        200.00    ",
    "P99 TTFT (ms):                           298.00    ",
    "-----Time per Output Token (excl. 1st token)------",
    "Mean TPOT (ms):                          150.00    ",
    "Median TPOT (ms):                        150.00    ",
    "P99 TPOT (ms):                           199.00    ",
    "---------------Inter-token Latency----------------",
    "Mean ITL (ms):                           133.33    ",
    "Median ITL (ms):                         100.00    ",
    "P99 ITL (ms):                            385.00    ",
    "----------------End-to-end Latency----------------",
    "Mean E2EL (ms):                          466.67    ",
    "Median E2EL (ms):                        500.00    ",
    "P99 E2EL (ms):                           696.00    ",
    "==================================================",
  };
  CHECK(lines == want);
  // a finite rate is stated, as vLLM does
  const std::string at_rate = format_report(m, {.request_rate = 4.0});
  CHECK(at_rate.find("Request rate configured (RPS):           4.00      \n") != std::string::npos);
  CHECK(at_rate.find("Maximum request concurrency:") == std::string::npos);
}

TEST_CASE("failures are listed by kind with their first messages, and nothing when none failed") {
  const std::string errors = format_errors(compute_metrics(sample_run(), 2.0));
  CHECK(errors.find("429 x1") != std::string::npos);
  CHECK(errors.find("closed x1") != std::string::npos);
  CHECK(errors.find("Error 0: [429] queue: full\n") != std::string::npos);
  CHECK(errors.find("Error 1: [closed] the server closed the connection\n") != std::string::npos);
  CHECK(format_errors(compute_metrics({sample_run()[0]}, 1.0)).empty());
}

TEST_CASE("the JSON holds the summary under vLLM's key names and every request") {
  const std::vector<bench_record> records = sample_run();
  const auto j = nlohmann::json::parse(
    metrics_json(compute_metrics(records, 2.0),
                 {.request_rate = std::numeric_limits<double>::infinity(), .seed = 5}, records));
  CHECK(j.at("request_rate") == "inf");
  CHECK(j.at("max_concurrency").is_null());
  CHECK(j.at("seed") == 5);
  CHECK(j.at("completed") == 3);
  CHECK(j.at("failed") == 2);
  CHECK(j.at("rejected") == 1);
  CHECK(j.at("migrated") == 1);
  CHECK(j.at("total_output_tokens") == 9);
  CHECK(j.at("p99_ttft_ms").get<double>() == doctest::Approx(298.0));
  CHECK(j.at("median_itl_ms").get<double>() == doctest::Approx(100.0));
  CHECK(j.at("std_e2el_ms").get<double>() > 0.0);
  CHECK(j.at("errors_by_kind").at("429") == 1);
  CHECK(j.at("ttfts").size() == 5);
  CHECK(j.at("itls").at(0).size() == 4);
  CHECK(j.at("errors").at(3) == "[429] queue: full");
}
