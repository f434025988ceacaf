// tools/bench_weights.cpp
#include "tools/bench_weights.hpp"

namespace moe::tools {

std::vector<std::span<const uint8_t>> token_weight_spans(const model_weights& w, int64_t call) {
  std::vector<std::span<const uint8_t>> out;
  auto add = [&](const linear_weight& lw) {
    if (lw.data == nullptr)
      return;
    // the copy the fast path reads: a BF16 weight's GEMM panels when it has them
    const void* bytes = lw.gemm_panels != nullptr ? static_cast<const void*>(lw.gemm_panels) : lw.data;
    out.emplace_back(static_cast<const uint8_t*>(bytes), static_cast<size_t>(lw.num_bytes()));
    if (lw.scale_inv != nullptr)
      out.emplace_back(reinterpret_cast<const uint8_t*>(lw.scale_inv), static_cast<size_t>(lw.scale_bytes()));
  };
  auto add_mlp = [&](const mlp_weights& m) {
    add(m.gate_proj);
    add(m.up_proj);
    add(m.down_proj);
  };
  const int64_t k = w.config.num_experts_per_tok;
  for (const layer_weights& l : w.layers) {
    const attention_weights& a = l.attn;
    for (const linear_weight* lw :
         {&a.q_a_proj, &a.q_b_proj, &a.q_proj, &a.kv_a_proj_with_mqa, &a.kv_b_proj, &a.o_proj})
      add(*lw);
    if (!l.is_moe) {
      add_mlp(l.mlp);
      continue;
    }
    add(l.moe.gate);
    add_mlp(l.moe.shared_experts);
    // k consecutive experts from a start that moves by a prime each call: distinct within a call,
    // spread over the layer across calls
    const auto E = static_cast<int64_t>(l.moe.experts.size());
    const int64_t first = (call * 7919) % (E > 0 ? E : 1);
    for (int64_t j = 0; j < k && j < E; ++j)
      add_mlp(l.moe.experts[static_cast<size_t>((first + j) % E)]);
  }
  add(w.lm_head);
  return out;
}

}  // namespace moe::tools
