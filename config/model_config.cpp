// config/model_config.cpp
// Reads a Hugging Face DeepSeek-V3 config.json into model_config (HF key names as-is), checks the
// invariants the forward pass relies on, and writes it back out for make-model.
#include "config/model_config.hpp"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace moe {
namespace {

using json = nlohmann::json;

[[noreturn]] void field_error(std::string_view origin, std::string_view field, std::string_view expected,
                              const json& got) {
  std::ostringstream msg;
  msg << origin << ": field \"" << field << "\": expected " << expected << ", got " << got.dump();
  throw input_error(msg.str());
}

[[noreturn]] void invalid(std::string_view origin, std::string_view field, std::string_view what) {
  std::ostringstream msg;
  msg << origin << ": field \"" << field << "\": " << what;
  throw input_error(msg.str());
}

// Reads typed fields of one JSON object; `prefix` qualifies nested names ("rope_scaling.").
struct field_reader {
  const json& obj;
  std::string_view origin;
  std::string prefix;

  [[nodiscard]] std::string qualified(std::string_view key) const { return prefix + std::string(key); }
  [[nodiscard]] const json* find(std::string_view key) const {
    auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
  }
  [[nodiscard]] bool has(std::string_view key) const { return find(key) != nullptr; }

  [[nodiscard]] std::optional<int64_t> optional_int(std::string_view key,
                                                    std::string_view expected = "an integer") const {
    const json* v = find(key);
    if (v == nullptr)
      return std::nullopt;
    // Every integer of a config is a size, a count or a token id: bounded so that products of
    // a few of them (shapes, KV bytes) cannot wrap an int64 and pass a check they should fail.
    constexpr int64_t bound = int64_t{1} << 24;
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(bound))
      field_error(origin, qualified(key), std::string(expected) + " of at most 2^24", *v);
    if (v->is_number_integer()) {
      const int64_t n = v->get<int64_t>();
      if (n > bound || n < -bound)
        field_error(origin, qualified(key), std::string(expected) + " of at most 2^24", *v);
      return n;
    }
    if (v->is_number_float()) {  // 4096.0 is an integer; 0.5 is not
      const double d = v->get<double>();
      if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) <= static_cast<double>(bound))
        return static_cast<int64_t>(d);
    }
    field_error(origin, qualified(key), expected, *v);
  }
  // The required fields are all dimensions, hence "positive" in the message.
  [[nodiscard]] int64_t required_int(std::string_view key) const {
    if (auto v = optional_int(key, "a positive integer"))
      return *v;
    invalid(origin, qualified(key), "missing (expected a positive integer)");
  }
  [[nodiscard]] int64_t int_or(std::string_view key, int64_t fallback) const {
    return optional_int(key).value_or(fallback);
  }
  [[nodiscard]] double number_or(std::string_view key, double fallback) const {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    if (!v->is_number())
      field_error(origin, qualified(key), "a number", *v);
    return v->get<double>();
  }
  [[nodiscard]] bool bool_or(std::string_view key, bool fallback) const {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    if (!v->is_boolean())
      field_error(origin, qualified(key), "true or false", *v);
    return v->get<bool>();
  }
  [[nodiscard]] std::string string_or(std::string_view key, std::string fallback) const {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    if (!v->is_string())
      field_error(origin, qualified(key), "a string", *v);
    return v->get<std::string>();
  }
  // bos/eos may be an integer or a list of integers (the first is used).
  [[nodiscard]] int64_t token_id_or(std::string_view key, int64_t fallback) const {
    const json* v = find(key);
    if (v == nullptr)
      return fallback;
    if (v->is_array() && !v->empty() && (*v)[0].is_number_integer())
      return (*v)[0].get<int64_t>();
    return int_or(key, fallback);
  }
  [[nodiscard]] const json* object(std::string_view key) const {
    const json* v = find(key);
    if (v != nullptr && !v->is_object())
      field_error(origin, qualified(key), "an object or null", *v);
    return v;
  }
};

rope_scaling_config parse_rope_scaling(const json& obj, std::string_view origin, const std::string& key) {
  const field_reader r{obj, origin, key + "."};
  rope_scaling_config rs;
  if (!r.has("type") && !r.has("rope_type")) {
    // Scaling parameters with no type would silently run plain RoPE (HF's remote code raises
    // KeyError here); only transformers 5's rope_parameters may hold rope_theta alone.
    for (const auto& [name, value] : obj.items())
      if (name != "rope_theta" && !value.is_null())
        invalid(origin, key + ".type",
                "missing beside \"" + name + "\" (expected \"yarn\", or no " + key + " for plain RoPE)");
  }
  rs.type = r.has("type") ? r.string_or("type", "") : r.string_or("rope_type", "default");
  rs.factor = r.number_or("factor", 1.0);
  rs.original_max_position_embeddings = r.int_or("original_max_position_embeddings", 0);
  rs.beta_fast = r.number_or("beta_fast", 32.0);
  rs.beta_slow = r.number_or("beta_slow", 1.0);
  rs.mscale = r.number_or("mscale", 1.0);
  rs.mscale_all_dim = r.number_or("mscale_all_dim", 0.0);
  return rs;
}

