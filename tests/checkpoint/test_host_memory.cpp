// tests/checkpoint/test_host_memory.cpp
// Reading MemAvailable and refusing allocations that would not fit, with the numbers; and a
// checkpoint bigger than memory refused before a byte of it is read.
#include <doctest/doctest.h>

#include "checkpoint/test_util.hpp"
#include "kernels/checkpoint/host_memory.hpp"

using namespace moe;
using namespace moe::test;

TEST_CASE("MemAvailable is read from /proc/meminfo's text, in bytes") {
  const std::string meminfo = "MemTotal:       25165824 kB\n"
                              "MemFree:         1048576 kB\n"
                              "MemAvailable:   22758592 kB\n"
                              "Buffers:           12345 kB\n";
  CHECK(parse_mem_available(meminfo) == uint64_t{22758592} * 1024);
  CHECK(parse_mem_available("MemAvailable: 7 kB") == uint64_t{7168});
  CHECK_FALSE(parse_mem_available("MemTotal: 1 kB\nMemFree: 1 kB\n").has_value());
  CHECK_FALSE(parse_mem_available("MemAvailable: lots kB\n").has_value());
  CHECK_FALSE(parse_mem_available("MemAvailable: 12 MB\n").has_value());
  CHECK_FALSE(parse_mem_available("").has_value());
  // this machine's own: some, and less than 2^50 bytes
  const std::optional<uint64_t> here = available_memory();
  REQUIRE(here.has_value());
  CHECK(*here > 0);
  CHECK(*here < (uint64_t{1} << 50));
}

TEST_CASE("require_memory refuses what does not fit, naming both sizes and the advice") {
  const uint64_t gb = 1000000000;
  CHECK_NOTHROW(require_memory(gb, "x", "", gb));                  // exactly fits
  CHECK_NOTHROW(require_memory(100 * gb, "x", "", std::nullopt));  // unknown: no check
  const std::string e = error_of([&] { require_memory(3 * gb + gb / 4, "the thing", ": try less", 2 * gb); });
  CHECK(e == "the thing would take 3.25 GB of memory, but 2.00 GB is available (MemAvailable in "
             "/proc/meminfo): try less");
}

TEST_CASE("a checkpoint bigger than memory is refused before it is read") {
  temp_dir tmp;
  const fs::path dir = make_tiny(tmp.path / "m");
  // a sparse file: 8 TiB long, no blocks on disk; its header (zeros) would not even parse
  fs::resize_file(dir / "model.safetensors", uint64_t{8} << 40);
  const std::string e = error_of([&] { (void)checkpoint::open(dir, weight_memory::copy); });
  CHECK(contains(e, dir.string() + ": copying the weights (1 file) would take 8796.09 GB of memory"));
  CHECK(contains(e, "--mmap-weights"));
}
