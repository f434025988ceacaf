// tools/lib/random_checkpoint.cpp
// A random-weight checkpoint in the real DeepSeek-V3 layout (model-spec
// sections 1-4), scaled so activations stay O(1) through every layer. Every row of every tensor
// has its own seed (global seed, tensor name, row), so the bytes depend on nothing else: not on
// the thread count, the shard layout or whether the weights are BF16 or FP8.
#include "tools/lib/random_checkpoint.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <thread>

#include <nlohmann/json.hpp>

#include "kernels/checkpoint/checkpoint.hpp"
#include "kernels/model/fp8_quantize.hpp"
#include "tools/lib/paths.hpp"

namespace moe::tools {
namespace {

namespace fs = std::filesystem;

// ---- deterministic random numbers (our own algorithms, unlike std::normal_distribution, whose
// output is implementation-defined; only std::log and std::sqrt come from the C library)

[[nodiscard]] constexpr uint64_t splitmix64(uint64_t& state) noexcept {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

[[nodiscard]] constexpr uint64_t fnv1a(std::string_view s) noexcept {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s)
    h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

// One row's stream: uniforms in [0, 1) and normals by Marsaglia's polar method.
struct row_rng {
  uint64_t state;

  row_rng(uint64_t tensor_seed, int64_t row_idx)
      : state(tensor_seed ^ (0xd1b54a32d192ed03ull * static_cast<uint64_t>(row_idx + 1))) {
    (void)splitmix64(state);
  }
  double uniform() noexcept { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; }
  // out[i] = scale * N(0, 1), i < n
  void normals(float* out, int64_t n, double scale) noexcept {
    for (int64_t i = 0; i < n; i += 2) {
      double u = 0.0, v = 0.0, q = 0.0;
      do {  // uniform point in the unit disc
        u = 2.0 * uniform() - 1.0;
        v = 2.0 * uniform() - 1.0;
        q = u * u + v * v;
      } while (q >= 1.0 || q == 0.0);
      const double f = std::sqrt(-2.0 * std::log(q) / q) * scale;
      out[i] = static_cast<float>(u * f);
      if (i + 1 < n)
        out[i + 1] = static_cast<float>(v * f);
    }
  }
};

// ---- what to write

enum class init_kind {
  normal,            // N(0, 1) * scale
  one_plus_uniform,  // 1 + U(-scale, scale)  (norm weights)
  uniform,           // U(-scale, scale)      (router bias)
  router_bias,       // U(-scale, scale) - router_skew_step * skew * ln(1 + popularity rank)
};

// How far --router-skew lowers each popularity rank's correction bias, per unit of skew, per
// ln(1 + rank). Against gate scores spread over ~(0.1, 0.9) this gives the small preset's
// MoE layers a max / mean expert load of ~3.5 at skew 1.2 (1.5 at 0): every token still takes
// k distinct experts, so the hottest flatten and only the tail follows rank^-skew.
constexpr double router_skew_step = 0.1;
constexpr double max_router_skew = 4.0;

struct tensor_spec {
  std::string name;
  std::vector<int64_t> shape;  // [rows, cols] or [cols]
  dtype type = dtype::bf16;    // f8_e4m3 ones also get <name>_scale_inv
  init_kind init = init_kind::normal;
  double scale = 1.0;
  int64_t shard_idx = 0;
  int64_t scale_shard_idx = 0;  // where <name>_scale_inv goes (FP8 only)
  double skew = 0.0;            // router_bias only

  [[nodiscard]] int64_t rows() const noexcept { return shape.size() == 2 ? shape[0] : 1; }
  [[nodiscard]] int64_t cols() const noexcept { return shape.back(); }
};

// Gives the experts of one router a popularity order (a seeded shuffle) and lowers the bias of
// the expert at rank r by router_skew_step * skew * ln(1 + r): a Zipf-like load, hottest first.
void lower_by_popularity(float* bias, int64_t num_experts, double skew, row_rng rng) {
  std::vector<int64_t> by_popularity(static_cast<size_t>(num_experts));
  std::iota(by_popularity.begin(), by_popularity.end(), int64_t{0});
  for (int64_t i = num_experts - 1; i > 0; --i)  // Fisher-Yates
    std::swap(by_popularity[i],
              by_popularity[static_cast<int64_t>(rng.uniform() * static_cast<double>(i + 1))]);
  for (int64_t r = 0; r < num_experts; ++r)
    bias[by_popularity[r]] -=
      static_cast<float>(router_skew_step * skew * std::log1p(static_cast<double>(r)));
}

// Rows [row_begin, row_end) of the tensor's f32 values -> out [row_end - row_begin, cols].
void generate_rows(const tensor_spec& t, uint64_t seed, int64_t row_begin, int64_t row_end, float* out) {
  const uint64_t tensor_seed = seed * 0x9e3779b97f4a7c15ull ^ fnv1a(t.name);
  const int64_t cols = t.cols();
  for (int64_t r = row_begin; r < row_end; ++r) {
    row_rng rng(tensor_seed, r);
    float* row = out + (r - row_begin) * cols;
    if (t.init == init_kind::normal) {
      rng.normals(row, cols, t.scale);
      continue;
    }
    const double center = t.init == init_kind::one_plus_uniform ? 1.0 : 0.0;
    for (int64_t c = 0; c < cols; ++c)
      row[c] = static_cast<float>(center + (2.0 * rng.uniform() - 1.0) * t.scale);
    if (t.init == init_kind::router_bias && t.skew > 0.0)
      lower_by_popularity(row, cols, t.skew, row_rng(tensor_seed, -1 - r));
  }
}

// Runs fn(begin, end) over [0, n) split across the machine's cores.
template <class Fn>
void parallel_for(int64_t n, int64_t work_per_item, Fn fn) {
  const int64_t max_threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8);
  const int64_t num_threads = std::min<int64_t>({max_threads, n, 1 + n * work_per_item / (1 << 16)});
  if (num_threads <= 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::jthread> threads;
  for (int64_t t = 0; t < num_threads; ++t)
    threads.emplace_back([&fn, n, num_threads, t] { fn(n * t / num_threads, n * (t + 1) / num_threads); });
}

void fill_float(const tensor_spec& t, uint64_t seed, std::span<std::byte> dst) {
  const int64_t cols = t.cols();
  parallel_for(t.rows(), cols, [&](int64_t begin, int64_t end) {
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t r = begin; r < end; ++r) {
      generate_rows(t, seed, r, r + 1, row.data());
      if (t.type == dtype::f32) {
        std::memcpy(dst.data() + r * cols * 4, row.data(), static_cast<size_t>(cols) * 4);
        continue;
      }
      auto* out = reinterpret_cast<uint16_t*>(dst.data()) + r * cols;
      for (int64_t c = 0; c < cols; ++c)
        out[c] = f32_to_bf16(row[c]);
    }
  });
}

constexpr int64_t fp8_block = fp8_quant_block;

// Quantises to e4m3 per 128x128 block with scale amax / 448 (W = q * scale). Writes the FP8 bytes
// to `dst` when it is non-empty, and the scales [ceil(rows/128), ceil(cols/128)] to `scales`.
void quantize_fp8(const tensor_spec& t, uint64_t seed, std::span<std::byte> dst, std::vector<float>& scales) {
  const int64_t rows = t.rows(), cols = t.cols();
  const int64_t block_rows = (rows + fp8_block - 1) / fp8_block,
                block_cols = (cols + fp8_block - 1) / fp8_block;
  scales.assign(static_cast<size_t>(block_rows * block_cols), 0.0f);
  parallel_for(block_rows, fp8_block * cols, [&](int64_t begin, int64_t end) {
    std::vector<float> buf(static_cast<size_t>(fp8_block * cols));
    for (int64_t br = begin; br < end; ++br) {
      const int64_t r0 = br * fp8_block, r1 = std::min(rows, r0 + fp8_block);
      generate_rows(t, seed, r0, r1, buf.data());
      for (int64_t bc = 0; bc < block_cols; ++bc) {
        const int64_t c0 = bc * fp8_block, c1 = std::min(cols, c0 + fp8_block);
        scales[br * block_cols + bc] = quantize_fp8_block(buf.data() + c0, cols, r1 - r0, c1 - c0,
                                                          [&](int64_t r, int64_t c, uint8_t code) {
                                                            if (!dst.empty())
                                                              dst[(r0 + r) * cols + c0 + c] = std::byte{code};
                                                          });
      }
    }
  });
}

// ---- the tensor list of model-spec section 3

struct spec_builder {
  const model_config& cfg;
  int64_t num_shards;
  bool fp8;
  double router_skew;
  std::vector<tensor_spec> specs;
  int64_t shard_idx = 0;

