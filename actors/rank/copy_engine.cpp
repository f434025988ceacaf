// actors/rank/copy_engine.cpp
#include "actors/rank/copy_engine.hpp"

#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <stdexcept>

#include "actors/errors.hpp"

namespace moe {

namespace {

// This thread at nice 19: it runs when the others leave a core idle, and still progresses
// (about 1.5 % of a core against a busy one) when they do not.
void lower_this_thread() {
  thread_local bool lowered = false;
  if (lowered)
    return;
  lowered = true;
  (void)::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 19);  // best effort
}

copy_engine_actor::behavior_type copy_engine(copy_engine_actor::pointer self) {
  self->set_down_handler([self](caf::down_msg&) { self->quit(); });
  return {
    [self](watch_atom, const caf::actor& owner) { self->monitor(owner); },
    [](experts_atom, const std::shared_ptr<const expert_copy>& copy, int64_t layer, int32_t expert) {
      lower_this_thread();
      return expert_blob{.layer = layer, .expert = expert, .bytes = encode_expert(copy->weights)};
    },
    [](experts_atom, const expert_blob& blob) -> caf::result<std::shared_ptr<const expert_copy>> {
      lower_this_thread();
      try {
        return decode_expert(blob.bytes);
      } catch (const std::invalid_argument& e) {
        return caf::make_error(serve_errc::invalid, e.what());
      }
    },
  };
}

}  // namespace

copy_engine_actor spawn_copy_engine(caf::actor_system& sys, bool own_thread) {
  return own_thread ? sys.spawn<caf::detached>(copy_engine) : sys.spawn(copy_engine);
}

copy_engine_actor spawn_copy_engine_for(caf::actor_system& sys, const caf::actor& owner) {
  copy_engine_actor engine = spawn_copy_engine(sys);
  caf::anon_send(engine, watch_atom::value, owner);
  return engine;
}

}  // namespace moe
