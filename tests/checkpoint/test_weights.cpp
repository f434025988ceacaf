// tests/checkpoint/test_weights.cpp
// load_model_weights: every tensor bound with the right shape and dtype, FP8 block dequantisation
// with partial blocks, realignment, MTP tensors ignored, and one test per loader error.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "checkpoint/test_util.hpp"
#include "kernels/model/weights.hpp"

using namespace moe;
using namespace moe::test;

namespace {

model_weights load(const fs::path& dir) { return load_model_weights(checkpoint::open(dir)); }

std::string load_error(const fs::path& dir) {
  return error_of([&] { (void)load(dir); });
}

std::vector<std::byte> zeros(size_t n) { return std::vector<std::byte>(n); }

std::vector<std::byte> f32_bytes(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Re-quantises every BF16 linear weight of a tiny checkpoint to FP8 with `block` = [rows, cols]
// blocks, so that the grid has partial edge blocks in both directions.
void quantize_checkpoint(const fs::path& dir, int64_t block_rows, int64_t block_cols) {
  edit_tensors(dir, [&](std::vector<tensor_copy>& tensors) {
    std::vector<tensor_copy> scales;
    for (tensor_copy& t : tensors) {
      const bool linear = t.shape.size() == 2 && t.name.starts_with("model.layers.") &&
                          !t.name.ends_with("mlp.gate.weight");
      if (!linear)
        continue;
      const int64_t rows = t.shape[0], cols = t.shape[1];
      const int64_t sr = (rows + block_rows - 1) / block_rows, sc = (cols + block_cols - 1) / block_cols;
      std::vector<float> s(static_cast<size_t>(sr * sc), 0.0f);
      auto value = [&](int64_t r, int64_t c) { return load_as_f32(t.type, t.bytes.data(), r * cols + c); };
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          s[(r / block_rows) * sc + c / block_cols] = std::max(s[(r / block_rows) * sc + c / block_cols],
                                                               std::fabs(value(r, c)) / 448.0f);
      std::vector<std::byte> q(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          q[r * cols + c] =
            std::byte{f32_to_fp8_e4m3(value(r, c) / s[(r / block_rows) * sc + c / block_cols])};
      t.type = dtype::f8_e4m3;
      t.bytes = std::move(q);
      scales.push_back({t.name + "_scale_inv", dtype::f32, {sr, sc}, f32_bytes(s)});
    }
    tensors.insert(tensors.end(), scales.begin(), scales.end());
  });
  edit_config(dir, "\"torch_dtype\": \"bfloat16\"",
              "\"torch_dtype\": \"bfloat16\", \"quantization_config\": {\"quant_method\": \"fp8\", "
              "\"fmt\": \"e4m3\", \"weight_block_size\": [" +
                std::to_string(block_rows) + ", " + std::to_string(block_cols) + "]}");
}

}  // namespace

TEST_CASE("a tiny BF16 checkpoint loads with every tensor bound") {
  temp_dir dir;
  make_tiny(dir.path);
  const model_weights w = load(dir.path);
  const model_config& c = w.config;
  CHECK(w.embed_tokens.out_features == 512);
  CHECK(w.embed_tokens.in_features == 64);
  CHECK(w.lm_head.data != w.embed_tokens.data);
  CHECK(w.norm.size() == 64);
  REQUIRE(w.layers.size() == 3);
  CHECK_FALSE(w.layers[0].is_moe);
  CHECK(w.layers[0].mlp.gate_proj.out_features == 128);
  CHECK(w.layers[0].mlp.down_proj.in_features == 128);
  for (int l = 1; l < 3; ++l) {
    const layer_weights& layer = w.layers[l];
    CHECK(layer.is_moe);
    CHECK(layer.moe.experts.size() == 16);
    CHECK(layer.moe.experts[15].down_proj.out_features == 64);
    CHECK(layer.moe.experts[15].down_proj.in_features == 32);
    CHECK(layer.moe.gate.type == dtype::bf16);
    CHECK(layer.moe.shared_experts.up_proj.out_features == 32);
    REQUIRE(layer.moe.e_score_correction_bias.size() == 16);
    for (float b : layer.moe.e_score_correction_bias)
      CHECK(std::fabs(b) <= 0.05f);
  }
  const attention_weights& a = w.layers[2].attn;
  CHECK(a.q_a_proj.out_features == 32);
  CHECK(a.q_b_proj.out_features == 4 * 24);
  CHECK(a.q_proj.data == nullptr);
  CHECK(a.kv_a_proj_with_mqa.out_features == 24);
  CHECK(a.kv_a_layernorm.size() == 16);
  CHECK(a.kv_b_proj.out_features == 4 * 32);
  CHECK(a.o_proj.in_features == 64);
  // Norm weights are 1 + U(-0.2, 0.2), not all 1.
  bool all_one = true;
  for (float x : w.layers[1].input_layernorm) {
    CHECK(std::fabs(x - 1.0f) <= 0.2f);
    all_one = all_one && x == 1.0f;
  }
  CHECK_FALSE(all_one);
  // Bytes per token: attention + dense MLP + (router + shared + 4 experts) x 2 + lm_head, BF16.
  const int64_t attn = 32 * 64 + 96 * 32 + 24 * 64 + 128 * 16 + 64 * 64;
  const int64_t per_token =
    2 * (3 * attn + 3 * 128 * 64 + 2 * (16 * 64 + 3 * 32 * 64 + 4 * 3 * 32 * 64) + 512 * 64);
  CHECK(weight_bytes_per_token(w) == per_token);
  CHECK(c.num_experts_per_tok == 4);
}

TEST_CASE("FP8 dequantisation: linear_weight::at multiplies by the block scale, partial blocks") {
  // A [200, 130] weight with a 2x2 grid of 128x128 blocks; the last row/column blocks are partial.
  std::vector<uint8_t> q(200 * 130);
  for (size_t i = 0; i < q.size(); ++i)
    q[i] = static_cast<uint8_t>((i * 7 + 3) % 0x7E);
  const float scale[4] = {0.5f, 2.0f, 0.25f, 8.0f};
  linear_weight w;
  w.type = dtype::f8_e4m3;
  w.data = q.data();
  w.out_features = 200;
  w.in_features = 130;
  w.scale_inv = scale;
  auto expect = [&](int64_t o, int64_t i, float s) { return fp8_e4m3_to_f32(q[o * 130 + i]) * s; };
  CHECK(w.at(0, 0) == expect(0, 0, 0.5f));
  CHECK(w.at(127, 127) == expect(127, 127, 0.5f));
  CHECK(w.at(127, 128) == expect(127, 128, 2.0f));
  CHECK(w.at(0, 129) == expect(0, 129, 2.0f));
  CHECK(w.at(128, 0) == expect(128, 0, 0.25f));
  CHECK(w.at(199, 127) == expect(199, 127, 0.25f));
  CHECK(w.at(199, 129) == expect(199, 129, 8.0f));
  CHECK(w.at(128, 128) == expect(128, 128, 8.0f));
  CHECK(w.num_bytes() == 200 * 130);
}

TEST_CASE("FP8 checkpoint with partial blocks: scales bound with the grid of config.json") {
  temp_dir dir;
  make_tiny(dir.path);
  const model_weights ref = load(dir.path);
  quantize_checkpoint(dir.path, 16, 24);  // kv_a_proj [24, 64] -> grid [2, 3], all edges partial
  const model_weights w = load(dir.path);
  const linear_weight& kv_a = w.layers[1].attn.kv_a_proj_with_mqa;
  REQUIRE(kv_a.type == dtype::f8_e4m3);
  REQUIRE(kv_a.scale_inv != nullptr);
  CHECK(kv_a.block_rows == 16);
  CHECK(kv_a.block_cols == 24);
  auto ckpt = checkpoint::open(dir.path);
  const tensor_info& s = ckpt->tensor("model.layers.1.self_attn.kv_a_proj_with_mqa.weight_scale_inv");
  CHECK(s.shape == std::vector<int64_t>{2, 3});
  const auto* qbytes = reinterpret_cast<const uint8_t*>(kv_a.data);
  auto scale_at = [&](int64_t br, int64_t bc) {
    float v = 0;
    std::memcpy(&v, s.data + (br * 3 + bc) * 4, 4);
    return v;
  };
  for (auto [o, i] : {std::pair<int64_t, int64_t>{0, 0}, {15, 23}, {16, 24}, {23, 63}, {23, 48}, {0, 63}}) {
    CAPTURE(o);
    CAPTURE(i);
    CHECK(kv_a.at(o, i) == fp8_e4m3_to_f32(qbytes[o * 64 + i]) * scale_at(o / 16, i / 24));
    // Within half an e4m3 step of the BF16 original: 2^-4 relative, or half a subnormal step.
    const float r = ref.layers[1].attn.kv_a_proj_with_mqa.at(o, i);
    CHECK(std::fabs(kv_a.at(o, i) - r) <=
          0.0625f * std::fabs(r) + scale_at(o / 16, i / 24) / 1024.0f + 1e-7f);
  }
  CHECK(w.layers[1].moe.gate.type == dtype::bf16);  // router stays BF16
}

TEST_CASE("MTP layers (model.layers.<num_hidden_layers>.*) are ignored") {
  temp_dir dir;
  make_tiny(dir.path);
  edit_tensors(dir.path, [](std::vector<tensor_copy>& t) {
    t.push_back({"model.layers.3.enorm.weight", dtype::bf16, {64}, zeros(128)});
    t.push_back({"model.layers.3.hnorm.weight", dtype::bf16, {64}, zeros(128)});
    t.push_back({"model.layers.3.eh_proj.weight", dtype::bf16, {64, 128}, zeros(64 * 128 * 2)});
    t.push_back({"model.layers.3.embed_tokens.weight", dtype::bf16, {512, 64}, zeros(512 * 64 * 2)});
    t.push_back({"model.layers.3.shared_head.head.weight", dtype::f32, {7}, zeros(28)});
    t.push_back({"model.layers.3.mlp.experts.0.gate_proj.weight", dtype::f8_e4m3, {32, 64}, zeros(32 * 64)});
    t.push_back({"model.layers.4.self_attn.o_proj.weight", dtype::i64, {1}, zeros(8)});
  });
  const model_weights w = load(dir.path);
  CHECK(w.layers.size() == 3);
  CHECK_FALSE(w.source->contains("model.layers.3.eh_proj.weight"));  // not read, not indexed
  CHECK(w.source->contains("model.layers.2.mlp.gate.weight"));
}

TEST_CASE("misaligned tensor data is copied into owned storage") {
  temp_dir dir;
  make_tiny(dir.path);
  const model_weights ref = load(dir.path);
  // A 3-byte tensor sorted first shifts every later tensor off its alignment.
  edit_tensors(dir.path, [](std::vector<tensor_copy>& t) {
    t.insert(t.begin(), {"aaa.padding", dtype::f8_e4m3, {3}, zeros(3)});
  });
  auto ckpt = checkpoint::open(dir.path);
  CHECK(reinterpret_cast<uintptr_t>(ckpt->tensor("lm_head.weight").data) % 2 == 1);
  const model_weights w = load_model_weights(ckpt);
  CHECK(reinterpret_cast<uintptr_t>(w.lm_head.data) % 2 == 0);
  CHECK(w.owned.size() > 0);
  CHECK(w.lm_head.at(511, 63) == ref.lm_head.at(511, 63));
  CHECK(w.layers[2].moe.experts[7].down_proj.at(5, 6) == ref.layers[2].moe.experts[7].down_proj.at(5, 6));
  CHECK(w.layers[2].moe.e_score_correction_bias == ref.layers[2].moe.e_score_correction_bias);
  CHECK(w.layers[0].input_layernorm == ref.layers[0].input_layernorm);
}

TEST_CASE("q_lora_rank null loads self_attn.q_proj") {
  temp_dir dir;
  make_tiny(dir.path);
  edit_config(dir.path, "\"q_lora_rank\": 32", "\"q_lora_rank\": null");
  edit_tensors(dir.path, [](std::vector<tensor_copy>& t) {
    for (int l = 0; l < 3; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      for (const char* n : {"q_a_proj.weight", "q_a_layernorm.weight", "q_b_proj.weight"})
        erase_tensor(t, p + n);
      t.push_back({p + "q_proj.weight", dtype::bf16, {96, 64}, zeros(96 * 64 * 2)});
    }
  });
  const model_weights w = load(dir.path);
  CHECK(w.layers[1].attn.q_proj.out_features == 96);
  CHECK(w.layers[1].attn.q_proj.in_features == 64);
  CHECK(w.layers[1].attn.q_a_proj.data == nullptr);
}

TEST_CASE("tie_word_embeddings reuses the embedding when lm_head is absent") {
  temp_dir dir;
  make_tiny(dir.path);
  edit_tensors(dir.path, [](std::vector<tensor_copy>& t) { erase_tensor(t, "lm_head.weight"); });
  const std::string msg = load_error(dir.path);
  CHECK(contains(msg, "\"lm_head.weight\" not found"));
  edit_config(dir.path, "\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
  const model_weights w = load(dir.path);
  CHECK(w.lm_head.data == w.embed_tokens.data);
}

TEST_CASE("loader errors name the file or directory and the tensor") {
  temp_dir dir;
  make_tiny(dir.path);
  const std::string file = (dir.path / "model.safetensors").string();

  SUBCASE("missing expert tensor") {
    edit_tensors(dir.path, [](auto& t) { erase_tensor(t, "model.layers.2.mlp.experts.13.up_proj.weight"); });
    const std::string msg = load_error(dir.path);
    CHECK(contains(msg, dir.path.string()));
    CHECK(contains(msg, "\"model.layers.2.mlp.experts.13.up_proj.weight\" not found"));
  }
  SUBCASE("wrong shape") {
    edit_tensors(dir.path, [](auto& t) {
      find_tensor(t, "model.layers.1.self_attn.o_proj.weight").shape = {32, 128};
    });
    const std::string msg = load_error(dir.path);
    CHECK(contains(msg, file));
    CHECK(contains(msg, "\"model.layers.1.self_attn.o_proj.weight\": expected shape [64, 64]"));
    CHECK(contains(msg, "got [32, 128]"));
  }
  SUBCASE("unsupported dtype for a linear weight") {
    edit_tensors(dir.path, [](auto& t) {
      auto& w = find_tensor(t, "model.layers.0.mlp.up_proj.weight");
      w.type = dtype::i64;
      w.bytes = zeros(128 * 64 * 8);
    });
    const std::string msg = load_error(dir.path);
    CHECK(contains(msg, file));
    CHECK(contains(msg, "\"model.layers.0.mlp.up_proj.weight\": dtype I64 is not supported"));
  }
  SUBCASE("FP8 router") {
    edit_tensors(dir.path, [](auto& t) {
      auto& w = find_tensor(t, "model.layers.1.mlp.gate.weight");
      w.type = dtype::f8_e4m3;
      w.bytes = zeros(16 * 64);
      t.push_back({"model.layers.1.mlp.gate.weight_scale_inv", dtype::f32, {1, 1}, zeros(4)});
    });
    const std::string msg = load_error(dir.path);
    CHECK(contains(msg, "\"model.layers.1.mlp.gate.weight\": dtype F8_E4M3 is not supported for the router"));
  }
  SUBCASE("norm weight with a wrong dtype") {
    edit_tensors(dir.path, [](auto& t) {
      auto& w = find_tensor(t, "model.norm.weight");
      w.type = dtype::f8_e4m3;
      w.bytes = zeros(64);
    });
    CHECK(contains(load_error(dir.path),
                   "\"model.norm.weight\": dtype F8_E4M3 is not supported for a norm weight"));
  }
  SUBCASE("truncated safetensors file") {
    std::string raw = read_text(file);
    write_text(file, raw.substr(0, raw.size() - 100));
    const std::string msg = load_error(dir.path);
    CHECK(contains(msg, file));
    CHECK(contains(msg, "run past the end of the data"));
  }
  SUBCASE("config failing validation") {
    edit_config(dir.path, "\"topk_group\": 2", "\"topk_group\": 5");
    const std::string msg = load_error(dir.path);
    CHECK(contains(msg, (dir.path / "config.json").string()));
    CHECK(contains(msg, "field \"topk_group\": must be <= n_group"));
  }
  SUBCASE("malformed config.json") {
    write_text(dir.path / "config.json", "{\"hidden_size\": 64");
    const std::string msg = load_error(dir.path);
    CHECK(contains(msg, (dir.path / "config.json").string()));
    CHECK(contains(msg, "malformed JSON"));
  }
}

TEST_CASE("FP8 loader errors (missing or misshapen scales) and BF16 scales and bias converted") {
  temp_dir dir;
  make_tiny(dir.path, /*fp8=*/true);
  const std::string weight = "model.layers.1.self_attn.kv_b_proj.weight";

  SUBCASE("missing scale") {
    edit_tensors(dir.path, [&](auto& t) { erase_tensor(t, weight + "_scale_inv"); });
    const std::string msg = load_error(dir.path);
    CHECK(
      contains(msg, "\"" + weight + "\" is F8_E4M3 but its scale \"" + weight + "_scale_inv\" is missing"));
  }
  SUBCASE("scale grid of the wrong shape") {
    edit_tensors(dir.path, [&](auto& t) {
      auto& s = find_tensor(t, weight + "_scale_inv");
      s.shape = {2, 1};
      s.bytes = zeros(8);
    });
    CHECK(contains(load_error(dir.path), "\"" + weight + "_scale_inv\": expected shape [1, 1]"));
  }
  SUBCASE("a NaN, infinite, negative, subnormal or huge scale; a NaN router bias or norm weight") {
    const std::vector<std::pair<std::string, float>> cases = {
      {weight + "_scale_inv", std::nanf("")},
      {weight + "_scale_inv", -INFINITY},
      {weight + "_scale_inv", -0.5f},
      {weight + "_scale_inv", std::ldexp(1.0f, -127)},  // subnormal: the fast path reads 0
      {weight + "_scale_inv", std::ldexp(1.5f, 63)},    // times 2^64 overflows
      {"model.layers.2.mlp.gate.e_score_correction_bias", std::nanf("")},
      {"model.layers.1.self_attn.kv_a_layernorm.weight", INFINITY}};
    for (const auto& [name, value] : cases) {
      CAPTURE(name);
      CAPTURE(value);
      temp_dir bad;
      make_tiny(bad.path, /*fp8=*/true);
      edit_tensors(bad.path, [&, name = name, value = value](auto& t) {
        auto& s = find_tensor(t, name);
        std::vector<float> v(s.bytes.size() / 4);
        std::memcpy(v.data(), s.bytes.data(), s.bytes.size());
        v.back() = value;
        s.bytes = f32_bytes(v);
      });
      const std::string msg = load_error(bad.path);
      CHECK(contains(msg, (bad.path / "model.safetensors").string()));
      CHECK_MESSAGE(contains(msg, "tensor \"" + name + "\": element "), msg);
      const bool range = std::isfinite(value);  // NaN and infinities: open's scan finds them first
      CHECK_MESSAGE(contains(msg, range ? "(expected an FP8 block scale: 0, or from 2^-126 to 2^63)"
                                        : "(expected a finite number)"),
                    msg);
    }
    for (const float edge : {std::ldexp(1.0f, -126), std::ldexp(1.0f, 63)}) {  // the limits load
      temp_dir ok;
      make_tiny(ok.path, /*fp8=*/true);
      edit_tensors(ok.path, [&](auto& t) {
        auto& s = find_tensor(t, weight + "_scale_inv");
        s.bytes = f32_bytes(std::vector<float>(s.bytes.size() / 4, edge));
      });
      CHECK(load(ok.path).layers[1].attn.kv_b_proj.scale_inv[0] == edge);
    }
    edit_tensors(dir.path, [&](auto& t) {  // a zero scale is an all-zero block: accepted
      auto& s = find_tensor(t, weight + "_scale_inv");
      s.bytes = f32_bytes(std::vector<float>(s.bytes.size() / 4, 0.0f));
    });
    CHECK(load(dir.path).layers[1].attn.kv_b_proj.at(0, 0) == 0.0f);
  }
  SUBCASE("BF16 scale and bias") {
    const model_weights ref = load(dir.path);
    edit_tensors(dir.path, [&](auto& t) {
      for (const std::string& name :
           {weight + "_scale_inv", std::string("model.layers.2.mlp.gate.e_score_correction_bias")}) {
        auto& s = find_tensor(t, name);
        const int64_t n = static_cast<int64_t>(s.bytes.size()) / 4;
        std::vector<std::byte> bf(static_cast<size_t>(n * 2));
        for (int64_t i = 0; i < n; ++i) {
          const uint16_t b = f32_to_bf16(load_as_f32(dtype::f32, s.bytes.data(), i));
          std::memcpy(bf.data() + 2 * i, &b, 2);
        }
        s.type = dtype::bf16;
        s.bytes = std::move(bf);
      }
    });
    const model_weights w = load(dir.path);
    const linear_weight& kv_b = w.layers[1].attn.kv_b_proj;
    const linear_weight& kv_b_ref = ref.layers[1].attn.kv_b_proj;
    CHECK(kv_b.scale_inv[0] == bf16_to_f32(f32_to_bf16(kv_b_ref.scale_inv[0])));
    CHECK(kv_b.at(3, 4) == doctest::Approx(kv_b_ref.at(3, 4)).epsilon(0.01));
    CHECK(w.layers[2].moe.e_score_correction_bias[5] ==
          bf16_to_f32(f32_to_bf16(ref.layers[2].moe.e_score_correction_bias[5])));
  }
}

TEST_CASE("FP8 weights load repacked into 64-row panels where they fit, with the same values") {
  temp_dir dir;
  make_tiny(dir.path, /*fp8=*/true);
  const model_weights rm = load_model_weights(checkpoint::open(dir.path));
  const model_weights pn =
    load_model_weights(checkpoint::open(dir.path, weight_memory::copy, {}, /*fp8_panels=*/true));
  const model_weights mm =
    load_model_weights(checkpoint::open(dir.path, weight_memory::mmap, {}, /*fp8_panels=*/true));
  int num_panels = 0, num_rows = 0;
  auto compare = [&](const linear_weight& a, const linear_weight& b, const linear_weight& mapped) {
    if (a.data == nullptr)
      return;
    CHECK(a.layout == weight_layout::row_major);
    CHECK(mapped.layout == weight_layout::row_major);  // a mapped file is never rewritten
    const bool fits = a.type == dtype::f8_e4m3 && fp8_panels_fit(a.out_features, a.in_features);
    CHECK(b.layout == (fits ? weight_layout::fp8_panels : weight_layout::row_major));
    ++(fits ? num_panels : num_rows);
    for (int64_t o = 0; o < a.out_features; ++o)
      for (int64_t i = 0; i < a.in_features; ++i)
        REQUIRE(std::bit_cast<uint32_t>(b.at(o, i)) == std::bit_cast<uint32_t>(a.at(o, i)));
  };
  auto compare_mlp = [&](const mlp_weights& a, const mlp_weights& b, const mlp_weights& c) {
    compare(a.gate_proj, b.gate_proj, c.gate_proj);
    compare(a.up_proj, b.up_proj, c.up_proj);
    compare(a.down_proj, b.down_proj, c.down_proj);
  };
  for (size_t l = 0; l < rm.layers.size(); ++l) {
    const attention_weights &a = rm.layers[l].attn, &b = pn.layers[l].attn, &c = mm.layers[l].attn;
    compare(a.q_a_proj, b.q_a_proj, c.q_a_proj);
    compare(a.q_b_proj, b.q_b_proj, c.q_b_proj);
    compare(a.kv_a_proj_with_mqa, b.kv_a_proj_with_mqa, c.kv_a_proj_with_mqa);
    compare(a.kv_b_proj, b.kv_b_proj, c.kv_b_proj);
    compare(a.o_proj, b.o_proj, c.o_proj);
    if (!rm.layers[l].is_moe) {
      compare_mlp(rm.layers[l].mlp, pn.layers[l].mlp, mm.layers[l].mlp);
      continue;
    }
    compare_mlp(rm.layers[l].moe.shared_experts, pn.layers[l].moe.shared_experts,
                mm.layers[l].moe.shared_experts);
    for (size_t e = 0; e < rm.layers[l].moe.experts.size(); ++e)
      compare_mlp(rm.layers[l].moe.experts[e], pn.layers[l].moe.experts[e], mm.layers[l].moe.experts[e]);
  }
  CHECK(num_panels > 0);  // the tiny preset has both kinds:
  CHECK(num_rows > 0);    // o_proj [64, 64], q_a_proj [32, 64]
}