  void add(std::string name, std::vector<int64_t> shape, init_kind init, double scale,
           dtype type = dtype::bf16) {
    specs.push_back({std::move(name), std::move(shape), type, init, scale, shard_idx, shard_idx});
  }
  void norm(std::string name, int64_t n) { add(std::move(name), {n}, init_kind::one_plus_uniform, 0.2); }
  // ~ N(0, 1/in) * extra; FP8 in --fp8 checkpoints.
  void linear(std::string name, int64_t out, int64_t in, double extra = 1.0) {
    add(std::move(name), {out, in}, init_kind::normal, extra / std::sqrt(static_cast<double>(in)),
        fp8 ? dtype::f8_e4m3 : dtype::bf16);
  }
  void mlp(const std::string& prefix, int64_t width, double out_scale) {
    linear(prefix + "gate_proj.weight", width, cfg.hidden_size);
    linear(prefix + "up_proj.weight", width, cfg.hidden_size);
    linear(prefix + "down_proj.weight", cfg.hidden_size, width, out_scale);
  }

  void layer(int64_t layer_idx) {
    const std::string p = "model.layers." + std::to_string(layer_idx) + ".";
    const int64_t d = cfg.hidden_size, h = cfg.num_attention_heads;
    const double out_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(cfg.num_hidden_layers));
    norm(p + "input_layernorm.weight", d);
    linear(p + "self_attn.q_a_proj.weight", *cfg.q_lora_rank, d);
    norm(p + "self_attn.q_a_layernorm.weight", *cfg.q_lora_rank);
    linear(p + "self_attn.q_b_proj.weight", h * cfg.qk_head_dim(), *cfg.q_lora_rank);
    linear(p + "self_attn.kv_a_proj_with_mqa.weight", cfg.kv_cache_dim(), d);
    norm(p + "self_attn.kv_a_layernorm.weight", cfg.kv_lora_rank);
    linear(p + "self_attn.kv_b_proj.weight", h * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank);
    linear(p + "self_attn.o_proj.weight", d, h * cfg.v_head_dim, out_scale);
    specs.back().scale_shard_idx = (shard_idx + 1) % num_shards;  // NOTE: on purpose (model-spec 1)
    norm(p + "post_attention_layernorm.weight", d);
    if (!cfg.is_moe_layer(layer_idx)) {
      mlp(p + "mlp.", cfg.intermediate_size, out_scale);
      return;
    }
    add(p + "mlp.gate.weight", {cfg.n_routed_experts, d}, init_kind::normal,
        2.0 / std::sqrt(static_cast<double>(d)));
    add(p + "mlp.gate.e_score_correction_bias", {cfg.n_routed_experts}, init_kind::router_bias, 0.05,
        dtype::f32);
    specs.back().skew = router_skew;
    for (int64_t e = 0; e < cfg.n_routed_experts; ++e)
      mlp(p + "mlp.experts." + std::to_string(e) + ".", cfg.moe_intermediate_size, out_scale);
    mlp(p + "mlp.shared_experts.", cfg.shared_intermediate_size(), out_scale);
  }