quantization_config parse_quantization(const json& obj, std::string_view origin) {
  const field_reader r{obj, origin, "quantization_config."};
  quantization_config q;
  q.quant_method = r.string_or("quant_method", "");
  q.fmt = r.string_or("fmt", "e4m3");
  if (const json* b = r.find("weight_block_size")) {
    if (!b->is_array() || b->size() != 2 || !(*b)[0].is_number_integer() || !(*b)[1].is_number_integer())
      field_error(origin, "quantization_config.weight_block_size", "[rows, cols] of integers", *b);
    q.block_rows = (*b)[0].get<int64_t>();
    q.block_cols = (*b)[1].get<int64_t>();
  }
  return q;
}

// Reads every field; validate() checks the values afterwards.
model_config read_fields(const json& root, std::string_view origin) {
  const field_reader r{root, origin, ""};
  model_config c;
  c.model_type = r.string_or("model_type", "");
  c.vocab_size = r.required_int("vocab_size");
  c.hidden_size = r.required_int("hidden_size");
  c.intermediate_size = r.int_or("intermediate_size", 0);
  c.moe_intermediate_size = r.int_or("moe_intermediate_size", 0);
  c.num_hidden_layers = r.required_int("num_hidden_layers");
  c.first_k_dense_replace = r.int_or("first_k_dense_replace", 0);
  c.moe_layer_freq = r.int_or("moe_layer_freq", 1);
  c.num_attention_heads = r.required_int("num_attention_heads");
  c.q_lora_rank = r.optional_int("q_lora_rank");
  c.kv_lora_rank = r.required_int("kv_lora_rank");
  c.qk_nope_head_dim = r.required_int("qk_nope_head_dim");
  c.qk_rope_head_dim = r.required_int("qk_rope_head_dim");
  c.v_head_dim = r.required_int("v_head_dim");
  c.n_routed_experts = r.int_or("n_routed_experts", 0);
  c.n_shared_experts = r.int_or("n_shared_experts", 0);
  c.num_experts_per_tok = r.int_or("num_experts_per_tok", 0);
  c.n_group = r.int_or("n_group", 1);
  c.topk_group = r.int_or("topk_group", 1);
  c.routed_scaling_factor = r.number_or("routed_scaling_factor", 1.0);
  c.norm_topk_prob = r.bool_or("norm_topk_prob", c.model_type != "deepseek_v2");
  c.scoring_func = r.string_or("scoring_func", c.scoring_func);
  c.topk_method = r.string_or("topk_method", c.topk_method);
  c.hidden_act = r.string_or("hidden_act", c.hidden_act);
  c.rms_norm_eps = r.number_or("rms_norm_eps", c.rms_norm_eps);
  c.max_position_embeddings = r.int_or("max_position_embeddings", 4096);  // HF DeepseekV3Config's default
  c.rope_interleave = r.bool_or("rope_interleave", true);
  c.tie_word_embeddings = r.bool_or("tie_word_embeddings", false);
  c.bos_token_id = r.token_id_or("bos_token_id", c.bos_token_id);
  c.eos_token_id = r.token_id_or("eos_token_id", c.eos_token_id);
  c.num_nextn_predict_layers = r.int_or("num_nextn_predict_layers", 0);
  c.torch_dtype = r.string_or("torch_dtype", r.string_or("dtype", c.torch_dtype));
  if (r.bool_or("attention_bias", false))
    invalid(origin, "attention_bias", "true is not supported (DeepSeek-V3 attention has no biases)");

  // transformers >= 5 writes rope_parameters (with rope_theta inside) instead of rope_scaling.
  c.rope_theta = r.number_or("rope_theta", c.rope_theta);
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    const json* rope = r.object(key);
    if (rope == nullptr)
      continue;
    field_reader inner{*rope, origin, std::string(key) + "."};
    c.rope_theta = inner.number_or("rope_theta", c.rope_theta);
    rope_scaling_config rs = parse_rope_scaling(*rope, origin, key);
    if (rs.type != "default" && !c.rope_scaling)
      c.rope_scaling = rs;
  }
  if (const json* q = r.object("quantization_config"))
    c.quantization = parse_quantization(*q, origin);
  return c;
}

