// tests/net/test_rpc_server_recovery.cpp
// Nothing accepted is lost over the wire while actors are killed under load: 200 streamed greedy
// generates, pipelined on one connection, while admin.kill crashes sessions, the request queue,
// both balancers, the stats sampler and (on 1P+1D) the ranks between their chunks. Every
// generate answers once with the single-rank generator's tokens, its stream gapless from seq 0
// and equal to its output_ids; afterwards every KV block and running slot is back.
#include <doctest/doctest.h>

#include <map>
#include <string>

#include "server_fixture.hpp"
#include "wire.hpp"

using namespace moe;
using namespace moe::testing;

namespace {

const net::auth_keys keys{.api_key = "client-secret", .admin_key = "admin-secret"};

struct stream_record {
  std::vector<int32_t> ids;
  uint64_t next_seq = 0;
  bool seq_ok = true;
};

/// The index of a live session, if admin.actors lists one: the `n`-th (mod their count), so
/// that the kills spread over the requests.
std::optional<int64_t> some_session(test_client& admin, uint32_t msgid, size_t n) {
  const net::rpc_response r = ask(admin, request_bytes(msgid, "admin.actors", std::vector<int>{}));
  REQUIRE(error_code(r) == 0);
  std::vector<int64_t> sessions;
  for (const auto& a : r.result.as<std::vector<std::map<std::string, msgpack::object>>>())
    if (a.at("kind").as<std::string>() == "session")
      sessions.push_back(a.at("index").as<int64_t>());
  if (sessions.empty())
    return std::nullopt;
  return sessions[n % sessions.size()];
}

/// stats' queue and ranks once nothing runs (asked again while the last ends are on their way).
void check_all_returned(test_client& client, uint32_t& msgid) {
  bool idle = false;
  std::string left;  // what was still held at the last look
  for (int tries = 0; tries < 200 && !idle; ++tries) {
    const net::rpc_response stats = ask(client, request_bytes(msgid++, "stats", std::vector<int>{}));
    if (error_code(stats) != 0)
      continue;  // a rank is restarting
    const auto m = result_map(stats);
    const auto queue = m.at("queue").as<std::map<std::string, int64_t>>();
    idle = queue.at("running") == 0 && queue.at("queued") == 0;
    left = "queue running " + std::to_string(queue.at("running")) + " queued " +
           std::to_string(queue.at("queued"));
    for (const auto& r : m.at("ranks").as<std::vector<std::map<std::string, msgpack::object>>>()) {
      const int64_t running = r.at("running").as<int64_t>();
      const int64_t free_blocks = r.at("free_blocks").as<int64_t>();
      const int64_t blocks = r.at("blocks").as<int64_t>();
      idle = idle && running == 0 && free_blocks == blocks;
      left += "; rank running " + std::to_string(running) + " blocks held " +
              std::to_string(blocks - free_blocks);
    }
  }
  CAPTURE(left);
  CHECK(idle);
}

/// Streams 200 pipelined greedy generates while killing the `kinds` in turn, spread evenly over
/// the stream's chunks;
/// returns the kills that found their actor alive, after checking every answer.
std::map<std::string, int> serve_under_kills(server_fixture& fx, const std::vector<std::string>& kinds) {
  fx.topo.max_running_requests = 4;  // some wait in the queue when it is killed
  fx.start({.max_in_flight = 256}, keys, 1000, /*fault_injection=*/true);  // all pipelined at once
  test_client client(fx.server->port());
  REQUIRE(error_code(ask(client, request_bytes(1, "auth", std::vector<std::string>{"client-secret"}))) == 0);
  test_client admin(fx.server->port());
  REQUIRE(error_code(ask(admin, request_bytes(1, "auth", std::vector<std::string>{"admin-secret"}))) == 0);

  constexpr int num_requests = 200;
  constexpr int32_t max_tokens = 10;
  const int kill_every = num_requests * max_tokens / static_cast<int>(kinds.size() + 1);
  std::map<uint32_t, std::vector<int32_t>> prompts, want;
  std::string pipelined;
  for (uint32_t i = 0; i < num_requests; ++i) {
    const uint32_t msgid = 100 + i;
    prompts[msgid] = {0, static_cast<int32_t>(300 + i), static_cast<int32_t>((500 + 3 * i) % 997 + 1), 7};
    want[msgid] = fx.reference_run(prompts[msgid],
                                   {.temperature = 0.0f, .max_tokens = max_tokens, .ignore_eos = true})
                    .output_ids;
    pipelined += streamed_generate(msgid, prompts[msgid], max_tokens);
  }
  client.send(pipelined);

  std::map<std::string, int> kills;
  size_t next_kind = 0;
  uint32_t admin_msgid = 10;
  std::map<uint32_t, stream_record> streams;
  std::map<uint32_t, net::rpc_response> answers;
  int chunks = 0;
  while (answers.size() < num_requests) {
    net::rpc_message m = client.next();
    if (auto* n = std::get_if<net::rpc_notification>(&m)) {
      REQUIRE(n->method == "token");
      const auto& p = n->params.via.array;
      stream_record& s = streams[p.ptr[0].as<uint32_t>()];
      s.seq_ok = s.seq_ok && p.ptr[1].as<uint64_t>() == s.next_seq++;
      for (const int32_t id : p.ptr[2].as<std::vector<int32_t>>())
        s.ids.push_back(id);
      if (++chunks % kill_every == 0 && next_kind < kinds.size()) {
        const std::string& kind = kinds[next_kind++];
        int64_t index = 0;
        if (kind == "session") {
          const auto live = some_session(admin, admin_msgid++, next_kind);
          if (!live)
            continue;
          index = *live;
        }
        const net::rpc_response killed = ask(admin, kill_bytes(admin_msgid++, kind, index));
        // 422: it was not alive (a session that just ended, a rank being restarted)
        if (error_code(killed) == 0 && result_map(killed).at("killed").as<bool>())
          ++kills[kind];
        else
          CHECK(error_code(killed) == 422);
      }
    } else if (auto* r = std::get_if<net::rpc_response>(&m)) {
      const uint32_t msgid = r->msgid;
      REQUIRE(answers.count(msgid) == 0);  // exactly one final answer
      answers.emplace(msgid, std::move(*r));
    }
  }
  for (auto& [id, r] : answers) {
    const uint32_t msgid = id;
    CAPTURE(msgid);
    if (error_code(r) != 0)
      FAIL(r.error.via.map.ptr[2].val.as<std::string>());
    const auto out = result_map(r).at("output_ids").as<std::vector<int32_t>>();
    CHECK(out == want[msgid]);
    CHECK(streams[msgid].ids == out);
    CHECK(streams[msgid].seq_ok);
  }
  uint32_t msgid = 500;
  check_all_returned(client, msgid);
  // every part lives again: ready makes a real generation
  CHECK(error_code(ask(client, request_bytes(msgid++, "ready", std::vector<int>{}))) == 0);
  // stats names the restarts per kind and the requests resumed or placed again
  const net::rpc_response stats = ask(client, request_bytes(msgid++, "stats", std::vector<int>{}));
  const auto recovery =
    result_map(stats).at("recovery").as<std::map<std::string, msgpack::object>>();  // into its frame
  const auto restarts = recovery.at("restarts").as<std::map<std::string, int64_t>>();
  const auto last = recovery.at("last_restart_s").as<std::map<std::string, double>>();
  const auto took = recovery.at("last_recovery_ms").as<std::map<std::string, double>>();
  for (const auto& [killed_kind, n] : kills) {
    const std::string kind = killed_kind;
    if (kind == "session")
      continue;
    CAPTURE(kind);
    CHECK(restarts.at(kind) == n);
    CHECK(last.at(kind) >= 0.0);
    CHECK(took.at(kind) > 0.0);                      // a restart takes time: a spawn and the re-introduction
    CHECK(took.at(kind) <= 1000.0 * last.at(kind));  // it ended before now
  }
  CHECK(recovery.at("resumed").as<int64_t>() >= 1);  // killed sessions, and those a killed prefill
                                                     // balancer's end took with it
  if (kills["decode_rank"] + kills["prefill_rank"] > 0)
    CHECK(recovery.at("migrations").as<int64_t>() >= recovery.at("resumed").as<int64_t>());
  // a resumed or migrated request prefills its prompt (and its tokens so far) again
  CHECK(recovery.at("reprefilled_tokens").as<int64_t>() > 0);
  CHECK(recovery.at("preemptions").as<int64_t>() == 0);  // worst-case KV bookings: no rank ran out
  // and the cluster still serves
  const net::rpc_response after = ask(client, streamed_generate(msgid++, prompts[100], max_tokens));
  REQUIRE(error_code(after) == 0);
  CHECK(result_map(after).at("output_ids").as<std::vector<int32_t>>() == want[100]);
  return kills;
}

}  // namespace

