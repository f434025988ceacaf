// tests/sampling/test_sampler.cpp
// The sampler against hand-computed cases: greedy argmax and ties, exact penalised logits,
// the token sets top-k / top-p / min-p allow, draw frequencies vs the renormalised
// probabilities (chi-square bound), seeded reproducibility, validation messages.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "kernels/sampling/sampler.hpp"

using moe::sampler;
using moe::sampling_params;

namespace {

sampling_params greedy() {
  sampling_params p;
  p.temperature = 0.0f;
  return p;
}

std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> out;
  out.reserve(probs.size());
  for (double p : probs)
    out.push_back(static_cast<float>(std::log(p)));
  return out;
}

/// Draws `n` tokens, one fresh sampler per seed (seeds 1..n), from copies of `logits`.
std::map<int32_t, int> draw_many(sampling_params p, const std::vector<float>& logits, int n) {
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) {
    p.seed = static_cast<uint64_t>(i + 1);
    sampler s(p, {});
    std::vector<float> row = logits;
    ++counts[s.sample(row)];
  }
  return counts;
}

/// Asserts only the tokens in `expected` (token -> probability) appear, and the counts fit them:
/// Pearson chi-square below `bound` (generous for the few degrees of freedom used here; the
/// p = 0.001 critical values are 10.8 / 13.8 / 16.3 for 1 / 2 / 3 degrees of freedom).
void check_distribution(const std::map<int32_t, int>& counts, const std::map<int32_t, double>& expected,
                        int n, double bound = 20.0) {
  for (const auto& drawn : counts) {  // INFO captures by reference: no structured binding
    INFO("token " << drawn.first << " drawn " << drawn.second << " times");
    CHECK(expected.count(drawn.first) == 1);
  }
  double chi2 = 0.0;
  for (const auto& [tok, prob] : expected) {
    const double e = prob * n;
    const auto it = counts.find(tok);
    const double o = it == counts.end() ? 0.0 : it->second;
    chi2 += (o - e) * (o - e) / e;
  }
  INFO("chi-square " << chi2 << " over " << expected.size() << " tokens");
  CHECK(chi2 < bound);
}

}  // namespace

TEST_CASE("greedy: argmax, lowest id on ties") {
  sampler s(greedy(), {});
  std::vector<float> a{1.0f, 3.0f, 2.0f, 3.0f};
  CHECK(s.sample(a) == 1);
  std::vector<float> b{-5.0f, -1.0f, -1.0f};
  CHECK(s.sample(b) == 1);
}

TEST_CASE("temperatures in (0, 0.01) are raised to 0.01 and sample, as vLLM's, only 0 is greedy") {
  // at 0.01: logits [1, 0.995] -> [100, 99.5]: p(1) = 1 / (1 + e^0.5) = 0.377541
  const std::vector<float> logits{1.0f, 0.995f};
  const double p1 = 1.0 / (1.0 + std::exp(0.5));
  const int n = 20000;
  for (const float t : {0.9e-5f, 0.005f, 0.01f}) {
    CAPTURE(t);
    sampling_params p;
    p.temperature = t;
    check_distribution(draw_many(p, logits, n), {{0, 1.0 - p1}, {1, p1}}, n);
  }
  sampling_params zero;
  zero.temperature = 0.0f;
  check_distribution(draw_many(zero, logits, 200), {{0, 1.0}}, 200);
}

TEST_CASE("greedy on a read-only row: lowest id of the largest, NaN never wins, past the 16 lanes") {
  sampler s(greedy(), {});
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  auto pick = [&](std::vector<float> v) { return s.sample(std::span<const float>(v)); };
  CHECK(pick({1.0f, 3.0f, 2.0f, 3.0f}) == 1);
  CHECK(pick({nan, -inf, nan}) == 1);     // the only non-NaN entry
  CHECK(pick({nan, nan}) == 0);           // nothing to pick: 0, as sample(vector&)
  std::vector<float> long_row(37, 0.5f);  // 2 full lane blocks and a tail of 5
  long_row[3] = 9.0f;                     // lane 3's largest, then a NaN in that lane
  long_row[19] = nan;
  CHECK(pick(long_row) == 3);
  long_row[3] = 0.5f;
  long_row[20] = 9.0f;
  long_row[35] = 9.0f;
  CHECK(pick(long_row) == 20);
  long_row[36] = 9.5f;  // the largest in the tail
  CHECK(pick(long_row) == 36);
  long_row[36] = nan;
  long_row[17] = inf;
  CHECK(pick(long_row) == 17);
}