std::string dims_text(int64_t a, int64_t b) { return std::to_string(a) + " and " + std::to_string(b); }

void require_positive(std::string_view origin, std::string_view field, int64_t value) {
  if (value <= 0)
    field_error(origin, field, "a positive integer", value);
}

void validate_moe(const model_config& c, std::string_view origin) {
  if (c.n_routed_experts < 0)
    field_error(origin, "n_routed_experts", "a non-negative integer", c.n_routed_experts);
  if (c.n_routed_experts == 0)
    return;  // no MoE layers: router fields unused
  require_positive(origin, "moe_intermediate_size", c.moe_intermediate_size);
  require_positive(origin, "num_experts_per_tok", c.num_experts_per_tok);
  require_positive(origin, "n_group", c.n_group);
  require_positive(origin, "topk_group", c.topk_group);
  require_positive(origin, "moe_layer_freq", c.moe_layer_freq);
  if (c.n_shared_experts < 0)
    field_error(origin, "n_shared_experts", "a non-negative integer", c.n_shared_experts);
  if (c.n_routed_experts % c.n_group != 0)
    invalid(origin, "n_routed_experts",
            "must be divisible by n_group (got " + dims_text(c.n_routed_experts, c.n_group) + ")");
  if (c.topk_group > c.n_group)
    invalid(origin, "topk_group", "must be <= n_group (got " + dims_text(c.topk_group, c.n_group) + ")");
  const int64_t per_group = c.n_routed_experts / c.n_group;
  if (c.n_group > 1 && per_group < 2)
    invalid(origin, "n_group",
            "needs at least 2 experts per group (the group score sums the top 2); got " +
              std::to_string(per_group));
  if (c.num_experts_per_tok > c.topk_group * per_group)
    invalid(origin, "num_experts_per_tok",
            "must be <= the experts in topk_group groups (" + std::to_string(c.topk_group * per_group) +
              "), got " + std::to_string(c.num_experts_per_tok));
  if (!(c.routed_scaling_factor > 0.0))
    field_error(origin, "routed_scaling_factor", "a positive number", c.routed_scaling_factor);
  if (c.scoring_func != "sigmoid")
    field_error(origin, "scoring_func", "\"sigmoid\" (the only router moeserve implements)", c.scoring_func);
  if (c.topk_method != "noaux_tc")
    field_error(origin, "topk_method", "\"noaux_tc\" (the only router moeserve implements)", c.topk_method);
}

void validate_rope(const model_config& c, std::string_view origin) {
  if (!(c.rope_theta > 0.0))
    field_error(origin, "rope_theta", "a positive number", c.rope_theta);
  if (!c.rope_scaling)
    return;
  const rope_scaling_config& rs = *c.rope_scaling;
  if (rs.type != "yarn")
    field_error(origin, "rope_scaling.type", "\"yarn\" (the only RoPE scaling moeserve implements)", rs.type);
  if (!(rs.factor > 0.0))
    field_error(origin, "rope_scaling.factor", "a positive number", rs.factor);
  require_positive(origin, "rope_scaling.original_max_position_embeddings",
                   rs.original_max_position_embeddings);
  if (!(rs.beta_fast > 0.0) || !(rs.beta_slow > 0.0))
    invalid(origin, "rope_scaling.beta_fast", "beta_fast and beta_slow must be positive");
}

}  // namespace

