// tests/checkpoint/test_router_skew.cpp
// make-model --router-skew: only the gates' correction biases change, each lowered by
// 0.1 * skew * ln(1 + popularity rank) in a seeded order of its own, and tokens routed through
// such a gate load the popular experts far more than the rest (what EPLB is there to fix).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "checkpoint/test_util.hpp"
#include "kernels/cpu/reference_backend.hpp"
#include "kernels/model/weights.hpp"

using namespace moe;
using namespace moe::test;

namespace {

fs::path make_skewed(const fs::path& out, double skew) {
  auto opts = tiny_options(out, 3);
  opts.router_skew = skew;
  tools::make_model(opts);
  return out;
}

// Tokens routed per logical expert of one MoE layer, for `num_tokens` hidden states ~ N(0, 1)
// (what RMSNorm leaves): logits by hand from the gate's rows, selection by the reference gate.
std::vector<int64_t> routed_per_expert(const model_config& cfg, const moe_weights& moe, int64_t num_tokens) {
  const int64_t E = cfg.n_routed_experts, D = cfg.hidden_size, K = cfg.num_experts_per_tok;
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(static_cast<size_t>(num_tokens * E));
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::vector<float> x(static_cast<size_t>(D));
    for (float& v : x)
      v = normal(gen);
    for (int64_t e = 0; e < E; ++e) {
      double dot = 0.0;
      for (int64_t i = 0; i < D; ++i)
        dot += static_cast<double>(moe.gate.at(e, i)) * x[i];
      logits[t * E + e] = static_cast<float>(dot);
    }
  }
  std::vector<int32_t> ids(static_cast<size_t>(num_tokens * K));
  std::vector<float> weights(ids.size());
  cpu_reference_backend cpu;
  cpu.moe_gate({.logits = logits.data(),
                .bias = moe.e_score_correction_bias.data(),
                .topk_ids = ids.data(),
                .topk_weights = weights.data(),
                .num_tokens = num_tokens,
                .num_experts = E,
                .num_groups = cfg.n_group,
                .topk_group = cfg.topk_group,
                .top_k = K,
                .norm_topk_prob = true,
                .routed_scaling_factor = 2.5f});
  std::vector<int64_t> load(static_cast<size_t>(E), 0);
  for (int32_t id : ids)
    ++load[id];
  return load;
}

double max_over_mean(const std::vector<int64_t>& load) {
  const double sum = std::accumulate(load.begin(), load.end(), 0.0);
  return static_cast<double>(*std::max_element(load.begin(), load.end())) * static_cast<double>(load.size()) /
         sum;
}

}  // namespace

TEST_CASE("router skew lowers only the correction biases, by 0.1 * skew * ln(1 + rank)") {
  temp_dir even, skewed;
  make_skewed(even.path, 0.0);
  make_skewed(skewed.path, 1.2);
  auto a = checkpoint::open(even.path), b = checkpoint::open(skewed.path);
  REQUIRE(a->tensor_names() == b->tensor_names());
  int biases = 0;
  for (const std::string& name : a->tensor_names()) {
    const tensor_info &ta = a->tensor(name), &tb = b->tensor(name);
    const bool same = std::equal(ta.data, ta.data + ta.num_bytes, tb.data, tb.data + tb.num_bytes);
    CHECK_MESSAGE(same == !name.ends_with("e_score_correction_bias"), name);
    biases += name.ends_with("e_score_correction_bias") ? 1 : 0;
  }
  CHECK(biases == 2);  // tiny: layers 1 and 2 are MoE

  const model_weights w_even = load_model_weights(a), w_skewed = load_model_weights(b);
  std::vector<std::vector<int64_t>> orders;
  for (size_t l = 1; l < w_even.layers.size(); ++l) {
    const auto &e = w_even.layers[l].moe.e_score_correction_bias,
               &s = w_skewed.layers[l].moe.e_score_correction_bias;
    REQUIRE(e.size() == 16);
    std::vector<double> lowered(e.size());
    for (size_t i = 0; i < e.size(); ++i)
      lowered[i] = static_cast<double>(e[i]) - s[i];
    std::vector<int64_t> order(e.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return lowered[x] < lowered[y]; });
    for (size_t r = 0; r < order.size(); ++r)  // f32 bias rounding allows ~1e-7
      CHECK(lowered[order[r]] ==
            doctest::Approx(0.12 * std::log(1.0 + static_cast<double>(r))).epsilon(1e-5));
    orders.push_back(order);
  }
  CHECK(orders[0] != orders[1]);  // every layer has its own popular experts
}

TEST_CASE("a skewed router loads its popular experts far more than an even one") {
  temp_dir even, skewed;
  const model_config cfg = load_model_config(make_skewed(even.path, 0.0));
  make_skewed(skewed.path, 1.2);
  const model_weights w_even = load_model_weights(checkpoint::open(even.path));
  const model_weights w_skewed = load_model_weights(checkpoint::open(skewed.path));
  for (size_t l = 1; l < w_even.layers.size(); ++l) {
    const std::vector<int64_t> even_load = routed_per_expert(cfg, w_even.layers[l].moe, 2000);
    const std::vector<int64_t> skewed_load = routed_per_expert(cfg, w_skewed.layers[l].moe, 2000);
    // the four experts the skew favours most against the four it favours least
    const auto& e = w_even.layers[l].moe.e_score_correction_bias;
    const auto& s = w_skewed.layers[l].moe.e_score_correction_bias;
    std::vector<int64_t> order(e.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t x, int64_t y) { return e[x] - s[x] < e[y] - s[y]; });
    int64_t hot = 0, cold = 0;
    for (int r = 0; r < 4; ++r) {
      hot += skewed_load[order[r]];
      cold += skewed_load[order[order.size() - 1 - r]];
    }
    INFO("layer " << l << ": hot " << hot << ", cold " << cold << ", max/mean even "
                  << max_over_mean(even_load) << ", skewed " << max_over_mean(skewed_load));
    CHECK(hot > 2 * cold);  // 2.3-2.5x on this checkpoint
    CHECK(max_over_mean(skewed_load) > max_over_mean(even_load) + 0.3);
    CHECK(max_over_mean(even_load) < 1.6);
  }
}

TEST_CASE("make-model refuses a router skew outside 0..4") {
  temp_dir dir;
  auto opts = tiny_options(dir.path);
  for (double bad : {-0.5, 4.5, std::nan("")}) {
    opts.router_skew = bad;
    CHECK(contains(error_of([&] { tools::make_model(opts); }), "--router-skew"));
  }
}
