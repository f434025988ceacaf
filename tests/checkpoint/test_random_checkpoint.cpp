// tests/checkpoint/test_random_checkpoint.cpp
// make-model: deterministic per seed, the same model in every layout (single file, shards, FP8),
// FP8 close to BF16, weights scaled as documented, and clear option errors.
#include <doctest/doctest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "checkpoint/test_util.hpp"
#include "kernels/backend.hpp"
#include "kernels/model/forward.hpp"
#include "kernels/model/kv_cache.hpp"
#include "kernels/model/weights.hpp"

using namespace moe;
using namespace moe::test;

namespace {

std::vector<const linear_weight*> linears(const model_weights& w) {
  std::vector<const linear_weight*> out;
  for (const layer_weights& l : w.layers) {
    for (const linear_weight* lw :
         {&l.attn.q_a_proj, &l.attn.q_b_proj, &l.attn.kv_a_proj_with_mqa, &l.attn.kv_b_proj, &l.attn.o_proj})
      out.push_back(lw);
    std::vector<const mlp_weights*> mlps{l.is_moe ? &l.moe.shared_experts : &l.mlp};
    for (const mlp_weights& e : l.moe.experts)
      mlps.push_back(&e);
    for (const mlp_weights* m : mlps)
      for (const linear_weight* lw : {&m->gate_proj, &m->up_proj, &m->down_proj})
        out.push_back(lw);
    if (l.is_moe)
      out.push_back(&l.moe.gate);
  }
  return out;
}

// ||a - b|| / ||b|| over all elements.
double relative_error(const linear_weight& a, const linear_weight& b) {
  double diff = 0.0, norm = 0.0;
  for (int64_t o = 0; o < b.out_features; ++o)
    for (int64_t i = 0; i < b.in_features; ++i) {
      const double d = a.at(o, i) - b.at(o, i);
      diff += d * d;
      norm += static_cast<double>(b.at(o, i)) * b.at(o, i);
    }
  return std::sqrt(diff / norm);
}

double rms(const linear_weight& w) {
  double sum = 0.0;
  for (int64_t o = 0; o < w.out_features; ++o)
    for (int64_t i = 0; i < w.in_features; ++i)
      sum += static_cast<double>(w.at(o, i)) * w.at(o, i);
  return std::sqrt(sum / static_cast<double>(w.out_features * w.in_features));
}

}  // namespace

TEST_CASE("make-model is deterministic per seed") {
  temp_dir a, b, c;
  make_tiny(a.path, false, 7);
  make_tiny(b.path, false, 7);
  make_tiny(c.path, false, 8);
  CHECK(read_text(a.path / "model.safetensors") == read_text(b.path / "model.safetensors"));
  CHECK(read_text(a.path / "config.json") == read_text(b.path / "config.json"));
  CHECK(read_text(a.path / "model.safetensors") != read_text(c.path / "model.safetensors"));
  CHECK(read_text(a.path / "config.json") == read_text(c.path / "config.json"));
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "generation_config.json"})
    CHECK(fs::is_regular_file(a.path / f));
  const auto gen = nlohmann::json::parse(read_text(a.path / "generation_config.json"));
  CHECK(gen["bos_token_id"] == 0);
  CHECK(gen["eos_token_id"] == 1);
  make_tiny(a.path, true, 7);
  make_tiny(b.path, true, 7);
  CHECK(read_text(a.path / "model.safetensors") == read_text(b.path / "model.safetensors"));
}

TEST_CASE("make-model config.json carries the DeepSeek-V3 fields of the tiny preset") {
  temp_dir dir;
  make_tiny(dir.path);
  const auto j = nlohmann::json::parse(read_text(dir.path / "config.json"));
  CHECK(j["model_type"] == "deepseek_v3");
  CHECK(j["architectures"][0] == "DeepseekV3ForCausalLM");
  CHECK(j["vocab_size"] == 512);
  CHECK(j["rope_scaling"]["factor"] == 40.0);
  CHECK(j["rope_scaling"]["original_max_position_embeddings"] == 4096);
  CHECK(j["max_position_embeddings"] == 163840);
  CHECK(j["routed_scaling_factor"] == 2.5);
  CHECK(j["torch_dtype"] == "bfloat16");
  CHECK_FALSE(j.contains("quantization_config"));
  const model_config c = load_model_config(dir.path);
  CHECK(c.hidden_size == 64);
  CHECK(c.num_hidden_layers == 3);
  CHECK(c.n_routed_experts == 16);
  CHECK(*c.q_lora_rank == 32);
}