TEST_CASE("sampling a read-only row equals sampling a copy, with penalties and random draws") {
  std::vector<float> logits;
  logits.reserve(50);
  for (int i = 0; i < 50; ++i)
    logits.push_back(std::sin(static_cast<float>(i) * 1.7f) * 3.0f);
  for (const float temperature : {0.0f, 0.8f}) {
    CAPTURE(temperature);
    sampling_params p;
    p.temperature = temperature;
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.5f;
    p.seed = 7;
    sampler on_copy(p, {4, 9}), in_place(p, {4, 9});
    for (int step = 0; step < 20; ++step) {
      std::vector<float> row = logits;
      const int32_t want = on_copy.sample(row);
      const int32_t got = in_place.sample(std::span<const float>(logits));
      CHECK(got == want);
      on_copy.accept(want);
      in_place.accept(got);
    }
  }
}

TEST_CASE("repetition penalty divides positive and multiplies negative logits of seen tokens") {
  sampling_params p = greedy();
  p.repetition_penalty = 2.0f;
  sampler s(p, {0, 2});
  std::vector<float> row{2.0f, -1.0f, -3.0f, 4.0f, 0.5f};
  (void)s.sample(row);
  CHECK(row == std::vector<float>{1.0f, -1.0f, -6.0f, 4.0f, 0.5f});
  s.accept(4);  // an output token counts as seen too
  std::vector<float> row2{2.0f, -1.0f, -3.0f, 4.0f, 0.5f};
  (void)s.sample(row2);
  CHECK(row2 == std::vector<float>{1.0f, -1.0f, -6.0f, 4.0f, 0.25f});
}

TEST_CASE("presence and frequency penalties use output tokens only") {
  sampling_params p = greedy();
  p.presence_penalty = 0.5f;
  p.frequency_penalty = 0.25f;
  sampler s(p, {0});  // prompt token 0 is not penalised
  s.accept(1);
  s.accept(1);
  s.accept(3);
  std::vector<float> row{0.0f, 0.0f, 0.0f, 0.0f};
  CHECK(s.sample(row) == 0);
  // token 1: 0.5 + 2 * 0.25 = 1.0; token 3: 0.5 + 0.25 = 0.75
  CHECK(row == std::vector<float>{0.0f, -1.0f, 0.0f, -0.75f});
}

TEST_CASE("all penalties together: repetition first, then presence/frequency") {
  sampling_params p = greedy();
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 1.0f;
  p.frequency_penalty = -0.5f;
  sampler s(p, {2});
  s.accept(0);
  s.accept(0);
  std::vector<float> row{3.0f, 1.0f, -2.0f};
  CHECK(s.sample(row) == 0);
  // token 0: 3 / 1.5 = 2, then - (1.0 + 2 * -0.5) = 2;  token 2: -2 * 1.5 = -3
  CHECK(row == std::vector<float>{2.0f, 1.0f, -3.0f});
}

TEST_CASE("temperature scales logits before the draw") {
  sampling_params p;
  p.temperature = 0.5f;  // logits [0, ln 2] -> weights [1, 4]
  const int n = 20000;
  auto counts = draw_many(p, {0.0f, static_cast<float>(std::log(2.0))}, n);
  check_distribution(counts, {{0, 0.2}, {1, 0.8}}, n);
}

TEST_CASE("top-k keeps the k largest") {
  sampling_params p;
  p.top_k = 2;
  const int n = 20000;
  auto counts = draw_many(p, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f}, n);
  const double z = std::exp(4.0) + std::exp(5.0);
  check_distribution(counts, {{3, std::exp(4.0) / z}, {4, std::exp(5.0) / z}}, n);

  p.top_k = 0;  // 0 behaves as -1: every token possible
  auto all = draw_many(p, {0.0f, 0.0f, 0.0f}, 3000);
  CHECK(all.size() == 3);
}

