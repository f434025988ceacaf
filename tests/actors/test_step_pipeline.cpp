// tests/actors/test_step_pipeline.cpp
// Several ranks' step pipelines joined by an in-memory transport that runs stream work (a stage
// that waits for payloads once they are in the rank's inbox) and delivers messages in a random
// order: every request's logits equal a single rank's forward pass bit for bit (reference
// backend), with an idle rank, redundant experts, one or two micro-batches and a prompt split
// between the micro-batches, and with the MLP answering peers one by one (prefill-sized batches)
// or all at once; peers' payloads leave from the sender's stream, split answers before the
// stage's last expert batch; the stream program's order (both micro-batches' ATTN stages, both
// MLPs, then each micro-batch's SHARED, COMBINE and next layer, one after another), and
// micro-batch 0's first dispatch flies while micro-batch 1 computes its dense layers; a stage that throws still takes part in the exchange, so the group's step completes.
#include <doctest/doctest.h>

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <optional>
#include <random>
#include <variant>

#include "actors/rank/step_pipeline.hpp"
#include "kernels/cpu/reference_backend.hpp"
#include "model/tiny_model.hpp"

using namespace moe;

namespace {

struct stream_item {
  int64_t micro_batch;
  stage_kind stage;
  int64_t layer_idx;
  std::optional<stage_input> input;
  std::function<void()> work;
};
using message = std::variant<std::shared_ptr<const ep_dispatch>, std::shared_ptr<const ep_combine>>;

// Every rank's stream and every message in flight; run() picks the next event at random among
// the streams whose next stage has its inputs and the messages in flight.
struct loop_transport {
  struct rank_io final : pipeline_io {
    loop_transport* loop = nullptr;
    int64_t rank = 0;
    std::deque<stream_item> stream;
    ep_inbox box;
    void enqueue(int64_t mb, stage_kind stage, int64_t layer_idx, std::optional<stage_input> input,
                 std::function<void()> work) override {
      stream.push_back({mb, stage, layer_idx, input, std::move(work)});
    }
    void send_dispatch(int64_t dest, std::shared_ptr<const ep_dispatch> d) override {
      loop->count_send(rank);
      loop->in_flight.push_back({dest, std::move(d)});
    }
    void send_combine(int64_t dest, std::shared_ptr<const ep_combine> c) override {
      loop->count_send(rank);
      if (loop->working_rank == rank)
        loop->combine_sent_at.push_back(*loop->expert_calls[rank]);
      loop->in_flight.push_back({dest, std::move(c)});
    }
    ep_inbox& inbox() override { return box; }
    [[nodiscard]] bool runnable() const {
      return !stream.empty() && (!stream.front().input || box.complete(*stream.front().input));
    }
  };
  std::deque<rank_io> ios;
  std::vector<std::pair<int64_t, message>> in_flight;
  std::vector<step_pipeline*> pipelines;
  std::mt19937 rng{1};
  int64_t max_in_flight = 0;
  int64_t working_rank = -1;  // whose stream work is running now, -1 between
  int64_t sends_from_stream = 0, sends_elsewhere = 0;
  struct stage_run {
    int64_t micro_batch;
    stage_kind stage;
    int64_t layer_idx;
    friend bool operator==(const stage_run&, const stage_run&) = default;
  };
  std::vector<std::vector<stage_run>> ran;        // per rank: its stream's stages in the order they ran
  std::vector<const int64_t*> expert_calls;       // per rank: its backend's moe_experts calls so far
  std::vector<int64_t> combine_sent_at;           // the running MLP's combines: expert calls made by then
  int64_t combines_early = 0, combines_late = 0;  // before / after the MLP's last expert batch

  // Payloads go on the wire from the sender's stream, as they are made, not from its owner.
  void count_send(int64_t rank) { ++(working_rank == rank ? sends_from_stream : sends_elsewhere); }

  explicit loop_transport(int64_t num_ranks)
      : ios(static_cast<size_t>(num_ranks)), ran(static_cast<size_t>(num_ranks)) {
    for (int64_t r = 0; r < num_ranks; ++r) {
      ios[r].loop = this;
      ios[r].rank = r;
    }
  }

