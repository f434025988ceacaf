// kernels/checkpoint/safetensors_writer.cpp
// Writes a .safetensors file: 8-byte header length, JSON header padded with spaces so the data
// starts 8-aligned, then the tensors back to back in the order they were added.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>

#include <nlohmann/json.hpp>

#include "kernels/checkpoint/checkpoint.hpp"

namespace moe {
namespace {

int64_t shape_bytes(const std::vector<int64_t>& shape, dtype type) {
  int64_t n = dtype_size(type);
  for (int64_t d : shape)
    n *= d;
  return n;
}

struct file_closer {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};

}  // namespace

void safetensors_writer::add(std::string name, dtype type, std::vector<int64_t> shape,
                             std::vector<std::byte> bytes) {
  const int64_t n = shape_bytes(shape, type);
  if (n != static_cast<int64_t>(bytes.size()))
    throw input_error("safetensors_writer: tensor \"" + name + "\" has " + std::to_string(bytes.size()) +
                      " bytes but its shape needs " + std::to_string(n));
  entries_.push_back({std::move(name), type, std::move(shape), std::move(bytes), nullptr, n});
}

void safetensors_writer::add(std::string name, dtype type, std::vector<int64_t> shape, filler fill) {
  const int64_t n = shape_bytes(shape, type);
  entries_.push_back({std::move(name), type, std::move(shape), {}, std::move(fill), n});
}

void safetensors_writer::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

int64_t safetensors_writer::data_bytes() const noexcept {
  int64_t n = 0;
  for (const entry& e : entries_)
    n += e.num_bytes;
  return n;
}

std::vector<std::string> safetensors_writer::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const entry& e : entries_)
    out.push_back(e.name);
  return out;
}

void safetensors_writer::write(const std::filesystem::path& path) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty())
    header["__metadata__"] = metadata_;
  int64_t offset = 0;
  for (const entry& e : entries_) {
    header[e.name] = {
      {"dtype", dtype_name(e.type)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.num_bytes}}};
    offset += e.num_bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts at 8 + N, a multiple of 8

  std::unique_ptr<std::FILE, file_closer> f(std::fopen(path.c_str(), "wb"));
  auto fail = [&](const char* what, int err = errno) {
    throw input_error(path.string() + ": " + what + ": " + std::strerror(err));
  };
  if (!f)
    fail("cannot create");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  if (std::fwrite(len, 1, 8, f.get()) != 8 ||
      std::fwrite(text.data(), 1, text.size(), f.get()) != text.size())
    fail("write failed");
  // Generated tensors alternate between two buffers: one is filled while the other is written.
  int64_t max_fill_bytes = 0;
  for (const entry& e : entries_)
    if (e.fill)
      max_fill_bytes = std::max(max_fill_bytes, e.num_bytes);
  std::unique_ptr<std::byte[]> buffers[2];
  int next_buffer = 0;
  std::future<int> pending;  // the write in flight -> errno or 0
  for (const entry& e : entries_) {
    std::span<const std::byte> bytes = e.bytes;
    if (e.fill) {
      auto& buffer = buffers[next_buffer];
      if (!buffer)
        buffer.reset(new std::byte[static_cast<size_t>(max_fill_bytes)]);
      e.fill({buffer.get(), static_cast<size_t>(e.num_bytes)});
      bytes = {buffer.get(), static_cast<size_t>(e.num_bytes)};
      next_buffer ^= 1;
    }
    if (const int err = pending.valid() ? pending.get() : 0)
      fail("write failed", err);
    pending = std::async(std::launch::async, [file = f.get(), bytes] {
      return std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size() ? 0 : errno;
    });
  }
  if (const int err = pending.valid() ? pending.get() : 0)
    fail("write failed", err);
  if (std::fflush(f.get()) != 0)
    fail("write failed");
  if (std::fclose(f.release()) != 0)
    fail("close failed");
}

}  // namespace moe
