// tests/actors/test_remote_messages.cpp
// The messages that cross a process serialize and come back equal: KV pages as one raw blob
// (the serialized size is the floats' bytes plus a small header), a kv_handoff's sampler rebuilt
// so that it draws what the prefill rank's own sampler would have drawn next, and corrupt input
// (a shape that does not match its blob, an unknown finish reason) refused.
#include <doctest/doctest.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "actor_fixture.hpp"
#include "actors/rank/ep_member.hpp"
#include "kernels/model/dispatch_payload.hpp"
#include "kernels/sampling/logprobs.hpp"

using moe::testing::actor_fixture;

namespace {

// Through the same virtual serializer interface a message's type-erased value uses.
template <class T>
std::vector<char> save(caf::actor_system& sys, T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  caf::serializer& f = sink;
  REQUIRE(!f(x));
  return buf;
}

template <class T>
caf::error load(caf::actor_system& sys, const std::vector<char>& buf, T& x) {
  caf::binary_deserializer source{sys, buf};
  caf::deserializer& f = source;
  return f(x);
}

moe::sampling_params every_field() {
  moe::sampling_params p;
  p.temperature = 0.7f;
  p.top_p = 0.9f;
  p.top_k = 40;
  p.min_p = 0.05f;
  p.repetition_penalty = 1.1f;
  p.presence_penalty = 0.5f;
  p.frequency_penalty = -0.25f;
  p.seed = 1234567890123ULL;
  p.max_tokens = 77;
  p.stop_token_ids = {5, 9};
  p.stop = {"\n\n", "END"};
  p.ignore_eos = true;
  p.logprobs = 3;
  return p;
}

bool same(const moe::sampling_params& a, const moe::sampling_params& b) {
  return a.temperature == b.temperature && a.top_p == b.top_p && a.top_k == b.top_k && a.min_p == b.min_p &&
         a.repetition_penalty == b.repetition_penalty && a.presence_penalty == b.presence_penalty &&
         a.frequency_penalty == b.frequency_penalty && a.seed == b.seed && a.max_tokens == b.max_tokens &&
         a.stop_token_ids == b.stop_token_ids && a.stop == b.stop && a.ignore_eos == b.ignore_eos &&
         a.logprobs == b.logprobs;
}

std::vector<float> random_row(std::mt19937& rng, int64_t vocab) {
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (float& v : row)
    v = d(rng);
  return row;
}

}  // namespace

TEST_CASE_FIXTURE(actor_fixture,
                  "remote messages: request_spec and sampling_params come back field for field") {
  moe::request_spec spec{.prompt_ids = {1, 2, 3, 70000}, .sampling = every_field(), .num_generated = 1};
  moe::request_spec back;
  REQUIRE(!load(sys, save(sys, spec), back));
  CHECK(back.prompt_ids == spec.prompt_ids);
  CHECK(back.num_generated == 1);
  CHECK(same(back.sampling, spec.sampling));
  // unset optionals stay unset
  spec.sampling.seed.reset();
  spec.sampling.logprobs.reset();
  REQUIRE(!load(sys, save(sys, spec), back));
  CHECK(!back.sampling.seed.has_value());
  CHECK(!back.sampling.logprobs.has_value());
}