  // Units (embedding, each layer, final norm + lm_head) are spread evenly over the shards.
  void build() {
    const int64_t num_units = cfg.num_hidden_layers + 2;
    auto shard_of = [&](int64_t unit) { return unit * num_shards / num_units; };
    shard_idx = shard_of(0);
    add("model.embed_tokens.weight", {cfg.vocab_size, cfg.hidden_size}, init_kind::normal, 1.0);
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
      shard_idx = shard_of(l + 1);
      layer(l);
    }
    shard_idx = shard_of(num_units - 1);
    norm("model.norm.weight", cfg.hidden_size);
    add("lm_head.weight", {cfg.vocab_size, cfg.hidden_size}, init_kind::normal,
        1.0 / std::sqrt(static_cast<double>(cfg.hidden_size)));
  }
};

// ---- progress

struct progress_meter {
  bool enabled = false;
  int64_t total_tensors = 0, total_bytes = 0;
  int64_t done_tensors = 0, done_bytes = 0;
  int64_t next_report = 0;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();

  void tensor_done(int64_t bytes) {
    ++done_tensors;
    done_bytes += bytes;
    if (!enabled || (done_bytes < next_report && done_tensors < total_tensors))
      return;
    next_report = done_bytes + total_bytes / 10;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "make-model: %lld/%lld tensors, %.1f/%.1f MB written (%.1f s)\n",
                 static_cast<long long>(done_tensors), static_cast<long long>(total_tensors),
                 static_cast<double>(done_bytes) / 1e6, static_cast<double>(total_bytes) / 1e6, secs);
  }
};