TEST_CASE_FIXTURE(server_fixture,
                  "streamed generates survive killed sessions, queue, balancer and ranks (1P+1D)") {
  if (skip_without_tokenizer())
    return;
  // through the kinds twice (4 restarts of the queue, within the default restart intensity)
  std::vector<std::string> kinds;
  for (int round = 0; round < 2; ++round)
    for (const char* k : {"session", "request_queue", "session", "decode_balancer", "prefill_balancer",
                          "session", "decode_rank", "request_queue", "session", "prefill_rank", "session"})
      kinds.emplace_back(k);
  std::map<std::string, int> kills = serve_under_kills(*this, kinds);
  CAPTURE(kills);
  int total = 0;
  for (const auto& [kind, n] : kills)
    total += n;
  CHECK(total >= 20);
  CHECK(kills["session"] >= 4);
  CHECK(kills["request_queue"] >= 4);
  for (const char* kind : {"decode_balancer", "prefill_balancer", "decode_rank", "prefill_rank"})
    CHECK(kills[kind] >= 2);
}

TEST_CASE_FIXTURE(server_fixture, "streamed generates survive killed sessions, queue and balancer (2P+2D)") {
  if (skip_without_tokenizer())
    return;
  topo.prefill_ranks = 2;  // ranks are killed in test_chaos.sh and test_fault_points.cpp
  topo.decode_ranks = 2;
  std::vector<std::string> kinds;
  for (int round = 0; round < 2; ++round)
    for (const char* k :
         {"session", "request_queue", "prefill_balancer", "decode_balancer", "session", "stats_sampler"})
      kinds.emplace_back(k);
  std::map<std::string, int> kills = serve_under_kills(*this, kinds);
  CAPTURE(kills);
  CHECK(kills["session"] >= 3);
  CHECK(kills["request_queue"] >= 2);
  CHECK(kills["decode_balancer"] >= 1);
  CHECK(kills["prefill_balancer"] >= 1);
}

