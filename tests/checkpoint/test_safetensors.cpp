// tests/checkpoint/test_safetensors.cpp
// The safetensors reader and writer, and checkpoint directories (single file, index + shards,
// scanned shards), including every malformed-file error; weights as a read-only huge-page copy
// (the default) or a populated map of the file.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "checkpoint/test_util.hpp"

using namespace moe;
using namespace moe::test;

namespace {

// Writes a raw safetensors file: 8-byte length, `header` verbatim, then `data_bytes` zero bytes.
void write_raw(const fs::path& path, const std::string& header, size_t data_bytes) {
  std::string bytes(8, '\0');
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<char>(n >> (8 * i));
  bytes += header;
  bytes.append(data_bytes, '\0');
  write_text(path, bytes);
}

std::string open_error(const fs::path& path) {
  return error_of([&] { (void)safetensors_file::open(path); });
}

std::vector<std::byte> bytes_of(std::initializer_list<uint8_t> v) {
  std::vector<std::byte> out;
  for (uint8_t b : v)
    out.push_back(std::byte{b});
  return out;
}

std::vector<std::byte> f32_bytes_of(std::initializer_list<float> v) {
  std::vector<std::byte> out(v.size() * sizeof(float));
  std::memcpy(out.data(), std::data(v), out.size());
  return out;
}

// One byte of every page of [data, data + n), summed; not instrumented by AddressSanitizer, whose
// shadow-memory checks would fault pages of their own.
__attribute__((no_sanitize_address)) uint64_t touch_pages(const std::byte* data, int64_t n, int64_t page) {
  uint64_t sum = 0;
  for (int64_t off = 0; off < n; off += page)
    sum += static_cast<uint8_t>(data[off]);
  return sum;
}

// The /proc/self/smaps entry of the mapping that holds `p`.
struct mapping {
  uintptr_t start = 0, end = 0;
  std::string perms, path;
  bool thp_eligible = false;
  int64_t rss_kib = 0;  // resident: the pages committed
};
mapping mapping_of(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  std::ifstream smaps("/proc/self/smaps");
  mapping m;
  bool found = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream in(line);
    if (in >> std::hex >> start >> dash >> end && dash == '-') {  // a mapping's header line
      if (found)
        break;
      std::string offset, dev, inode;
      m = {.start = start, .end = end};
      in >> m.perms >> offset >> dev >> inode;
      std::getline(in >> std::ws, m.path);
      found = start <= addr && addr < end;
    } else if (found && line.starts_with("THPeligible:")) {
      m.thp_eligible = line.find('1') != std::string::npos;
    } else if (found && line.starts_with("Rss:")) {
      m.rss_kib = std::stoll(line.substr(4));
    }
  }
  REQUIRE(found);
  return m;
}

// Transparent huge pages are not switched off on this machine.
bool thp_available() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(f, modes);
  return !modes.empty() && modes.find("[never]") == std::string::npos;
}

}  // namespace

TEST_CASE("weights load as a read-only copy in memory advised for huge pages, or as a map of the file") {
  temp_dir dir;
  const fs::path file = dir.path / "w.safetensors";
  safetensors_writer w;
  w.add("w", dtype::bf16, {1024, 1536}, [](std::span<std::byte> dst) {  // 3 MiB: past one huge page
    for (size_t i = 0; i < dst.size(); ++i)
      dst[i] = std::byte{static_cast<uint8_t>((i * 7 + (i >> 16)) % 127)};  // finite bf16: open scans
  });
  w.write(file);
  const std::string raw = read_text(file);
  const auto copied = safetensors_file::open(file);
  const auto mapped = safetensors_file::open(file, weight_memory::mmap);
  const tensor_info& c = copied->tensors().at("w");
  const tensor_info& m = mapped->tensors().at("w");
  REQUIRE(c.num_bytes == 1024 * 1536 * 2);
  CHECK(std::memcmp(c.data, m.data, static_cast<size_t>(c.num_bytes)) == 0);
  CHECK(std::memcmp(c.data, raw.data() + (raw.size() - static_cast<size_t>(c.num_bytes)),
                    static_cast<size_t>(c.num_bytes)) == 0);
  const mapping cm = mapping_of(c.data), mm = mapping_of(m.data);
  CHECK(cm.perms == "r--p");         // private, written once, then read-only
  CHECK(cm.path.empty());            // anonymous
  CHECK(cm.start % (2 << 20) == 0);  // starts on a huge-page boundary
  CHECK(cm.end - cm.start >= raw.size());
  if (thp_available())
    CHECK(cm.thp_eligible);
  else
    MESSAGE("transparent huge pages are off here: the copy stays in 4 KiB pages");
  CHECK(mm.perms == "r--s");  // the file's shared page cache
  CHECK(mm.path == fs::canonical(file).string());
}

