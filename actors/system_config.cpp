// actors/system_config.cpp
#include "actors/system_config.hpp"

#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/timestamp.hpp>
#include <chrono>
#include <sys/prctl.h>

#include "actors/errors.hpp"
#include "actors/messages.hpp"
#include "actors/node_gate.hpp"
#include "actors/rank/ep_member.hpp"

namespace moe {

void configure_actor_system(caf::actor_system_config& cfg) {
  add_serve_error_category(cfg);
  cfg.set("work-stealing.moderate-sleep-duration", caf::timespan{0});
  // Timed waits end when due, not up to Linux's default 50 us timer slack later; threads the
  // actor system starts from here inherit it.
  prctl(PR_SET_TIMERSLACK, 1UL);
}

void configure_remote(caf::actor_system_config& cfg, double heartbeat_s, double timeout_s) {
  const auto span = [](double seconds) {
    return caf::timespan{std::chrono::duration_cast<caf::timespan>(std::chrono::duration<double>(seconds))};
  };
  cfg.load<caf::io::middleman>();
  cfg.set("middleman.heartbeat-interval", span(heartbeat_s));
  cfg.set("middleman.connection-timeout", span(timeout_s));
  cfg.add_message_type<node_roster>("moe::node_roster");
  cfg.add_message_type<rank_stats>("moe::rank_stats");
  cfg.add_message_type<request_spec>("moe::request_spec");
  cfg.add_message_type<prefill_job>("moe::prefill_job");
  cfg.add_message_type<token_chunk>("moe::token_chunk");
  cfg.add_message_type<kv_handoff>("moe::kv_handoff");
  cfg.add_message_type<kv_pages>("moe::kv_pages");
  cfg.add_message_type<ep_membership>("moe::ep_membership");
  cfg.add_message_type<ep_dispatch>("moe::ep_dispatch");
  cfg.add_message_type<ep_combine>("moe::ep_combine");
  // expert moves between ranks of a group split over processes (expert_balancer.hpp)
  cfg.add_message_type<placement_change>("moe::placement_change");
  cfg.add_message_type<placement_report>("moe::placement_report");
  cfg.add_message_type<expert_blob>("moe::expert_blob");
  cfg.add_message_type<expert_load>("moe::expert_load");
  cfg.add_message_type<collective_id>("moe::collective_id");  // a split group's NCCL communicator
}

}  // namespace moe