  void run() {
    for (;;) {
      std::vector<int64_t> choices;  // rank r: its stream; R + i: message i
      for (size_t r = 0; r < ios.size(); ++r)
        if (ios[r].runnable())
          choices.push_back(static_cast<int64_t>(r));
      for (size_t i = 0; i < in_flight.size(); ++i)
        choices.push_back(static_cast<int64_t>(ios.size() + i));
      max_in_flight = std::max<int64_t>(max_in_flight, static_cast<int64_t>(in_flight.size()));
      if (choices.empty())
        break;
      const int64_t c = choices[std::uniform_int_distribution<size_t>(0, choices.size() - 1)(rng)];
      if (c < static_cast<int64_t>(ios.size())) {
        stream_item item = std::move(ios[c].stream.front());
        ios[c].stream.pop_front();
        ran[c].push_back({item.micro_batch, item.stage, item.layer_idx});
        working_rank = c;
        item.work();
        working_rank = -1;
        for (const int64_t calls : combine_sent_at)
          ++(calls < *expert_calls[c] ? combines_early : combines_late);
        combine_sent_at.clear();
        if (item.stage == stage_kind::logits)
          pipelines[c]->on_logits_done();
      } else {
        auto flight = std::move(in_flight[c - ios.size()]);
        in_flight.erase(in_flight.begin() + (c - static_cast<int64_t>(ios.size())));
        ep_inbox& box = ios[flight.first].box;
        std::visit([&](auto& p) { (void)box.put(std::move(p), ep_inbox::clock::now()); }, flight.second);
      }
    }
    for (const rank_io& io : ios)  // nothing left waiting: no deadlock
      CHECK(io.stream.empty());
  }
};

// The reference backend, except that the n-th call of one op throws.
struct failing_backend final : cpu_reference_backend {
  op_kind op;
  int64_t calls_left;
  failing_backend(op_kind o, int64_t nth) : op(o), calls_left(nth) {}
  void fail_if(op_kind called) {
    if (called == op && --calls_left == 0)
      throw std::runtime_error("injected failure");
  }
  void moe_gate(const moe_gate_params& p) override {
    fail_if(op_kind::moe_gate);
    cpu_reference_backend::moe_gate(p);
  }
  void moe_experts(const moe_experts_params& p) override {
    fail_if(op_kind::moe_experts);
    cpu_reference_backend::moe_experts(p);
  }
};

// The reference backend, counting its expert batches.
struct counting_backend final : cpu_reference_backend {
  int64_t& calls;
  explicit counting_backend(int64_t& c) : calls(c) {}
  void moe_experts(const moe_experts_params& p) override {
    ++calls;
    cpu_reference_backend::moe_experts(p);
  }
};

struct rank_state {
  int64_t expert_calls = 0;
  std::unique_ptr<backend> device = std::make_unique<counting_backend>(expert_calls);
  kv_cache cache;
  explicit rank_state(const model_config& c) : cache(c.num_hidden_layers, 32, 4, c.kv_cache_dim()) {}
};

}  // namespace

