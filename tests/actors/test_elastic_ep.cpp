// tests/actors/test_elastic_ep.cpp
// Elastic expert parallelism, as the front node runs it when a node of a group split over
// processes is lost (actors/node_watch.cpp), here in one process over the tiny model (16 routed
// experts) on 2P+4D: decode ranks 0 and 1 are told a membership of the two of them alone, as
// survivors are. They then hold all 16 experts between them (8 each, copied from the
// checkpoint) and decode every request alone, with the single-rank generator's tokens (the exact
// combine does not depend on the group). Told the whole group again, every rank holds its 4
// experts as it began, and the tokens are the same again.
#include <doctest/doctest.h>

#include "actors/group_roster.hpp"
#include "recovery_fixture.hpp"

using namespace moe;
using namespace moe::testing;
using namespace std::chrono_literals;

namespace {

struct elastic_case : recovery_case {
  void configure(const cluster& c, const std::string& target, config_fields change) {
    self->request(c.supervisor, 10s, configure_atom::value, target, int64_t{0}, std::move(change))
      .receive([](versioned_config&) {}, [&](caf::error& e) { FAIL(sys.render(e)); });
  }

  // A membership of `ranks` (decode ranks; global ranks after the 2 prefill ones) with fresh
  // inboxes and no placement, from `first_step`, told to each of them.
  static void tell(const cluster& c, const std::vector<int64_t>& ranks, int64_t first_step) {
    ep_membership m;
    for (const int64_t r : ranks) {
      m.peers.push_back(caf::actor_cast<caf::actor>(c.decode_ranks[static_cast<size_t>(r)]));
      m.inboxes.push_back(std::make_shared<ep_inbox>());
      m.global_ranks.push_back(2 + r);
    }
    m.first_step = first_step;
    for (const caf::actor& peer : m.peers)
      caf::anon_send(peer, peers_atom::value, m);
  }

  // The logical experts decode rank `r` holds on the last layer, ascending (its placement's
  // slots of rank `group_rank` of `num_ranks`).
  std::vector<int32_t> experts_on(const cluster& c, int64_t r, int64_t group_rank, int64_t num_ranks) {
    const auto report = ask<placement_report>(
      caf::actor_cast<caf::actor>(c.decode_ranks[static_cast<size_t>(r)]), placement_atom::value);
    REQUIRE(!report.slot_expert.empty());
    const std::vector<int32_t>& slots = report.slot_expert.back();
    REQUIRE(slots.size() % static_cast<size_t>(num_ranks) == 0);
    const size_t per_rank = slots.size() / static_cast<size_t>(num_ranks);
    std::vector<int32_t> out(slots.begin() + static_cast<std::ptrdiff_t>(per_rank * group_rank),
                             slots.begin() + static_cast<std::ptrdiff_t>(per_rank * (group_rank + 1)));
    std::sort(out.begin(), out.end());
    return out;
  }

  void run_and_check(const cluster& c, uint32_t seed) {
    const std::vector<request_spec> specs = greedy_requests(8, seed);
    std::map<uint64_t, size_t> index_of;
    std::map<uint64_t, collected> got = run_load(c, specs, index_of, [](size_t) {});
    check_outputs(specs, index_of, got);
  }
};

}  // namespace

TEST_CASE_FIXTURE(elastic_case,
                  "elastic EP: two survivors of a 4-rank decode group hold every expert and decode alone, "
                  "the whole group again holds its experts as it began, same tokens") {
  auto tok = real_tokenizer();
  if (!tok)
    return;
  auto weights = tiny_weights();
  REQUIRE(weights->config.n_routed_experts == 16);
  topology_config topo = recovery_topology();
  topo.decode_ranks = 4;
  scoped_cluster c = spawn_cluster(sys, weights, tok, {.topology = topo, .reference = true});
  reference(weights, tok, topo);
  CHECK(experts_on(c, 1, 1, 4) == std::vector<int32_t>{4, 5, 6, 7});
  run_and_check(c, 11);

  // ranks 2 and 3 as if lost: no new work, and 0 and 1 a group of their own
  configure(c, "decode_balancer", {{"drain", int64_t{2}}});
  configure(c, "decode_balancer", {{"drain", int64_t{3}}});
  tell(c, {0, 1}, epoch_first_step(100));
  CHECK(experts_on(c, 0, 0, 2) == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(experts_on(c, 1, 1, 2) == std::vector<int32_t>{8, 9, 10, 11, 12, 13, 14, 15});
  const int64_t taken2 =
    ask<rank_stats>(c.supervisor, stats_atom::value, std::string("decode_rank"), int64_t{2}).num_requests;
  run_and_check(c, 12);
  CHECK(
    ask<rank_stats>(c.supervisor, stats_atom::value, std::string("decode_rank"), int64_t{2}).num_requests ==
    taken2);

  // the whole group again, from a later epoch
  tell(c, {0, 1, 2, 3}, epoch_first_step(101));
  configure(c, "decode_balancer", {{"undrain", int64_t{2}}});
  configure(c, "decode_balancer", {{"undrain", int64_t{3}}});
  for (int64_t r = 0; r < 4; ++r)
    CHECK(experts_on(c, r, r, 4) ==
          std::vector<int32_t>{static_cast<int32_t>(4 * r), static_cast<int32_t>(4 * r + 1),
                               static_cast<int32_t>(4 * r + 2), static_cast<int32_t>(4 * r + 3)});
  run_and_check(c, 13);
  c.stop();
}
