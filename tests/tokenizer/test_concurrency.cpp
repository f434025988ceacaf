// tests/tokenizer/test_concurrency.cpp
// One tokenizer shared by several threads (the word cache is shared): same ids as alone, and
// long inputs round-trip.
#include <doctest/doctest.h>

#include <thread>

#include "tests/tokenizer/real_tokenizer.hpp"

TEST_CASE("encode from several threads at once gives the same ids") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  const auto& cases = moe::test::vectors().at("encode");
  std::vector<int> num_wrong(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < num_wrong.size(); ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (size_t i = (t + round) % cases.size(), k = 0; k < cases.size(); ++k, i = (i + 1) % cases.size())
          num_wrong[t] += tok->encode(cases[i].at("text").get<std::string>()) !=
                          cases[i].at("ids").get<std::vector<int32_t>>();
    });
  }
  for (auto& thread : threads)
    thread.join();
  for (const int wrong : num_wrong)
    CHECK(wrong == 0);
}

TEST_CASE("long inputs round-trip") {
  const auto tok = moe::test::real_tokenizer();
  if (!tok) {
    MESSAGE(moe::test::missing_tokenizer_message());
    return;
  }
  std::string mixed;
  for (int i = 0; i < 20000; ++i)
    mixed += "word " + std::to_string(i) + ", 字符\n\t";
  for (const std::string& text : {std::string(300000, ' '), std::string(300000, '9'),
                                  std::string(100000, 'x'), std::string(200000, '\n'), mixed}) {
    const auto ids = tok->encode(text);
    CHECK(tok->decode(ids) == text);
  }
}
