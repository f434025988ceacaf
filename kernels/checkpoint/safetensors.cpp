// kernels/checkpoint/safetensors.cpp
// Loads one .safetensors file (a read-only copy in huge pages, or a map of the file; see
// weight_memory) and checks its header against the file (model-spec 1.1):
// 8-byte little-endian header length, JSON header, then tensor data at offsets relative to the
// end of the header.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/checkpoint/checkpoint.hpp"
#include "kernels/checkpoint/tensor_pass.hpp"

namespace moe {
namespace {

using json = nlohmann::json;

[[noreturn]] void file_error(const std::filesystem::path& path, const std::string& what) {
  throw input_error(path.string() + ": " + what);
}

[[noreturn]] void tensor_error(const std::filesystem::path& path, std::string_view name,
                               const std::string& what) {
  throw input_error(path.string() + ": tensor \"" + std::string(name) + "\": " + what);
}

std::vector<int64_t> parse_shape(const json& v, const std::filesystem::path& path, std::string_view name) {
  if (!v.is_array())
    tensor_error(path, name, "\"shape\" must be an array of non-negative integers, got " + v.dump());
  std::vector<int64_t> shape;
  for (const json& d : v) {
    if (!d.is_number_unsigned())
      tensor_error(path, name, "\"shape\" must be an array of non-negative integers, got " + v.dump());
    shape.push_back(d.get<int64_t>());
  }
  return shape;
}

// prod(shape) * element size, or -1 on overflow.
int64_t expected_bytes(const std::vector<int64_t>& shape, dtype type) {
  int64_t n = dtype_size(type);
  for (int64_t d : shape) {
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d)
      return -1;
    n *= d;
  }
  return n;
}

tensor_info parse_entry(const std::string& name, const json& entry, const std::filesystem::path& path,
                        const std::byte* data_begin, uint64_t data_size) {
  if (!entry.is_object())
    tensor_error(path, name, "header entry must be an object, got " + entry.dump());
  tensor_info t;
  t.name = name;
  t.file = path.string();
  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string())
    tensor_error(path, name, "missing \"dtype\" string");
  if (!parse_dtype(dtype_it->get<std::string>(), t.type))
    tensor_error(path, name,
                 "unknown dtype \"" + dtype_it->get<std::string>() +
                   "\" (expected F32, F16, BF16, F8_E4M3, I64 or I32)");
  auto shape_it = entry.find("shape");
  if (shape_it == entry.end())
    tensor_error(path, name, "missing \"shape\"");
  t.shape = parse_shape(*shape_it, path, name);
  auto off = entry.find("data_offsets");
  if (off == entry.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned())
    tensor_error(path, name, "\"data_offsets\" must be [begin, end] of non-negative integers");
  const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
  if (begin > end)
    tensor_error(path, name, "data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
  if (end > data_size)
    tensor_error(path, name,
                 "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                   ") run past the end of the data (" + std::to_string(data_size) +
                   " bytes; file truncated?)");
  const int64_t want = expected_bytes(t.shape, t.type);
  if (want < 0)
    tensor_error(path, name, "shape " + shape_it->dump() + " holds more bytes than a 64-bit size");
  if (static_cast<uint64_t>(want) != end - begin)
    tensor_error(path, name,
                 "data_offsets span " + std::to_string(end - begin) + " bytes but shape and dtype need " +
                   std::to_string(want));
  t.data = data_begin + begin;
  t.num_bytes = want;
  return t;
}

// An FP8 [out, in] tensor, row-major at `data`, rewritten as weight_layout::fp8_panels: per
// panel of 64 rows through a 64-row x 64-column tile (the source rows stream, the tile stays in
// L1), each column pair's two bytes moved as one.
void repack_fp8_panels(std::byte* data, int64_t out, int64_t in) {
  std::vector<std::byte> panel(static_cast<size_t>(fp8_panel_rows * in));
  for (int64_t p0 = 0; p0 < out; p0 += fp8_panel_rows) {
    std::byte* src = data + p0 * in;
    for (int64_t c0 = 0; c0 < in; c0 += 64)
      for (int64_t r = 0; r < fp8_panel_rows; ++r)
        for (int64_t c = c0; c < c0 + 64; c += 2)
          std::memcpy(panel.data() + fp8_panel_offset(r, c, in), src + r * in + c, 2);
    std::memcpy(src, panel.data(), panel.size());
  }
}

// Every F8_E4M3 2-D tensor of a file whose shape fits, repacked into panels (in our own copy) and
// marked so, on every core: ~3 GB/s a core here, so a checkpoint of V3's size (~650 GB of FP8)
// would otherwise add minutes to a load.
void repack_fp8_tensors(std::map<std::string, tensor_info, std::less<>>& tensors) {
  std::vector<tensor_info*> todo;
  for (auto& [name, t] : tensors)
    if (t.type == dtype::f8_e4m3 && t.shape.size() == 2 && fp8_panels_fit(t.shape[0], t.shape[1]))
      todo.push_back(&t);
  for_each_tensor_parallel(todo, [](tensor_info& t) {
    repack_fp8_panels(const_cast<std::byte*>(t.data), t.shape[0], t.shape[1]);
    t.layout = weight_layout::fp8_panels;
  });
}

// Every kept tensor scanned for NaN and infinite values (check_finite), largest first so the
// cores finish together; before any repacking, so an error names the element as stored.
void check_finite_tensors(std::map<std::string, tensor_info, std::less<>>& tensors) {
  std::vector<tensor_info*> todo;
  for (auto& [name, t] : tensors)
    todo.push_back(&t);
  std::stable_sort(todo.begin(), todo.end(),
                   [](const tensor_info* a, const tensor_info* b) { return a->num_bytes > b->num_bytes; });
  for_each_tensor_parallel(todo, [](tensor_info& t) { check_finite(t); });
}

struct fd_guard {
  int fd;
  ~fd_guard() { ::close(fd); }
};

// `size` bytes of fresh anonymous memory, 2 MiB-aligned and advised for transparent huge pages
// (best effort: with THP off it stays 4 KiB pages), writable (open makes it read-only once
// parsed); pages never written are never committed. Sets `mapped` to the length to munmap.
std::byte* allocate_huge_pages(uint64_t size, const std::filesystem::path& path, size_t& mapped) {
  constexpr size_t huge = size_t{2} << 20;
  mapped = (size + huge - 1) / huge * huge;
  void* raw = ::mmap(nullptr, mapped + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    file_error(path, "cannot allocate " + std::to_string(mapped) +
                       " bytes for its weights: " + std::strerror(errno));
  auto* const first = static_cast<std::byte*>(raw);
  auto* const base =
    reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(first) + huge - 1) & ~uintptr_t{huge - 1});
  if (base > first)
    ::munmap(first, static_cast<size_t>(base - first));
  if (first + huge > base)
    ::munmap(base + mapped, static_cast<size_t>(first + huge - base));
  (void)::madvise(base, mapped, MADV_HUGEPAGE);
  return base;
}

