// tests/net/test_server_log.cpp
// The server's periodic stats line: rates over the interval, requests, KV in use per rank.
#include <doctest/doctest.h>

#include "net/server_log.hpp"

using moe::net::format_stats_line;
using moe::net::stats_line_figures;

TEST_CASE("a stats line: token rates over its interval, requests, every rank's KV in use, connections") {
  const stats_line_figures f{.seconds = 4.0,
                             .requests = 3,
                             .failed = 1,
                             .input_tokens = 482,
                             .output_tokens = 180,
                             .connections = 2,
                             .prefill_kv = {0.0, 0.125},
                             .decode_kv = {0.374, 0.996}};
  CHECK(format_stats_line(f) == "prompt 120.5 tok/s, generation 45.0 tok/s, 3 requests (1 failed) in 4.0 s, "
                                "KV in use: prefill 0 % 13 %, decode 37 % 100 %, 2 connections");
  const stats_line_figures one{.seconds = 0.0, .requests = 1, .connections = 1};  // no division by zero
  CHECK(format_stats_line(one) ==
        "prompt 0.0 tok/s, generation 0.0 tok/s, 1 request (0 failed) in 0.0 s, KV in use: prefill, decode, "
        "1 connection");
}

TEST_CASE(
  "a stats line names the actor restarts, migrations and preemptions of its interval, when there were any") {
  const stats_line_figures f{.seconds = 1.0,
                             .requests = 2,
                             .connections = 1,
                             .restarts = {{"decode_rank", 2}, {"request_queue", 1}, {"stats_sampler", 0}},
                             .recovery_ms = {{"decode_rank", 41.26}, {"stats_sampler", 0.5}},
                             .migrations = 1};
  CHECK(format_stats_line(f) ==
        "prompt 0.0 tok/s, generation 0.0 tok/s, 2 requests (0 failed) in 1.0 s, KV in use: prefill, decode, "
        "1 connection, 3 actor restarts (decode_rank 2, last took 41.3 ms; request_queue 1), 1 migration");
  const stats_line_figures one{
    .seconds = 1.0, .requests = 2, .connections = 1, .restarts = {{"stats_sampler", 1}}};
  CHECK(format_stats_line(one) ==
        "prompt 0.0 tok/s, generation 0.0 tok/s, 2 requests (0 failed) in 1.0 s, "
        "KV in use: prefill, decode, 1 connection, 1 actor restart (stats_sampler 1)");
  const stats_line_figures p{.seconds = 1.0, .requests = 2, .connections = 1, .preemptions = 4};
  CHECK(format_stats_line(p) == "prompt 0.0 tok/s, generation 0.0 tok/s, 2 requests (0 failed) in 1.0 s, "
                                "KV in use: prefill, decode, 1 connection, 4 preemptions");
}
