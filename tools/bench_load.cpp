// tools/bench_load.cpp
#include "tools/bench_load.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace moe::tools {

namespace {

constexpr double rounding_slack = 1e-9;  // 10 * (1 + 0.1) is 11.000000000000002 in doubles

}  // namespace

length_range length_range_of(int64_t len, double range_ratio) {
  const auto low =
    static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - range_ratio) + rounding_slack));
  const auto high =
    static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + range_ratio) - rounding_slack));
  return {.min = std::max<int64_t>(low, 1), .max = std::max<int64_t>(high, 1)};
}

request_source::request_source(load_shape shape, int64_t vocab_size, uint64_t seed)
    : shape_(std::move(shape)), input_range_(length_range_of(shape_.input_len, shape_.range_ratio)),
      output_range_(length_range_of(shape_.output_len, shape_.range_ratio)), vocab_size_(vocab_size),
      rng_(seed) {}

bench_request request_source::next() {
  bench_request r;
  if (!shape_.prompt) {
    const int64_t input_len = std::uniform_int_distribution<int64_t>(input_range_.min,
                                                                     input_range_.max)(rng_);
    std::uniform_int_distribution<int32_t> id(0, static_cast<int32_t>(vocab_size_ - 1));
    r.input_ids.resize(static_cast<size_t>(input_len));
    for (int32_t& token_id : r.input_ids)
      token_id = id(rng_);
  }
  r.output_len = std::uniform_int_distribution<int64_t>(output_range_.min, output_range_.max)(rng_);
  return r;
}

arrival_schedule::arrival_schedule(double request_rate, uint64_t seed) : rate_(request_rate), rng_(seed) {}

double arrival_schedule::next_arrival_s() {
  const double arrival = next_s_;
  if (std::isfinite(rate_))
    next_s_ += std::exponential_distribution<double>(rate_)(rng_);
  return arrival;
}

}  // namespace moe::tools