TEST_CASE("top-k keeps every token tied with the k-th value") {
  sampling_params p;
  p.top_k = 1;
  auto counts = draw_many(p, {1.0f, 2.0f, 2.0f, 0.0f}, 4000);
  check_distribution(counts, {{1, 0.5}, {2, 0.5}}, 4000);
}

TEST_CASE("top-p keeps the smallest set reaching top_p, at least one token") {
  const std::vector<float> logits = log_of({0.1, 0.2, 0.3, 0.4});
  const int n = 20000;
  sampling_params p;
  p.top_p = 0.6f;  // 0.4 < 0.6, 0.4 + 0.3 = 0.7 >= 0.6 -> {3, 2}
  check_distribution(draw_many(p, logits, n), {{2, 3.0 / 7.0}, {3, 4.0 / 7.0}}, n);
  p.top_p = 0.3f;  // the top token alone suffices
  check_distribution(draw_many(p, logits, 2000), {{3, 1.0}}, 2000);
  p.top_p = 0.95f;  // needs all four
  check_distribution(draw_many(p, logits, n), {{0, 0.1}, {1, 0.2}, {2, 0.3}, {3, 0.4}}, n);
}

TEST_CASE("top-p applies to the distribution left by top-k") {
  const std::vector<float> logits = log_of({0.05, 0.15, 0.2, 0.25, 0.35});
  const int n = 20000;
  sampling_params p;
  p.top_p = 0.7f;  // alone: 0.35, 0.6, 0.8 -> {4, 3, 2}
  check_distribution(draw_many(p, logits, n), {{2, 0.25}, {3, 0.3125}, {4, 0.4375}}, n);
  p.top_k = 3;  // renormalised {0.25, 0.3125, 0.4375}: 0.4375, 0.75 -> {4, 3}
  check_distribution(draw_many(p, logits, n), {{3, 0.3125 / 0.75}, {4, 0.4375 / 0.75}}, n);
}

TEST_CASE("min-p drops tokens below min_p * max probability") {
  const std::vector<float> logits = log_of({0.1, 0.2, 0.3, 0.4});
  const int n = 20000;
  sampling_params p;
  p.min_p = 0.6f;  // cut 0.24 -> {2, 3}
  check_distribution(draw_many(p, logits, n), {{2, 3.0 / 7.0}, {3, 4.0 / 7.0}}, n);
  p.min_p = 0.45f;  // cut 0.18 -> {1, 2, 3}
  check_distribution(draw_many(p, logits, n), {{1, 2.0 / 9.0}, {2, 3.0 / 9.0}, {3, 4.0 / 9.0}}, n);
  p.min_p = 1.0f;  // only the maximum
  check_distribution(draw_many(p, logits, 2000), {{3, 1.0}}, 2000);
}

TEST_CASE("min-p runs before top-k and top-p (vLLM v1): top-p sums what min-p kept, renormalised") {
  const std::vector<float> logits = log_of({0.2, 0.3, 0.5});
  const int n = 20000;
  sampling_params p;
  p.top_p = 0.6f;  // alone: 0.5, 0.8 -> {2, 1}
  check_distribution(draw_many(p, logits, n), {{1, 0.375}, {2, 0.625}}, n);
  p.min_p = 0.5f;  // first: cut 0.25 -> {1, 2} as {0.375, 0.625}; top-p 0.6 -> {2}
  check_distribution(draw_many(p, logits, 2000), {{2, 1.0}}, 2000);
  p.top_p = 1.0f;
  p.top_k = 1;  // min-p keeps {1, 2}, top-k the largest of them
  check_distribution(draw_many(p, logits, 2000), {{2, 1.0}}, 2000);
}

TEST_CASE("masked logits are -inf after sample()") {
  sampling_params p;
  p.top_k = 2;
  p.seed = 3;
  sampler s(p, {});
  std::vector<float> row{1.0f, 3.0f, 2.0f, 0.0f};
  const int32_t t = s.sample(row);
  CHECK((t == 1 || t == 2));
  CHECK(std::isinf(row[0]));
  CHECK(std::isinf(row[3]));
  CHECK(row[1] == 3.0f);
  CHECK(row[2] == 2.0f);
}

