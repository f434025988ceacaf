// actors/supervisor.cpp
#include "actors/supervisor.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <chrono>
#include <cstdio>
#include <exception>
#include <list>
#include <map>
#include <memory>
#include <optional>

#include "actors/errors.hpp"

namespace moe {

namespace {

struct child {
  child_spec spec;
  caf::actor handle;  // invalid while none lives
  restart_intensity intensity;
  std::vector<caf::typed_response_promise<caf::actor>> successor_waiters;
  bool ended = false;  // exited and will not be restarted
  std::optional<std::chrono::steady_clock::time_point> last_restart;
  double last_recovery_ms = -1.0;          // down message to successor introduced, for the last restart
  std::optional<versioned_config> config;  // the last live change it accepted
};

// Those waiting for a successor learn that none will come.
void no_successor(child& c, const std::string& why) {
  c.ended = true;
  for (auto& p : c.successor_waiters)
    p.deliver(
      caf::make_error(serve_errc::unavailable, c.spec.kind + " " + std::to_string(c.spec.index) + why));
  c.successor_waiters.clear();
}

// An actor another owns, attached for listing and fault injection.
struct attached {
  std::string kind;
  int64_t index = 0;
  caf::actor handle;
};

struct supervisor_state {
  std::list<child> children;  // stable addresses: a child added later moves none
  std::vector<attached> attached_actors;
  std::map<std::string, int64_t> next_attached_index;  // per kind
  bool stopping = false;
  static inline const char* name = "supervisor";
};

using supervisor_pointer = supervisor_actor::stateful_pointer<supervisor_state>;

child* find_child(supervisor_state& st, const std::string& kind, int64_t index) {
  for (child& c : st.children)
    if (c.spec.kind == kind && c.spec.index == index)
      return &c;
  return nullptr;
}

child* find_child(supervisor_state& st, const caf::actor_addr& addr) {
  for (child& c : st.children)
    if (c.handle && c.handle.address() == addr)
      return &c;
  return nullptr;
}

child_lookup lookup_in(supervisor_pointer self) {
  return [self](const std::string& kind, int64_t index) {
    if (kind == "supervisor")  // a child that reports to it (an expert balancer's decisions)
      return caf::actor_cast<caf::actor>(self);
    child* other = find_child(self->state, kind, index);
    return other != nullptr ? other->handle : caf::actor{};
  };
}

using configurable = caf::typed_actor<configure_change, config_query>;

constexpr auto config_timeout = std::chrono::seconds(5);

// A configurable child that accepted no change yet: its starting configuration is kept, so that
// the listing names it even while it is being restarted.
void keep_starting_config(supervisor_pointer self, const child& c) {
  const std::string kind = c.spec.kind;
  const int64_t index = c.spec.index;
  self->request(caf::actor_cast<configurable>(c.handle), config_timeout, config_atom::value)
    .then(
      [=](const versioned_config& v) {
        if (child* now = find_child(self->state, kind, index); now != nullptr && !now->config)
          now->config = v;
      },
      [](const caf::error&) {});  // it died first: its successor is asked when it starts
}

void start_child(supervisor_pointer self, child& c) {
  if (c.spec.running) {
    c.handle = std::move(c.spec.running);
    c.spec.running = {};
  } else {
    c.handle = c.spec.start(lookup_in(self));
  }
  self->monitor(c.handle);
  if (c.config)  // before anyone learns the handle: its first message
    caf::anon_send(c.handle, configure_atom::value, *c.config);
  else if (c.spec.configurable)
    keep_starting_config(self, c);
  for (auto& p : c.successor_waiters)
    p.deliver(c.handle);
  c.successor_waiters.clear();
}

// Stops every child and exits with `reason`.
void stop_all(supervisor_pointer self, const caf::error& reason) {
  auto& st = self->state;
  st.stopping = true;
  for (child& c : st.children) {
    no_successor(c, ": the cluster stopped");
    if (c.handle) {
      self->demonitor(c.handle);
      if (c.spec.restart != restart_policy::elsewhere)  // another process's: it stops with its node
        caf::anon_send_exit(c.handle, caf::exit_reason::user_shutdown);
      c.handle = {};
    }
  }
  for (const attached& a : st.attached_actors)  // their owners are told by their own monitors
    self->demonitor(a.handle);
  st.attached_actors.clear();
  self->quit(reason);
}

bool is_normal(const caf::error& reason) {
  return !reason || reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown;
}

void on_child_down(supervisor_pointer self, const caf::down_msg& dm) {
  auto& st = self->state;
  if (std::erase_if(st.attached_actors, [&](const attached& a) { return a.handle.address() == dm.source; }) >
      0)
    return;  // its owner handles it
  child* c = find_child(st, dm.source);
  if (c == nullptr || st.stopping)
    return;
  c->handle = {};
  const bool normal = is_normal(dm.reason);
  if (c->spec.restart == restart_policy::transient && normal)
    return no_successor(*c, " ended");
  const std::string who = c->spec.kind + " " + std::to_string(c->spec.index);
  if (c->spec.restart == restart_policy::never && !normal) {
    std::fprintf(stderr, "supervisor: %s exited (%s) and cannot be restarted: stopping the cluster\n",
                 who.c_str(), self->system().render(dm.reason).c_str());
    return stop_all(self, dm.reason);
  }
  if (c->spec.restart == restart_policy::never)
    return no_successor(*c, " ended");
  if (c->spec.restart == restart_policy::elsewhere) {
    std::fprintf(stderr, "supervisor: %s, in another process, is down (%s): the cluster goes on without it\n",
                 who.c_str(), self->system().render(dm.reason).c_str());
    return no_successor(*c, " is down in another process");
  }
  if (!c->intensity.allow(restart_intensity::clock::now())) {
    std::fprintf(stderr,
                 "supervisor: %s exited (%s) after %lld restarts, more than its restart limits "
                 "allow: stopping the cluster\n",
                 who.c_str(), self->system().render(dm.reason).c_str(),
                 static_cast<long long>(c->intensity.num_restarts()));
    return stop_all(self, caf::make_error(serve_errc::crash_loop, who));
  }
  try {
    const auto began = std::chrono::steady_clock::now();
    c->last_restart = began;
    start_child(self, *c);
    if (c->spec.introduce)
      c->spec.introduce(c->handle, lookup_in(self));
    c->last_recovery_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "supervisor: %s could not be restarted (%s): stopping the cluster\n", who.c_str(),
                 e.what());
    return stop_all(self, caf::make_error(serve_errc::crash_loop, who + ": " + e.what()));
  }
}

// What a child that runs workers answers.
using worker_owner = caf::typed_actor<caf::replies_to<actors_atom>::with<std::vector<actor_info>>,
                                      caf::replies_to<kill_atom, uint64_t>::with<bool>>;

// The live children, then each one's workers (asked of it; one that does not answer adds none).
caf::typed_response_promise<std::vector<actor_info>> list_actors(supervisor_pointer self) {
  auto rp = self->make_response_promise<std::vector<actor_info>>();
  auto out = std::make_shared<std::vector<actor_info>>();
  std::vector<std::pair<caf::actor, std::string>> owners;
  for (const child& c : self->state.children)
    if (c.handle) {
      const double since =
        c.last_restart
          ? std::chrono::duration<double>(std::chrono::steady_clock::now() - *c.last_restart).count()
          : -1.0;
      out->push_back({c.spec.kind, c.spec.index, c.intensity.num_restarts(), since, c.last_recovery_ms});
      if (!c.spec.worker_kind.empty())
        owners.emplace_back(c.handle, c.spec.worker_kind);
    }
  for (const attached& a : self->state.attached_actors)
    out->push_back({a.kind, a.index, 0, -1.0, -1.0});
  if (owners.empty()) {
    rp.deliver(*out);
    return rp;
  }
  auto pending = std::make_shared<size_t>(owners.size());
  for (const auto& [owner, kind] : owners) {
    auto one_done = [rp, out, pending]() mutable {
      if (--*pending == 0)
        rp.deliver(*out);
    };
    self->request(caf::actor_cast<worker_owner>(owner), std::chrono::seconds(5), actors_atom::value)
      .then(
        [out, one_done, kind = kind](const std::vector<actor_info>& workers) mutable {
          for (actor_info w : workers) {
            w.kind = kind;
            out->push_back(std::move(w));
          }
          one_done();
        },
        [one_done](caf::error&) mutable { one_done(); });
  }
  return rp;
}

// What a configurable child answers.
caf::result<versioned_config> configure_child(supervisor_pointer self, const std::string& kind, int64_t index,
                                              const config_fields& change) {
  child* c = find_child(self->state, kind, index);
  const std::string who = kind + " " + std::to_string(index);
  if (c == nullptr || !c->spec.configurable)
    return caf::make_error(serve_errc::invalid, "target: " + who + " takes no configuration");
  if (!c->handle)
    return caf::make_error(serve_errc::unavailable, who + " is being restarted");
  auto rp = self->make_response_promise<versioned_config>();
  const caf::actor_addr asked = c->handle.address();
  self->request(caf::actor_cast<configurable>(c->handle), config_timeout, configure_atom::value, change)
    .then(
      [=](const versioned_config& v) mutable {
        // kept for a successor, unless the instance that accepted it is gone already: its
        // successor started with what was kept before, and the operator is told to retry
        child* now = find_child(self->state, kind, index);
        if (now == nullptr || !now->handle || now->handle.address() != asked) {
          rp.deliver(caf::make_error(serve_errc::unavailable, who + " was restarted meanwhile: retry"));
          return;
        }
        if (!now->config || now->config->epoch < v.epoch)
          now->config = v;
        rp.deliver(v);
      },
      [=](caf::error& e) mutable { rp.deliver(std::move(e)); });
  return rp;
}

// Question `q` to the instance of child (kind, index) living now, delegated: it answers, as a
// `Reply`; serve_errc::unavailable while it is being restarted.
template <class Reply, class Atom>
caf::result<Reply> ask_living(supervisor_pointer self, const std::string& kind, int64_t index, Atom q) {
  child* c = find_child(self->state, kind, index);
  if (c == nullptr || !c->handle)
    return caf::make_error(serve_errc::unavailable, kind + " " + std::to_string(index) + " is restarting");
  using answering = caf::typed_actor<typename caf::replies_to<Atom>::template with<Reply>>;
  return self->delegate(caf::actor_cast<answering>(c->handle), q);
}

// Every configurable child's configuration (asked of it; a restarting one: what was kept).
caf::typed_response_promise<std::vector<versioned_config>> list_configs(supervisor_pointer self) {
  auto rp = self->make_response_promise<std::vector<versioned_config>>();
  std::vector<child*> targets;
  for (child& c : self->state.children)
    if (c.spec.configurable)
      targets.push_back(&c);
  auto out = std::make_shared<std::vector<std::optional<versioned_config>>>(targets.size());
  auto pending = std::make_shared<size_t>(targets.size());
  auto finish = [rp, out]() mutable {
    std::vector<versioned_config> all;
    for (auto& v : *out)
      if (v)
        all.push_back(std::move(*v));
    rp.deliver(std::move(all));
  };
  if (targets.empty()) {
    finish();
    return rp;
  }
  for (size_t i = 0; i < targets.size(); ++i) {
    child& c = *targets[i];
    auto one_done = [pending, finish]() mutable {
      if (--*pending == 0)
        finish();
    };
    if (!c.handle) {
      (*out)[i] = c.config;
      one_done();
      continue;
    }
    std::optional<versioned_config> kept = c.config;
    self->request(caf::actor_cast<configurable>(c.handle), config_timeout, config_atom::value)
      .then(
        [out, i, one_done](const versioned_config& v) mutable {
          (*out)[i] = v;
          one_done();
        },
        [out, i, one_done, kept](caf::error&) mutable {
          (*out)[i] = kept;
          one_done();
        });
  }
  return rp;
}

supervisor_actor::behavior_type supervisor(supervisor_pointer self, std::vector<child_spec> specs,
                                           restart_limits limits, const placement_keeper& keeper) {
  for (child_spec& s : specs)
    self->state.children.push_back(
      {.spec = std::move(s), .handle = {}, .intensity = restart_intensity(limits)});
  for (child& c : self->state.children)
    start_child(self, c);
  self->set_down_handler([=](caf::down_msg& dm) { on_child_down(self, dm); });
  self->set_exit_handler([=](caf::exit_msg& em) { stop_all(self, em.reason); });
  return {
    [=](actors_atom) -> caf::result<std::vector<actor_info>> { return list_actors(self); },
    [=](kill_atom, const std::string& kind, int64_t index) -> caf::result<bool> {
      for (const child& c : self->state.children)
        if (c.handle && !c.spec.worker_kind.empty() && c.spec.worker_kind == kind)
          return self->delegate(caf::actor_cast<worker_owner>(c.handle), kill_atom::value,
                                static_cast<uint64_t>(index));
      for (const attached& a : self->state.attached_actors)
        if (a.kind == kind && a.index == index) {
          caf::anon_send_exit(a.handle, caf::exit_reason::kill);
          return true;
        }
      child* c = find_child(self->state, kind, index);
      if (c == nullptr || !c->handle)
        return false;
      caf::anon_send_exit(c->handle, caf::exit_reason::kill);
      return true;
    },
    [=](lookup_atom, const std::string& kind, int64_t index) {
      child* c = find_child(self->state, kind, index);
      return c != nullptr ? c->handle : caf::actor{};
    },
    [=](lookup_atom, const std::string& kind, int64_t index,
        const caf::actor_addr& lost) -> caf::result<caf::actor> {
      child* c = find_child(self->state, kind, index);
      if (c == nullptr)
        return caf::make_error(serve_errc::unavailable, "no child " + kind + " " + std::to_string(index));
      if (c->handle && c->handle.address() != lost)
        return c->handle;
      if (c->ended || self->state.stopping)
        return caf::make_error(serve_errc::unavailable, kind + " " + std::to_string(index) + " ended");
      c->successor_waiters.push_back(self->make_response_promise<caf::actor>());
      return c->successor_waiters.back();
    },
    [=](stats_atom, const std::string& kind, int64_t index) -> caf::result<rank_stats> {
      return ask_living<rank_stats>(self, kind, index, stats_atom::value);  // ranks answer rank_stats
    },
    [=](expert_load_atom, const std::string& kind, int64_t index) -> caf::result<expert_load> {
      return ask_living<expert_load>(self, kind, index, expert_load_atom::value);
    },
    [=](configure_atom, const std::string& kind, int64_t index, const config_fields& change) {
      return configure_child(self, kind, index, change);
    },
    [=](config_atom) -> caf::result<std::vector<versioned_config>> { return list_configs(self); },
    [=](placement_atom, const std::string& rank_kind, const placement_change& decision,
        bool renew) -> caf::result<bool> {
      if (self->state.stopping || !keeper)
        return false;
      placement_kept kept = keeper(rank_kind, decision, renew);
      if (const auto* elsewhere = std::get_if<placement_keeper_actor>(&kept))
        return *elsewhere ? self->delegate(*elsewhere, placement_atom::value, rank_kind, decision, renew)
                          : caf::result<bool>{false};
      return std::get<bool>(kept);
    },
    [=](start_atom, child_spec& spec) -> caf::result<caf::actor> {
      auto& st = self->state;
      if (st.stopping)
        return caf::make_error(serve_errc::unavailable, "the cluster stopped");
      if (child* old = find_child(st, spec.kind, spec.index); old != nullptr && old->handle)
        return caf::make_error(serve_errc::invalid, spec.kind + " " + std::to_string(spec.index) + " lives");
      std::erase_if(st.children,
                    [&](const child& c) { return c.spec.kind == spec.kind && c.spec.index == spec.index; });
      st.children.push_back({.spec = std::move(spec), .handle = {}, .intensity = restart_intensity(limits)});
      try {
        start_child(self, st.children.back());
      } catch (const std::exception& e) {
        st.children.pop_back();
        return caf::make_error(serve_errc::unavailable, std::string("could not start it: ") + e.what());
      }
      return st.children.back().handle;
    },
    [=](attach_atom, const std::string& kind, caf::actor& worker) {
      auto& st = self->state;
      if (st.stopping || !worker)
        return;
      self->monitor(worker);  // one already dead is reported at once
      st.attached_actors.push_back({kind, st.next_attached_index[kind]++, std::move(worker)});
    },
  };
}

}  // namespace

supervisor_actor spawn_supervisor(caf::actor_system& sys, std::vector<child_spec> children,
                                  restart_limits limits, placement_keeper keeper) {
  return sys.spawn(supervisor, std::move(children), limits, std::move(keeper));
}

}  // namespace moe
