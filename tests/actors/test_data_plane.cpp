// tests/actors/test_data_plane.cpp
// The UCX data plane (actors/rank/data_plane.hpp), two planes in one process over whatever
// transports UCX picks here (shared memory on loopback): an FP8 dispatch and a BF16 combine sent
// to a rank attached to the other plane arrive as the messages the middleman would deliver,
// byte for byte, a combine of 4 MiB too (UCX's rendezvous path); a payload for an actor no plane
// knows, one to an address that is not a plane's, and one without the receiving plane's key
// are dropped and counted. Skipped where moeserve was built without UCX. A contact's text and
// the interface that holds an address are checked against hand-written values.
#include <doctest/doctest.h>

#include <random>

#include "actor_fixture.hpp"
#include "actors/atoms.hpp"
#include "actors/kernel_inspect.hpp"
#include "actors/rank/data_plane.hpp"
#include "actors/rank/plane_contact.hpp"
#include "kernels/model/expert_parallel.hpp"

using moe::testing::actor_fixture;
using namespace std::chrono_literals;

namespace {

std::vector<float> random_rows(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x)
    v = d(rng);
  return x;
}

// A rank's stand-in: what arrives as (dispatch_atom, payload) goes to `sink`.
caf::behavior relay(caf::event_based_actor*, caf::actor sink) {
  return {
    [=](moe::dispatch_atom, moe::ep_dispatch& d) { caf::anon_send(sink, std::move(d)); },
    [=](moe::dispatch_atom, moe::ep_combine& c) { caf::anon_send(sink, std::move(c)); },
  };
}

}  // namespace

TEST_CASE_FIXTURE(actor_fixture,
                  "data plane: payloads between two UCX planes arrive as the rank's messages") {
  if (!moe::ucx_plane_built()) {
    MESSAGE("skipped: moeserve was built without UCX (Debian's libucx-dev)");
    return;
  }
  const std::shared_ptr<moe::data_plane> a = moe::start_ucx_plane(sys, "127.0.0.1");
  const std::shared_ptr<moe::data_plane> b = moe::start_ucx_plane(sys, "127.0.0.1");
  REQUIRE(a->address() != b->address());
  const caf::actor rank = sys.spawn(relay, caf::actor_cast<caf::actor>(self));
  b->attach(rank);

  std::mt19937 rng(11);
  const int64_t tokens = 3, hidden = 200, top_k = 2;
  const std::vector<float> x = random_rows(rng, tokens * hidden);
  const std::vector<int32_t> ids{0, 3, 2, 1, 3, 0};
  const std::vector<float> weights{0.7f, 0.3f, 0.6f, 0.4f, 0.55f, 0.45f};
  moe::dispatch_plan plan;
  const auto dispatches = moe::make_dispatches(moe::default_layer_placement(4, 0, 2),
                                               {.step = 5, .layer_idx = 1, .micro_batch = 0}, 0, x, ids,
                                               weights, tokens, hidden, top_k,
                                               {.dispatch = moe::payload_dtype::fp8,
                                                .combine = moe::payload_dtype::bf16,
                                                .sum = moe::combine_sum::per_pair},
                                               plan);
  const moe::ep_dispatch& d = *dispatches[1];
  REQUIRE(d.num_pairs() > 0);
  a->send(b->address(), rank, d);
  moe::ep_dispatch got;
  self->receive([&](moe::ep_dispatch& r) { got = std::move(r); },
                caf::after(10s) >> [] { FAIL("no dispatch"); });
  CHECK(got.key == d.key);
  CHECK(got.rows.type == moe::payload_dtype::fp8);
  CHECK(got.rows.data == d.rows.data);
  CHECK(got.rows.scales == d.rows.scales);
  CHECK(got.pair_row == d.pair_row);
  CHECK(got.pair_expert == d.pair_expert);
  CHECK(got.pair_weight == d.pair_weight);

  // 4 MiB of BF16 outputs: past UCX's eager limits, so it goes by rendezvous
  const int64_t rows = 512, wide = 4096;
  const std::vector<float> big = random_rows(rng, rows * wide);
  const moe::ep_combine c{.key = {.step = 6, .layer_idx = 3, .micro_batch = 1},
                          .src_rank = 1,
                          .outputs = moe::encode_rows(big.data(), rows, wide, moe::payload_dtype::bf16)};
  REQUIRE(c.outputs.num_bytes() == 4u << 20);
  a->send(b->address(), rank, c);
  moe::ep_combine back;
  self->receive([&](moe::ep_combine& r) { back = std::move(r); },
                caf::after(20s) >> [] { FAIL("no combine"); });
  CHECK(back.key == c.key);
  CHECK(back.src_rank == 1);
  CHECK(back.outputs.num_rows == rows);
  CHECK(back.outputs.data == c.outputs.data);

  // to an actor no plane has attached, to an address that is no plane's, and with b's worker
  // address but not b's key (a sender the control plane did not introduce): dropped, counted
  const caf::actor stranger = sys.spawn(relay, caf::actor_cast<caf::actor>(self));
  a->send(b->address(), stranger, d);
  a->send("not-a-contact", rank, d);
  std::string forged = b->address();
  REQUIRE(forged.size() > 33);
  REQUIRE(forged[32] == '.');
  forged.replace(0, 32, std::string(32, '0'));
  a->send(forged, rank, d);
  bool stray = false;
  self->receive([&](moe::ep_dispatch&) { stray = true; }, caf::after(500ms) >> [] {});
  CHECK(!stray);
  const moe::data_plane_stats sa = a->stats(), sb = b->stats();
  CHECK(sa.messages_sent == 4);
  CHECK(sa.dropped == 1);  // the address
  CHECK(sb.messages_received == 2);
  CHECK(sb.dropped == 2);  // the stranger, the forged key
  CHECK(sb.bytes_received > (4u << 20));
  caf::anon_send_exit(rank, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(stranger, caf::exit_reason::user_shutdown);
}

TEST_CASE("data plane: a contact is a 128-bit key and a worker address, in lower-case hex") {
  moe::plane_key key{};
  for (size_t i = 0; i < key.size(); ++i)
    key[i] = static_cast<unsigned char>(0xf0 + i);  // f0 f1 ... ff
  const unsigned char worker[] = {0x00, 0x7f, 0xab};
  const std::string text = moe::contact_text(key, worker, sizeof worker);
  CHECK(text == "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff.007fab");
  const std::optional<moe::plane_contact> back = moe::parse_contact(text);
  REQUIRE(back);
  CHECK(back->key == key);
  CHECK(back->worker == std::vector<unsigned char>{0x00, 0x7f, 0xab});
  // a key too short, no worker, an odd digit count, upper case, no dot: not a contact
  CHECK_FALSE(moe::parse_contact("f0f1.007fab"));
  CHECK_FALSE(moe::parse_contact("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff."));
  CHECK_FALSE(moe::parse_contact("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff.007fa"));
  CHECK_FALSE(moe::parse_contact("F0F1F2F3F4F5F6F7F8F9FAFBFCFDFEFF.007fab"));
  CHECK_FALSE(moe::parse_contact("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff007fab"));
  // two keys drawn are not the same (a 2^-128 chance)
  CHECK(moe::random_plane_key() != moe::random_plane_key());
}

TEST_CASE("data plane: the interface that holds a node's address") {
  CHECK(moe::interface_of("127.0.0.1") == "lo");
  CHECK(moe::interface_of("localhost") == "lo");  // a name, resolved
  CHECK(moe::interface_of("192.0.2.1").empty());  // TEST-NET-1: no interface here holds it
  CHECK(moe::interface_of("").empty());
}