TEST_CASE_FIXTURE(actor_fixture,
                  "remote messages: a token chunk with logprobs comes back, an unknown reason is refused") {
  moe::token_chunk chunk{.request_id = 42,
                         .token_ids = {7, 8},
                         .reason = moe::finish_reason::length,
                         .error = "",
                         .logprobs = {{7, -0.5f, {{7, -0.5f}, {3, -1.25f}}}, {8, -2.0f, {}}}};
  moe::token_chunk back;
  std::vector<char> bytes = save(sys, chunk);
  REQUIRE(!load(sys, bytes, back));
  CHECK(back.request_id == 42);
  CHECK(back.token_ids == chunk.token_ids);
  CHECK(back.reason == moe::finish_reason::length);
  REQUIRE(back.logprobs.size() == 2);
  CHECK(back.logprobs[0].top.size() == 2);
  CHECK(back.logprobs[0].top[1].token_id == 3);
  CHECK(back.logprobs[0].top[1].logprob == -1.25f);
  CHECK(back.logprobs[1].logprob == -2.0f);
  // the reason's byte: where the same chunk with another reason differs
  moe::token_chunk stopped = chunk;
  stopped.reason = moe::finish_reason::stop;
  const std::vector<char> other = save(sys, stopped);
  REQUIRE(other.size() == bytes.size());
  const auto reason_at =
    static_cast<size_t>(std::mismatch(bytes.begin(), bytes.end(), other.begin()).first - bytes.begin());
  REQUIRE(reason_at < bytes.size());
  bytes[reason_at] = 9;
  CHECK(load(sys, bytes, back));
}

TEST_CASE_FIXTURE(actor_fixture,
                  "remote messages: KV pages go as one raw blob, and a shape that lies is refused") {
  moe::kv_pages pages{.num_layers = 3, .num_tokens = 5, .kv_dim = 7, .data = {}};
  for (int i = 0; i < 3 * 5 * 7; ++i)
    pages.data.push_back(static_cast<float>(i) * 0.37f - 11.0f);
  std::vector<char> bytes = save(sys, pages);
  const size_t blob = pages.data.size() * sizeof(float);
  CHECK(bytes.size() >= blob);
  CHECK(bytes.size() <= blob + 40);  // the shape (3 x 8 bytes) and the count
  CHECK(std::memcmp(bytes.data() + bytes.size() - blob, pages.data.data(), blob) == 0);
  moe::kv_pages back;
  REQUIRE(!load(sys, bytes, back));
  CHECK(back.num_layers == 3);
  CHECK(back.num_tokens == 5);
  CHECK(back.kv_dim == 7);
  CHECK(back.data == pages.data);
  moe::kv_pages liar = pages;
  liar.num_tokens = 6;  // 3 x 6 x 7 != the 105 floats sent
  CHECK(load(sys, save(sys, liar), back));
  bytes.resize(bytes.size() - 4);  // cut short
  CHECK(load(sys, bytes, back));
}

TEST_CASE_FIXTURE(actor_fixture,
                  "remote messages: a kv_handoff's rebuilt sampler draws what the prefill rank's would") {
  std::mt19937 rng(7);
  constexpr int64_t vocab = 300;
  for (const int64_t num_generated : {0, 4}) {
    CAPTURE(num_generated);
    moe::sampling_params p = every_field();
    p.logprobs.reset();
    p.ignore_eos = false;
    p.stop.clear();
    moe::request_spec spec{
      .prompt_ids = {11, 12, 13, 14, 15, 16, 17, 18}, .sampling = p, .num_generated = num_generated};
    // as a prefill rank does (actors/prefill_rank.cpp): the prompt less the generated tokens,
    // resumed after those, then the first token drawn from the last position's logits
    const auto& prompt = spec.prompt_ids;
    moe::sampler original(p, std::vector<int32_t>(prompt.begin(), prompt.end() - num_generated));
    original.resume_after(std::span(prompt).last(static_cast<size_t>(num_generated)));
    const int32_t first = moe::pick_token(original, random_row(rng, vocab), std::nullopt).token_id;

    moe::kv_handoff h{.request_id = 5,
                      .spec = spec,
                      .pages = {},
                      .first_token = first,
                      .pick = nullptr,
                      .session = caf::actor_cast<caf::actor>(self)};
    moe::kv_handoff back;
    REQUIRE(!load(sys, save(sys, h), back));
    REQUIRE(back.pick != nullptr);
    CHECK(back.session == h.session);
    CHECK(back.first_token == first);
    for (int step = 0; step < 32; ++step) {
      const std::vector<float> row = random_row(rng, vocab);
      const int32_t want = moe::pick_token(original, row, std::nullopt).token_id;
      CHECK(moe::pick_token(*back.pick, row, std::nullopt).token_id == want);
    }
  }
}

