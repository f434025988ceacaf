// tests/checkpoint/test_util.hpp
// Helpers for the checkpoint tests: temporary directories, tiny make-model checkpoints, and
// rewriting a safetensors file tensor by tensor to inject one fault at a time.
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "kernels/checkpoint/checkpoint.hpp"
#include "tools/lib/random_checkpoint.hpp"

namespace moe::test {

namespace fs = std::filesystem;

/// A fresh directory under the system temp dir, removed with everything in it on destruction.
struct temp_dir {
  fs::path path;
  temp_dir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("moe_ckpt_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
};

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void write_text(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

/// Runs `fn`, which must throw input_error; returns its message ("" and a failed check otherwise).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const input_error& e) {
    return e.what();
  }
  FAIL_CHECK("expected an input_error");
  return "";
}

inline bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

/// make-model options for a tiny test checkpoint (vocab 512 keeps files small).
inline tools::make_model_options tiny_options(const fs::path& out, uint64_t seed = 0) {
  tools::make_model_options opts;
  opts.preset = "tiny";
  opts.seed = seed;
  opts.vocab_size = 512;
  opts.tokenizer_dir = MOE_TOKENIZER_DIR;
  opts.out = out;
  return opts;
}

inline fs::path make_tiny(const fs::path& out, bool fp8 = false, uint64_t seed = 0) {
  auto opts = tiny_options(out, seed);
  opts.fp8 = fp8;
  tools::make_model(opts);
  return out;
}

/// One tensor's contents, copied out of a file so it can be edited and written back.
struct tensor_copy {
  std::string name;
  dtype type;
  std::vector<int64_t> shape;
  std::vector<std::byte> bytes;
};

inline std::vector<tensor_copy> read_tensors(const fs::path& file) {
  auto f = safetensors_file::open(file);
  std::vector<tensor_copy> out;
  for (const auto& [name, t] : f->tensors())
    out.push_back({name, t.type, t.shape, std::vector<std::byte>(t.data, t.data + t.num_bytes)});
  return out;
}

inline void write_tensors(const fs::path& file, std::vector<tensor_copy> tensors) {
  safetensors_writer w;
  for (auto& t : tensors)
    w.add(std::move(t.name), t.type, std::move(t.shape), std::move(t.bytes));
  w.write(file);
}

/// Applies `edit` to the tensors of `<dir>/model.safetensors` and writes them back. The new file
/// replaces the old one by rename, so checkpoints opened earlier keep mapping the old contents.
inline void edit_tensors(const fs::path& dir, const std::function<void(std::vector<tensor_copy>&)>& edit) {
  const fs::path file = dir / "model.safetensors";
  auto tensors = read_tensors(file);
  edit(tensors);
  write_tensors(dir / "model.safetensors.tmp", std::move(tensors));
  fs::rename(dir / "model.safetensors.tmp", file);
}

inline tensor_copy& find_tensor(std::vector<tensor_copy>& tensors, const std::string& name) {
  for (auto& t : tensors)
    if (t.name == name)
      return t;
  FAIL("no tensor " << name);
  return tensors.front();
}

inline void erase_tensor(std::vector<tensor_copy>& tensors, const std::string& name) {
  std::erase_if(tensors, [&](const tensor_copy& t) { return t.name == name; });
}

/// Replaces `from` with `to` in `<dir>/config.json` (which must contain it).
inline void edit_config(const fs::path& dir, const std::string& from, const std::string& to) {
  std::string text = read_text(dir / "config.json");
  const size_t pos = text.find(from);
  REQUIRE_MESSAGE(pos != std::string::npos, "config.json has no " << from);
  text.replace(pos, from.size(), to);
  write_text(dir / "config.json", text);
}

}  // namespace moe::test
