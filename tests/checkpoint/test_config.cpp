// tests/checkpoint/test_config.cpp
// config.json parsing (HF key names, rope_parameters, nulls), validation messages, round trip.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "checkpoint/test_util.hpp"
#include "config/model_config.hpp"

using namespace moe;
using moe::test::contains;
using moe::test::error_of;

namespace {

// The real deepseek-ai/DeepSeek-V3 config.json (model-spec section 2).
const char* const v3_config = R"({
  "architectures": ["DeepseekV3ForCausalLM"],
  "attention_bias": false, "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_deepseek.DeepseekV3Config"},
  "aux_loss_alpha": 0.001, "bos_token_id": 0, "eos_token_id": 1, "ep_size": 1,
  "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
  "initializer_range": 0.02, "intermediate_size": 18432, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v3", "moe_intermediate_size": 2048,
  "moe_layer_freq": 1, "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1,
  "norm_topk_prob": true, "num_attention_heads": 128, "num_experts_per_tok": 8,
  "num_hidden_layers": 61, "num_key_value_heads": 128, "num_nextn_predict_layers": 1,
  "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
  "quantization_config": {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "weight_block_size": [128, 128]},
  "rms_norm_eps": 1e-06, "rope_theta": 10000,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                   "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096, "type": "yarn"},
  "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 4, "topk_method": "noaux_tc",
  "torch_dtype": "bfloat16", "transformers_version": "4.33.1", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 129280
})";

nlohmann::json v3_json() { return nlohmann::json::parse(v3_config); }

std::string parse_error(const nlohmann::json& j) {
  return error_of([&] { (void)parse_model_config(j.dump(), "config.json"); });
}

}  // namespace

TEST_CASE("parses the real DeepSeek-V3 config.json") {
  const model_config c = parse_model_config(v3_config, "config.json");
  CHECK(c.model_type == "deepseek_v3");
  CHECK(c.vocab_size == 129280);
  CHECK(c.hidden_size == 7168);
  CHECK(c.intermediate_size == 18432);
  CHECK(c.moe_intermediate_size == 2048);
  CHECK(c.num_hidden_layers == 61);
  CHECK(c.first_k_dense_replace == 3);
  CHECK(c.num_attention_heads == 128);
  REQUIRE(c.q_lora_rank.has_value());
  CHECK(*c.q_lora_rank == 1536);
  CHECK(c.kv_lora_rank == 512);
  CHECK(c.qk_head_dim() == 192);
  CHECK(c.kv_cache_dim() == 576);
  CHECK(c.n_routed_experts == 256);
  CHECK(c.num_experts_per_tok == 8);
  CHECK(c.n_group == 8);
  CHECK(c.topk_group == 4);
  CHECK(c.routed_scaling_factor == 2.5);
  CHECK(c.norm_topk_prob);
  CHECK(c.rope_theta == 10000.0);
  REQUIRE(c.rope_scaling.has_value());
  CHECK(c.rope_scaling->type == "yarn");
  CHECK(c.rope_scaling->factor == 40.0);
  CHECK(c.rope_scaling->original_max_position_embeddings == 4096);
  CHECK(c.rope_scaling->mscale_all_dim == 1.0);
  CHECK(c.rope_interleave);
  CHECK(c.num_nextn_predict_layers == 1);
  REQUIRE(c.quantization.has_value());
  CHECK(c.quantization->block_rows == 128);
  CHECK(c.quantization->block_cols == 128);
  CHECK_FALSE(c.is_moe_layer(2));
  CHECK(c.is_moe_layer(3));
}

TEST_CASE("transformers 5 rope_parameters, null q_lora_rank, no quantization") {
  auto j = v3_json();
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j.erase("quantization_config");
  j["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 50000.0},
                          {"factor", 40},        {"original_max_position_embeddings", 4096},
                          {"beta_fast", 32},     {"beta_slow", 1},
                          {"mscale", 1.0},       {"mscale_all_dim", 1.0}};
  j["q_lora_rank"] = nullptr;
  const model_config c = parse_model_config(j.dump(), "config.json");
  CHECK(c.rope_theta == 50000.0);
  REQUIRE(c.rope_scaling.has_value());
  CHECK(c.rope_scaling->type == "yarn");
  CHECK(c.rope_scaling->factor == 40.0);
  CHECK_FALSE(c.q_lora_rank.has_value());
  CHECK_FALSE(c.quantization.has_value());
}