TEST_CASE("shards and FP8 variants hold the same model") {
  temp_dir single, sharded, fp8, fp8_sharded;
  make_tiny(single.path);
  make_tiny(fp8.path, true);
  auto opts = tiny_options(sharded.path);
  opts.num_shards = 3;
  tools::make_model(opts);
  opts.out = fp8_sharded.path;
  opts.fp8 = true;
  tools::make_model(opts);

  CHECK_FALSE(fs::exists(sharded.path / "model.safetensors"));
  CHECK(fs::exists(sharded.path / "model-00003-of-00003.safetensors"));
  CHECK(read_text(sharded.path / "config.json") == read_text(single.path / "config.json"));
  CHECK(read_text(fp8_sharded.path / "config.json") == read_text(fp8.path / "config.json"));
  const auto fp8_json = nlohmann::json::parse(read_text(fp8.path / "config.json"));
  CHECK(fp8_json["quantization_config"]["weight_block_size"] == nlohmann::json::array({128, 128}));
  CHECK(fp8_json["quantization_config"]["fmt"] == "e4m3");

  // Every tensor is byte-identical across layouts.
  for (auto [a, b] : {std::pair{&single, &sharded}, std::pair{&fp8, &fp8_sharded}}) {
    auto ca = checkpoint::open(a->path), cb = checkpoint::open(b->path);
    REQUIRE(ca->tensor_names() == cb->tensor_names());
    for (const std::string& name : ca->tensor_names()) {
      const tensor_info &ta = ca->tensor(name), &tb = cb->tensor(name);
      CHECK(std::equal(ta.data, ta.data + ta.num_bytes, tb.data, tb.data + tb.num_bytes));
    }
  }
  // The index lists every tensor; some weight and its scale are in different shards.
  const auto index = nlohmann::json::parse(read_text(fp8_sharded.path / "model.safetensors.index.json"));
  const auto& map = index["weight_map"];
  CHECK(map.size() == checkpoint::open(fp8.path)->tensor_names().size());
  int split = 0;
  for (const auto& [name, file] : map.items())
    if (name.ends_with("_scale_inv") && map[name.substr(0, name.size() - 10)] != file)
      ++split;
  CHECK(split > 0);

  // The FP8 variant dequantises close to the BF16 one; the router and embeddings stay BF16.
  const model_weights w16 = load_model_weights(checkpoint::open(single.path));
  const model_weights w8 = load_model_weights(checkpoint::open(fp8_sharded.path));
  const auto l16 = linears(w16), l8 = linears(w8);
  REQUIRE(l16.size() == l8.size());
  int num_fp8 = 0;
  for (size_t k = 0; k < l16.size(); ++k) {
    num_fp8 += l8[k]->type == dtype::f8_e4m3;
    CHECK(relative_error(*l8[k], *l16[k]) < 0.07);
  }
  CHECK(num_fp8 == static_cast<int>(l8.size()) - 2);  // all but the two routers
  CHECK(w8.embed_tokens.type == dtype::bf16);
  CHECK(w8.lm_head.type == dtype::bf16);
  CHECK(w8.layers[1].moe.gate.type == dtype::bf16);
  CHECK(w8.layers[1].moe.e_score_correction_bias == w16.layers[1].moe.e_score_correction_bias);
}