// ---- files

std::string shard_file_name(int64_t shard_idx, int64_t num_shards) {
  if (num_shards == 1)
    return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05lld-of-%05lld.safetensors", static_cast<long long>(shard_idx) + 1,
                static_cast<long long>(num_shards));
  return buf;
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out.flush())
    throw input_error(path.string() + ": cannot write");
}

// Removes what an earlier make-model may have left, so a loader never mixes layouts.
void remove_old_checkpoint_files(const fs::path& dir) {
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors.index.json" ||
        (name.starts_with("model") && e.path().extension() == ".safetensors"))
      fs::remove(e.path());
  }
}

void check_tokenizer_files(const fs::path& dir) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    if (!fs::is_regular_file(dir / name))
      throw input_error((dir / name).string() +
                        ": not found; run tools/setup.sh to install the DeepSeek-V3 tokenizer "
                        "(or pass --tokenizer-dir)");
}

// One writer per shard, each tensor a filler generating its bytes at write time.
std::vector<safetensors_writer> plan_shards(const std::vector<tensor_spec>& specs, int64_t num_shards,
                                            uint64_t seed, progress_meter& meter) {
  std::vector<safetensors_writer> writers(static_cast<size_t>(num_shards));
  for (auto& w : writers)
    w.set_metadata("format", "pt");
  for (const tensor_spec& spec : specs) {
    safetensors_writer& w = writers[spec.shard_idx];
    const auto* t = &spec;
    if (spec.type != dtype::f8_e4m3) {
      w.add(spec.name, spec.type, spec.shape, [t, seed, &meter](std::span<std::byte> dst) {
        fill_float(*t, seed, dst);
        meter.tensor_done(static_cast<int64_t>(dst.size()));
      });
      continue;
    }
    // The weight's filler leaves its scales here for the scale's filler (or the latter recomputes).
    auto scales = std::make_shared<std::vector<float>>();
    w.add(spec.name, spec.type, spec.shape, [t, seed, scales, &meter](std::span<std::byte> dst) {
      quantize_fp8(*t, seed, dst, *scales);
      meter.tensor_done(static_cast<int64_t>(dst.size()));
    });
    const std::vector<int64_t> scale_shape{(spec.rows() + fp8_block - 1) / fp8_block,
                                           (spec.cols() + fp8_block - 1) / fp8_block};
    writers[spec.scale_shard_idx].add(spec.name + "_scale_inv", dtype::f32, scale_shape,
                                      [t, seed, scales, &meter](std::span<std::byte> dst) {
                                        if (scales->empty())
                                          quantize_fp8(*t, seed, {}, *scales);
                                        std::memcpy(dst.data(), scales->data(), dst.size());
                                        scales->clear();
                                        scales->shrink_to_fit();
                                        meter.tensor_done(static_cast<int64_t>(dst.size()));
                                      });
  }
  return writers;
}

}  // namespace