TEST_CASE("a NaN or an infinity in any float tensor is refused at open, naming the element") {
  // One bad element at flat index `at` of a [rows, cols] tensor; every other element finite,
  // among them each dtype's largest finite values (which must load).
  struct bad_case {
    dtype type;
    std::vector<uint8_t> bad;   // the bad element's bytes, little-endian
    std::vector<uint8_t> edge;  // a finite edge value's bytes
    std::string shown;
  };
  const std::vector<bad_case> cases = {
    {dtype::f32, {0x00, 0x00, 0xc0, 0x7f}, {0xff, 0xff, 0x7f, 0x7f}, "is NaN"},  // FLT_MAX edge
    {dtype::f32, {0x00, 0x00, 0x80, 0xff}, {0xff, 0xff, 0x7f, 0xff}, "is -infinity"},
    {dtype::bf16, {0x80, 0x7f}, {0x7f, 0x7f}, "is +infinity"},  // 0x7f7f: max
    {dtype::bf16, {0xc1, 0xff}, {0x7f, 0xff}, "is NaN"},
    {dtype::f16, {0x00, 0x7c}, {0xff, 0x7b}, "is +infinity"},  // 65504 loads
    {dtype::f16, {0x01, 0xfe}, {0xff, 0xfb}, "is NaN"},
    {dtype::f8_e4m3, {0x7f}, {0x7e}, "is NaN (F8_E4M3 code 0x7f)"},  // 448 loads
    {dtype::f8_e4m3, {0xff}, {0xfe}, "is NaN (F8_E4M3 code 0xff)"}};
  constexpr int64_t rows = 40, cols = 300, at = 37 * cols + 211;  // past the scan's first block
  for (const bad_case& c : cases) {
    CAPTURE(std::string(dtype_name(c.type)));
    CAPTURE(c.shown);
    const size_t size = c.bad.size();
    auto fill = [&](bool with_bad) {
      std::vector<std::byte> bytes(static_cast<size_t>(rows * cols) * size);
      for (size_t e = 0; e < static_cast<size_t>(rows * cols); ++e)
        for (size_t b = 0; b < size; ++b)
          bytes[e * size + b] = std::byte{(e % 3 == 0 ? c.edge : std::vector<uint8_t>(size, 0x11))[b]};
      if (with_bad)
        for (size_t b = 0; b < size; ++b)
          bytes[static_cast<size_t>(at) * size + b] = std::byte{c.bad[b]};
      return bytes;
    };
    temp_dir dir;
    const fs::path good = dir.path / "good.safetensors", bad = dir.path / "bad.safetensors";
    for (const bool with_bad : {false, true}) {
      safetensors_writer w;
      w.add("ok", dtype::f32, {2}, f32_bytes_of({1.0f, -2.0f}));
      w.add("model.w", c.type, {rows, cols}, fill(with_bad));
      w.write(with_bad ? bad : good);
    }
    for (const weight_memory memory : {weight_memory::copy, weight_memory::mmap}) {
      CAPTURE(static_cast<int>(memory));
      CHECK(safetensors_file::open(good, memory)->tensors().size() == 2);
      const std::string msg =
        error_of([&] { (void)safetensors_file::open(bad, memory, {}, /*fp8_panels=*/true); });
      CHECK_MESSAGE(contains(msg, bad.string() + ": tensor \"model.w\": element " + std::to_string(at) +
                                    " [37, 211] " + c.shown + " (expected a finite number)"),
                    msg);
    }
  }
}