TEST_CASE("make-model weight scales keep activations O(1)") {
  temp_dir dir;
  make_tiny(dir.path);
  const model_weights w = load_model_weights(checkpoint::open(dir.path));
  CHECK(rms(w.embed_tokens) == doctest::Approx(1.0).epsilon(0.05));
  CHECK(rms(w.lm_head) == doctest::Approx(1.0 / 8.0).epsilon(0.05));
  CHECK(rms(w.layers[1].attn.q_a_proj) == doctest::Approx(1.0 / 8.0).epsilon(0.1));
  const double out_scale = 1.0 / std::sqrt(6.0);
  CHECK(rms(w.layers[0].mlp.down_proj) == doctest::Approx(out_scale / std::sqrt(128.0)).epsilon(0.1));
  CHECK(rms(w.layers[1].attn.o_proj) == doctest::Approx(out_scale / 8.0).epsilon(0.1));
  CHECK(rms(w.layers[1].moe.gate) == doctest::Approx(2.0 / 8.0).epsilon(0.1));
}

TEST_CASE("make-model's own checkpoints keep activations O(1) through every layer, BF16 and FP8") {
  for (const bool fp8 : {false, true}) {
    CAPTURE(fp8);
    temp_dir dir;
    make_tiny(dir.path, fp8, /*seed=*/5);
    const model_weights w = load_model_weights(checkpoint::open(dir.path));
    auto ref = make_cpu_reference_backend();
    kv_cache cache(w.config.num_hidden_layers, 4, 16, w.config.kv_cache_dim());
    std::vector<double> layer_rms;
    model_runner runner(w, *ref, cache, {.observe_layer = [&](int64_t, std::span<const float> h) {
                          double ss = 0.0;
                          for (const float v : h)
                            ss += static_cast<double>(v) * v;
                          layer_rms.push_back(std::sqrt(ss / static_cast<double>(h.size())));
                        }});
    const std::vector<int32_t> prompt = {0, 199, 258, 33, 457, 100, 511, 7};  // the tiny options: vocab 512
    sequence_kv kv;
    REQUIRE(kv.reserve(cache, static_cast<int64_t>(prompt.size())));
    const batch_entry e{.tokens = prompt, .kv = &kv, .all_logits = true};
    const std::vector<float> logits = runner.forward(std::span(&e, 1));
    kv.release(cache);
    REQUIRE(layer_rms.size() == static_cast<size_t>(w.config.num_hidden_layers));
    for (const double r : layer_rms) {  // the residual stream after each layer
      CHECK(r > 0.3);
      CHECK(r < 10.0);
    }
    double max_abs = 0.0;
    for (const float v : logits) {
      REQUIRE(std::isfinite(v));
      max_abs = std::max(max_abs, static_cast<double>(std::fabs(v)));
    }
    CHECK(max_abs > 0.1);
    CHECK(max_abs < 100.0);
  }
}

TEST_CASE("make-model option errors") {
  temp_dir dir;
  auto opts = tiny_options(dir.path);
  opts.tokenizer_dir = dir.path / "no-tokenizer";
  std::string msg = error_of([&] { tools::make_model(opts); });
  CHECK(contains(msg, (dir.path / "no-tokenizer" / "tokenizer.json").string()));
  CHECK(contains(msg, "tools/setup.sh"));
  opts = tiny_options(dir.path);
  opts.preset = "huge";
  CHECK(contains(error_of([&] { tools::make_model(opts); }), "--preset"));
  opts = tiny_options(dir.path);
  opts.num_shards = 9;
  CHECK(contains(error_of([&] { tools::make_model(opts); }), "--shards"));
  opts = tiny_options(dir.path);
  opts.vocab_size = 1;
  CHECK(contains(error_of([&] { tools::make_model(opts); }), "eos_token_id"));
}

TEST_CASE("make-model replaces an earlier checkpoint's layout in the same directory") {
  temp_dir dir;
  auto opts = tiny_options(dir.path);
  opts.num_shards = 2;
  tools::make_model(opts);
  CHECK(fs::exists(dir.path / "model.safetensors.index.json"));
  make_tiny(dir.path);
  CHECK_FALSE(fs::exists(dir.path / "model.safetensors.index.json"));
  CHECK_FALSE(fs::exists(dir.path / "model-00001-of-00002.safetensors"));
  CHECK(load_model_weights(checkpoint::open(dir.path)).layers.size() == 3);
}
