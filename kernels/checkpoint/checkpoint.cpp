// kernels/checkpoint/checkpoint.cpp
// Opens a checkpoint directory: config.json plus model.safetensors.index.json and its shards, or a
// single model.safetensors, or else every *.safetensors file; builds one name -> tensor index.
#include <algorithm>
#include <charconv>
#include <fstream>
#include <numeric>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "kernels/checkpoint/checkpoint.hpp"
#include "kernels/checkpoint/host_memory.hpp"

namespace moe {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Shard file names listed by model.safetensors.index.json, each checked to exist.
std::vector<fs::path> files_from_index(const fs::path& dir, const fs::path& index_path,
                                       std::map<std::string, std::string>& weight_map) {
  std::ifstream in(index_path, std::ios::binary);
  if (!in)
    throw input_error(index_path.string() + ": cannot open");
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {  // parse_error, out_of_range (1e400)
    throw input_error(index_path.string() + ": malformed JSON: " + e.what());
  }
  auto map_it = root.is_object() ? root.find("weight_map") : root.end();
  if (map_it == root.end() || !map_it->is_object())
    throw input_error(index_path.string() + ": expected an object \"weight_map\" of tensor -> file");
  std::set<std::string> names;
  for (const auto& [tensor, file] : map_it->items()) {
    if (!file.is_string())
      throw input_error(index_path.string() + ": weight_map[\"" + tensor +
                        "\"]: expected a file name string, got " + file.dump());
    const std::string file_name = file.get<std::string>();
    if (file_name.find('/') != std::string::npos || !fs::is_regular_file(dir / file_name))
      throw input_error(index_path.string() + ": tensor \"" + tensor + "\" maps to shard \"" + file_name +
                        "\", which does not exist in " + dir.string());
    weight_map.emplace(tensor, file_name);
    names.insert(file_name);
  }
  std::vector<fs::path> files;
  for (const std::string& name : names)
    files.push_back(dir / name);
  return files;
}

// model.layers.<N>.* with N >= num_hidden_layers: the multi-token-prediction module, which is
// not run (model-spec section 3), so neither read nor indexed.
tensor_filter beyond_layers(int64_t num_layers) {
  return [num_layers](std::string_view name) {
    constexpr std::string_view prefix = "model.layers.";
    if (!name.starts_with(prefix))
      return false;
    name.remove_prefix(prefix.size());
    int64_t layer = 0;
    const auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), layer);
    return ec == std::errc{} && end != name.data() + name.size() && *end == '.' && layer >= num_layers;
  };
}

std::vector<fs::path> scan_safetensors(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const fs::directory_entry& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".safetensors")
      files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

std::shared_ptr<const checkpoint> checkpoint::open(const fs::path& dir, weight_memory memory,
                                                   const load_progress& progress, bool fp8_panels) {
  if (!fs::is_directory(dir))
    throw input_error(dir.string() + ": not a directory (expected a Hugging Face checkpoint directory)");
  auto ckpt = std::make_shared<checkpoint>();
  ckpt->dir_ = dir;
  ckpt->config_ = load_model_config(dir);

  const fs::path index_path = dir / "model.safetensors.index.json";
  std::map<std::string, std::string> weight_map;
  std::vector<fs::path> files;
  if (fs::exists(index_path))
    files = files_from_index(dir, index_path, weight_map);
  else if (fs::is_regular_file(dir / "model.safetensors"))
    files = {dir / "model.safetensors"};
  else
    files = scan_safetensors(dir);
  if (files.empty())
    throw input_error(dir.string() + ": no model.safetensors, model.safetensors.index.json or "
                                     "*.safetensors files");

  std::vector<uint64_t> sizes;  // for progress; a missing file is reported by open
  for (const fs::path& path : files) {
    std::error_code ec;
    const uint64_t size = fs::file_size(path, ec);
    sizes.push_back(ec ? 0 : size);
  }
  const uint64_t total = std::accumulate(sizes.begin(), sizes.end(), uint64_t{0});
  const tensor_filter skip = beyond_layers(ckpt->config_.num_hidden_layers);
  uint64_t needed = total;
  if (memory == weight_memory::copy)
    for (const fs::path& path : files)
      needed -= std::min(needed, safetensors_skipped_bytes(path, skip));
  if (memory == weight_memory::copy)  // before reading a byte: not killed half-way through
    require_memory(needed,
                   dir.string() + ": copying the weights (" + std::to_string(files.size()) +
                     (files.size() == 1 ? " file)" : " files)"),
                   ": map the files instead (moeserve --mmap-weights: the page cache, slower decode) "
                   "or use a machine with more memory");
  uint64_t loaded = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const fs::path& path = files[f];
    std::function<void(uint64_t)> on_bytes;
    if (progress)
      on_bytes = [&progress, loaded, total](uint64_t n) { progress(loaded + n, total); };
    ckpt->files_.push_back(safetensors_file::open(path, memory, on_bytes, fp8_panels, skip));
    loaded += sizes[f];
    for (const auto& [name, info] : ckpt->files_.back()->tensors()) {
      auto [it, inserted] = ckpt->index_.emplace(name, &info);
      if (!inserted)
        throw input_error(dir.string() + ": tensor \"" + name + "\" appears in both " + it->second->file +
                          " and " + info.file);
    }
  }
  for (const auto& [tensor, file_name] : weight_map) {
    if (skip(tensor))
      continue;
    auto it = ckpt->index_.find(tensor);
    if (it == ckpt->index_.end() || fs::path(it->second->file).filename() != file_name)
      throw input_error(index_path.string() + ": tensor \"" + tensor + "\" is mapped to " + file_name +
                        " but that file does not contain it");
  }
  return ckpt;
}

bool checkpoint::contains(std::string_view name) const noexcept { return index_.find(name) != index_.end(); }

const tensor_info& checkpoint::tensor(std::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    throw input_error(dir_.string() + ": tensor \"" + std::string(name) + "\" not found in the checkpoint");
  return *it->second;
}

const tensor_info& checkpoint::tensor(std::string_view name, const std::vector<int64_t>& shape) const {
  const tensor_info& t = tensor(name);
  if (t.shape != shape)
    throw input_error(t.file + ": tensor \"" + t.name + "\": expected shape " + shape_text(shape) +
                      " (from config.json), got " + shape_text(t.shape));
  return t;
}

std::vector<std::string> checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [name, info] : index_)
    names.push_back(name);
  return names;
}

}  // namespace moe
