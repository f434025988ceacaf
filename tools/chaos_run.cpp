// tools/chaos_run.cpp
// NOTE: the killer paces itself with sleeps: when it kills is what a chaos run varies, not work.
#include "tools/chaos_run.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <optional>
#include <thread>

#include "config/model_config.hpp"  // input_error
#include "tools/wire_client.hpp"

namespace moe::tools {

namespace {

using clock = std::chrono::steady_clock;
using object_map = std::map<std::string, msgpack::object>;
constexpr auto answer_timeout = std::chrono::seconds(60);
constexpr auto call_timeout = std::chrono::seconds(10);
constexpr auto recovery_timeout = std::chrono::seconds(10);

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

msgpack::sbuffer generate_request(uint32_t msgid, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  return request_frame(msgid, "generate", 1, [&](auto& pk) {
    pk.pack_map(5);
    pk.pack("input_ids").pack(prompt).pack("max_tokens").pack(max_tokens);
    pk.pack("temperature").pack(0).pack("ignore_eos").pack(true).pack("stream").pack(true);
  });
}

msgpack::sbuffer no_params(uint32_t msgid, std::string_view method) {
  return request_frame(msgid, method, 0, [](auto&) {});
}

int error_code_of(const net::rpc_response& r) {
  if (r.error.is_nil())
    return 0;
  return r.error.as<object_map>().at("code").as<int>();
}

void authenticate(wire_client& c, const std::string& key, uint32_t msgid) {
  if (key.empty())
    return;
  const auto r = c.call(request_frame(msgid, "auth", 1, [&](auto& pk) { pk.pack(key); }), msgid,
                        call_timeout);
  if (error_code_of(r) != 0)
    throw input_error("chaos: the admin key was refused");
}

struct stream_record {
  std::vector<int32_t> ids;
  uint64_t next_seq = 0;
  bool seq_ok = true;
};

// A generate answered 503 retryable (its connection's bridge was lost, the server is short of a
// part) is sent again after retry_after_ms, as a real client would, at most this often.
constexpr int max_retries = 5;

// The retry_after_ms of a retryable error; none for any other answer.
std::optional<int64_t> retry_after_ms(const net::rpc_response& r) {
  if (r.error.is_nil())
    return std::nullopt;
  const auto err = r.error.as<object_map>();
  const auto retryable = err.find("retryable");
  if (retryable == err.end() || !retryable->second.as<bool>())
    return std::nullopt;
  const auto after = err.find("retry_after_ms");
  return after == err.end() ? 0 : after->second.as<int64_t>();
}

/// One pass: every prompt once, `concurrency` in flight; outputs by request index.
pass_report run_load(uint16_t port, const std::string& key, const std::vector<std::vector<int32_t>>& prompts,
                     const chaos_options& o, std::vector<std::vector<int32_t>>& outputs) {
  wire_client c("127.0.0.1", port);
  authenticate(c, key, 1);
  pass_report rep;
  outputs.assign(prompts.size(), {});
  rep.completed_idx.assign(prompts.size(), false);
  std::map<uint32_t, stream_record> streams;
  std::map<uint32_t, size_t> index_of;  // msgid -> request, for the msgids in flight
  std::vector<int> retries(prompts.size(), 0);
  std::multimap<clock::time_point, size_t> due;  // requests to send again, by when
  uint32_t next_msgid = 1000;
  size_t next = 0, answered = 0;
  int64_t in_flight = 0;
  const auto t0 = clock::now();
  auto last_message = t0;
  auto send = [&](size_t i) {
    const uint32_t msgid = next_msgid++;
    index_of[msgid] = i;
    c.send(generate_request(msgid, prompts[i], o.max_tokens));
    ++in_flight;
  };
  while (answered < prompts.size()) {
    while (!due.empty() && due.begin()->first <= clock::now()) {
      send(due.begin()->second);
      due.erase(due.begin());
    }
    while (next < prompts.size() && in_flight + static_cast<int64_t>(due.size()) < o.concurrency) {
      send(next++);
      ++rep.sent;
    }
    auto m = c.next(due.empty() ? answer_timeout : std::chrono::milliseconds(10));
    if (!m) {
      if (!due.empty() && clock::now() - last_message < answer_timeout)
        continue;                                         // waiting to send a retry
      rep.lost += static_cast<int64_t>(next - answered);  // nothing for a minute: the rest are lost
      break;
    }
    last_message = clock::now();
    if (auto* n = std::get_if<net::rpc_notification>(&*m); n && n->method == "token") {
      const auto& p = n->params.via.array;
      stream_record& s = streams[p.ptr[0].as<uint32_t>()];
      s.seq_ok = s.seq_ok && p.ptr[1].as<uint64_t>() == s.next_seq++;
      for (const int32_t id : p.ptr[2].as<std::vector<int32_t>>())
        s.ids.push_back(id);
    } else if (auto* r = std::get_if<net::rpc_response>(&*m); r && index_of.count(r->msgid) > 0) {
      const size_t i = index_of.at(r->msgid);
      index_of.erase(r->msgid);
      --in_flight;
      if (const int code = error_code_of(*r); code != 0) {
        if (const auto after = retry_after_ms(*r); after && retries[i] < max_retries) {
          ++retries[i];
          ++rep.retried;
          due.emplace(clock::now() + std::chrono::milliseconds(*after), i);
          continue;
        }
        ++answered;
        ++rep.failed_by_code[code];
        continue;
      }
      ++answered;
      outputs[i] = r->result.as<object_map>().at("output_ids").as<std::vector<int32_t>>();
      const stream_record& s = streams[r->msgid];
      if (!s.seq_ok || s.ids != outputs[i])
        ++rep.bad_streams;
      rep.output_tokens += static_cast<int64_t>(outputs[i].size());
      rep.completed_idx[i] = true;
      ++rep.completed;
    }
  }
  rep.wall_s = seconds_since(t0);
  return rep;
}

struct listed_actor {
  std::string kind;
  int64_t index = 0, restarts = 0;
};

std::vector<listed_actor> list_actors(wire_client& admin, uint32_t& msgid) {
  const uint32_t id = msgid++;
  const auto r = admin.call(no_params(id, "admin.actors"), id, call_timeout);
  if (error_code_of(r) != 0)
    throw input_error("chaos: admin.actors failed (is the server started with --fault-injection?)");
  std::vector<listed_actor> out;
  for (const auto& a : r.result.as<std::vector<object_map>>())
    out.push_back(
      {a.at("kind").as<std::string>(), a.at("index").as<int64_t>(), a.at("restarts").as<int64_t>()});
  return out;
}

// Waits until the killed actor has a successor: a supervised one listed with one more restart,
// a session's request listed with a later session (restarts: the sessions it lost), a connection
// bridge by a new one (an index above `newest`, the highest listed before the kill).
std::optional<double> wait_recovered(wire_client& admin, uint32_t& msgid, const listed_actor& killed,
                                     int64_t newest, clock::time_point at) {
  while (clock::now() - at < recovery_timeout) {
    for (const listed_actor& a : list_actors(admin, msgid))
      if (a.kind == killed.kind &&
          (killed.kind == "connection_bridge" ? a.index > newest
                                              : a.index == killed.index && a.restarts > killed.restarts))
        return seconds_since(at);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return std::nullopt;
}

// Kills until `opts.num_kills` are done or the load is over: the kinds in turn (a kind with no
// live actor, as no session between requests, is tried again next time), a random one of each.
void kill_loop(uint16_t port, const std::string& key, const chaos_options& o,
               const std::atomic<bool>& load_done, std::map<std::string, kind_report>& kinds) {
  wire_client admin("127.0.0.1", port);
  uint32_t msgid = 1;
  authenticate(admin, key, msgid++);
  std::mt19937_64 rng(o.seed ^ 0x9e3779b97f4a7c15ULL);
  std::uniform_real_distribution<double> jitter(0.5, 1.5);
  int64_t done = 0;
  while (done < o.num_kills && !load_done) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s * jitter(rng)));
    const std::string& kind = o.kinds[static_cast<size_t>(done) % o.kinds.size()];  // each in turn
    std::vector<listed_actor> candidates;
    for (const listed_actor& a : list_actors(admin, msgid))
      if (a.kind == kind)
        candidates.push_back(a);
    if (candidates.empty())
      continue;  // no such actor lives now (no session between requests)
    const listed_actor victim = candidates[rng() % candidates.size()];
    int64_t newest = 0;
    for (const listed_actor& a : candidates)
      newest = std::max(newest, a.index);
    const uint32_t id = msgid++;
    const auto r =
      admin.call(request_frame(id, "admin.kill", 1,
                               [&](auto& pk) {
                                 pk.pack_map(2);
                                 pk.pack("kind").pack(victim.kind).pack("index").pack(victim.index);
                               }),
                 id, call_timeout);
    if (error_code_of(r) != 0)
      continue;  // it ended between the listing and the kill
    const auto at = clock::now();
    ++done;
    kind_report& k = kinds[kind];
    ++k.kills;
    if (const auto s = wait_recovered(admin, msgid, victim, newest, at))
      k.recovery_s.push_back(*s);
  }
}