TEST_CASE("step pipelines of an EP group equal a single rank's forward pass, in any event order") {
  const model_weights w = testing::tiny_model_builder(41).build(testing::tiny_config());
  const model_config& cfg = w.config;
  const rope_tables rope = make_rope_tables(cfg);
  // DeepSeek's payloads, and FP32 ones: sums of a few BF16 values are exact in any order, FP32
  // ones are not, so only the latter show the combine's fixed k order
  for (const ep_precision ep :
       {ep_precision{.dispatch = payload_dtype::fp8, .combine = payload_dtype::bf16}, ep_precision{}}) {
    CAPTURE(to_string(ep.dispatch));
    // prompts: rank 0 gets 0 and 1 (prompt 0 split between its micro-batches), rank 1 gets 2, rank 2 none
    const std::vector<std::vector<int32_t>> prompts = {{0, 5, 9, 14, 3, 3, 60}, {0, 7}, {0, 1, 2, 3, 4, 5}};

    // the single-rank answers: each prompt alone
    std::vector<std::vector<float>> expected;
    {
      rank_state solo(cfg);
      model_runner runner(w, *solo.device, solo.cache, {.ep = ep});
      for (const auto& p : prompts) {
        sequence_kv kv;
        REQUIRE(kv.reserve(solo.cache, static_cast<int64_t>(p.size())));
        const batch_entry e{.tokens = p, .kv = &kv};
        expected.push_back(runner.forward(std::span(&e, 1)));
        kv.release(solo.cache);
      }
    }

    const int64_t E = cfg.n_routed_experts;
    for (const int64_t num_mb : {1, 2}) {
      for (const int64_t redundant : {2, 5}) {  // 16 logical experts -> 18, 21 slots on 3 ranks
        for (const uint32_t seed : {1u, 2u, 3u}) {
          // these prompts bring too few rows to split the MLP by default; 0 always splits it
          const int64_t split_min = seed == 2 ? answer_split_min_rows : 0;
          CAPTURE(num_mb);
          CAPTURE(split_min);
          CAPTURE(redundant);
          CAPTURE(seed);
          const int64_t R = 3;
          REQUIRE((E + redundant) % R == 0);
          std::mt19937 rng(seed);
          std::vector<int32_t> slots = default_layer_placement(E, redundant, R).slot_expert;
          std::shuffle(slots.begin(), slots.end(), rng);
          auto placements = std::make_shared<std::vector<layer_placement>>(cfg.num_hidden_layers);
          for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
            if (w.layers[l].is_moe)
              (*placements)[l] = make_layer_placement(slots, R, E);

          std::vector<std::unique_ptr<rank_state>> ranks;
          std::vector<sequence_kv> kvs(prompts.size());
          for (int64_t r = 0; r < R; ++r)
            ranks.push_back(std::make_unique<rank_state>(cfg));
          const int64_t home[3] = {0, 0, 1};
          for (size_t i = 0; i < prompts.size(); ++i)
            REQUIRE(kvs[i].reserve(ranks[home[i]]->cache, static_cast<int64_t>(prompts[i].size())));
          // micro-batches per rank
          std::vector<std::vector<std::vector<batch_entry>>> mbs(
            R, std::vector<std::vector<batch_entry>>(num_mb));
          const std::span<const int32_t> p0 = prompts[0];
          if (num_mb == 2) {
            mbs[0][0].push_back({.tokens = p0.first(4), .kv = &kvs[0], .no_logits = true, .start = 0});
            mbs[0][1].push_back({.tokens = p0.subspan(4), .kv = &kvs[0], .start = 4});
            mbs[0][0].push_back({.tokens = prompts[1], .kv = &kvs[1]});
          } else {
            mbs[0][0].push_back({.tokens = p0, .kv = &kvs[0]});
            mbs[0][0].push_back({.tokens = prompts[1], .kv = &kvs[1]});
          }
          mbs[1][0].push_back({.tokens = prompts[2], .kv = &kvs[2]});

          loop_transport loop(R);
          loop.rng.seed(seed);
          std::vector<std::unique_ptr<step_pipeline>> pipes;
          for (int64_t r = 0; r < R; ++r) {
            loop.expert_calls.push_back(&ranks[r]->expert_calls);
            const ep_group group{.rank = r,
                                 .num_ranks = R,
                                 .placements = placements,
                                 .experts = hold_experts_from(w, *placements, r),
                                 .ep = ep,
                                 .num_micro_batches = num_mb,
                                 .answer_split_min_rows = split_min};
            const step_model model{
              .weights = &w, .device = ranks[r]->device.get(), .cache = &ranks[r]->cache, .rope = &rope};
            pipes.push_back(std::make_unique<step_pipeline>(7, group, model, mbs[r], loop.ios[r]));
            loop.pipelines.push_back(pipes.back().get());
          }
          for (auto& p : pipes)
            p->start();
          loop.run();
          for (auto& p : pipes)
            CHECK(p->done());
          for (auto& p : pipes)
            CHECK(p->error().empty());
          CHECK(loop.max_in_flight > 0);
          CHECK(loop.sends_from_stream > 0);
          CHECK(loop.sends_elsewhere == 0);
          // split: some peer's answer leaves while this rank's experts still run for others
          CHECK((loop.combines_early > 0) == (split_min == 0));
          CHECK(loop.combines_early + loop.combines_late > 0);
          for (int64_t r = 0; r < R; ++r) {
            const auto& order = loop.ran[r];
            const auto at = [&](int64_t mb, stage_kind stage, int64_t l) {
              return std::find(order.begin(), order.end(), loop_transport::stage_run{mb, stage, l}) -
                     order.begin();
            };
            const auto n = static_cast<std::ptrdiff_t>(order.size());
            CHECK(n == num_mb * (cfg.num_hidden_layers * 3 +
                                 (cfg.num_hidden_layers - cfg.first_k_dense_replace) * 2) +
                         1);
            CHECK(order.back() ==
                  loop_transport::stage_run{0, stage_kind::logits, cfg.num_hidden_layers - 1});
            // micro-batch 0 goes on from its dense layer into the first MoE layer (its dispatch on
            // the wire) before micro-batch 1 computes its dense layer
            const int64_t first_moe = cfg.first_k_dense_replace;
            REQUIRE(first_moe > 0);
            if (num_mb == 2)
              CHECK(at(0, stage_kind::attn_1, first_moe) < at(1, stage_kind::attn_0, 0));
            for (int64_t l = first_moe; l < cfg.num_hidden_layers; ++l) {
              CAPTURE(r);
              CAPTURE(l);
              const int64_t last = num_mb - 1;
              CHECK(at(0, stage_kind::attn_0, l) < at(0, stage_kind::attn_1, l));
              CHECK(at(last, stage_kind::attn_1, l) < at(0, stage_kind::mlp, l));  // every ATTN first,
              CHECK(at(last, stage_kind::mlp, l) < at(0, stage_kind::shared, l));  // every MLP,
              for (int64_t m = 0; m < num_mb; ++m)  // then each SHARED right before its COMBINE
                CHECK(at(m, stage_kind::shared, l) + 1 == at(m, stage_kind::combine, l));
              if (num_mb == 2 &&
                  l + 1 < cfg.num_hidden_layers)  // micro-batch 1's SHARED behind micro-batch 0's next ATTN
                CHECK(at(1, stage_kind::shared, l) > at(0, stage_kind::attn_1, l + 1));
              CHECK(at(last, stage_kind::combine, l) < n);
              if (l + 1 < cfg.num_hidden_layers) {  // a micro-batch's next layer right behind its COMBINE
                CHECK(at(0, stage_kind::attn_0, l + 1) == at(0, stage_kind::combine, l) + 1);
                if (num_mb == 2)
                  CHECK(at(0, stage_kind::attn_1, l + 1) < at(1, stage_kind::combine, l));
              }
            }
          }
          const int64_t V = cfg.vocab_size;
          // rank 0: prompt 0's row is in the last micro-batch, prompt 1's in micro-batch 0
          const std::vector<float>& l0 = pipes[0]->logits(num_mb - 1);
          const std::vector<float>& l1 = pipes[0]->logits(0);
          const int64_t row1 = num_mb == 2 ? 0 : 1;
          CHECK(std::vector<float>(l0.begin(), l0.begin() + V) == expected[0]);  // its first row
          CHECK(std::vector<float>(l1.begin() + row1 * V, l1.begin() + (row1 + 1) * V) == expected[1]);
          CHECK(pipes[1]->logits(0) == expected[2]);
          CHECK(pipes[2]->logits(0).empty());  // the idle rank took part with no tokens
          for (size_t i = 0; i < prompts.size(); ++i) {
            CHECK(kvs[i].num_cached == static_cast<int64_t>(prompts[i].size()));
            kvs[i].release(ranks[home[i]]->cache);
          }
        }
      }
    }
  }
}

