// tests/actors/test_cluster.cpp
// The whole serving graph in-process (queue -> balancers -> P prefill ranks -> D decode ranks ->
// sessions): greedy and seeded outputs equal the single-rank generator with the same EP payload
// types, for 1+1, 2+2 and 4+4 ranks (EP4 with redundant experts), overlap on and off, prefill
// chunks of 16/64/512 tokens, 32 concurrent requests of mixed lengths; every KV pool refills.
// The reduced (DeepEP) combine: equal to the generator in a group of one, the same on every run.
// The fast kernels over V3's FP8 layout: tokens and logprobs equal the single rank's bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <set>

#include "actor_fixture.hpp"
#include "actors/cluster.hpp"
#include "kernels/backend.hpp"
#include "kernels/cpu/fast_weights.hpp"
#include "kernels/model/generator.hpp"
#include "model/tiny_model.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

struct collected {
  std::vector<int32_t> streamed;
  std::string text;
  uint64_t next_seq = 0;
  bool seq_ok = true;
  session_result result;
  bool done = false;
};

std::vector<request_spec> mixed_requests(int64_t count, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<request_spec> specs;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t len = 1 + static_cast<int64_t>(rng() % 90);
    request_spec s;
    s.prompt_ids.push_back(0);
    for (int64_t t = 1; t < len; ++t)
      s.prompt_ids.push_back(static_cast<int32_t>(rng() % vocab));
    s.sampling.max_tokens = 1 + static_cast<int32_t>(rng() % 10);
    s.sampling.ignore_eos = true;
    if (i % 4 == 3) {  // some seeded sampling too
      s.sampling.temperature = 0.9f;
      s.sampling.seed = 100 + i;
    } else {
      s.sampling.temperature = 0.0f;
    }
    specs.push_back(std::move(s));
  }
  return specs;
}

struct cluster_case {
  int64_t prefill_ranks, decode_ranks, redundant;
  bool overlap;
  int64_t chunk;
  int64_t num_requests;
  const char* combine = "exact";
};

// The real tokenizer, or null with a skip message when set-up has not installed it.
std::shared_ptr<const tokenizer> real_tokenizer() {
  if (!std::filesystem::exists(std::filesystem::path(MOE_TOKENIZER_DIR) / "tokenizer.json")) {
    MESSAGE("skipped: tokenizer not installed at " MOE_TOKENIZER_DIR " (run tools/setup.sh)");
    return nullptr;
  }
  return tokenizer::load(MOE_TOKENIZER_DIR);
}

std::shared_ptr<const model_weights> tiny_weights() {
  return std::make_shared<const model_weights>(
    testing::tiny_model_builder(9).build(testing::tiny_config(1000)));
}

// P prefill + D decode ranks with KV pools sized for the tiny model's short requests.
topology_config small_topology(int64_t prefill_ranks, int64_t decode_ranks) {
  topology_config topo;
  topo.prefill_ranks = prefill_ranks;
  topo.decode_ranks = decode_ranks;
  topo.kv_blocks = 96;
  topo.page_size = 4;
  topo.max_context = 128;
  return topo;
}

// A case's topology: its ranks, redundant experts, overlap, combine and prefill chunk (a batch
// budget of two chunks), at most 8 running requests per decode rank.
topology_config case_topology(const cluster_case& cc) {
  topology_config topo = small_topology(cc.prefill_ranks, cc.decode_ranks);
  topo.combine = cc.combine;
  topo.redundant_experts = cc.redundant;
  topo.two_batch_overlap = cc.overlap;
  topo.chunked_prefill_size = cc.chunk;
  topo.max_prefill_tokens = 2 * cc.chunk;
  topo.max_running_requests = 8;
  return topo;
}