TEST_CASE("skipped tensors (the MTP layer) are checked, left out, and in a copy never read nor committed") {
  temp_dir dir;
  const fs::path file = dir.path / "w.safetensors";
  constexpr int64_t big = int64_t{32} << 20;
  safetensors_writer w;
  w.add("model.layers.2.mlp.gate.weight", dtype::f32, {4}, f32_bytes_of({1, 2, 3, 4}));
  w.add("model.layers.3.eh_proj.weight", dtype::bf16, {big / 2},
        [](std::span<std::byte> dst) { std::memset(dst.data(), 0x5a, dst.size()); });
  w.add("model.norm.weight", dtype::f32, {2}, f32_bytes_of({5, 6}));
  w.write(file);
  const tensor_filter skip = [](std::string_view name) { return name.starts_with("model.layers.3."); };
  CHECK(safetensors_skipped_bytes(file, skip) == static_cast<uint64_t>(big));
  CHECK(safetensors_skipped_bytes(dir.path / "nope.safetensors", skip) == 0);
  for (const weight_memory memory : {weight_memory::copy, weight_memory::mmap}) {
    CAPTURE(static_cast<int>(memory));
    uint64_t last = 0;
    const auto f = safetensors_file::open(
      file, memory,
      [&](uint64_t n) {
        CHECK(n > last);
        last = n;
      },
      false, skip);
    CHECK(last == fs::file_size(file));  // progress reaches the whole file
    CHECK(f->tensors().size() == 2);
    CHECK_FALSE(f->tensors().contains("model.layers.3.eh_proj.weight"));
    float v[2];
    std::memcpy(v, f->tensors().at("model.norm.weight").data, sizeof v);
    CHECK(v[1] == 6.0f);
    if (memory == weight_memory::copy)  // without the skip: 32 MiB resident
      CHECK(mapping_of(f->tensors().at("model.norm.weight").data).rss_kib < 12 * 1024);
  }
  // the skipped tensor's header entry is still checked
  write_raw(file, R"({"model.layers.3.x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}})", 4);
  CHECK(contains(error_of([&] { (void)safetensors_file::open(file, weight_memory::copy, {}, false, skip); }),
                 "span 4 bytes but shape and dtype need 8"));
}

TEST_CASE("writer and reader round-trip tensors, metadata and alignment") {
  temp_dir dir;
  const fs::path file = dir.path / "t.safetensors";
  safetensors_writer w;
  w.set_metadata("format", "pt");
  w.add("a.bf16", dtype::bf16, {2, 2}, bytes_of({0x80, 0x3F, 0x00, 0xC0, 0, 0, 0x80, 0xBF}));
  w.add("b.fp8", dtype::f8_e4m3, {3}, bytes_of({0x38, 0xB8, 0x7E}));
  w.add("c.f32", dtype::f32, {1}, [](std::span<std::byte> dst) {
    const float v = 2.5f;
    std::memcpy(dst.data(), &v, 4);
  });
  CHECK(w.data_bytes() == 8 + 3 + 4);
  CHECK(w.names() == std::vector<std::string>{"a.bf16", "b.fp8", "c.f32"});
  w.write(file);

  const std::string raw = read_text(file);
  uint64_t header_len = 0;
  std::memcpy(&header_len, raw.data(), 8);
  CHECK((8 + header_len) % 8 == 0);
  CHECK(raw.size() == 8 + header_len + 15);

  auto f = safetensors_file::open(file);
  REQUIRE(f->tensors().size() == 3);
  const tensor_info& a = f->tensors().at("a.bf16");
  CHECK(a.type == dtype::bf16);
  CHECK(a.shape == std::vector<int64_t>{2, 2});
  CHECK(load_as_f32(a.type, a.data, 0) == 1.0f);
  CHECK(load_as_f32(a.type, a.data, 1) == -2.0f);
  CHECK(load_as_f32(a.type, a.data, 3) == -1.0f);
  const tensor_info& b = f->tensors().at("b.fp8");
  CHECK(fp8_e4m3_to_f32(static_cast<uint8_t>(b.data[2])) == 448.0f);
  const tensor_info& c = f->tensors().at("c.f32");
  float cv = 0;
  std::memcpy(&cv, c.data, 4);  // unaligned: after 11 bytes of data
  CHECK(cv == 2.5f);
  CHECK(c.file == file.string());
}

TEST_CASE("writer rejects a byte count that does not match the shape") {
  safetensors_writer w;
  CHECK(contains(error_of([&] { w.add("x", dtype::f32, {3}, bytes_of({1, 2, 3})); }), "\"x\""));
}

