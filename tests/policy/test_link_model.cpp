// tests/policy/test_link_model.cpp
// Message delivery times on hand-worked links: latency, bandwidth, and a sender's port queueing.
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>

#include "actors/policy/link_model.hpp"

using namespace moe;
using namespace std::chrono_literals;

namespace {

// 2 ranks per node; intra: 1 µs + 100 GB/s (100 bytes/ns); inter: 10 µs + 10 GB/s (10 bytes/ns).
link_model_config two_per_node() {
  return {.ranks_per_node = 2,
          .intra_node = {.latency_us = 1.0, .bandwidth_gb_s = 100.0},
          .inter_node = {.latency_us = 10.0, .bandwidth_gb_s = 10.0}};
}

const link_model::clock::time_point t0 = link_model::clock::time_point{} + 1s;

}  // namespace

TEST_CASE("link model: ranks group into nodes") {
  const link_model links(two_per_node(), 6);
  CHECK(links.same_node(0, 1));
  CHECK(links.same_node(4, 5));
  CHECK_FALSE(links.same_node(1, 2));
  CHECK_FALSE(links.same_node(0, 5));
}

TEST_CASE("link model: one message intra-node and one inter-node") {
  link_model links(two_per_node(), 4);
  // 1 MB: intra 1e6 / 100 = 10 µs on the port + 1 µs; inter 1e6 / 10 = 100 µs + 10 µs
  CHECK(links.transfer_time(0, 1, 1'000'000) == 11us);
  CHECK(links.transfer_time(0, 2, 1'000'000) == 110us);
  CHECK(links.deliver_at(0, 1, 1'000'000, t0) == t0 + 11us);
  CHECK(links.deliver_at(2, 0, 1'000'000, t0) == t0 + 110us);
}

TEST_CASE("link model: back-to-back messages queue on the sender's port") {
  link_model links(two_per_node(), 4);
  // each 100 KB inter-node message holds the port 10 µs; latency 10 µs is not serialised
  CHECK(links.deliver_at(0, 2, 100'000, t0) == t0 + 20us);        // departs 0, port free at 10
  CHECK(links.deliver_at(0, 3, 100'000, t0) == t0 + 30us);        // departs 10, port free at 20
  CHECK(links.deliver_at(0, 2, 100'000, t0 + 5us) == t0 + 40us);  // departs 20, port free at 30
  // transfer_time reserves nothing
  CHECK(links.transfer_time(0, 2, 100'000) == 20us);
  CHECK(links.deliver_at(0, 2, 100'000, t0 + 30us) == t0 + 50us);  // port just went idle at 30
}

TEST_CASE("link model: intra and inter ports and different senders do not queue on each other") {
  link_model links(two_per_node(), 4);
  CHECK(links.deliver_at(0, 2, 1'000'000, t0) == t0 + 110us);  // inter port of rank 0 busy to 100
  CHECK(links.deliver_at(0, 1, 1'000'000, t0) == t0 + 11us);   // intra port of rank 0 is free
  CHECK(links.deliver_at(1, 3, 1'000'000, t0) == t0 + 110us);  // rank 1's inter port is free
}

TEST_CASE("link model: a message sent after the port went idle departs at once") {
  link_model links(two_per_node(), 4);
  CHECK(links.deliver_at(0, 1, 1'000'000, t0) == t0 + 11us);  // port busy until t0 + 10
  CHECK(links.deliver_at(0, 1, 1'000'000, t0 + 50us) == t0 + 61us);
}

TEST_CASE("link model: to itself is immediate, unlimited bandwidth costs only latency") {
  link_model links(
    {.ranks_per_node = 2, .intra_node = {.latency_us = 3.0, .bandwidth_gb_s = 0.0}, .inter_node = {}}, 4);
  CHECK(links.deliver_at(1, 1, 1'000'000'000, t0) == t0);
  CHECK(links.transfer_time(1, 1, 1'000'000'000) == 0us);
  CHECK(links.deliver_at(0, 1, 1'000'000'000, t0) == t0 + 3us);
  CHECK(links.deliver_at(0, 1, 1'000'000'000, t0) == t0 + 3us);  // nothing occupies the port
  CHECK(links.deliver_at(0, 2, 1'000'000'000, t0) == t0);        // zero spec: free and instant
}

TEST_CASE("link model: rejects an empty topology") {
  CHECK_THROWS_AS(link_model({.ranks_per_node = 0}, 4), std::invalid_argument);
  CHECK_THROWS_AS(link_model(two_per_node(), 0), std::invalid_argument);
}

TEST_CASE("link model: on even steps only, odd steps' messages do not take the link") {
  link_model_config cfg = two_per_node();
  CHECK(link_model(cfg, 4).carries(1));  // by default every step does
  cfg.even_steps_only = true;
  const link_model links(cfg, 4);
  CHECK(links.carries(0));
  CHECK_FALSE(links.carries(1));
  CHECK(links.carries(2));
  CHECK_FALSE(links.carries(7));
}
