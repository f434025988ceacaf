// tests/sampling/test_logprobs.cpp
// logprobs_of against log_softmax computed by hand: the sampled token's value, the top list's
// order (lowest id first on ties), n = 0, n past the vocabulary, logits far from 0.
#include <doctest/doctest.h>

#include <limits>
#include <vector>

#include "kernels/sampling/logprobs.hpp"

using moe::logprobs_of;
using moe::token_logprobs;

TEST_CASE("logits [1, 2, 3]: log_softmax by hand, top list largest first") {
  // lse = 3 + log(e^-2 + e^-1 + e^0) = 3 + log(0.135335 + 0.367879 + 1) = 3 + log(1.503215)
  //     = 3.407606; log_softmax = [1, 2, 3] - 3.407606 = [-2.407606, -1.407606, -0.407606]
  const std::vector<float> logits{1.0f, 2.0f, 3.0f};
  const token_logprobs lp = logprobs_of(logits, 0, 2);
  CHECK(lp.token_id == 0);
  CHECK(lp.logprob == doctest::Approx(-2.4076059644).epsilon(1e-6));
  REQUIRE(lp.top.size() == 2);
  CHECK(lp.top[0].token_id == 2);
  CHECK(lp.top[0].logprob == doctest::Approx(-0.4076059644).epsilon(1e-6));
  CHECK(lp.top[1].token_id == 1);
  CHECK(lp.top[1].logprob == doctest::Approx(-1.4076059644).epsilon(1e-6));
}

TEST_CASE("ties are listed lowest id first") {
  // four equal logits: each log(1/4) = -1.386294
  const std::vector<float> logits{0.5f, 0.5f, 0.5f, 0.5f};
  const token_logprobs lp = logprobs_of(logits, 3, 3);
  CHECK(lp.logprob == doctest::Approx(-1.3862943611).epsilon(1e-6));
  REQUIRE(lp.top.size() == 3);
  for (int32_t i = 0; i < 3; ++i) {
    CHECK(lp.top[static_cast<size_t>(i)].token_id == i);
    CHECK(lp.top[static_cast<size_t>(i)].logprob == doctest::Approx(-1.3862943611).epsilon(1e-6));
  }
}

TEST_CASE("n past the vocabulary lists every token, n = 0 lists none") {
  const std::vector<float> logits{1.0f, 3.0f, 2.0f};
  const token_logprobs all = logprobs_of(logits, 1, 20);
  REQUIRE(all.top.size() == 3);
  CHECK(all.top[0].token_id == 1);
  CHECK(all.top[1].token_id == 2);
  CHECK(all.top[2].token_id == 0);
  const token_logprobs none = logprobs_of(logits, 1, 0);
  CHECK(none.top.empty());
  CHECK(none.logprob == doctest::Approx(-0.4076059644).epsilon(1e-6));
}

TEST_CASE("large and very negative logits stay finite (log-sum-exp around the maximum)") {
  // [1000, 1001, 999]: exp(1001) overflows a double; shifted by the max it is [1, 2, 3] reordered
  const std::vector<float> big{1000.0f, 1001.0f, 999.0f};
  const token_logprobs lp = logprobs_of(big, 2, 1);
  CHECK(lp.logprob == doctest::Approx(-2.4076059644).epsilon(1e-6));
  REQUIRE(lp.top.size() == 1);
  CHECK(lp.top[0].token_id == 1);
  CHECK(lp.top[0].logprob == doctest::Approx(-0.4076059644).epsilon(1e-6));
  // [-1e30, 0, 5, 5]: lse = 5 + log(2 + e^-5) = 5.696510; -1e30 contributes nothing
  const std::vector<float> spread{-1e30f, 0.0f, 5.0f, 5.0f};
  const token_logprobs s = logprobs_of(spread, 1, 4);
  CHECK(s.logprob == doctest::Approx(-5.6965104918).epsilon(1e-6));
  REQUIRE(s.top.size() == 4);
  CHECK(s.top[0].token_id == 2);
  CHECK(s.top[1].token_id == 3);
  CHECK(s.top[0].logprob == doctest::Approx(-0.6965104918).epsilon(1e-6));
  CHECK(s.top[3].token_id == 0);
  CHECK(s.top[3].logprob == doctest::Approx(-1e30).epsilon(1e-6));
}

TEST_CASE("a NaN logit counts as -inf") {
  // [NaN, 0, 0]: log_softmax = [-inf, log(1/2), log(1/2)] = [-inf, -0.693147, -0.693147]
  const std::vector<float> logits{std::numeric_limits<float>::quiet_NaN(), 0.0f, 0.0f};
  const token_logprobs lp = logprobs_of(logits, 2, 3);
  CHECK(lp.logprob == doctest::Approx(-0.6931471806).epsilon(1e-6));
  REQUIRE(lp.top.size() == 3);
  CHECK(lp.top[0].token_id == 1);
  CHECK(lp.top[1].token_id == 2);
  CHECK(lp.top[2].token_id == 0);
  CHECK(lp.top[2].logprob == -std::numeric_limits<float>::infinity());
}