// Bytes [begin, end) of the file into base + begin, in 64 MiB reads; `on_bytes` hears the
// file offset reached.
void read_span(int fd, std::byte* base, uint64_t begin, uint64_t end, const std::filesystem::path& path,
               const std::function<void(uint64_t)>& on_bytes) {
  for (uint64_t done = begin; done < end;) {
    const ssize_t n = ::pread(fd, base + done, std::min<uint64_t>(end - done, uint64_t{64} << 20),
                              static_cast<off_t>(done));
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      file_error(path, "cannot read at byte " + std::to_string(done) + ": " +
                         (n < 0 ? std::strerror(errno) : "the file ended early (changed while loading?)"));
    done += static_cast<uint64_t>(n);
    if (on_bytes)
      on_bytes(done);
  }
}

// The 8-byte little-endian header length at `bytes`, checked against the file's size.
uint64_t header_length(const std::byte* bytes, uint64_t size, const std::filesystem::path& path) {
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  if (header_len > size - 8)
    file_error(path, "header length " + std::to_string(header_len) + " runs past the end of the " +
                       std::to_string(size) + "-byte file (truncated or not a safetensors file)");
  return header_len;
}

// The header's JSON object; a tensor named twice is refused (a parse would keep the last entry).
json parse_header(const char* header, uint64_t header_len, const std::filesystem::path& path) {
  json root;
  std::set<std::string> names;
  const json::parser_callback_t no_duplicates = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
      tensor_error(path, parsed.get<std::string>(), "named twice in the header");
    return true;
  };
  try {
    root = json::parse(header, header + header_len, no_duplicates);
  } catch (const json::exception& e) {  // parse_error, out_of_range (1e400)
    file_error(path, std::string("malformed header JSON: ") + e.what());
  }
  if (!root.is_object())
    file_error(path, "header must be a JSON object, got " + std::string(root.type_name()));
  return root;
}

// The format's data area is the tensors back to back, from its first byte to its last: no
// holes, no overlaps (as the reference safetensors loader requires). A header length one byte
// short shifts every tensor into its neighbour's bytes, and overlapping offsets would read one
// tensor as another (and, in copy mode, repack shared FP8 bytes twice): both fail here.
void check_tiling(const std::map<std::string, tensor_info, std::less<>>& tensors,
                  const std::filesystem::path& path, const std::byte* data_begin, uint64_t data_size) {
  std::vector<std::tuple<uint64_t, uint64_t, const std::string*>> spans;  // begin, bytes, name
  for (const auto& [name, t] : tensors)
    spans.emplace_back(static_cast<uint64_t>(t.data - data_begin), static_cast<uint64_t>(t.num_bytes), &name);
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (const auto& [begin, bytes, name] : spans) {
    if (begin < covered)
      tensor_error(path, *name,
                   "data_offsets begin at byte " + std::to_string(begin) +
                     ", inside the tensor before it (tensors may not overlap)");
    if (begin > covered)
      tensor_error(path, *name,
                   "data_offsets begin at byte " + std::to_string(begin) + ", leaving bytes " +
                     std::to_string(covered) + ".." + std::to_string(begin) +
                     " of the data to no tensor (the data must be the tensors back to back)");
    covered = begin + bytes;
  }
  if (covered != data_size)
    file_error(path, "the tensors cover " + std::to_string(covered) + " bytes of a " +
                       std::to_string(data_size) +
                       "-byte data area (header length wrong, or bytes after the last tensor)");
}

