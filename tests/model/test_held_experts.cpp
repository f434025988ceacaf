// tests/model/test_held_experts.cpp
// A rank's own copies of its experts: every element of a copy (and of one moved as bytes) equals
// the checkpoint's, FP8 block scales and BF16 GEMM panels included, in memory of its own; bad
// bytes are refused naming what is wrong; a rank holds exactly the experts its slots name.
#include <doctest/doctest.h>

#include <cstring>
#include <set>

#include "kernels/backend.hpp"
#include "kernels/cpu/fast_weights.hpp"
#include "kernels/model/expert_parallel.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

namespace {

void check_same(const linear_weight& got, const linear_weight& want) {
  REQUIRE(got.type == want.type);
  REQUIRE(got.layout == want.layout);
  REQUIRE(got.out_features == want.out_features);
  REQUIRE(got.in_features == want.in_features);
  CHECK(got.data != want.data);  // its own memory
  CHECK(reinterpret_cast<uintptr_t>(got.data) % 64 == 0);
  CHECK((got.scale_inv == nullptr) == (want.scale_inv == nullptr));
  int64_t differ = 0;
  for (int64_t o = 0; o < want.out_features; ++o)
    for (int64_t i = 0; i < want.in_features; ++i)
      differ += got.at(o, i) != want.at(o, i) ? 1 : 0;  // dequantised: scales included
  CHECK(differ == 0);
}

void check_same(const mlp_weights& got, const mlp_weights& want) {
  check_same(got.gate_proj, want.gate_proj);
  check_same(got.up_proj, want.up_proj);
  check_same(got.down_proj, want.down_proj);
}

}  // namespace

TEST_CASE("an expert moved as bytes is the checkpoint's, element for element") {
  for (const auto format : {testing::tiny_weights::f32, testing::tiny_weights::fp8}) {
    CAPTURE(static_cast<int>(format));
    const model_weights w = testing::tiny_model_builder(7, format).build(testing::panel_config(101));
    const mlp_weights& expert = w.layers[w.config.first_k_dense_replace].moe.experts[3];
    const std::vector<uint8_t> bytes = encode_expert(expert);
    const std::shared_ptr<const expert_copy> copy = decode_expert(bytes);
    check_same(copy->weights, expert);
    // what a move sends: the weights and their scales, a header of well under a KiB besides
    CHECK(copy->wire_bytes == mlp_bytes(expert));
    CHECK(static_cast<int64_t>(bytes.size()) > copy->wire_bytes);
    CHECK(static_cast<int64_t>(bytes.size()) < copy->wire_bytes + 1024);
    CHECK(copy->memory_bytes >= copy->wire_bytes);
    if (format == testing::tiny_weights::fp8) {  // 64 x 128 experts in panels, 128 x 128 scales
      CHECK(copy->weights.gate_proj.layout == weight_layout::fp8_panels);
      CHECK(copy->weights.gate_proj.scale_inv != expert.gate_proj.scale_inv);
      CHECK(copy->weights.gate_proj.scale_inv[0] == expert.gate_proj.scale_inv[0]);
    }
  }
}

TEST_CASE("a BF16 expert's GEMM panels are packed again where the sender had them") {
  if (!cpu_fast_path_supported()) {
    MESSAGE("skipped: this CPU lacks AVX-512 BF16, VBMI or GFNI, which the fast path needs");
    return;
  }
  model_config c = testing::panel_config(101);
  model_weights w = testing::tiny_model_builder(9).build(c);
  mlp_weights expert = w.layers[c.first_k_dense_replace].moe.experts[1];
  // BF16 weights, as an FP8 checkpoint's BF16 tensors, with the fast path's panels
  std::vector<std::vector<uint16_t>> bf16(3);
  std::vector<std::shared_ptr<const uint16_t>> panels;
  linear_weight* projs[3] = {&expert.gate_proj, &expert.up_proj, &expert.down_proj};
  for (size_t p = 0; p < 3; ++p) {
    linear_weight& x = *projs[p];
    for (int64_t o = 0; o < x.out_features; ++o)
      for (int64_t i = 0; i < x.in_features; ++i)
        bf16[p].push_back(f32_to_bf16(x.at(o, i)));
    x.type = dtype::bf16;
    x.data = bf16[p].data();
    panels.push_back(fast::pack_gemm_panels(x));
    x.gemm_panels = panels.back().get();
  }
  const std::shared_ptr<const expert_copy> copy = decode_expert(encode_expert(expert));
  check_same(copy->weights, expert);
  CHECK(copy->wire_bytes == mlp_bytes(expert));  // panels are not sent
  const linear_weight* got[3] = {&copy->weights.gate_proj, &copy->weights.up_proj, &copy->weights.down_proj};
  for (size_t p = 0; p < 3; ++p) {
    REQUIRE(got[p]->gemm_panels != nullptr);
    CHECK(got[p]->gemm_panels != projs[p]->gemm_panels);
    CHECK(std::memcmp(got[p]->gemm_panels, projs[p]->gemm_panels,
                      static_cast<size_t>(fast::gemm_panels_bytes(*projs[p]))) == 0);
  }
}