// Submits specs[0, n) and collects every stream and result by request id; index_of: id -> i.
std::map<uint64_t, collected> run_all(testing::actor_fixture& f, const cluster& c,
                                      const std::vector<request_spec>& specs, int64_t n,
                                      std::map<uint64_t, size_t>& index_of) {
  for (int64_t i = 0; i < n; ++i)
    f.self->request(c.queue, 10s, submit_atom::value, specs[i])
      .receive([&](uint64_t id) { index_of[id] = static_cast<size_t>(i); },
               [&](caf::error& e) { FAIL("submit failed: " << f.sys.render(e)); });
  std::map<uint64_t, collected> got;
  size_t num_done = 0;
  bool timed_out = false;
  while (num_done < static_cast<size_t>(n) && !timed_out)
    f.self->receive(
      [&](token_atom, const stream_chunk& chunk) {
        collected& g = got[chunk.request_id];
        g.seq_ok = g.seq_ok && chunk.seq == g.next_seq++;
        g.streamed.insert(g.streamed.end(), chunk.token_ids.begin(), chunk.token_ids.end());
        g.text += chunk.text_delta;
      },
      [&](done_atom, const session_result& r) {
        got[r.request_id].result = r;
        got[r.request_id].done = true;
        ++num_done;
      },
      caf::after(60s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  return got;
}

}  // namespace

TEST_CASE_FIXTURE(testing::actor_fixture, "the cluster's outputs equal the single-rank generator") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const std::vector<request_spec> specs = mixed_requests(32, 1000, 5);

  const std::vector<cluster_case> cases = {
    {1, 1, 0, true, 512, 8},           {2, 2, 0, true, 64, 32},  {2, 2, 0, false, 16, 12},
    {4, 4, 4, true, 16, 32},           {4, 4, 4, false, 64, 12}, {1, 3, 2, true, 512, 12},
    {1, 1, 0, true, 64, 8, "reduced"},  // a group of one: the reduced combine rounds nothing more
  };
  for (const cluster_case& cc : cases) {
    CAPTURE(cc.prefill_ranks);
    CAPTURE(cc.decode_ranks);
    CAPTURE(cc.redundant);
    CAPTURE(cc.overlap);
    CAPTURE(cc.chunk);
    CAPTURE(cc.combine);
    const topology_config topo = case_topology(cc);
    const cluster_config cfg{.topology = topo, .reference = true};

    // the single-rank baseline with the same payload types
    auto ref = make_cpu_reference_backend();
    kv_cache cache(weights->config.num_hidden_layers, 96, 4, weights->config.kv_cache_dim());
    model_runner runner(*weights, *ref, cache, {.ep = ep_precision_of(topo)});
    generator gen(runner, tok, cc.chunk);

    testing::scoped_cluster c = spawn_cluster(sys, weights, tok, cfg);
    std::map<uint64_t, size_t> index_of;
    std::map<uint64_t, collected> got = run_all(*this, c, specs, cc.num_requests, index_of);
    for (const auto& [id, i] : index_of) {
      CAPTURE(i);
      const generation_result want = gen.run(specs[i].prompt_ids, specs[i].sampling);
      const collected& g = got[id];
      CHECK(g.done);
      CHECK(g.seq_ok);
      CHECK(g.result.error == "");
      CHECK(g.result.output_ids == want.output_ids);
      CHECK(g.streamed == want.output_ids);
      CHECK(g.result.reason == want.reason);
      CHECK(g.text == want.text);
    }
    for (const auto& rank : c.prefill_ranks) {
      const rank_stats s = idle_stats(rank);
      CHECK(s.num_free_blocks == s.num_blocks);
    }
    int64_t decode_steps = 0;
    for (const auto& rank : c.decode_ranks) {
      const rank_stats s = idle_stats(rank);
      CHECK(s.num_running == 0);
      CHECK(s.num_free_blocks == s.num_blocks);
      decode_steps = std::max(decode_steps, s.num_steps);
    }
    CHECK(decode_steps > 0);
    // the queue admitted each request once and has none left (sessions tell it before the client)
    self->request(c.queue, 5s, stats_atom::value)
      .receive(
        [&](const queue_stats& qs) {
          CHECK(qs.num_admitted == cc.num_requests);
          CHECK(qs.num_running == 0);
          CHECK(qs.num_queued == 0);
        },
        [&](caf::error& e) { FAIL(sys.render(e)); });
    // every rank of a group took part in every step (lockstep), idle or not
    if (weights->config.n_routed_experts > 0)
      for (const auto& rank : c.decode_ranks)
        CHECK(idle_stats(rank).num_steps == decode_steps);
    c.stop();
  }
}

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "on the fast path the cluster's tokens and logprobs equal the single rank's bit for bit") {
  // The fast kernels with V3's FP8 layout (projections and experts in FP8 panels, kv_a's 96 rows
  // in padded panels, routers and lm_head BF16 packed, as the loaders lay them out): micro-batches, ranks and
  // expert placement change how many rows each matmul gets (an expert's rows across the GEMV /
  // GEMM switch), and must not change a single bit of any request's logits.
  if (!cpu_fast_path_supported()) {
    MESSAGE("skipped: this CPU lacks AVX-512 BF16, VBMI or GFNI, which the fast path needs");
    return;
  }
  auto tok = real_tokenizer();
  if (!tok)
    return;
  model_weights built =
    testing::tiny_model_builder(21, testing::tiny_weights::fp8).build(testing::panel_config(1000));
  fast::prepare_fast_weights(built);
  auto weights = std::make_shared<const model_weights>(std::move(built));
  REQUIRE(weights->layers[1].moe.experts[0].gate_proj.layout == weight_layout::fp8_panels);
  REQUIRE(weights->layers[1].attn.kv_a_proj_with_mqa.layout == weight_layout::fp8_panels);
  REQUIRE(weights->layers[1].moe.gate.gemm_panels != nullptr);
  std::vector<request_spec> specs = mixed_requests(24, 1000, 12);
  for (request_spec& s : specs)
    s.sampling.logprobs = 2;
  const std::vector<cluster_case> cases = {
    {1, 1, 0, true, 512, 12}, {2, 2, 0, true, 16, 24}, {4, 4, 4, true, 64, 24}};
  for (const cluster_case& cc : cases) {
    CAPTURE(cc.prefill_ranks);
    CAPTURE(cc.decode_ranks);
    CAPTURE(cc.chunk);
    const topology_config topo = case_topology(cc);
    auto fast = make_cpu_fast_backend(2);
    kv_cache cache(weights->config.num_hidden_layers, 96, 4, weights->config.kv_cache_dim());
    model_runner runner(*weights, *fast, cache, {.ep = ep_precision_of(topo)});
    generator gen(runner, tok, cc.chunk);

    testing::scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = false});
    std::map<uint64_t, size_t> index_of;
    std::map<uint64_t, collected> got = run_all(*this, c, specs, cc.num_requests, index_of);
    for (const auto& [id, i] : index_of) {
      CAPTURE(i);
      const generation_result want = gen.run(specs[i].prompt_ids, specs[i].sampling);
      const session_result& r = got[id].result;
      CHECK(r.error == "");
      CHECK(r.output_ids == want.output_ids);
      REQUIRE(r.logprobs.size() == want.logprobs.size());
      for (size_t t = 0; t < r.logprobs.size(); ++t) {
        CAPTURE(t);
        CHECK(r.logprobs[t].logprob == want.logprobs[t].logprob);
        REQUIRE(r.logprobs[t].top.size() == want.logprobs[t].top.size());
        for (size_t j = 0; j < r.logprobs[t].top.size(); ++j) {
          CHECK(r.logprobs[t].top[j].token_id == want.logprobs[t].top[j].token_id);
          CHECK(r.logprobs[t].top[j].logprob == want.logprobs[t].top[j].logprob);
        }
      }
    }
    for (const auto& rank : c.decode_ranks) {
      const rank_stats st = idle_stats(rank);
      CHECK(st.num_free_blocks == st.num_blocks);
    }
    c.stop();
  }
}

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "the reduced combine gives the same outputs on every run of a topology") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  const std::vector<request_spec> specs = mixed_requests(12, 1000, 8);
  topology_config topo = small_topology(2, 2);
  topo.combine = "reduced";
  std::vector<std::vector<int32_t>> first;
  for (int run = 0; run < 2; ++run) {
    testing::scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
    std::map<uint64_t, size_t> index_of;
    const std::map<uint64_t, collected> got = run_all(*this, c, specs, 12, index_of);
    std::vector<std::vector<int32_t>> outputs(12);
    for (const auto& [id, i] : index_of) {
      CHECK(got.at(id).result.reason == finish_reason::length);
      CHECK(got.at(id).result.output_ids.size() == static_cast<size_t>(specs[i].sampling.max_tokens));
      outputs[i] = got.at(id).result.output_ids;
    }
    for (const auto& rank : c.decode_ranks) {
      const rank_stats st = idle_stats(rank);
      CHECK(st.num_free_blocks == st.num_blocks);
    }
    c.stop();
    if (run == 0)
      first = outputs;
    else
      CHECK(outputs == first);  // seeded sampling included
  }
}

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "cancelled requests end with abort wherever they are and free their KV") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  topology_config topo = small_topology(1, 2);
  topo.max_running_requests = 1;  // 2 running cluster-wide: the rest wait in the queue
  topo.chunked_prefill_size = 16;
  topo.max_prefill_tokens = 16;
  testing::scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  const sampling_params long_greedy{.temperature = 0.0f, .max_tokens = 60, .ignore_eos = true};
  std::vector<uint64_t> ids;
  for (int i = 0; i < 4; ++i)
    self
      ->request(c.queue, 10s, submit_atom::value,
                request_spec{.prompt_ids = {0, static_cast<int32_t>(10 + i), 5, 6, 7},
                             .sampling = long_greedy})
      .receive([&](uint64_t id) { ids.push_back(id); }, [&](caf::error& e) { FAIL(sys.render(e)); });
  REQUIRE(ids.size() == 4);
  self->send(c.queue, cancel_atom::value, ids[3]);  // still waiting in the queue
  std::map<uint64_t, session_result> results;
  std::map<uint64_t, int> num_results;
  bool cancelled_running = false, timed_out = false;
  while (results.size() < ids.size() && !timed_out)
    self->receive(
      [&](token_atom, const stream_chunk& chunk) {
        if (chunk.request_id == ids[0] && chunk.seq == 2 && !cancelled_running) {
          self->send(c.queue, cancel_atom::value, ids[0]);  // decoding
          cancelled_running = true;
        }
      },
      [&](done_atom, const session_result& r) {
        results[r.request_id] = r;
        ++num_results[r.request_id];
      },
      caf::after(60s) >> [&] { timed_out = true; });
  REQUIRE_FALSE(timed_out);
  CHECK(results[ids[3]].reason == finish_reason::abort);
  CHECK(results[ids[3]].output_ids.empty());
  CHECK(results[ids[0]].reason == finish_reason::abort);
  CHECK(results[ids[0]].output_ids.size() < 60);
  CHECK(results[ids[1]].reason == finish_reason::length);
  CHECK(results[ids[1]].output_ids.size() == 60);
  CHECK(results[ids[2]].reason == finish_reason::length);
  for (const auto& [id, n] : num_results)
    CHECK(n == 1);  // exactly one answer each
  for (const auto& rank : c.decode_ranks) {
    const rank_stats s = idle_stats(rank);
    CHECK(s.num_free_blocks == s.num_blocks);
  }
  const rank_stats p = idle_stats(c.prefill_ranks[0]);
  CHECK(p.num_free_blocks == p.num_blocks);
  queue_stats q{};
  self->request(c.queue, 5s, stats_atom::value)
    .receive([&](const queue_stats& s) { q = s; }, [](caf::error&) {});
  CHECK(q.num_running == 0);
  CHECK(q.num_queued == 0);
  c.stop();
}