void validate(const model_config& c, std::string_view origin) {
  if (c.model_type != "deepseek_v3" && c.model_type != "deepseek_v2")
    field_error(origin, "model_type", "\"deepseek_v3\" or \"deepseek_v2\"", c.model_type);
  require_positive(origin, "vocab_size", c.vocab_size);
  require_positive(origin, "hidden_size", c.hidden_size);
  require_positive(origin, "num_hidden_layers", c.num_hidden_layers);
  require_positive(origin, "num_attention_heads", c.num_attention_heads);
  if (c.q_lora_rank)
    require_positive(origin, "q_lora_rank", *c.q_lora_rank);
  require_positive(origin, "kv_lora_rank", c.kv_lora_rank);
  require_positive(origin, "qk_nope_head_dim", c.qk_nope_head_dim);
  require_positive(origin, "qk_rope_head_dim", c.qk_rope_head_dim);
  if (c.qk_rope_head_dim % 2 != 0)
    field_error(origin, "qk_rope_head_dim", "an even integer (RoPE rotates pairs)", c.qk_rope_head_dim);
  require_positive(origin, "v_head_dim", c.v_head_dim);
  if (c.first_k_dense_replace < 0 || c.first_k_dense_replace > c.num_hidden_layers)
    invalid(origin, "first_k_dense_replace",
            "must be in [0, num_hidden_layers=" + std::to_string(c.num_hidden_layers) + "], got " +
              std::to_string(c.first_k_dense_replace));
  validate_moe(c, origin);
  for (int64_t layer_idx = 0; layer_idx < c.num_hidden_layers; ++layer_idx)
    if (!c.is_moe_layer(layer_idx)) {  // some layer is dense: it needs a width
      require_positive(origin, "intermediate_size", c.intermediate_size);
      break;
    }
  if (c.hidden_act != "silu")
    field_error(origin, "hidden_act", "\"silu\"", c.hidden_act);
  if (!(c.rms_norm_eps > 0.0))
    field_error(origin, "rms_norm_eps", "a positive number", c.rms_norm_eps);
  if (c.max_position_embeddings < 2)  // a prompt token and a generated one
    field_error(origin, "max_position_embeddings", "an integer of at least 2", c.max_position_embeddings);
  if (c.num_nextn_predict_layers < 0)
    field_error(origin, "num_nextn_predict_layers", "a non-negative integer", c.num_nextn_predict_layers);
  if (c.bos_token_id < 0 || c.bos_token_id >= c.vocab_size)
    field_error(origin, "bos_token_id", "a token id below vocab_size", c.bos_token_id);
  if (c.eos_token_id < 0 || c.eos_token_id >= c.vocab_size)
    field_error(origin, "eos_token_id", "a token id below vocab_size", c.eos_token_id);
  validate_rope(c, origin);
  if (c.quantization) {
    if (c.quantization->quant_method != "fp8")
      field_error(origin, "quantization_config.quant_method", "\"fp8\"", c.quantization->quant_method);
    if (c.quantization->fmt != "e4m3")
      field_error(origin, "quantization_config.fmt", "\"e4m3\"", c.quantization->fmt);
    if (c.quantization->block_rows <= 0 || c.quantization->block_cols <= 0)
      invalid(origin, "quantization_config.weight_block_size", "block sizes must be positive");
  }
}

model_config parse_model_config(std::string_view json_text, std::string_view origin) {
  json root;
  try {
    root = json::parse(json_text.begin(), json_text.end());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e400
    throw input_error(std::string(origin) + ": malformed JSON: " + e.what());
  }
  if (!root.is_object())
    throw input_error(std::string(origin) + ": expected a JSON object at the top level, got " +
                      std::string(root.type_name()));
  model_config cfg = read_fields(root, origin);
  validate(cfg, origin);
  return cfg;
}

model_config load_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw input_error(path.string() + ": cannot open (is " + dir.string() +
                      " a Hugging Face checkpoint directory?)");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_model_config(text.str(), path.string());
}

std::string to_json(const model_config& c) {
  nlohmann::ordered_json j;
  const bool v2 = c.model_type == "deepseek_v2";
  j["architectures"] = {v2 ? "DeepseekV2ForCausalLM" : "DeepseekV3ForCausalLM"};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["moe_layer_freq"] = c.moe_layer_freq;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_attention_heads;
  j["q_lora_rank"] = c.q_lora_rank ? nlohmann::ordered_json(*c.q_lora_rank) : nullptr;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["v_head_dim"] = c.v_head_dim;
  j["n_routed_experts"] = c.n_routed_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["n_group"] = c.n_group;
  j["topk_group"] = c.topk_group;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["scoring_func"] = c.scoring_func;
  j["topk_method"] = c.topk_method;
  j["hidden_act"] = c.hidden_act;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["max_position_embeddings"] = c.max_position_embeddings;
  if (c.rope_scaling) {
    const rope_scaling_config& rs = *c.rope_scaling;
    j["rope_scaling"] = {{"type", rs.type},
                         {"factor", rs.factor},
                         {"original_max_position_embeddings", rs.original_max_position_embeddings},
                         {"beta_fast", rs.beta_fast},
                         {"beta_slow", rs.beta_slow},
                         {"mscale", rs.mscale},
                         {"mscale_all_dim", rs.mscale_all_dim}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (!c.rope_interleave)
    j["rope_interleave"] = false;
  j["attention_bias"] = false;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["num_nextn_predict_layers"] = c.num_nextn_predict_layers;
  j["bos_token_id"] = c.bos_token_id;
  j["eos_token_id"] = c.eos_token_id;
  j["torch_dtype"] = c.torch_dtype;
  if (c.quantization)
    j["quantization_config"] = {{"activation_scheme", "dynamic"},
                                {"fmt", c.quantization->fmt},
                                {"quant_method", c.quantization->quant_method},
                                {"weight_block_size",
                                 {c.quantization->block_rows, c.quantization->block_cols}}};
  return j.dump(2) + "\n";
}

}  // namespace moe