TEST_CASE("bytes that are not an expert's are refused, naming what is wrong") {
  const model_weights w = testing::tiny_model_builder(7).build(testing::tiny_config());
  const std::vector<uint8_t> good = encode_expert(w.layers[w.config.first_k_dense_replace].moe.experts[0]);
  auto refused = [](std::vector<uint8_t> bytes) -> std::string {
    try {
      (void)decode_expert(bytes);
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "accepted";
  };
  CHECK(refused({}).find("do not start with an expert's header") != std::string::npos);
  std::vector<uint8_t> bad = good;
  bad[0] = 'X';
  CHECK(refused(bad).find("header") != std::string::npos);
  bad = good;
  bad.pop_back();  // truncated
  CHECK(refused(bad).find("the header says") != std::string::npos);
  bad = good;
  bad.push_back(0);  // trailing bytes
  CHECK(refused(bad).find("the header says") != std::string::npos);
  bad = good;
  bad[4] = 9;  // format version
  CHECK(refused(bad).find("format version 9") != std::string::npos);
  bad = good;
  bad[8] = 17;  // gate_proj's dtype (after magic and version)
  CHECK(refused(bad).find("gate_proj: dtype 17") != std::string::npos);
  bad = good;
  bad[16] = 0xff;  // gate_proj's out_features, low byte: the weight bytes no longer match
  CHECK(refused(bad).find("gate_proj") != std::string::npos);
  CHECK(refused(good) == "accepted");
}

TEST_CASE("a rank holds one copy of each expert its slots name, and knows what it lacks") {
  const model_weights w = testing::tiny_model_builder(3).build(testing::tiny_config());
  const int64_t E = w.config.n_routed_experts, L = w.config.first_k_dense_replace;
  std::vector<layer_placement> placements(w.layers.size());
  // 2 ranks x (E/2 + 2) slots: rank 1 holds expert 5 twice and expert 0 besides its own half
  std::vector<int32_t> slots;
  slots.reserve(static_cast<size_t>(E) + 4);
  for (int32_t e = 0; e < E / 2; ++e)
    slots.push_back(e);
  slots.push_back(static_cast<int32_t>(E / 2));  // rank 0: its half and the first of rank 1's
  slots.push_back(1);
  for (int64_t e = E / 2; e < E; ++e)
    slots.push_back(static_cast<int32_t>(e));
  slots.push_back(0);
  slots.push_back(static_cast<int32_t>(E - 1));
  placements[L] = make_layer_placement(slots, 2, E);
  const auto held = hold_experts_from(w, placements, 1);
  const held_layer& mine = held->layers[L];
  std::vector<int32_t> want = {0};
  for (int64_t e = E / 2; e < E; ++e)
    want.push_back(static_cast<int32_t>(e));
  CHECK(mine.experts == want);
  CHECK(held->num_copies() == static_cast<int64_t>(want.size()));
  CHECK(mine.holds(0));
  CHECK(!mine.holds(1));
  CHECK(held->find(L, 1) == nullptr);
  REQUIRE(held->find(L, 0) != nullptr);
  check_same(held->find(L, 0)->weights, w.layers[L].moe.experts[0]);
  CHECK(held->memory_bytes() == static_cast<int64_t>(want.size()) * held->find(L, 0)->memory_bytes);
  // under a placement that gives rank 1 expert 1 too, it lacks exactly that one
  std::vector<int32_t> next = slots;
  std::swap(next[E / 2 + 1], next[E / 2 + 2 + E / 2]);  // rank 0's expert 1 <-> rank 1's expert 0
  std::vector<layer_placement> after(w.layers.size());
  after[L] = make_layer_placement(next, 2, E);
  CHECK(missing_experts(*held, after, 1) == std::vector<std::pair<int64_t, int32_t>>{{L, 1}});
  CHECK(missing_experts(*held, placements, 1).empty());
  // a source without the copy is named
  CHECK_THROWS_WITH_AS((void)hold_experts(after, 1, [&](int64_t l, int32_t e) { return held->find(l, e); }),
                       doctest::Contains("no copy of expert 1 of layer"), std::invalid_argument);
}
