// tests/tools/test_bench_runner.cpp
// `moeserve bench`'s load generator against a served tiny model on a loopback ephemeral port:
// every request answered with the asked lengths, 429s counted as rejected, --duration ending
// in cancels that free the server's KV, and a clear error when nothing listens.
#include <doctest/doctest.h>

#include "net/server_fixture.hpp"
#include "tools/bench_runner.hpp"

using namespace moe;
using namespace moe::testing;
using namespace moe::tools;

namespace {

bench_config config_for(uint16_t port) {
  bench_config cfg;
  cfg.port = port;
  cfg.seed = 1;
  return cfg;
}

}  // namespace

TEST_CASE_FIXTURE(server_fixture, "6 prompts at concurrency 3 all come back with the asked lengths") {
  if (skip_without_tokenizer())
    return;
  start();
  bench_config cfg = config_for(server->port());
  cfg.num_prompts = 6;
  cfg.max_concurrency = 3;
  cfg.num_connections = 3;
  cfg.shape = {.input_len = 8, .output_len = 5};
  int64_t num_reports = 0;
  const bench_run run = run_bench(cfg, [&](const bench_progress&) { ++num_reports; });
  CHECK(run.model.vocab_size == 1000);
  CHECK(run.model.max_context == 128);
  REQUIRE(run.records.size() == 6);
  const bench_metrics m = compute_metrics(run.records, run.duration_s);
  CHECK(m.completed == 6);
  CHECK(m.failed == 0);
  CHECK(m.rejected == 0);
  CHECK(m.migrated == 0);  // the server does not send it yet
  CHECK(m.total_input_tokens == 6 * 8);
  CHECK(m.total_output_tokens == 6 * 5);
  for (const bench_record& r : run.records) {
    CHECK(r.itl_s.size() == 4);  // one gap per token after the first
    CHECK(r.ttft_s > 0.0);
    CHECK(r.ttft_s <= r.e2e_s);
  }
  CHECK(m.ttft.p99_ms >= m.ttft.median_ms);
  CHECK(num_reports >= 1);  // the final report at least
}

TEST_CASE_FIXTURE(server_fixture, "429 answers are counted as rejected") {
  if (skip_without_tokenizer())
    return;
  // One generate in flight per connection, three sent together on one connection: the server
  // reads them in one piece (the bench coalesces what one handler queues), so the 2nd and 3rd
  // meet the 1st still running and get 429. Later ones depend on timing: each is either
  // answered or rejected.
  start({.max_in_flight = 1});
  bench_config cfg = config_for(server->port());
  cfg.num_prompts = 6;
  cfg.max_concurrency = 3;
  cfg.num_connections = 1;
  cfg.shape = {.input_len = 4, .output_len = 16};
  const bench_run run = run_bench(cfg);
  const bench_metrics m = compute_metrics(run.records, run.duration_s);
  CHECK(m.rejected >= 2);
  CHECK(m.completed >= 1);
  CHECK(m.completed + m.rejected == 6);
  CHECK(m.failed == m.rejected);
  CHECK(m.errors.at("429") == m.rejected);
  CHECK(m.total_output_tokens == m.completed * 16);
}

TEST_CASE_FIXTURE(server_fixture,
                  "--duration stops issuing, cancels what still runs, and the server frees its KV") {
  if (skip_without_tokenizer())
    return;
  start();
  bench_config cfg = config_for(server->port());
  cfg.num_prompts = std::nullopt;  // as many as the time allows
  cfg.duration_s = 0.3;
  cfg.grace_s = 0.0;
  cfg.request_rate = 50.0;
  cfg.max_concurrency = 2;
  cfg.num_connections = 2;
  cfg.shape = {.input_len = 4, .output_len = 100};
  const bench_run run = run_bench(cfg);
  REQUIRE(!run.records.empty());
  const bench_metrics m = compute_metrics(run.records, run.duration_s);
  CHECK(m.completed + m.failed == static_cast<int64_t>(run.records.size()));
  for (const bench_record& r : run.records)
    if (!r.success)
      CHECK(r.error_kind == "cancelled");
  for (const rank_stats& s : idle_rank_stats())
    CHECK(s.num_free_blocks == s.num_blocks);
}

TEST_CASE_FIXTURE(server_fixture,
                  "with --api-key every connection authenticates first, a wrong key is a clear error") {
  if (skip_without_tokenizer())
    return;
  start({}, {.api_key = "sekrit"});
  bench_config cfg = config_for(server->port());
  cfg.num_prompts = 4;
  cfg.num_connections = 2;
  cfg.shape = {.input_len = 4, .output_len = 2};
  CHECK_THROWS_WITH_AS(run_bench(cfg, {}), doctest::Contains("authenticate first"), input_error);  // no key
  cfg.api_key = "wrong";
  CHECK_THROWS_WITH_AS(run_bench(cfg, {}), doctest::Contains("auth (--api-key)"), input_error);
  cfg.api_key = "sekrit";
  const bench_run run = run_bench(cfg, {});
  CHECK(compute_metrics(run.records, run.duration_s).completed == 4);
}

TEST_CASE_FIXTURE(server_fixture, "a --prompt is measured in the server's tokens against the context") {
  if (skip_without_tokenizer())
    return;
  start();
  bench_config cfg = config_for(server->port());
  cfg.num_prompts = 2;
  cfg.num_connections = 1;
  // digits and spaces: token ids below the test model's 1000-token vocabulary
  cfg.shape = {.input_len = 1, .output_len = 3, .prompt = std::string("1 2 3 4")};
  const bench_run run = run_bench(cfg, {});
  REQUIRE(run.records.size() == 2);
  INFO(run.records[0].error_kind, " ", run.records[0].error);
  CHECK(run.records[0].prompt_tokens == 8);  // BOS + 4 digits + 3 spaces

  CHECK(compute_metrics(run.records, run.duration_s).completed == 2);
  std::string digits;  // BOS + 63 digits + 62 spaces + 3 outputs > 128
  for (int i = 0; i < 63; ++i)
    digits += std::to_string(i % 10) + " ";
  digits.pop_back();
  cfg.shape.prompt = digits;
  CHECK_THROWS_WITH_AS(static_cast<void>(run_bench(cfg, {})), doctest::Contains("--prompt ("), input_error);
  CHECK_THROWS_WITH_AS(static_cast<void>(run_bench(cfg, {})),
                       doctest::Contains("do not fit the model's context of 128"), input_error);
}

TEST_CASE("nothing listening: a clear input_error") {
  asio::io_context io;
  asio::ip::tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
  const uint16_t port = acceptor.local_endpoint().port();
  acceptor.close();  // the port is free again, nobody listens
  bench_config cfg = config_for(port);
  CHECK_THROWS_WITH_AS(static_cast<void>(run_bench(cfg)),
                       doctest::Contains(("cannot connect to 127.0.0.1:" + std::to_string(port)).c_str()),
                       input_error);
}
