// tools/op_timing.cpp
#include "tools/op_timing.hpp"

#include <algorithm>
#include <set>
#include <vector>

namespace moe::tools {
namespace {

double bytes_of(const linear_weight& w) {
  return static_cast<double>(w.num_bytes() + (w.scale_inv != nullptr ? w.scale_bytes() : 0));
}

std::string shape_of(const linear_weight& w) {
  return std::to_string(w.out_features) + "x" + std::to_string(w.in_features) + " " +
         std::string(dtype_name(w.type));
}

}  // namespace

void op_timing_backend::embedding(const embedding_params& p) {
  timed("embedding", 0.0, [&] { inner_.embedding(p); });
}

void op_timing_backend::rms_norm(const rms_norm_params& p) {
  timed("rms_norm", 0.0, [&] { inner_.rms_norm(p); });
}

void op_timing_backend::linear(const linear_params& p) {
  timed("linear " + shape_of(*p.w), bytes_of(*p.w), [&] { inner_.linear(p); });
}

void op_timing_backend::linear_group(const linear_group_params& p) {
  std::string label = "linear_group";
  double bytes = 0.0;
  for (size_t i = 0; i < p.w.size(); ++i) {
    label += (i == 0 ? " " : " + ") + shape_of(*p.w[i]);
    bytes += bytes_of(*p.w[i]);
  }
  timed(label, bytes, [&] { inner_.linear_group(p); });
}

void op_timing_backend::rope(const rope_params& p) {
  timed("rope", 0.0, [&] { inner_.rope(p); });
}

void op_timing_backend::store_kv(const store_kv_params& p) {
  timed("store_kv", 0.0, [&] { inner_.store_kv(p); });
}

void op_timing_backend::mla_attention(const mla_attention_params& p) {
  timed("mla_attention", bytes_of(*p.kv_b_proj), [&] { inner_.mla_attention(p); });
}

void op_timing_backend::silu_mul(const silu_mul_params& p) {
  timed("silu_mul", 0.0, [&] { inner_.silu_mul(p); });
}

void op_timing_backend::add(const add_params& p) {
  timed("add", 0.0, [&] { inner_.add(p); });
}

void op_timing_backend::moe_gate(const moe_gate_params& p) {
  timed("moe_gate", 0.0, [&] { inner_.moe_gate(p); });
}

void op_timing_backend::moe_experts(const moe_experts_params& p) {
  std::set<int32_t> used;  // each routed-to expert's weights are read once
  for (int64_t i = 0; i < p.num_tokens * p.top_k; ++i)
    if (p.topk_ids[i] >= p.expert_begin && p.topk_ids[i] < p.expert_end)
      used.insert(p.topk_ids[i]);
  double bytes = 0.0;
  for (const int32_t e : used) {
    const mlp_weights& m = (*p.experts)[static_cast<size_t>(e)];
    bytes += bytes_of(m.gate_proj) + bytes_of(m.up_proj) + bytes_of(m.down_proj);
  }
  timed("moe_experts", bytes, [&] { inner_.moe_experts(p); });
}

void op_timing_backend::print(std::FILE* out, int64_t steps, const char* unit) const {
  std::vector<std::pair<std::string, op_total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double all = 0.0;
  for (const auto& [label, t] : rows)
    all += t.seconds;
  const double n = static_cast<double>(std::max<int64_t>(1, steps));
  const std::string ms = std::string("ms/") + unit, mb = std::string("MB/") + unit;
  std::fprintf(out, "  %-50s %9s %6s %6s %9s %9s\n", "op", ms.c_str(), "share", "calls", mb.c_str(), "GB/s");
  for (const auto& [label, t] : rows) {
    std::fprintf(out, "  %-50s %9.3f %5.1f%% %6.1f %9.2f", label.c_str(), 1e3 * t.seconds / n,
                 all > 0.0 ? 100.0 * t.seconds / all : 0.0, static_cast<double>(t.calls) / n,
                 1e-6 * t.weight_bytes / n);
    if (t.weight_bytes > 0.0 && t.seconds > 0.0)
      std::fprintf(out, " %9.1f", 1e-9 * t.weight_bytes / t.seconds);
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "  %-50s %9.3f\n", "all ops", 1e3 * all / n);
}

}  // namespace moe::tools
