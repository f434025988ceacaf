// tests/actors/deterministic_fixture.hpp
// One CAF actor system per test case on CAF's deterministic scheduler (scheduler.policy
// "testing", caf/scheduler/test_coordinator.hpp): nothing runs until the test says so, one
// message at a time, so a test can hold one actor back while the others run and make a
// message-order race happen in the order it names. Ranks need cluster_config::
// synchronous_streams (their streams' work and completions then run inline, on this thread).
#pragma once

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <vector>

#include "actors/atoms.hpp"
#include "actors/errors.hpp"
#include "actors/messages.hpp"
#include "actors/system_config.hpp"

namespace moe::testing {

struct deterministic_fixture {
  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;  // the client: submits, gets the streamed chunks and results
  caf::scheduler::test_coordinator& sched;

  static caf::actor_system_config& tune(caf::actor_system_config& c) {
    configure_actor_system(c);
    c.set("scheduler.policy", caf::atom("testing"));
    c.set("logger.file-verbosity", caf::atom("quiet"));
    c.set("middleman.heartbeat-interval", caf::timespan{0});
    return c;
  }
  deterministic_fixture()
      : sys{tune(cfg)}, self{sys, true}, sched{dynamic_cast<caf::scheduler::test_coordinator&>(
                                           sys.scheduler())} {}
  ~deterministic_fixture() { sched.run(); }
  deterministic_fixture(const deterministic_fixture&) = delete;
  deterministic_fixture& operator=(const deterministic_fixture&) = delete;

  template <class Handle>
  static caf::resumable* job_of(const Handle& h) {
    return dynamic_cast<caf::resumable*>(caf::actor_cast<caf::abstract_actor*>(h));
  }

  /// Whether `h`'s next message is (Ts..., anything after).
  template <class... Ts, class Handle>
  bool next_message_is(const Handle& h) {
    // only a scheduled actor's mailbox may be peeked: peeking an idle one's would clear its
    // "reader blocked" mark, and the next message would no longer schedule it
    if (std::find(sched.jobs.begin(), sched.jobs.end(), job_of(h)) == sched.jobs.end())
      return false;
    auto* a = dynamic_cast<caf::scheduled_actor*>(caf::actor_cast<caf::abstract_actor*>(h));
    const caf::mailbox_element* e = a ? a->mailbox().peek() : nullptr;
    if (e == nullptr || e->content().size() < sizeof...(Ts))
      return false;
    size_t i = 0;
    return (e->content().match_element<Ts>(i++) && ...);
  }

  /// Runs one message at a time, never one of `held`'s, until `done()` holds. Returns done():
  /// false when only held actors (or none) have messages left.
  template <class Pred>
  bool run_until(Pred done, const std::vector<caf::resumable*>& held = {}) {
    while (!done()) {
      auto it = std::find_if(sched.jobs.begin(), sched.jobs.end(), [&](caf::resumable* j) {
        return std::find(held.begin(), held.end(), j) == held.end();
      });
      if (it == sched.jobs.end())
        return false;
      std::rotate(sched.jobs.begin(), it, it + 1);
      sched.run_once();
    }
    return true;
  }

  /// Runs every message except `held`'s until only theirs are left.
  void run_all_but(const std::vector<caf::resumable*>& held) {
    run_until([] { return false; }, held);
  }

  /// Runs until no actor has a message.
  void run_all() { sched.run(); }

  /// The client's mailbox, drained: every streamed chunk and result it has now.
  struct client_view {
    std::vector<stream_chunk> chunks;
    std::vector<session_result> results;
  };
  client_view drain_client() {
    client_view v;
    bool more = true;
    while (more)
      self->receive([&](token_atom, stream_chunk& c) { v.chunks.push_back(std::move(c)); },
                    [&](done_atom, session_result& r) { v.results.push_back(std::move(r)); },
                    caf::after(std::chrono::seconds(0)) >> [&] { more = false; });
    return v;
  }

  /// Asks `h` (a message that needs no other actor to answer) and runs until it has answered.
  template <class T, class Handle, class... Ts>
  T ask(const Handle& h, Ts... xs) {
    auto reply = self->request(h, caf::infinite, xs...);
    run_all();
    T out{};
    reply.receive([&](T& x) { out = std::move(x); },
                  [&](caf::error& e) { throw std::runtime_error("ask: " + sys.render(e)); });
    return out;
  }
};

}  // namespace moe::testing