// The file open for reading and its size, checked to hold the header length.
struct opened_file {
  int fd;
  uint64_t size;
};

opened_file open_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    file_error(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    file_error(path, std::string("cannot stat: ") + std::strerror(errno));
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    file_error(path, "file is " + std::to_string(size) +
                       " bytes, shorter than the 8-byte safetensors header length");
  }
  return {fd, size};
}

}  // namespace

std::unique_ptr<safetensors_file> safetensors_file::open(const std::filesystem::path& path,
                                                         weight_memory memory,
                                                         const std::function<void(uint64_t)>& on_bytes,
                                                         bool fp8_panels, const tensor_filter& skip) {
  const auto [fd, size] = open_file(path);
  const fd_guard guard{fd};
  std::unique_ptr<safetensors_file> file(new safetensors_file());  // unmaps on a throw below
  file->path_ = path;
  std::byte* bytes = nullptr;
  uint64_t header_len = 0;
  if (memory == weight_memory::copy) {
    // The header first, then only the tensors kept: a skipped tensor's pages are never touched,
    // so never committed (V3's MTP layer would hold ~15 GB for nothing).
    bytes = allocate_huge_pages(size, path, file->map_size_);
    file->map_ = bytes;
    read_span(fd, bytes, 0, 8, path, {});
    header_len = header_length(bytes, size, path);
    read_span(fd, bytes, 8, 8 + header_len, path, {});
  } else {
    // MAP_POPULATE: the page tables are filled (and the file read ahead) now, at load, rather
    // than one fault per page on first use: a server is warm when it says it is ready. Measured,
    // small FP8 preset on 2P+2D, bench-cluster at concurrency 1 (mean TTFT of two requests, the
    // first one cold): 280-294 -> 221-223 ms; a cold lm_head took 140 ms instead of ~15.
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (map == MAP_FAILED)
      file_error(path, std::string("cannot mmap: ") + std::strerror(errno));
    file->map_ = map;
    file->map_size_ = size;
    bytes = static_cast<std::byte*>(map);
    header_len = header_length(bytes, size, path);
  }
  const json root = parse_header(reinterpret_cast<const char*>(bytes + 8), header_len, path);
  const std::byte* data_begin = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__")
      continue;
    file->tensors_.emplace(name, parse_entry(name, entry, path, data_begin, data_size));
  }
  check_tiling(file->tensors_, path, data_begin, data_size);
  if (skip)
    std::erase_if(file->tensors_, [&](const auto& entry) { return skip(entry.first); });

  if (memory == weight_memory::copy) {
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // file offsets of the kept tensors, merged
    for (const auto& [name, t] : file->tensors_)
      spans.emplace_back(t.data - bytes, t.data - bytes + t.num_bytes);
    std::sort(spans.begin(), spans.end());
    uint64_t at = 8 + header_len;
    for (const auto& [begin, end] : spans) {
      if (begin > at && on_bytes)
        on_bytes(begin);  // skipped bytes count as done
      read_span(fd, bytes, std::max(begin, at), std::max(end, at), path, on_bytes);
      at = std::max(end, at);
    }
    if (on_bytes && at < size)  // skipped tensors at the end
      on_bytes(size);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);  // the copy is what runs
  }
  check_finite_tensors(file->tensors_);
  if (memory == weight_memory::copy) {
    if (fp8_panels)
      repack_fp8_tensors(file->tensors_);
    (void)::mprotect(file->map_, file->map_size_, PROT_READ);
  } else if (on_bytes) {
    on_bytes(size);
  }
  return file;
}

uint64_t safetensors_skipped_bytes(const std::filesystem::path& path, const tensor_filter& skip) {
  try {
    const auto [fd, size] = open_file(path);
    const fd_guard guard{fd};
    std::byte length[8];
    if (::pread(fd, length, 8, 0) != 8)
      return 0;
    const uint64_t header_len = header_length(length, size, path);
    std::string header(header_len, '\0');
    if (::pread(fd, header.data(), header_len, 8) != static_cast<ssize_t>(header_len))
      return 0;
    uint64_t skipped = 0;
    const json root = parse_header(header.data(), header_len, path);
    for (const auto& [name, entry] : root.items()) {
      const auto off = entry.is_object() ? entry.find("data_offsets") : entry.end();
      if (!skip(name) || off == entry.end() || !off->is_array() || off->size() != 2 ||
          !(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned())
        continue;
      const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
      if (begin <= end && end <= size)
        skipped += end - begin;
    }
    return std::min(skipped, size);
  } catch (const input_error&) {
    return 0;  // open names what is wrong
  }
}

safetensors_file::~safetensors_file() {
  if (map_ != nullptr)
    ::munmap(map_, map_size_);
}

}  // namespace moe