TEST_CASE_FIXTURE(actor_fixture, "remote messages: a prefill job keeps its actor handles") {
  moe::prefill_job job{.request_id = 9,
                       .spec = {.prompt_ids = {1}, .sampling = {}, .num_generated = 0},
                       .decode_rank = caf::actor_cast<caf::actor>(self),
                       .session = caf::actor_cast<caf::actor>(self),
                       .balancer = caf::actor{}};
  moe::prefill_job back;
  REQUIRE(!load(sys, save(sys, job), back));
  CHECK(back.request_id == 9);
  CHECK(back.decode_rank == job.decode_rank);
  CHECK(back.session == job.session);
  CHECK(!back.balancer);
}

TEST_CASE_FIXTURE(actor_fixture,
                  "remote messages: an FP8 dispatch and its BF16 combine come back byte for byte") {
  // 3 tokens of 200 channels (2 FP8 scale blocks per row), top-2 over a placement of 4 experts
  // on 2 ranks: the payloads a rank sends a peer in another process
  std::mt19937 rng(7);
  const int64_t tokens = 3, hidden = 200, top_k = 2;
  const std::vector<float> x = random_row(rng, tokens * hidden);
  const std::vector<int32_t> ids{0, 3, 2, 1, 3, 0};
  const std::vector<float> weights{0.7f, 0.3f, 0.6f, 0.4f, 0.55f, 0.45f};
  const moe::layer_placement placement = moe::default_layer_placement(4, 0, 2);
  moe::dispatch_plan plan;
  const auto dispatches = moe::make_dispatches(placement, {.step = 9, .layer_idx = 2, .micro_batch = 1}, 0, x,
                                               ids, weights, tokens, hidden, top_k,
                                               {.dispatch = moe::payload_dtype::fp8,
                                                .combine = moe::payload_dtype::bf16,
                                                .sum = moe::combine_sum::per_pair},
                                               plan);
  REQUIRE(dispatches.size() == 2);
  moe::ep_dispatch d = *dispatches[1];
  REQUIRE(d.rows.type == moe::payload_dtype::fp8);
  REQUIRE(d.num_pairs() > 0);
  const std::vector<char> bytes = save(sys, d);
  CHECK(bytes.size() < d.rows.num_bytes() + d.pair_row.size() * 12 + 128);  // blobs, not element by element
  moe::ep_dispatch back;
  REQUIRE(!load(sys, bytes, back));
  CHECK(back.key == d.key);
  CHECK(back.src_rank == d.src_rank);
  CHECK(back.rows.type == d.rows.type);
  CHECK(back.rows.num_rows == d.rows.num_rows);
  CHECK(back.rows.dim == d.rows.dim);
  CHECK(back.rows.data == d.rows.data);
  CHECK(back.rows.scales == d.rows.scales);
  CHECK(back.pair_row == d.pair_row);
  CHECK(back.pair_expert == d.pair_expert);
  CHECK(back.pair_weight == d.pair_weight);
  CHECK(back.combine_type == d.combine_type);
  CHECK(back.sum == d.sum);

  moe::ep_combine c{
    .key = d.key, .src_rank = 1, .outputs = moe::encode_rows(x.data(), 2, hidden, moe::payload_dtype::bf16)};
  moe::ep_combine c_back;
  REQUIRE(!load(sys, save(sys, c), c_back));
  CHECK(c_back.key == c.key);
  CHECK(c_back.outputs.data == c.outputs.data);
  CHECK(c_back.outputs.num_rows == 2);

  // a pair naming a row the payload does not have, and a blob of the wrong size, are refused
  moe::ep_dispatch bad = d;
  bad.pair_row.back() = static_cast<int32_t>(d.rows.num_rows);
  CHECK(load(sys, save(sys, bad), back));
  moe::ep_combine short_blob = c;
  short_blob.outputs.data.pop_back();
  CHECK(load(sys, save(sys, short_blob), c_back));
}

