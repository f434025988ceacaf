// actors/expert_balancer.cpp
#include "actors/expert_balancer.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <stdexcept>
#include <variant>

#include "actors/errors.hpp"
#include "actors/policy/expert_placement.hpp"
#include "actors/rank/ep_member.hpp"
#include "actors/supervisor.hpp"

namespace moe {

namespace {

struct expert_balancer_state {
  expert_balancer_config cfg;
  live_settings<expert_balancer_settings> settings;
  std::vector<ep_member_actor> ranks;  // an invalid one while that rank is being restarted
  std::vector<int64_t> steps_seen;     // per rank: its num_steps_run at the last check
  int64_t steps_since = 0;             // group steps since the last planned rebalance
  bool checking = false;               // a check's questions are out
  bool running = false;                // a rebalance runs; `waiters` get its report
  std::vector<caf::typed_response_promise<rebalance_report>> waiters;
  // answers awaited from ranks, each failed when its rank goes down (await_answer)
  std::map<uint64_t, std::pair<caf::actor_addr, std::function<void(const std::string&)>>> awaiting;
  uint64_t next_await = 0;
  expert_balancer_stats stats;
  static inline const char* name = "expert_balancer";
};

using balancer_pointer = expert_balancer_actor::stateful_pointer<expert_balancer_state>;
using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

// What the ranks said: each one's placement in force and routed load (nullopt: no answer).
struct group_view {
  std::vector<std::optional<placement_report>> placements;
  std::vector<std::optional<expert_load>> loads;
  size_t pending = 0;
};

// Asks every rank its placement and load, then calls `done` with what came back.
void look_at_group(balancer_pointer self, const std::function<void(group_view&)>& done) {
  auto& st = self->state;
  auto view = std::make_shared<group_view>();
  const size_t n = st.ranks.size();
  view->placements.resize(n);
  view->loads.resize(n);
  view->pending = 2 * n;
  auto one = [view, done] {
    if (--view->pending == 0)
      done(*view);
  };
  for (size_t r = 0; r < n; ++r) {
    if (!st.ranks[r]) {  // being restarted: no answer (it is introduced when it lives)
      one();
      one();
      continue;
    }
    self->request(st.ranks[r], st.cfg.rank_timeout, placement_atom::value)
      .then(
        [view, r, one](const placement_report& p) {
          view->placements[r] = p;
          one();
        },
        [one](const caf::error&) { one(); });
    self->request(st.ranks[r], st.cfg.rank_timeout, expert_load_atom::value)
      .then(
        [view, r, one](const expert_load& l) {
          view->loads[r] = l;
          one();
        },
        [one](const caf::error&) { one(); });
  }
}

// The group's placement in force (every rank agreeing), or why there is none to plan from.
std::variant<placement_report, std::string> agreed_placement(const group_view& v) {
  for (size_t r = 0; r < v.placements.size(); ++r)
    if (!v.placements[r])
      return "rank " + std::to_string(r) + " did not answer (restarting?)";
  const placement_report& first = *v.placements[0];
  for (const auto& p : v.placements)
    if (p->epoch != first.epoch || p->membership_first_step != first.membership_first_step ||
        p->slot_expert != first.slot_expert)
      return std::string("the ranks disagree on the placement: a change or a restart is under way");
  return first;
}

// The routed tokens summed over the ranks: [moe_layers, num_logical].
std::variant<matrix<double>, std::string> summed_load(const group_view& v, int64_t num_logical) {
  matrix<double> total;
  for (size_t r = 0; r < v.loads.size(); ++r) {
    if (!v.loads[r])
      return "rank " + std::to_string(r) + " did not report its load";
    const expert_load& l = *v.loads[r];
    if (l.num_experts != num_logical ||
        static_cast<int64_t>(l.counts.size()) != l.num_layers * l.num_experts ||
        (total.rows != 0 && l.num_layers != total.rows))
      return "rank " + std::to_string(r) + " reported a load of another shape";
    if (total.rows == 0)
      total = matrix<double>(l.num_layers, l.num_experts);
    for (size_t i = 0; i < l.counts.size(); ++i)
      total.data[i] += static_cast<double>(l.counts[i]);
  }
  return total;
}

// The MoE layers' rows of a placement report.
std::vector<std::vector<int32_t>> moe_rows(const placement_report& p) {
  std::vector<std::vector<int32_t>> rows;
  for (const auto& row : p.slot_expert)
    if (!row.empty())
      rows.push_back(row);
  return rows;
}

void finish(balancer_pointer self, rebalance_report report) {
  auto& st = self->state;
  if (report.error.empty()) {
    ++st.stats.rebalances;
    st.stats.moved_bytes += report.moved_bytes;
    st.stats.epoch = report.epoch;
    if (!report.balancedness_after.empty())
      st.stats.balancedness = report.balancedness_after;
  } else {
    ++st.stats.failed;
    st.stats.last_error = report.error;
    std::fprintf(stderr, "expert_balancer %s: rebalance failed, the placement stays: %s\n",
                 st.cfg.role.c_str(), report.error.c_str());
  }
  st.stats.last_seconds = report.seconds;
  st.running = false;
  for (auto& w : st.waiters)
    w.deliver(report);
  st.waiters.clear();
}

// Asks the supervisor to keep `change` as the group's placement (renewing the group with it).
auto keep_decision(balancer_pointer self, const placement_change& change, bool renew) {
  return self->request(caf::actor_cast<placement_keeper_actor>(self->state.cfg.supervisor),
                       self->state.cfg.rank_timeout, placement_atom::value, self->state.cfg.rank_kind, change,
                       renew);
}

// Calls exactly one of `on_value` and `on_fail` for a request to `rank`: with the answer, or
// with why none came: an error, or the rank going down while it held the request (CAF 0.17
// answers no error for a request its receiver dies holding; a move may take minutes).
template <class T, class Handle, class OnValue, class OnFail>
void await_answer(balancer_pointer self, const ep_member_actor& rank, Handle handle, OnValue on_value,
                  OnFail on_fail) {
  const uint64_t id = self->state.next_await++;
  auto settled = std::make_shared<bool>(false);
  auto fail = [=](const std::string& why) {
    if (std::exchange(*settled, true))
      return;
    self->state.awaiting.erase(id);
    on_fail(why);
  };
  self->state.awaiting.emplace(id,
                               std::make_pair(rank.address(), std::function<void(const std::string&)>(fail)));
  handle.then(
    [=](T value) {
      if (std::exchange(*settled, true))
        return;
      self->state.awaiting.erase(id);
      on_value(value);
    },
    [=](const caf::error& e) { fail(self->system().render(e)); });
}

// Phase two: the decision is recorded; every rank switches at `switch_step`. A refusal renews
// the group, whose new membership carries the recorded placement.
void commit(balancer_pointer self, std::shared_ptr<rebalance_report> report, const placement_change& change,
            int64_t switch_step, clock::time_point began) {
  auto& st = self->state;
  auto pending = std::make_shared<size_t>(st.ranks.size());
  auto refused = std::make_shared<bool>(false);
  auto one = [=](bool ok) {
    *refused = *refused || !ok;
    if (--*pending != 0)
      return;
    report->seconds = seconds_since(began);
    if (!*refused)
      return finish(self, *report);
    std::fprintf(stderr,
                 "expert_balancer %s: a rank refused epoch %llu's switch: renewing the group with it\n",
                 self->state.cfg.role.c_str(), static_cast<unsigned long long>(change.epoch));
    keep_decision(self, change, true)
      .then([=](bool) { finish(self, *report); },
            [=](const caf::error& e) {
              report->error = "the switch was refused and the group could not be renewed: " +
                              self->system().render(e);
              finish(self, *report);
            });
  };
  for (const ep_member_actor& rank : st.ranks) {
    if (!rank) {  // restarted since phase one: its membership carries the decision
      one(false);
      continue;
    }
    await_answer<bool>(
      self, rank,
      self->request(rank, st.cfg.switch_timeout, placement_atom::value, change.epoch, switch_step,
                    change.membership_first_step),
      [one](bool ok) { one(ok); }, [one](const std::string&) { one(false); });
  }
}

void abort_change(balancer_pointer self, const placement_change& change,
                  std::shared_ptr<rebalance_report> report, std::string why, clock::time_point began) {
  for (const ep_member_actor& rank : self->state.ranks)
    if (rank)
      self->send(rank, placement_atom::value, change.epoch);
  report->error = std::move(why);
  report->seconds = seconds_since(began);
  finish(self, *report);
}

// Asks every rank `ask(rank)`, hands each answer to `on_answer`, and calls `then(why)` once all
// answered; `why` names the first rank that was restarting or failed at `doing`, empty when none.
template <class T, class Ask, class OnAnswer, class Then>
void ask_every_rank(balancer_pointer self, const char* doing, Ask ask, OnAnswer on_answer, Then then) {
  auto& st = self->state;
  auto pending = std::make_shared<size_t>(st.ranks.size());
  auto why = std::make_shared<std::string>();
  auto one = [=] {
    if (--*pending == 0)
      then(*why);
  };
  for (size_t r = 0; r < st.ranks.size(); ++r) {
    if (!st.ranks[r]) {
      if (why->empty())
        *why = "rank " + std::to_string(r) + " is restarting";
      one();
      continue;
    }
    await_answer<T>(
      self, st.ranks[r], ask(st.ranks[r]),
      [=](T value) {
        on_answer(value);
        one();
      },
      [=](const std::string& error) {
        if (why->empty())
          *why = "rank " + std::to_string(r) + " " + doing + ": " + error;
        one();
      });
  }
}

// Phase one on every rank, then the decision recorded with the supervisor, then phase two.
void install(balancer_pointer self, std::shared_ptr<rebalance_report> report, const placement_change& change,
             clock::time_point began) {
  auto next_steps = std::make_shared<std::vector<int64_t>>();
  ask_every_rank<int64_t>(
    self, "refused the placement",
    [=](const ep_member_actor& rank) {
      return self->request(rank, self->state.cfg.rank_timeout, placement_atom::value, change);
    },
    [=](int64_t next) { next_steps->push_back(next); },
    [=](const std::string& why) {
      if (!why.empty())
        return abort_change(self, change, report, why, began);
      const int64_t switch_step = *std::max_element(next_steps->begin(), next_steps->end()) +
                                  placement_hold_steps;
      keep_decision(self, change, false)
        .then(
          [=](bool recorded) {
            if (!recorded)
              return abort_change(self, change, report, "the group's membership changed meanwhile", began);
            commit(self, report, change, switch_step, began);
          },
          [=](const caf::error& e) {
            abort_change(self, change, report,
                         "the decision could not be recorded: " + self->system().render(e), began);
          });
    });
}

// Every rank copies the experts the change gives it from peers that hold them (steps go on
// meanwhile), then the change is installed; the bytes they copied are the report's.
void move_experts(balancer_pointer self, std::shared_ptr<rebalance_report> report,
                  const placement_change& change, clock::time_point began) {
  report->moved_bytes = 0;
  ask_every_rank<int64_t>(
    self, "could not copy its experts",
    [=](const ep_member_actor& rank) {
      return self->request(rank, self->state.cfg.move_timeout, experts_atom::value, change);
    },
    [=](int64_t bytes) { report->moved_bytes += bytes; },
    [=](const std::string& why) {
      if (!why.empty())
        return abort_change(self, change, report, why, began);
      install(self, report, change, began);
    });
}

// Plans from what the ranks said and installs the plan.
void plan_and_install(balancer_pointer self, group_view& view, clock::time_point began) {
  auto& st = self->state;
  const expert_balancer_settings& s = st.settings.now;
  auto report = std::make_shared<rebalance_report>();
  report->role = st.cfg.role;
  auto fail = [&](std::string why) {
    report->error = std::move(why);
    report->seconds = seconds_since(began);
    finish(self, *report);
  };
  auto agreed = agreed_placement(view);
  if (auto* why = std::get_if<std::string>(&agreed))
    return fail(*why);
  const placement_report current = std::get<placement_report>(std::move(agreed));
  report->epoch = current.epoch;
  auto summed = summed_load(view, st.cfg.num_logical);
  if (auto* why = std::get_if<std::string>(&summed))
    return fail(*why);
  const matrix<double> load = std::get<matrix<double>>(std::move(summed));
  if (std::all_of(load.data.begin(), load.data.end(), [](double x) { return x == 0.0; }))
    return fail("no tokens were routed in the window yet");
  const int64_t num_ranks = static_cast<int64_t>(st.ranks.size());
  placement_change_plan plan;
  try {
    plan = plan_placement(load, moe_rows(current), s.redundant_experts, num_ranks, st.cfg.num_groups,
                          st.cfg.num_nodes, s.policy == "global", s.minimal_movement);
  } catch (const std::invalid_argument& e) {
    return fail(std::string("no plan: ") + e.what());
  }
  report->moved_experts = plan.moved;
  report->moved_bytes = plan.moved * st.cfg.expert_bytes;  // until the ranks say what they copied
  report->plain_moved_bytes = plan.moved_plain * st.cfg.expert_bytes;
  report->balancedness_before = plan.balancedness_before;
  report->balancedness_after = plan.balancedness_after;
  if (plan.slots == moe_rows(current)) {  // already the plan: nothing to install
    report->seconds = seconds_since(began);
    return finish(self, *report);
  }
  auto placements = std::make_shared<std::vector<layer_placement>>(current.slot_expert.size());
  size_t next_moe = 0;
  for (size_t l = 0; l < current.slot_expert.size(); ++l)
    if (!current.slot_expert[l].empty())
      (*placements)[l] = make_layer_placement(plan.slots[next_moe++], num_ranks, st.cfg.num_logical);
  report->epoch = current.epoch + 1;
  move_experts(self, report,
               {.epoch = current.epoch + 1,
                .membership_first_step = current.membership_first_step,
                .placements = std::move(placements)},
               began);
}

void start_rebalance(balancer_pointer self) {
  auto& st = self->state;
  st.running = true;  // finish() clears it and answers the waiters
  st.steps_since = 0;
  const clock::time_point began = clock::now();
  for (size_t r = 0; r < st.ranks.size(); ++r)
    if (!st.ranks[r])
      return finish(self, {.role = st.cfg.role, .error = "rank " + std::to_string(r) + " is restarting"});
  look_at_group(self, [self, began](group_view& view) { plan_and_install(self, view, began); });
}

// Counts the group's steps since the last rebalance and keeps the balancedness current; plans
// once interval_steps have run (unless off or only on request).
void check(balancer_pointer self) {
  auto& st = self->state;
  if (st.checking || st.running)
    return;
  st.checking = true;
  look_at_group(self, [self](group_view& view) {
    auto& st = self->state;
    st.checking = false;
    int64_t progressed = 0;
    for (size_t r = 0; r < view.placements.size(); ++r) {
      if (!view.placements[r])
        continue;
      const int64_t now = view.placements[r]->num_steps_run;
      progressed = std::max(progressed, now >= st.steps_seen[r] ? now - st.steps_seen[r] : now);  // restarted
      st.steps_seen[r] = now;
    }
    st.steps_since += progressed;
    auto agreed = agreed_placement(view);
    auto summed = summed_load(view, st.cfg.num_logical);
    if (auto* p = std::get_if<placement_report>(&agreed)) {
      st.stats.epoch = p->epoch;
      if (auto* load = std::get_if<matrix<double>>(&summed))
        st.stats.balancedness = placement_balancedness(moe_rows(*p), *load,
                                                       static_cast<int64_t>(st.ranks.size()));
    }
    const expert_balancer_settings& s = st.settings.now;
    if (!st.running && s.policy != "off" && s.interval_steps > 0 && st.steps_since >= s.interval_steps)
      start_rebalance(self);
  });
}

// The rank counts over the settings' window.
void tell_window(balancer_pointer self, const ep_member_actor& rank) {
  if (!rank)
    return;
  self
    ->request(rank, self->state.cfg.rank_timeout, expert_load_atom::value,
              self->state.settings.now.window_steps)
    .then([](bool) {}, [](const caf::error&) {});  // a rank that restarts meanwhile is told when introduced
}

expert_balancer_actor::behavior_type expert_balancer(balancer_pointer self,
                                                     const std::vector<caf::actor>& ranks,
                                                     expert_balancer_config cfg) {
  auto& st = self->state;
  for (const caf::actor& r : ranks) {
    st.ranks.push_back(caf::actor_cast<ep_member_actor>(r));
    if (r)
      self->monitor(r);
  }
  st.steps_seen.assign(st.ranks.size(), 0);
  // a rank that goes down is being restarted (the supervisor introduces its successor): what
  // was asked of it fails now, not at its timeout
  self->set_down_handler([=](caf::down_msg& down) {
    auto& st = self->state;
    for (ep_member_actor& rank : st.ranks)
      if (rank && rank.address() == down.source)
        rank = nullptr;
    std::vector<std::function<void(const std::string&)>> failed;
    for (const auto& [id, awaited] : st.awaiting)
      if (awaited.first == down.source)
        failed.push_back(awaited.second);
    for (const auto& fail : failed)
      fail("went down");
  });
  st.settings = {.target = "expert_balancer", .now = cfg.settings, .epoch = 0};
  st.settings.now.num_logical = cfg.num_logical;
  st.stats.role = cfg.role;
  st.cfg = std::move(cfg);
  self->delayed_send(self, st.cfg.check_period, check_atom::value);
  return {
    [=](rebalance_atom) -> caf::result<rebalance_report> {
      auto& st = self->state;
      st.waiters.push_back(self->make_response_promise<rebalance_report>());
      auto rp = st.waiters.back();
      if (!st.running)
        start_rebalance(self);
      return rp;
    },
    [=](peers_atom, int64_t index, caf::actor& fresh) {
      auto& st = self->state;
      if (index < 0 || index >= static_cast<int64_t>(st.ranks.size()))
        return;
      st.ranks[index] = caf::actor_cast<ep_member_actor>(fresh);
      if (fresh)
        self->monitor(fresh);
      st.steps_seen[index] = 0;
      if (st.settings.epoch > 0)
        tell_window(self, st.ranks[index]);
    },
    [=](stats_atom) { return self->state.stats; },
    [=](check_atom) {
      check(self);
      self->delayed_send(self, self->state.cfg.check_period, check_atom::value);
    },
    [=](configure_atom, const config_fields& change) -> caf::result<versioned_config> {
      auto& st = self->state;
      const int64_t window = st.settings.now.window_steps;
      caf::expected<versioned_config> v = st.settings.configure(change);
      if (!v)
        return std::move(v.error());
      if (st.settings.now.window_steps != window)
        for (const ep_member_actor& rank : st.ranks)
          tell_window(self, rank);
      return std::move(*v);
    },
    [=](configure_atom, const versioned_config& v) {
      auto& st = self->state;
      st.settings.restore(v);
      for (const ep_member_actor& rank : st.ranks)
        tell_window(self, rank);
    },
    [=](config_atom) { return self->state.settings.current(); },
  };
}

}  // namespace

expert_balancer_actor spawn_expert_balancer(caf::actor_system& sys, std::vector<caf::actor> ranks,
                                            expert_balancer_config cfg) {
  return sys.spawn(expert_balancer, std::move(ranks), std::move(cfg));
}

}  // namespace moe