TEST_CASE("to_json round-trips through parse_model_config") {
  const model_config a = parse_model_config(v3_config, "config.json");
  const model_config b = parse_model_config(to_json(a), "round-trip");
  CHECK(b.hidden_size == a.hidden_size);
  CHECK(b.q_lora_rank == a.q_lora_rank);
  CHECK(b.n_group == a.n_group);
  CHECK(b.rope_scaling->beta_fast == a.rope_scaling->beta_fast);
  CHECK(b.rope_scaling->original_max_position_embeddings == 4096);
  CHECK(b.quantization->quant_method == "fp8");
  CHECK(b.eos_token_id == 1);
  CHECK(to_json(b) == to_json(a));
  const auto j = nlohmann::json::parse(to_json(a));
  CHECK(j["architectures"][0] == "DeepseekV3ForCausalLM");
  CHECK(j["quantization_config"]["weight_block_size"] == nlohmann::json::array({128, 128}));
}

TEST_CASE("malformed config.json names the file") {
  const std::string msg =
    error_of([] { (void)parse_model_config("{\"hidden_size\": 7168,", "x/config.json"); });
  CHECK(contains(msg, "x/config.json"));
  CHECK(contains(msg, "malformed JSON"));
  CHECK(contains(error_of([] { (void)parse_model_config("[1, 2]", "config.json"); }), "JSON object"));
}

TEST_CASE("a mistyped or missing field names the field and what was expected") {
  auto j = v3_json();
  j["hidden_size"] = "abc";
  CHECK(parse_error(j) == R"(config.json: field "hidden_size": expected a positive integer, got "abc")");
  j = v3_json();
  j.erase("vocab_size");
  CHECK(contains(parse_error(j), "field \"vocab_size\": missing"));
  j = v3_json();
  j["norm_topk_prob"] = 1;
  CHECK(contains(parse_error(j), "field \"norm_topk_prob\": expected true or false, got 1"));
  j = v3_json();
  j["rope_scaling"]["factor"] = "forty";
  CHECK(contains(parse_error(j), "field \"rope_scaling.factor\": expected a number"));
  j = v3_json();
  j["quantization_config"]["weight_block_size"] = {128};
  CHECK(contains(parse_error(j), "quantization_config.weight_block_size"));
}

TEST_CASE(
  "sizes past 2^24 (products could wrap int64), a number overflowing a double, and a context under 2 are refused") {
  auto j = v3_json();
  j["num_attention_heads"] = (int64_t{1} << 62) + 4;  // heads x 24 would wrap to 96
  CHECK(parse_error(j) == "config.json: field \"num_attention_heads\": expected a positive integer of "
                          "at most 2^24, got 4611686018427387908");
  j = v3_json();
  j["n_shared_experts"] = uint64_t{1} << 63;
  CHECK(contains(parse_error(j), "field \"n_shared_experts\": expected an integer of at most 2^24"));
  j = v3_json();
  j["max_position_embeddings"] = 16777216.0;  // 2^24 itself, written as a float: fine
  CHECK(parse_model_config(j.dump(), "config.json").max_position_embeddings == 16777216);
  std::string text = v3_json().dump();
  text.replace(text.find("163840"), 6, "1e400");
  const std::string overflow = error_of([&] { (void)parse_model_config(text, "x/config.json"); });
  CHECK(contains(overflow, "x/config.json: malformed JSON"));
  CHECK(contains(overflow, "number overflow"));
  j = v3_json();
  j["max_position_embeddings"] = 0;
  CHECK(
    contains(parse_error(j), "field \"max_position_embeddings\": expected an integer of at least 2, got 0"));
  j.erase("max_position_embeddings");  // HF DeepseekV3Config's default
  CHECK(parse_model_config(j.dump(), "config.json").max_position_embeddings == 4096);
}