// Polls stats until nothing runs (10 s at most): the KV blocks and running slots still taken.
void count_leaks(uint16_t port, const std::string& key, chaos_report& rep) {
  wire_client c("127.0.0.1", port);
  uint32_t msgid = 1;
  authenticate(c, key, msgid++);
  const auto t0 = clock::now();
  for (;;) {
    const uint32_t id = msgid++;
    const auto r = c.call(no_params(id, "stats"), id, call_timeout);
    if (error_code_of(r) == 0) {
      const auto m = r.result.as<object_map>();
      rep.running_left = m.at("queue").as<std::map<std::string, int64_t>>().at("running");
      rep.leaked_blocks = 0;
      for (const auto& rank : m.at("ranks").as<std::vector<object_map>>())
        rep.leaked_blocks += rank.at("blocks").as<int64_t>() - rank.at("free_blocks").as<int64_t>();
      const auto recovery = m.at("recovery").as<object_map>();
      rep.resumed = recovery.at("resumed").as<int64_t>();
      rep.migrations = recovery.at("migrations").as<int64_t>();
      rep.preemptions = recovery.at("preemptions").as<int64_t>();
      rep.reprefilled_tokens = recovery.at("reprefilled_tokens").as<int64_t>();
      if ((rep.running_left == 0 && rep.leaked_blocks == 0) || seconds_since(t0) > 10.0)
        return;
    } else if (seconds_since(t0) > 10.0) {
      throw input_error("chaos: stats did not answer after the load");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace

chaos_report run_chaos(uint16_t port, const std::string& admin_key, int64_t vocab_size,
                       const chaos_options& o) {
  if (o.kinds.empty())
    throw input_error("--kinds: name at least one kind");
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(1, static_cast<int32_t>(vocab_size - 1));
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(o.num_requests));
  for (auto& p : prompts)
    for (int64_t i = 0; i < o.prompt_len; ++i)
      p.push_back(token(rng));
  chaos_report rep;
  std::vector<std::vector<int32_t>> reference, outputs;
  rep.reference = run_load(port, admin_key, prompts, o, reference);
  std::atomic<bool> load_done{false};
  std::exception_ptr killer_error;
  std::thread killer([&] {
    try {
      kill_loop(port, admin_key, o, load_done, rep.kinds);
    } catch (...) {
      killer_error = std::current_exception();
    }
  });
  try {
    rep.chaos = run_load(port, admin_key, prompts, o, outputs);
  } catch (...) {
    load_done = true;
    killer.join();
    throw;
  }
  load_done = true;
  killer.join();
  if (killer_error)
    std::rethrow_exception(killer_error);
  // a request that failed in either pass is counted there; every pair that completed must agree
  for (size_t i = 0; i < prompts.size(); ++i)
    if (rep.chaos.completed_idx[i] && rep.reference.completed_idx[i] && outputs[i] != reference[i])
      ++rep.chaos.mismatches;
  count_leaks(port, admin_key, rep);
  return rep;
}

}  // namespace moe::tools
