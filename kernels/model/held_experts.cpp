// kernels/model/held_experts.cpp
#include "kernels/model/held_experts.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/fast_weights.hpp"

namespace moe {

namespace {

constexpr std::array<uint8_t, 4> magic = {'M', 'O', 'E', 'X'};
constexpr uint32_t format_version = 1;
constexpr int64_t max_side = int64_t{1} << 24;  // a projection's rows or columns

// One projection's header: everything but its bytes.
struct projection_header {
  uint8_t type = 0;
  uint8_t layout = 0;
  uint8_t has_scales = 0;
  uint8_t has_panels = 0;  // the sender had GEMM panels: the receiver packs them again
  uint32_t reserved = 0;
  int64_t out_features = 0;
  int64_t in_features = 0;
  int64_t block_rows = 0;
  int64_t block_cols = 0;
  int64_t data_bytes = 0;
  int64_t scale_bytes = 0;
};

constexpr size_t header_bytes = magic.size() + sizeof(uint32_t) + 3 * sizeof(projection_header);

int64_t round_up_64(int64_t n) { return (n + 63) / 64 * 64; }

int64_t data_bytes_of(const linear_weight& w) {
  return w.layout == weight_layout::fp8_panels ? fp8_panels_bytes(w.out_features, w.in_features)
                                               : w.out_features * w.in_features * dtype_size(w.type);
}

int64_t scale_bytes_of(int64_t out, int64_t in, int64_t block_rows, int64_t block_cols) {
  return 4 * ((out + block_rows - 1) / block_rows) * ((in + block_cols - 1) / block_cols);
}

std::array<const linear_weight*, 3> projections(const mlp_weights& m) {
  return {&m.gate_proj, &m.up_proj, &m.down_proj};
}

std::array<linear_weight*, 3> projections(mlp_weights& m) { return {&m.gate_proj, &m.up_proj, &m.down_proj}; }

constexpr std::array<const char*, 3> projection_names = {"gate_proj", "up_proj", "down_proj"};

// Checks one projection's header against itself; throws naming what is wrong.
void check(const projection_header& h, const char* name) {
  const std::string where = std::string("expert bytes: ") + name + ": ";
  if (h.type > static_cast<uint8_t>(dtype::f8_e4m3))
    throw std::invalid_argument(where + "dtype " + std::to_string(h.type) + " is not a weight dtype");
  if (h.layout > static_cast<uint8_t>(weight_layout::fp8_panels) ||
      (h.layout == static_cast<uint8_t>(weight_layout::fp8_panels) &&
       (h.type != static_cast<uint8_t>(dtype::f8_e4m3) || h.in_features % 64 != 0)))
    throw std::invalid_argument(where + "layout " + std::to_string(h.layout) + " does not fit the weight");
  if (h.out_features <= 0 || h.in_features <= 0 || h.out_features > max_side || h.in_features > max_side)
    throw std::invalid_argument(where + "shape [" + std::to_string(h.out_features) + ", " +
                                std::to_string(h.in_features) + "] is out of range");
  linear_weight w{.type = static_cast<dtype>(h.type),
                  .layout = static_cast<weight_layout>(h.layout),
                  .out_features = h.out_features,
                  .in_features = h.in_features};
  if (h.data_bytes != data_bytes_of(w))
    throw std::invalid_argument(where + std::to_string(h.data_bytes) + " weight bytes for its shape, not " +
                                std::to_string(data_bytes_of(w)));
  if (h.has_scales > 1 || h.has_panels > 1 ||
      (h.has_scales && h.type != static_cast<uint8_t>(dtype::f8_e4m3)) ||
      (h.has_panels && h.type != static_cast<uint8_t>(dtype::bf16)))
    throw std::invalid_argument(where + "scales or panels that its dtype does not have");
  if (h.has_scales) {
    if (h.block_rows <= 0 || h.block_cols <= 0 || h.block_rows > max_side || h.block_cols > max_side)
      throw std::invalid_argument(where + "block size out of range");
    if (h.scale_bytes != scale_bytes_of(h.out_features, h.in_features, h.block_rows, h.block_cols))
      throw std::invalid_argument(where + std::to_string(h.scale_bytes) + " scale bytes for its blocks");
  } else if (h.scale_bytes != 0) {
    throw std::invalid_argument(where + "scale bytes without scales");
  }
}

}  // namespace

std::vector<uint8_t> encode_expert(const mlp_weights& m) {
  std::array<projection_header, 3> headers;
  size_t total = header_bytes;
  for (size_t i = 0; i < 3; ++i) {
    const linear_weight& w = *projections(m)[i];
    if (w.data == nullptr)
      throw std::invalid_argument(std::string("encode_expert: ") + projection_names[i] + " has no weights");
    headers[i] = {.type = static_cast<uint8_t>(w.type),
                  .layout = static_cast<uint8_t>(w.layout),
                  .has_scales = static_cast<uint8_t>(w.scale_inv != nullptr),
                  .has_panels = static_cast<uint8_t>(w.gemm_panels != nullptr),
                  .out_features = w.out_features,
                  .in_features = w.in_features,
                  .block_rows = w.block_rows,
                  .block_cols = w.block_cols,
                  .data_bytes = data_bytes_of(w),
                  .scale_bytes = w.scale_bytes()};
    total += static_cast<size_t>(headers[i].data_bytes + headers[i].scale_bytes);
  }
  std::vector<uint8_t> bytes(total);
  uint8_t* p = bytes.data();
  std::memcpy(p, magic.data(), magic.size());
  p += magic.size();
  std::memcpy(p, &format_version, sizeof format_version);
  p += sizeof format_version;
  std::memcpy(p, headers.data(), sizeof headers);
  p += sizeof headers;
  for (size_t i = 0; i < 3; ++i) {
    const linear_weight& w = *projections(m)[i];
    std::memcpy(p, w.data, static_cast<size_t>(headers[i].data_bytes));
    p += headers[i].data_bytes;
    if (headers[i].scale_bytes > 0)
      std::memcpy(p, w.scale_inv, static_cast<size_t>(headers[i].scale_bytes));
    p += headers[i].scale_bytes;
  }
  return bytes;
}

std::shared_ptr<const expert_copy> decode_expert(std::span<const uint8_t> bytes) {
  if (bytes.size() < header_bytes || !std::equal(magic.begin(), magic.end(), bytes.begin()))
    throw std::invalid_argument("expert bytes: " + std::to_string(bytes.size()) +
                                " bytes that do not start with an expert's header");
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + magic.size(), sizeof version);
  if (version != format_version)
    throw std::invalid_argument("expert bytes: format version " + std::to_string(version) + ", expected " +
                                std::to_string(format_version));
  std::array<projection_header, 3> headers;
  std::memcpy(headers.data(), bytes.data() + magic.size() + sizeof version, sizeof headers);
  int64_t payload = 0, memory = 0;
  for (size_t i = 0; i < 3; ++i) {
    const projection_header& h = headers[i];
    check(h, projection_names[i]);
    payload += h.data_bytes + h.scale_bytes;
    const linear_weight shape{
      .type = dtype::bf16, .out_features = h.out_features, .in_features = h.in_features};
    memory += round_up_64(h.data_bytes) + round_up_64(h.scale_bytes) +
              (h.has_panels ? round_up_64(fast::gemm_panels_bytes(shape)) : 0);
  }
  if (static_cast<int64_t>(bytes.size()) != static_cast<int64_t>(header_bytes) + payload)
    throw std::invalid_argument("expert bytes: " + std::to_string(bytes.size()) + " bytes, the header says " +
                                std::to_string(static_cast<int64_t>(header_bytes) + payload));
  auto copy = std::make_shared<expert_copy>();
  copy->memory = fast::huge_page_buffer(static_cast<size_t>(memory));
  copy->memory_bytes = memory;
  copy->wire_bytes = payload;
  auto* dst = static_cast<uint8_t*>(copy->memory.get());
  const uint8_t* src = bytes.data() + header_bytes;
  for (size_t i = 0; i < 3; ++i) {
    const projection_header& h = headers[i];
    linear_weight& w = *projections(copy->weights)[i];
    w = {.type = static_cast<dtype>(h.type),
         .data = dst,
         .layout = static_cast<weight_layout>(h.layout),
         .out_features = h.out_features,
         .in_features = h.in_features,
         .block_rows = h.has_scales ? h.block_rows : 128,
         .block_cols = h.has_scales ? h.block_cols : 128};
    std::memcpy(dst, src, static_cast<size_t>(h.data_bytes));
    dst += round_up_64(h.data_bytes);
    src += h.data_bytes;
    if (h.has_scales) {
      std::memcpy(dst, src, static_cast<size_t>(h.scale_bytes));
      w.scale_inv = reinterpret_cast<const float*>(dst);
      dst += round_up_64(h.scale_bytes);
      src += h.scale_bytes;
    }
    if (h.has_panels) {
      auto* panels = reinterpret_cast<uint16_t*>(dst);
      fast::pack_gemm_panels_into(w, panels);
      w.gemm_panels = panels;
      dst += round_up_64(fast::gemm_panels_bytes(w));
    }
  }
  return copy;
}