namespace {

// Six mixed requests through a traced 2P+2D cluster under a slow link (300 us + bytes at
// 0.5 GB/s: arrivals well after departures); the trace's spans, sorted by begin. None without
// the real tokenizer.
std::optional<std::vector<trace_span>> traced_link_run(testing::actor_fixture& f, bool even_steps_only) {
  auto tok = real_tokenizer();
  if (!tok)
    return std::nullopt;
  auto weights = tiny_weights();
  const std::vector<request_spec> specs = mixed_requests(6, 1000, 5);
  topology_config topo = small_topology(2, 2);
  topo.link_model = true;
  topo.intra_node = topo.inter_node = link_spec{.latency_us = 300.0, .bandwidth_gb_s = 0.5};
  testing::scoped_cluster c = spawn_cluster(
    f.sys, weights, tok, {.topology = topo, .trace = true, .link_even_steps_only = even_steps_only});
  std::map<uint64_t, size_t> index_of;
  const std::map<uint64_t, collected> got = run_all(f, c, specs, 6, index_of);
  c.stop();
  for (const auto& [id, g] : got)
    CHECK(g.result.reason == finish_reason::length);
  return c.trace->spans();
}

}  // namespace

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "traced under the link model, every stage starts after its inputs arrive") {
  const auto traced = traced_link_run(*this, false);
  if (!traced)
    return;
  const std::vector<trace_span>& spans = *traced;
  // per receiving rank and "<MLP|COMBINE> mb<m> L<l>": when the stages began, and when the
  // payloads they wait for arrived (the peer's DISPATCH / COMBINE spans end at arrival), in order
  std::map<std::pair<int64_t, std::string>, std::vector<std::chrono::steady_clock::time_point>> began,
    arrived;
  std::map<int64_t, std::set<std::string>> stages;  // per rank: stage names seen
  int64_t num_comm = 0;
  for (const trace_span& sp : spans) {
    const std::string kind = sp.name.substr(0, sp.name.find(' '));
    if (sp.lane == trace_lane::compute) {
      stages[sp.rank].insert(kind);
      if (kind == "MLP" || kind == "COMBINE")
        began[{sp.rank, sp.name}].push_back(sp.begin);
      continue;
    }
    ++num_comm;
    CHECK(sp.end - sp.begin >= std::chrono::microseconds(300));
    const size_t to = sp.name.rfind(" to ");
    REQUIRE(to != std::string::npos);
    const int64_t dest = std::stoll(sp.name.substr(to + 4));
    const std::string stage = kind == "DISPATCH" ? "MLP" : "COMBINE";
    arrived[{dest, stage + sp.name.substr(kind.size(), to - kind.size())}].push_back(sp.end);
  }
  CHECK(num_comm > 0);
  for (int64_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    for (const char* stage : {"ATTN-0", "ATTN-1", "SHARED", "MLP", "COMBINE", "LOGITS", "SAMPLE"})
      CHECK(stages[r].count(stage) == 1);
  }
  // in a group of two, each of a rank's MLP / COMBINE stages waits for one payload from its peer
  int64_t checked = 0;
  for (auto& [key, arrivals] : arrived) {
    CAPTURE(key.first);
    CAPTURE(key.second);
    std::vector<std::chrono::steady_clock::time_point>& starts = began[key];
    std::sort(arrivals.begin(), arrivals.end());
    std::sort(starts.begin(), starts.end());
    // the cluster may stop while an idle rank still runs the last step its peer began (that
    // peer's requests are done): the stage of the last payload may never have run
    REQUIRE(starts.size() <= arrivals.size());
    REQUIRE(starts.size() + 1 >= arrivals.size());
    for (size_t i = 0; i < starts.size(); ++i, ++checked)
      CHECK(starts[i] >= arrivals[i]);
  }
  CHECK(checked > 0);
}