model_config make_model_config(const make_model_options& opts) {
  model_config c;
  c.model_type = "deepseek_v3";
  c.vocab_size = opts.vocab_size.value_or(129280);
  if (opts.preset == "tiny") {
    c.hidden_size = 64;
    c.num_hidden_layers = 3;
    c.first_k_dense_replace = 1;
    c.intermediate_size = 128;
    c.num_attention_heads = 4;
    c.q_lora_rank = 32;
    c.kv_lora_rank = 16;
    c.qk_nope_head_dim = 16;
    c.qk_rope_head_dim = 8;
    c.v_head_dim = 16;
    c.n_routed_experts = 16;
    c.num_experts_per_tok = 4;
    c.n_group = 4;
    c.topk_group = 2;
    c.moe_intermediate_size = 32;
  } else if (opts.preset == "small") {
    c.hidden_size = 1024;
    c.num_hidden_layers = 8;
    c.first_k_dense_replace = 1;
    c.intermediate_size = 2816;
    c.num_attention_heads = 16;
    c.q_lora_rank = 384;
    c.kv_lora_rank = 128;
    c.qk_nope_head_dim = 64;
    c.qk_rope_head_dim = 32;
    c.v_head_dim = 64;
    c.n_routed_experts = 64;
    c.num_experts_per_tok = 8;
    c.n_group = 8;
    c.topk_group = 4;
    c.moe_intermediate_size = 256;
  } else {
    throw input_error("make-model: --preset: expected \"tiny\" or \"small\", got \"" + opts.preset + "\"");
  }
  c.n_shared_experts = 1;
  c.moe_layer_freq = 1;
  c.routed_scaling_factor = 2.5;
  c.norm_topk_prob = true;
  c.scoring_func = "sigmoid";
  c.topk_method = "noaux_tc";
  c.hidden_act = "silu";
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 163840;
  c.rope_scaling = rope_scaling_config{.type = "yarn",
                                       .factor = 40.0,
                                       .original_max_position_embeddings = 4096,
                                       .beta_fast = 32.0,
                                       .beta_slow = 1.0,
                                       .mscale = 1.0,
                                       .mscale_all_dim = 1.0};
  c.tie_word_embeddings = false;
  c.bos_token_id = 0;
  c.eos_token_id = 1;
  c.num_nextn_predict_layers = 0;
  c.torch_dtype = "bfloat16";
  if (opts.fp8)
    c.quantization =
      quantization_config{.quant_method = "fp8", .fmt = "e4m3", .block_rows = 128, .block_cols = 128};
  validate(c, "make-model");
  return c;
}

void make_model(const make_model_options& opts) {
  const model_config cfg = make_model_config(opts);
  const int64_t max_shards = cfg.num_hidden_layers + 2;
  if (opts.num_shards < 1 || opts.num_shards > max_shards)
    throw input_error("make-model: --shards: expected 1.." + std::to_string(max_shards) + " for preset " +
                      opts.preset + ", got " + std::to_string(opts.num_shards));
  if (opts.out.empty())
    throw input_error("make-model: --out: expected an output directory");
  if (!(opts.router_skew >= 0.0 && opts.router_skew <= max_router_skew))
    throw input_error("make-model: --router-skew: expected 0.." +
                      std::to_string(static_cast<int>(max_router_skew)) + ", got " +
                      std::to_string(opts.router_skew));
  const fs::path tokenizer_dir = opts.tokenizer_dir.empty() ? fs::path(default_tokenizer_dir())
                                                            : opts.tokenizer_dir;
  check_tokenizer_files(tokenizer_dir);

  std::error_code ec;
  fs::create_directories(opts.out, ec);
  if (!fs::is_directory(opts.out))
    throw input_error(opts.out.string() + ": cannot create the output directory");
  remove_old_checkpoint_files(opts.out);

  spec_builder builder{cfg, opts.num_shards, opts.fp8, opts.router_skew, {}};
  builder.build();
  progress_meter meter;
  meter.enabled = opts.progress;
  std::vector<safetensors_writer> writers = plan_shards(builder.specs, opts.num_shards, opts.seed, meter);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (const auto& w : writers) {
    meter.total_tensors += static_cast<int64_t>(w.names().size());
    meter.total_bytes += w.data_bytes();
  }
  for (int64_t s = 0; s < opts.num_shards; ++s) {
    const std::string file = shard_file_name(s, opts.num_shards);
    writers[s].write(opts.out / file);
    for (const std::string& name : writers[s].names())
      weight_map[name] = file;
  }
  if (opts.num_shards > 1) {
    const nlohmann::ordered_json index = {{"metadata", {{"total_size", meter.total_bytes}}},
                                          {"weight_map", weight_map}};
    write_text(opts.out / "model.safetensors.index.json", index.dump(2) + "\n");
  }

  write_text(opts.out / "config.json", to_json(cfg));
  const nlohmann::ordered_json generation = {{"bos_token_id", cfg.bos_token_id},
                                             {"eos_token_id", cfg.eos_token_id}};
  write_text(opts.out / "generation_config.json", generation.dump(2) + "\n");
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(tokenizer_dir / name, opts.out / name, fs::copy_options::overwrite_existing);
}

}  // namespace moe::tools