TEST_CASE("one sampler draws from its own distribution across steps") {
  sampling_params p;
  p.seed = 12345;
  sampler s(p, {});
  const std::vector<float> logits = log_of({0.1, 0.2, 0.3, 0.4});
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> row = logits;
    ++counts[s.sample(row)];
  }
  check_distribution(counts, {{0, 0.1}, {1, 0.2}, {2, 0.3}, {3, 0.4}}, n);
}

TEST_CASE("same seed gives the same sequence, another seed a different one") {
  const std::vector<float> logits(50, 0.0f);
  auto run = [&](uint64_t seed) {
    sampling_params p;
    p.seed = seed;
    sampler s(p, {});
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) {
      std::vector<float> row = logits;
      out.push_back(s.sample(row));
    }
    return out;
  };
  CHECK(run(42) == run(42));
  CHECK(run(42) != run(43));
  sampling_params unseeded;  // random_device seeding: still produces valid tokens
  sampler u(unseeded, {});
  std::vector<float> row = logits;
  const int32_t t = u.sample(row);
  CHECK((t >= 0 && t < 50));
}

TEST_CASE("validate names the field") {
  CHECK(moe::validate(sampling_params{}).empty());
  auto msg = [](auto&& set) {
    sampling_params p;
    set(p);
    return moe::validate(p);
  };
  CHECK(msg([](sampling_params& p) { p.temperature = -0.1f; }) ==
        "temperature must be a finite non-negative number, got -0.1.");
  CHECK(msg([](sampling_params& p) { p.temperature = std::numeric_limits<float>::infinity(); }) ==
        "temperature must be a finite non-negative number, got inf.");
  CHECK(msg([](sampling_params& p) { p.repetition_penalty = std::numeric_limits<float>::infinity(); }) ==
        "repetition_penalty must be a finite number greater than zero, got inf.");
  CHECK(msg([](sampling_params& p) { p.top_p = 0.0f; }) == "top_p must be in (0, 1], got 0.");
  CHECK(msg([](sampling_params& p) { p.top_p = 1.5f; }) == "top_p must be in (0, 1], got 1.5.");
  CHECK(msg([](sampling_params& p) { p.top_k = -2; }).rfind("top_k must be -1", 0) == 0);
  CHECK(msg([](sampling_params& p) { p.top_k = 0; }).empty());
  CHECK(msg([](sampling_params& p) { p.min_p = 1.5f; }) == "min_p must be in [0, 1], got 1.5.");
  CHECK(msg([](sampling_params& p) { p.repetition_penalty = 0.0f; }) ==
        "repetition_penalty must be a finite number greater than zero, got 0.");
  CHECK(msg([](sampling_params& p) { p.presence_penalty = 2.5f; }) ==
        "presence_penalty must be in [-2, 2], got 2.5.");
  CHECK(msg([](sampling_params& p) { p.frequency_penalty = -3.0f; }) ==
        "frequency_penalty must be in [-2, 2], got -3.");
  CHECK(msg([](sampling_params& p) { p.max_tokens = 0; }) == "max_tokens must be at least 1, got 0.");
  CHECK(msg([](sampling_params& p) { p.logprobs = -1; }) == "logprobs must be at least 0, got -1.");
  CHECK(msg([](sampling_params& p) { p.logprobs = 0; }).empty());
  CHECK(msg([](sampling_params& p) { p.temperature = std::nanf(""); }).rfind("temperature", 0) == 0);
}

TEST_CASE("finish_reason names") {
  CHECK(std::string(moe::to_string(moe::finish_reason::stop)) == "stop");
  CHECK(std::string(moe::to_string(moe::finish_reason::length)) == "length");
  CHECK(std::string(moe::to_string(moe::finish_reason::abort)) == "abort");
  CHECK(std::string(moe::to_string(moe::finish_reason::error)) == "error");
  CHECK(std::string(moe::to_string(moe::finish_reason::none)) == "none");
}