TEST_CASE_FIXTURE(testing::actor_fixture,
                  "with the link on even steps only, a rank's steps alternate on and off it") {
  const auto traced = traced_link_run(*this, true);
  if (!traced)
    return;
  const std::vector<trace_span>& spans = *traced;
  for (int64_t r = 0; r < 4; ++r) {
    CAPTURE(r);
    // the rank's steps end at its LOGITS spans; per step: did the rank send over the link?
    std::vector<std::chrono::steady_clock::time_point> ends;
    for (const trace_span& sp : spans)
      if (sp.rank == r && sp.lane == trace_lane::compute && sp.name.starts_with("LOGITS"))
        ends.push_back(sp.end);
    std::vector<bool> on(ends.size(), false);
    for (const trace_span& sp : spans)
      if (sp.rank == r && sp.lane == trace_lane::comm) {
        const auto step = std::lower_bound(ends.begin(), ends.end(), sp.begin) - ends.begin();
        if (step < static_cast<std::ptrdiff_t>(on.size()))
          on[static_cast<size_t>(step)] = true;
      }
    REQUIRE(on.size() >= (r < 2 ? 2u : 3u));  // prefill ranks take few steps
    CHECK(on[0]);                             // step 0 takes the link, step 1 does not, ...
    for (size_t i = 0; i < on.size(); ++i) {
      CAPTURE(i);
      CHECK(on[i] == (i % 2 == 0));
    }
  }
}
