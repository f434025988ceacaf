// tests/model/test_rope_tables.cpp
// YaRN frequencies and the MLA softmax scale against the numbers in model-spec 5.3 and 7.
#include <doctest/doctest.h>

#include "kernels/model/forward.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

TEST_CASE("V3 YaRN inv_freq and softmax scale match model-spec 5.3") {
  model_config c = testing::tiny_config();
  c.qk_nope_head_dim = 128;
  c.qk_rope_head_dim = 64;
  const rope_tables t = make_rope_tables(c);
  REQUIRE(t.inv_freq.size() == 32);
  const std::pair<int, double> expected[] = {{0, 1.0},
                                             {8, 0.1},
                                             {10, 5.623413252e-2},
                                             {11, 3.900692657e-2},
                                             {16, 5.5e-3},
                                             {22, 1.778279410e-4},
                                             {23, 3.333803580e-5},
                                             {31, 3.333803580e-6}};
  for (auto [i, v] : expected)
    CHECK(t.inv_freq[i] == doctest::Approx(v).epsilon(1e-6));
  CHECK(t.softmax_scale == doctest::Approx(0.1352337789).epsilon(1e-7));
  CHECK(t.attention_factor == doctest::Approx(1.0));
}

TEST_CASE("tiny config rope numbers match model-spec 7") {
  const rope_tables t = make_rope_tables(testing::tiny_config());
  REQUIRE(t.inv_freq.size() == 4);
  CHECK(t.inv_freq[0] == doctest::Approx(1.0));
  CHECK(t.inv_freq[1] == doctest::Approx(0.1));
  CHECK(t.inv_freq[2] == doctest::Approx(5.125e-3).epsilon(1e-6));
  CHECK(t.inv_freq[3] == doctest::Approx(2.5e-5).epsilon(1e-6));
  CHECK(t.softmax_scale == doctest::Approx(0.3824988883).epsilon(1e-7));
}

TEST_CASE("without rope_scaling the frequencies are plain RoPE") {
  model_config c = testing::tiny_config();
  c.rope_scaling.reset();
  const rope_tables t = make_rope_tables(c);
  CHECK(t.inv_freq[1] == doctest::Approx(0.1));   // 10000^(-2/8)
  CHECK(t.inv_freq[3] == doctest::Approx(1e-3));  // 10000^(-6/8)
  CHECK(t.softmax_scale == doctest::Approx(1.0 / std::sqrt(24.0)));
}