TEST_CASE_FIXTURE(actor_fixture,
                  "remote messages: a membership keeps its peers and placement, without inboxes") {
  moe::ep_membership m;
  m.peers = {caf::actor_cast<caf::actor>(self), caf::actor_cast<caf::actor>(self)};
  m.inboxes = {std::make_shared<moe::ep_inbox>(), std::make_shared<moe::ep_inbox>()};
  m.global_ranks = {2, 3};
  m.data_addresses = {"0a1b", "2c3d"};
  m.first_step = int64_t{3} << 40;
  m.placements = std::make_shared<const std::vector<moe::layer_placement>>(
    std::vector<moe::layer_placement>{{}, moe::default_layer_placement(4, 2, 2)});
  m.placement_epoch = 5;
  moe::ep_membership back;
  REQUIRE(!load(sys, save(sys, m), back));
  CHECK(back.peers == m.peers);
  CHECK(back.global_ranks == m.global_ranks);
  CHECK(back.data_addresses == m.data_addresses);
  CHECK(back.first_step == m.first_step);
  CHECK(back.placement_epoch == 5);
  REQUIRE(back.placements);
  REQUIRE(back.placements->size() == 2);
  CHECK((*back.placements)[1].slot_expert == (*m.placements)[1].slot_expert);
  CHECK((*back.placements)[1].expert_slots == (*m.placements)[1].expert_slots);
  REQUIRE(back.inboxes.size() == 2);  // each rank sends to these peers over the plane, or by message
  CHECK(back.inboxes[0] == nullptr);
  CHECK(back.inboxes[1] == nullptr);
  m.data_addresses = {"0a1b"};  // not one per peer: refused
  CHECK(load(sys, save(sys, m), back));
}

TEST_CASE_FIXTURE(
  actor_fixture,
  "remote messages: a placement change and an expert's bytes come back, inconsistent ones refused") {
  moe::placement_change change{
    .epoch = 7,
    .membership_first_step = int64_t{2} << 40,
    .placements = std::make_shared<const std::vector<moe::layer_placement>>(
      std::vector<moe::layer_placement>{{}, moe::default_layer_placement(4, 2, 2)})};
  moe::placement_change back;
  REQUIRE(!load(sys, save(sys, change), back));
  CHECK(back.epoch == 7);
  CHECK(back.membership_first_step == change.membership_first_step);
  REQUIRE(back.placements);
  REQUIRE(back.placements->size() == 2);
  CHECK((*back.placements)[0].slot_expert.empty());
  CHECK((*back.placements)[1].slot_expert == std::vector<int32_t>{0, 1, 2, 3, 0, 1});
  CHECK((*back.placements)[1].expert_slots == (*change.placements)[1].expert_slots);
  // slots that do not split over the ranks, and an expert whose slot list is not its own: refused
  std::vector<moe::layer_placement> odd = *change.placements;
  odd[1].num_ranks = 4;
  change.placements = std::make_shared<const std::vector<moe::layer_placement>>(odd);
  CHECK(load(sys, save(sys, change), back));
  odd = *back.placements;
  odd[1].expert_slots[0] = {5};
  change.placements = std::make_shared<const std::vector<moe::layer_placement>>(odd);
  CHECK(load(sys, save(sys, change), back));

  // the bytes and a short header: one raw blob, not element by element
  moe::expert_blob blob{.layer = 2, .expert = 5, .bytes = std::vector<uint8_t>(10000)};
  for (size_t i = 0; i < blob.bytes.size(); ++i)
    blob.bytes[i] = static_cast<uint8_t>(i * 7);
  const std::vector<char> bytes = save(sys, blob);
  CHECK(bytes.size() < blob.bytes.size() + 64);
  moe::expert_blob blob_back;
  REQUIRE(!load(sys, bytes, blob_back));
  CHECK(blob_back.layer == 2);
  CHECK(blob_back.expert == 5);
  CHECK(blob_back.bytes == blob.bytes);
  blob.expert = -1;
  CHECK(load(sys, save(sys, blob), blob_back));
}
