// tests/model/test_output_text.cpp
// Finish rules and streamed text with stop strings, on hand-picked cases.
#include <doctest/doctest.h>

#include <filesystem>

#include "kernels/model/output_text.hpp"

using namespace moe;

TEST_CASE("token_finish: EOS, stop ids, max_tokens and a full context") {
  sampling_params p{.max_tokens = 3, .stop_token_ids = {7}};
  CHECK(token_finish(p, 1, 5, 1, 10, 100) == finish_reason::none);
  CHECK(token_finish(p, 1, 1, 1, 10, 100) == finish_reason::stop);     // EOS
  CHECK(token_finish(p, 1, 7, 1, 10, 100) == finish_reason::stop);     // stop id
  CHECK(token_finish(p, 1, 5, 3, 10, 100) == finish_reason::length);   // max_tokens
  CHECK(token_finish(p, 1, 5, 1, 100, 100) == finish_reason::length);  // context full
  p.ignore_eos = true;
  CHECK(token_finish(p, 1, 1, 1, 10, 100) == finish_reason::none);
}

TEST_CASE("find_stop finds the earliest stop string that ends after search_from") {
  CHECK(find_stop("abcdef", {"cd", "b"}, 0) == 1);
  CHECK(find_stop("abcdef", {"cd"}, 3) == 2);  // "cd" ends at 4 > 3
  CHECK(find_stop("abcdef", {"xy"}, 0) == std::string::npos);
  CHECK(find_stop("abc", {}, 0) == std::string::npos);
}

TEST_CASE("text_stream holds back a forming stop string and cuts before it") {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR);
    return;
  }
  auto tok = tokenizer::load(MOE_TOKENIZER_DIR);
  const std::vector<int32_t> ids = tok->encode("Hello world, the end. More text");
  text_stream out(tok, {"the end"});
  std::string streamed;
  for (int32_t id : ids)
    streamed += out.push(id);
  streamed += out.finish();
  CHECK(out.stopped());
  CHECK(out.text() == "Hello world, ");
  CHECK(streamed == "Hello world, ");

  text_stream plain(tok, {});
  std::string all;
  for (int32_t id : tok->encode("naïve 日本語 🚀"))
    all += plain.push(id);
  all += plain.finish();
  CHECK(all == "naïve 日本語 🚀");
  CHECK_FALSE(plain.stopped());
}