TEST_CASE("a stage that throws still takes part in the exchange: the group's step completes") {
  const model_weights w = testing::tiny_model_builder(43).build(testing::tiny_config());
  const model_config& cfg = w.config;
  const rope_tables rope = make_rope_tables(cfg);
  const int64_t R = 2, E = cfg.n_routed_experts;
  auto placements = std::make_shared<std::vector<layer_placement>>(cfg.num_hidden_layers);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    if (w.layers[l].is_moe)
      (*placements)[l] = default_layer_placement(E, 0, R);
  const std::vector<std::vector<int32_t>> prompts = {{0, 5, 9, 14}, {0, 1, 2}};
  // rank 1's gate (ATTN-1) or its experts (MLP, over both ranks' tokens) throw once, early or late
  // (split into one expert batch per source rank, the second batch of the first MoE layer: after
  // an answer has left)
  for (const op_kind op : {op_kind::moe_gate, op_kind::moe_experts}) {
    for (const int64_t nth : {int64_t{1}, int64_t{2}}) {  // the first or the second MoE layer
      for (const int64_t split_min : {answer_split_min_rows, int64_t{0}}) {
        CAPTURE(static_cast<int>(op));
        CAPTURE(nth);
        CAPTURE(split_min);
        std::vector<std::unique_ptr<rank_state>> ranks;
        std::vector<sequence_kv> kvs(prompts.size());
        for (int64_t r = 0; r < R; ++r) {
          ranks.push_back(std::make_unique<rank_state>(cfg));
          REQUIRE(kvs[r].reserve(ranks[r]->cache, static_cast<int64_t>(prompts[r].size())));
        }
        ranks[1]->device = std::make_unique<failing_backend>(op, nth);
        loop_transport loop(R);
        std::vector<std::unique_ptr<step_pipeline>> pipes;
        for (int64_t r = 0; r < R; ++r) {
          loop.expert_calls.push_back(&ranks[r]->expert_calls);
          std::vector<std::vector<batch_entry>> mbs(2);
          mbs[0].push_back({.tokens = prompts[r], .kv = &kvs[r]});
          const ep_group group{.rank = r,
                               .num_ranks = R,
                               .placements = placements,
                               .experts = hold_experts_from(w, *placements, r),
                               .ep = {.dispatch = payload_dtype::fp8, .combine = payload_dtype::bf16},
                               .answer_split_min_rows = split_min};
          const step_model model{
            .weights = &w, .device = ranks[r]->device.get(), .cache = &ranks[r]->cache, .rope = &rope};
          pipes.push_back(std::make_unique<step_pipeline>(0, group, model, std::move(mbs), loop.ios[r]));
          loop.pipelines.push_back(pipes.back().get());
        }
        for (auto& p : pipes)
          p->start();
        loop.run();
        for (auto& p : pipes)
          CHECK(p->done());  // nobody waits for the failed rank's messages
        CHECK(pipes[0]->error().empty());
        CHECK(pipes[1]->error() == "injected failure");
        for (int64_t r = 0; r < R; ++r)
          kvs[r].release(ranks[r]->cache);
      }
    }
  }
}