TEST_CASE("malformed safetensors files are rejected naming the file and tensor") {
  temp_dir dir;
  const fs::path file = dir.path / "bad.safetensors";

  SUBCASE("shorter than 8 bytes") {
    write_text(file, "abc");
    const std::string msg = open_error(file);
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "shorter than the 8-byte"));
  }
  SUBCASE("header length beyond the file") {
    std::string bytes(8, '\0');
    bytes[0] = static_cast<char>(200);
    write_text(file, bytes + "{}");
    const std::string msg = open_error(file);
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "header length 200 runs past the end"));
  }
  SUBCASE("malformed header JSON") {
    write_raw(file, R"({"w": {"dtype": "BF16", )", 0);
    const std::string msg = open_error(file);
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "malformed header JSON"));
  }
  SUBCASE("unknown dtype") {
    write_raw(file, R"({"w": {"dtype": "F64", "shape": [2], "data_offsets": [0, 16]}})", 16);
    const std::string msg = open_error(file);
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "tensor \"w\""));
    CHECK(contains(msg, "unknown dtype \"F64\""));
  }
  SUBCASE("byte span does not match shape * dtype size") {
    write_raw(file, R"({"w": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [0, 10]}})", 10);
    const std::string msg = open_error(file);
    CHECK(contains(msg, "tensor \"w\""));
    CHECK(contains(msg, "span 10 bytes but shape and dtype need 12"));
  }
  SUBCASE("a shape whose byte count overflows") {
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})",
              8);
    CHECK(contains(open_error(file),
                   "tensor \"w\": shape [4611686018427387904,4] holds more bytes than a 64-bit size"));
  }
  SUBCASE("offsets past the end of the file (truncated)") {
    write_raw(
      file,
      R"({"__metadata__": {"format": "pt"}, "w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
      8);
    const std::string msg = open_error(file);
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "tensor \"w\""));
    CHECK(contains(msg, "run past the end of the data (8 bytes"));
  }
  SUBCASE("begin > end") {
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}})", 8);
    CHECK(contains(open_error(file), "tensor \"w\": data_offsets begin 8 > end 4"));
  }
  SUBCASE("missing or mistyped fields") {
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4);
    CHECK(contains(open_error(file), "tensor \"w\": \"shape\" must be an array"));
    write_raw(file, R"({"w": {"dtype": "F32", "shape": [1]}})", 4);
    CHECK(contains(open_error(file), "tensor \"w\": \"data_offsets\""));
  }
  SUBCASE("missing file") {
    CHECK(contains(open_error(dir.path / "nope.safetensors"), "nope.safetensors: cannot open"));
  }
  SUBCASE("overlapping tensors, a hole, or bytes no tensor covers") {
    write_raw(file, R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
              12);
    std::string msg = open_error(file);
    CHECK(contains(msg, "tensor \"b\": data_offsets begin at byte 4, inside the tensor before it"));
    write_raw(file, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                        "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
              12);
    CHECK(contains(open_error(file), "tensor \"b\": data_offsets begin at byte 8, leaving bytes 4..8"));
    write_raw(file, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 5);
    msg = open_error(file);
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "the tensors cover 4 bytes of a 5-byte data area"));
  }
  SUBCASE("a tensor named twice") {
    write_raw(file, R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
                        "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]},
                        "a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
              8);
    const std::string msg = open_error(file);
    CHECK(contains(msg, file.string()));
    CHECK(contains(msg, "tensor \"a\": named twice in the header"));
  }
  SUBCASE("a header length one byte short shifts the data: refused") {
    const std::string header = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}} )";  // 1 pad
    write_raw(file, header, 8);
    std::string bytes = read_text(file);
    bytes[0] = static_cast<char>(header.size() - 1);  // the space becomes the data's first byte
    write_text(file, bytes);
    CHECK(contains(open_error(file), "the tensors cover 8 bytes of a 9-byte data area"));
  }
}