TEST_CASE_FIXTURE(server_fixture,
                  "a client that disconnects while its requests migrate leaves nothing behind") {
  if (skip_without_tokenizer())
    return;
  start({}, keys, 1000, /*fault_injection=*/true);
  test_client admin(server->port());
  REQUIRE(error_code(ask(admin, request_bytes(1, "auth", std::vector<std::string>{"admin-secret"}))) == 0);
  uint32_t msgid = 10;
  for (const std::string kind : {"decode_rank", "session", "prefill_balancer"}) {
    CAPTURE(kind);
    {
      test_client client(server->port());
      REQUIRE(error_code(ask(client, request_bytes(1, "auth", std::vector<std::string>{"client-secret"}))) ==
              0);
      std::string pipelined;
      for (uint32_t i = 0; i < 6; ++i)
        pipelined += streamed_generate(100 + i, {0, static_cast<int32_t>(400 + i), 9}, 60);
      client.send(pipelined);
      REQUIRE(std::holds_alternative<net::rpc_notification>(client.next()));  // streaming
      int64_t index = 0;
      if (kind == "session") {
        const auto live = some_session(admin, msgid++, 0);
        REQUIRE(live);
        index = *live;
      }
      REQUIRE(error_code(ask(admin, kill_bytes(msgid++, kind, index))) == 0);
      client.close();  // while its requests are placed again or resumed
    }
    check_all_returned(admin, msgid);
  }
}
