// tests/tools/test_bench_load.cpp
// `moeserve bench`'s load: length ranges as vLLM's random dataset, random prompts deterministic
// per seed, and the Poisson arrival schedule's mean and spread.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "tools/bench_load.hpp"

using namespace moe::tools;

TEST_CASE("length ranges are [floor(len(1-r)), ceil(len(1+r))], at least 1") {
  CHECK(length_range_of(64, 0.0).min == 64);  // r = 0: exactly len
  CHECK(length_range_of(64, 0.0).max == 64);
  CHECK(length_range_of(100, 0.5).min == 50);  // 100 * 0.5, 100 * 1.5
  CHECK(length_range_of(100, 0.5).max == 150);
  CHECK(length_range_of(128, 0.1).min == 115);  // floor(115.2)
  CHECK(length_range_of(128, 0.1).max == 141);  // ceil(140.8)
  CHECK(length_range_of(10, 0.1).max == 11);    // 11 exactly, not ceil(11.000000000000002)
  CHECK(length_range_of(10, 0.1).min == 9);
  CHECK(length_range_of(1, 0.5).min == 1);  // floor(0.5) = 0, raised to 1
  CHECK(length_range_of(1, 0.5).max == 2);  // ceil(1.5)
}

TEST_CASE("request lengths and ids stay in range, both ends are drawn, and a seed repeats them") {
  request_source source({.input_len = 20, .output_len = 10, .range_ratio = 0.5}, /*vocab_size=*/50,
                        /*seed=*/7);
  int64_t min_in = 1 << 30, max_in = 0, min_out = 1 << 30, max_out = 0;
  int32_t max_id = 0;
  for (int i = 0; i < 2000; ++i) {
    const bench_request r = source.next();
    const auto in = static_cast<int64_t>(r.input_ids.size());
    min_in = std::min(min_in, in);
    max_in = std::max(max_in, in);
    min_out = std::min(min_out, r.output_len);
    max_out = std::max(max_out, r.output_len);
    for (int32_t id : r.input_ids) {
      REQUIRE(id >= 0);
      max_id = std::max(max_id, id);
    }
  }
  CHECK(min_in == 10);  // [10, 30]
  CHECK(max_in == 30);
  CHECK(min_out == 5);  // [5, 15]
  CHECK(max_out == 15);
  CHECK(max_id == 49);  // ids below the vocabulary, all of it used

  request_source a({.input_len = 16, .output_len = 4, .range_ratio = 0.25}, 1000, 3);
  request_source b({.input_len = 16, .output_len = 4, .range_ratio = 0.25}, 1000, 3);
  request_source c({.input_len = 16, .output_len = 4, .range_ratio = 0.25}, 1000, 4);
  bool c_differs = false;
  for (int i = 0; i < 10; ++i) {
    const bench_request ra = a.next(), rb = b.next(), rc = c.next();
    CHECK(ra.input_ids == rb.input_ids);
    CHECK(ra.output_len == rb.output_len);
    c_differs = c_differs || rc.input_ids != ra.input_ids;
  }
  CHECK(c_differs);
}

TEST_CASE("a fixed prompt sends no ids and still draws output lengths") {
  request_source source({.output_len = 8, .range_ratio = 0.5, .prompt = "hello"}, 1000, 0);
  for (int i = 0; i < 100; ++i) {
    const bench_request r = source.next();
    CHECK(r.input_ids.empty());
    CHECK(r.output_len >= 4);
    CHECK(r.output_len <= 12);
  }
}

TEST_CASE("Poisson arrivals: first at 0, mean gap 1/rate, gaps as spread as their mean") {
  // 10000 exponential gaps of mean 0.05 s: the sample mean's relative standard error is 1 %,
  // so 3 % is three of them (the seed is fixed, so the draw is too); an exponential's standard
  // deviation equals its mean (uniform gaps would give 0.58 of it, fixed gaps 0).
  arrival_schedule schedule(/*request_rate=*/20.0, /*seed=*/0);
  CHECK(schedule.next_arrival_s() == 0.0);
  const int n = 10000;
  std::vector<double> gaps;
  double previous = 0.0;
  for (int i = 0; i < n; ++i) {
    const double t = schedule.next_arrival_s();
    REQUIRE(t >= previous);
    gaps.push_back(t - previous);
    previous = t;
  }
  const double mean = previous / n;
  CHECK(mean == doctest::Approx(0.05).epsilon(0.03));
  double sum_sq = 0.0;
  for (double g : gaps)
    sum_sq += (g - mean) * (g - mean);
  CHECK(std::sqrt(sum_sq / n) == doctest::Approx(0.05).epsilon(0.05));

  arrival_schedule all_at_once(std::numeric_limits<double>::infinity(), 0);
  for (int i = 0; i < 5; ++i)
    CHECK(all_at_once.next_arrival_s() == 0.0);
}