TEST_CASE("checkpoint directories: index with shards, scanned shards, and their errors") {
  temp_dir dir;
  make_tiny(dir.path);
  auto tensors = read_tensors(dir.path / "model.safetensors");
  fs::remove(dir.path / "model.safetensors");
  std::vector<tensor_copy> first, second;
  for (size_t i = 0; i < tensors.size(); ++i)
    (i % 2 ? second : first).push_back(tensors[i]);
  const size_t num_first = first.size();
  write_tensors(dir.path / "part-a.safetensors", first);
  write_tensors(dir.path / "part-b.safetensors", second);

  SUBCASE("scanned without an index") {
    auto ckpt = checkpoint::open(dir.path);
    CHECK(ckpt->tensor_names().size() == tensors.size());
    CHECK(ckpt->contains("lm_head.weight"));
  }
  SUBCASE("listed by an index") {
    nlohmann::json map;
    for (size_t i = 0; i < tensors.size(); ++i)
      map[tensors[i].name] = i % 2 ? "part-b.safetensors" : "part-a.safetensors";
    write_text(dir.path / "model.safetensors.index.json",
               nlohmann::json{{"metadata", {{"total_size", 1}}}, {"weight_map", map}}.dump());
    auto ckpt = checkpoint::open(dir.path);
    CHECK(ckpt->tensor_names().size() == tensors.size());

    map[tensors[0].name] = "part-c.safetensors";
    write_text(dir.path / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
    const std::string msg = error_of([&] { (void)checkpoint::open(dir.path); });
    CHECK(contains(msg, "model.safetensors.index.json"));
    CHECK(contains(msg, "\"" + tensors[0].name + "\""));
    CHECK(contains(msg, "part-c.safetensors"));
    CHECK(contains(msg, "does not exist"));

    map[tensors[0].name] = "part-b.safetensors";  // it is really in part-a
    write_text(dir.path / "model.safetensors.index.json", nlohmann::json{{"weight_map", map}}.dump());
    CHECK(contains(error_of([&] { (void)checkpoint::open(dir.path); }), "does not contain it"));

    write_text(dir.path / "model.safetensors.index.json", "{\"weight_map\": ");
    CHECK(contains(error_of([&] { (void)checkpoint::open(dir.path); }), "index.json: malformed JSON"));
  }
  SUBCASE("a tensor in two files") {
    write_tensors(dir.path / "part-c.safetensors", {second.front()});
    const std::string msg = error_of([&] { (void)checkpoint::open(dir.path); });
    CHECK(contains(msg, "\"" + second.front().name + "\" appears in both"));
    CHECK(contains(msg, "part-b.safetensors"));
    CHECK(contains(msg, "part-c.safetensors"));
  }
  SUBCASE("no safetensors at all") {
    fs::remove(dir.path / "part-a.safetensors");
    fs::remove(dir.path / "part-b.safetensors");
    CHECK(contains(error_of([&] { (void)checkpoint::open(dir.path); }), "no model.safetensors"));
  }
  CHECK(num_first > 0);
}

TEST_CASE("checkpoint tensor look-ups name the tensor, the file and the shapes") {
  temp_dir dir;
  make_tiny(dir.path);
  auto ckpt = checkpoint::open(dir.path);
  const std::string missing = error_of([&] { (void)ckpt->tensor("model.layers.0.nope"); });
  CHECK(contains(missing, dir.path.string()));
  CHECK(contains(missing, "\"model.layers.0.nope\" not found"));
  const std::string shape = error_of([&] { (void)ckpt->tensor("model.norm.weight", {65}); });
  CHECK(contains(shape, "model.safetensors"));
  CHECK(contains(shape, "\"model.norm.weight\": expected shape [65] (from config.json), got [64]"));
  CHECK(ckpt->tensor("model.norm.weight", {64}).type == dtype::bf16);
  CHECK(contains(error_of([&] { (void)checkpoint::open(dir.path / "missing"); }), "not a directory"));
}

TEST_CASE("loaded weights' pages are in place at open: reading every tensor takes no page faults") {
  temp_dir dir;
  const fs::path file = dir.path / "big.safetensors";
  constexpr int64_t page = 4096, pages = 1024;  // 4 MiB, one tensor
  safetensors_writer w;
  w.add("w", dtype::bf16, {pages, page / 2}, [](std::span<std::byte> dst) {
    for (size_t i = 0; i < dst.size(); ++i)
      dst[i] = std::byte{static_cast<uint8_t>(1 + (i >> 12) % 126)};  // finite bf16 (no NaN: open scans)
  });
  w.write(file);
  for (const weight_memory memory : {weight_memory::copy, weight_memory::mmap}) {
    CAPTURE(static_cast<int>(memory));
    const auto f = safetensors_file::open(file, memory);
    const tensor_info& t = f->tensors().at("w");
    auto minor_faults = [] {
      rusage u{};
      getrusage(RUSAGE_THREAD, &u);
      return static_cast<int64_t>(u.ru_minflt);
    };
    const int64_t before = minor_faults();
    const uint64_t sum = touch_pages(t.data, t.num_bytes, page);
    const int64_t faults = minor_faults() - before;
    CHECK(sum > 0);
    // Mapped lazily, the first read of each page (or 64 KiB fault-around window, or large page-cache
    // folio: 6 faults here on ext4) faults; populated at open (or written there by the copy), none does.
    CHECK(faults == 0);
  }
}