std::shared_ptr<const expert_copy> copy_expert(const mlp_weights& m) {
  return decode_expert(encode_expert(m));
}

std::shared_ptr<const expert_copy> held_experts::find(int64_t layer, int64_t expert) const {
  if (layer < 0 || layer >= static_cast<int64_t>(layers.size()) || !layers[layer].holds(expert))
    return nullptr;
  return layers[layer].copies[layers[layer].local[expert]];
}

int64_t held_experts::memory_bytes() const noexcept {
  int64_t n = 0;
  for (const held_layer& l : layers)
    for (const auto& c : l.copies)
      n += c->memory_bytes;
  return n;
}

int64_t held_experts::num_copies() const noexcept {
  int64_t n = 0;
  for (const held_layer& l : layers)
    n += static_cast<int64_t>(l.copies.size());
  return n;
}

held_layer make_held_layer(std::vector<int32_t> experts,
                           std::vector<std::shared_ptr<const expert_copy>> copies, int64_t num_logical) {
  if (experts.size() != copies.size())
    throw std::invalid_argument("held experts: " + std::to_string(experts.size()) + " experts, " +
                                std::to_string(copies.size()) + " copies");
  held_layer l{.experts = std::move(experts), .copies = std::move(copies)};
  l.local.assign(static_cast<size_t>(num_logical), -1);
  for (size_t i = 0; i < l.experts.size(); ++i) {
    const int32_t e = l.experts[i];
    if (e < 0 || e >= num_logical || (i > 0 && e <= l.experts[i - 1]) || l.copies[i] == nullptr)
      throw std::invalid_argument("held experts: expert " + std::to_string(e) +
                                  " is out of range, out of order or without a copy");
    l.local[e] = static_cast<int32_t>(i);
    l.weights.push_back(l.copies[i]->weights);
  }
  return l;
}

}  // namespace moe
