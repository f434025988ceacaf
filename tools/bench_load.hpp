// tools/bench_load.hpp
// What `moeserve bench` sends and when: request lengths drawn as vLLM's random dataset does,
// random prompt token ids, and the Poisson arrival schedule, all deterministic per seed.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace moe::tools {

/// Inclusive bounds of a drawn length.
struct length_range {
  int64_t min = 1;
  int64_t max = 1;
};

/// [floor(len * (1 - ratio)), ceil(len * (1 + ratio))], at least 1 (vLLM's random dataset),
/// rounded as exact arithmetic would (10 with ratio 0.1 is [9, 11], where vLLM's floats give 12).
/// `len` >= 1, 0 <= `range_ratio` < 1.
[[nodiscard]] length_range length_range_of(int64_t len, double range_ratio);

struct load_shape {
  int64_t input_len = 128;
  int64_t output_len = 64;
  double range_ratio = 0.0;
  std::optional<std::string> prompt;  // set: every request sends this text, input_len unused
};

/// One generate: `input_ids` (random ids) or the fixed prompt text, and its max_tokens.
struct bench_request {
  std::vector<int32_t> input_ids;  // empty when the shape has a prompt
  int64_t output_len = 0;
};

/// The requests of a run, in issue order; request i is the same for a given seed and shape.
class request_source {
 public:
  /// `vocab_size`: ids are drawn uniformly from [0, vocab_size).
  request_source(load_shape shape, int64_t vocab_size, uint64_t seed);

  [[nodiscard]] bench_request next();
  [[nodiscard]] const load_shape& shape() const noexcept { return shape_; }

 private:
  load_shape shape_;
  length_range input_range_, output_range_;
  int64_t vocab_size_;
  std::mt19937_64 rng_;
};

/// Arrival times of a request rate: a Poisson process (exponential gaps of mean 1/rate, the
/// first request at 0); an infinite rate sends every request at 0.
class arrival_schedule {
 public:
  arrival_schedule(double request_rate, uint64_t seed);

  /// The next request's arrival, seconds from the start of the run (non-decreasing).
  [[nodiscard]] double next_arrival_s();

 private:
  double rate_;
  std::mt19937_64 rng_;
  double next_s_ = 0.0;
};

}  // namespace moe::tools
