// kernels/checkpoint/checkpoint.hpp
// A Hugging Face checkpoint directory: config.json plus one model.safetensors or shards listed by
// model.safetensors.index.json, all mmap-ed (docs/reference/model-spec.md §1).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.hpp"
#include "kernels/dtype.hpp"

namespace moe {

/// One tensor inside a mapped safetensors file.
struct tensor_info {
  std::string name;
  dtype type = dtype::f32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // inside the mapping; may be unaligned
  int64_t num_bytes = 0;
  /// row_major as stored, or fp8_panels where the loader repacked it (FP8 2-D, see open).
  weight_layout layout = weight_layout::row_major;
  std::string file;  // file name, for error messages
};

/// Where a checkpoint's bytes live while the model runs.
enum class weight_memory : uint8_t {
  /// Read into anonymous memory advised for transparent huge pages (2 MiB), then read-only; the
  /// file's page cache is dropped. A decode step reads hundreds of short weight streams; mapped
  /// from a page cache in 4 KiB pages each walks page tables (small FP8 preset, vocab 32000, batch
  /// 1, 5 alternating pairs: 3.56-4.96 -> 3.15-3.57 ms per step). Where the page cache already
  /// holds 2 MiB folios (newer kernels' ext4 after a plain copy) the map is as fast; the copy is
  /// fast whatever the file system and kernel.
  copy,
  /// Map the file (MAP_POPULATE): shared with the page cache and other processes, 4 KiB pages.
  mmap,
};

/// Loading progress: bytes of weight files loaded so far and in all (the files' sizes), called
/// on the loading thread as pieces arrive.
using load_progress = std::function<void(uint64_t done, uint64_t total)>;

/// Tensor names to leave out of a load (the multi-token-prediction layer).
using tensor_filter = std::function<bool(std::string_view name)>;

/// One loaded .safetensors file with its parsed header.
class safetensors_file {
 public:
  /// Loads (see weight_memory) and parses `path`; throws input_error naming the file on a
  /// truncated file, malformed header JSON, an unknown dtype, offsets out of range / not
  /// matching the shape, or a kept tensor holding a NaN or an infinity (check_finite, on every
  /// core: one pass over the bytes at load).
  /// `on_bytes` (optional) hears the bytes of this file loaded so far. With `fp8_panels` and
  /// weight_memory::copy, every F8_E4M3 tensor of two dimensions that fp8_panels_fit is repacked
  /// in place into weight_layout::fp8_panels (its tensor_info says so); mapped files stay as stored.
  /// Tensors `skip` names are checked like the rest, then left out of tensors(); with
  /// weight_memory::copy their bytes are never read (nor their memory committed).
  static std::unique_ptr<safetensors_file> open(const std::filesystem::path& path,
                                                weight_memory memory = weight_memory::copy,
                                                const std::function<void(uint64_t)>& on_bytes = {},
                                                bool fp8_panels = false, const tensor_filter& skip = {});
  ~safetensors_file();
  safetensors_file(const safetensors_file&) = delete;
  safetensors_file& operator=(const safetensors_file&) = delete;

  [[nodiscard]] const std::map<std::string, tensor_info, std::less<>>& tensors() const noexcept {
    return tensors_;
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  safetensors_file() = default;
  std::filesystem::path path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::map<std::string, tensor_info, std::less<>> tensors_;
};

/// Bytes of `path`'s tensors that `skip` names, from its header alone; 0 when the header cannot
/// be read (open reports why).
[[nodiscard]] uint64_t safetensors_skipped_bytes(const std::filesystem::path& path,
                                                 const tensor_filter& skip);

/// A checkpoint directory. Tensor look-ups check presence and shape and throw input_error with
/// the tensor's name and file (or the directory when missing). Tensors of layers past
/// num_hidden_layers (the MTP module) are checked in their headers, then left out: not read in
/// copy mode, not in the index.
class checkpoint {
 public:
  /// `fp8_panels`: see safetensors_file::open (the fast CPU kernels' layout for FP8 weights).
  static std::shared_ptr<const checkpoint> open(const std::filesystem::path& dir,
                                                weight_memory memory = weight_memory::copy,
                                                const load_progress& progress = {}, bool fp8_panels = false);

  [[nodiscard]] const model_config& config() const noexcept { return config_; }
  [[nodiscard]] const std::filesystem::path& dir() const noexcept { return dir_; }
  [[nodiscard]] bool contains(std::string_view name) const noexcept;
  /// The tensor `name`; throws input_error when missing.
  [[nodiscard]] const tensor_info& tensor(std::string_view name) const;
  /// The tensor `name`, which must have exactly `shape`; throws input_error otherwise.
  [[nodiscard]] const tensor_info& tensor(std::string_view name, const std::vector<int64_t>& shape) const;
  [[nodiscard]] std::vector<std::string> tensor_names() const;

 private:
  std::filesystem::path dir_;
  model_config config_;
  std::vector<std::unique_ptr<safetensors_file>> files_;
  std::map<std::string, const tensor_info*, std::less<>> index_;
};

/// Builds a safetensors file in memory and writes it (make-model, tests).
class safetensors_writer {
 public:
  /// Producer of a tensor's bytes at write time; it must fill the whole span.
  using filler = std::function<void(std::span<std::byte>)>;

  void add(std::string name, dtype type, std::vector<int64_t> shape, std::vector<std::byte> bytes);
  /// A tensor generated by `fill` while write() runs, so big tensors are never all in memory.
  void add(std::string name, dtype type, std::vector<int64_t> shape, filler fill);
  void set_metadata(std::string key, std::string value);
  /// Writes header (padded so data starts 8-aligned) and data; throws input_error on I/O failure.
  void write(const std::filesystem::path& path) const;
  [[nodiscard]] int64_t data_bytes() const noexcept;
  [[nodiscard]] std::vector<std::string> names() const;

 private:
  struct entry {
    std::string name;
    dtype type;
    std::vector<int64_t> shape;
    std::vector<std::byte> bytes;  // empty when `fill` produces them
    filler fill;
    int64_t num_bytes = 0;
  };
  std::vector<entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace moe