TEST_CASE("validation rejects inconsistent configs, naming the field") {
  struct bad_case {
    const char* field;
    nlohmann::json value;
    const char* expect;
  };
  const bad_case cases[] = {
    {"hidden_size", -1, "field \"hidden_size\": expected a positive integer, got -1"},
    {"n_routed_experts", 250, "field \"n_routed_experts\": must be divisible by n_group"},
    {"topk_group", 9, "field \"topk_group\": must be <= n_group"},
    {"num_experts_per_tok", 129,
     "field \"num_experts_per_tok\": must be <= the experts in topk_group groups (128)"},
    {"qk_rope_head_dim", 63, "field \"qk_rope_head_dim\": expected an even integer"},
    {"scoring_func", "softmax", "field \"scoring_func\": expected \"sigmoid\""},
    {"topk_method", "greedy", "field \"topk_method\": expected \"noaux_tc\""},
    {"first_k_dense_replace", 62, "field \"first_k_dense_replace\": must be in [0, num_hidden_layers=61]"},
    {"model_type", "llama",
     "field \"model_type\": expected \"deepseek_v3\" or \"deepseek_v2\", got \"llama\""},
    {"kv_lora_rank", 0, "field \"kv_lora_rank\": expected a positive integer, got 0"},
    {"q_lora_rank", 0, "field \"q_lora_rank\": expected a positive integer, got 0"},
    {"hidden_act", "gelu", "field \"hidden_act\": expected \"silu\""},
    {"eos_token_id", 200000, "field \"eos_token_id\": expected a token id below vocab_size"},
    {"attention_bias", true, "field \"attention_bias\""},
    {"rms_norm_eps", 0.0, "field \"rms_norm_eps\": expected a positive number"},
  };
  for (const bad_case& c : cases) {
    CAPTURE(c.field);
    auto j = v3_json();
    j[c.field] = c.value;
    const std::string msg = parse_error(j);
    CHECK(contains(msg, "config.json: "));
    CHECK_MESSAGE(contains(msg, c.expect), msg);
  }
  auto j = v3_json();
  j["rope_scaling"]["type"] = "linear";
  CHECK(contains(parse_error(j), "field \"rope_scaling.type\": expected \"yarn\""));
  j = v3_json();  // YaRN parameters with no type: not plain RoPE in silence
  j["rope_scaling"].erase("type");
  CHECK(contains(parse_error(j), "field \"rope_scaling.type\": missing beside \"beta_fast\""));
  j = v3_json();  // transformers 5: rope_theta alone needs no type
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_theta", 50000.0}};
  CHECK(parse_model_config(j.dump(), "config.json").rope_theta == 50000.0);
  CHECK_FALSE(parse_model_config(j.dump(), "config.json").rope_scaling.has_value());
  j = v3_json();
  j["quantization_config"]["quant_method"] = "gptq";
  CHECK(contains(parse_error(j), "field \"quantization_config.quant_method\""));
}

TEST_CASE("deepseek_v2 model_type is accepted and a dense-only model needs no router fields") {
  auto j = v3_json();
  j["model_type"] = "deepseek_v2";
  CHECK(parse_model_config(j.dump(), "config.json").model_type == "deepseek_v2");
  j = v3_json();
  j["n_routed_experts"] = nullptr;
  j["scoring_func"] = "softmax";
  const model_config c = parse_model_config(j.dump(), "config.json");
  CHECK_FALSE(c.is_moe_layer(10));
}

TEST_CASE("load_model_config names the missing file") {
  moe::test::temp_dir dir;
  const std::string msg = error_of([&] { (void)load_model_config(dir.path); });
  CHECK(contains(msg, (dir.path / "config.json").string()));
  moe::test::write_text(dir.path / "config.json", "{ not json");
  CHECK(contains(error_of([&] { (void)load_model_config(dir.path); }), (dir.path / "config.json").string()));
}
