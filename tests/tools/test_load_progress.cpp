// tests/tools/test_load_progress.cpp
// A weight load reports its progress on stderr only once it has taken a while, then every few
// seconds and at the end; the loader hears every file's bytes, in order, up to the total.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/test_util.hpp"
#include "tools/lib/load_progress.hpp"

using namespace moe;
namespace fs = std::filesystem;

namespace {

std::string contents(std::FILE* f) {
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;)
    out += static_cast<char>(c);
  return out;
}

}  // namespace

TEST_CASE("a quick load prints nothing, a slow one a line now and then and one at the end") {
  std::FILE* quick = std::tmpfile();
  REQUIRE(quick != nullptr);
  tools::load_reporter q(quick, 2.0, 5.0);
  q.update(1'000'000'000, 4'000'000'000, 0.5);
  q.update(4'000'000'000, 4'000'000'000, 1.9);  // done before the first report was due
  CHECK(q.lines() == 0);
  CHECK(contents(quick).empty());
  std::fclose(quick);

  std::FILE* slow = std::tmpfile();
  REQUIRE(slow != nullptr);
  tools::load_reporter r(slow, 2.0, 5.0);
  r.update(500'000'000, 4'000'000'000, 1.0);    // too early
  r.update(1'000'000'000, 4'000'000'000, 2.4);  // first line
  r.update(1'500'000'000, 4'000'000'000, 6.0);  // 3.6 s later: too soon
  r.update(3'000'000'000, 4'000'000'000, 7.6);  // 5.2 s later: second line
  r.update(4'000'000'000, 4'000'000'000, 9.0);  // the end
  CHECK(r.lines() == 3);
  CHECK(contents(slow) == "moeserve: loading weights: 1.0 of 4.0 GB (25 %), 2 s\n"
                          "moeserve: loading weights: 3.0 of 4.0 GB (75 %), 8 s\n"
                          "moeserve: loaded 4.0 GB of weights in 9 s\n");
  std::fclose(slow);
}

TEST_CASE("checkpoint loading reports every file's bytes, in order, up to the files' total") {
  for (const weight_memory memory : {weight_memory::copy, weight_memory::mmap}) {
    CAPTURE(static_cast<int>(memory));
    test::temp_dir dir;
    test::make_tiny(dir.path);
    auto tensors = test::read_tensors(dir.path / "model.safetensors");
    fs::remove(dir.path / "model.safetensors");
    std::vector<test::tensor_copy> first, second;
    for (size_t i = 0; i < tensors.size(); ++i)
      (i % 2 ? second : first).push_back(tensors[i]);
    test::write_tensors(dir.path / "part-a.safetensors", first);
    test::write_tensors(dir.path / "part-b.safetensors", second);
    const uint64_t total = fs::file_size(dir.path / "part-a.safetensors") +
                           fs::file_size(dir.path / "part-b.safetensors");

    std::vector<std::pair<uint64_t, uint64_t>> heard;
    (void)checkpoint::open(dir.path, memory,
                           [&](uint64_t done, uint64_t all) { heard.emplace_back(done, all); });
    REQUIRE(heard.size() >= 2);  // at least once per file
    for (size_t i = 0; i < heard.size(); ++i) {
      CHECK(heard[i].second == total);
      if (i > 0)
        CHECK(heard[i].first > heard[i - 1].first);
    }
    CHECK(heard.back().first == total);
    CHECK(std::find(heard.begin(), heard.end(),
                    std::pair{fs::file_size(dir.path / "part-a.safetensors"), total}) !=
          heard.end());  // the first file, complete, before the second
  }
}
