// actors/rank/expert_fetch.hpp
// A rank's part in moving experts: before a placement change, it copies each expert the new
// placement gives it and it holds no copy of from a peer that holds it, as messages
// ((experts_atom, layer, expert) -> expert_blob, the same a rank in another process will send),
// one MoE layer at a time, while its steps go on with the placement in force. The copies are
// staged in the rank's core (ep_rank_core::stage_experts) for prepare_placement.
#pragma once

#include <caf/error.hpp>
#include <caf/typed_response_promise.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "actors/errors.hpp"
#include "actors/rank/ep_rank_core.hpp"

namespace moe {

/// How long one expert's copy may take to come.
inline constexpr std::chrono::seconds expert_fetch_timeout{10};

/// One staging under way.
struct expert_fetch_run {
  uint64_t epoch = 0;
  std::vector<expert_fetch> todo;  // layer by layer
  size_t next = 0;                 // the first of the next layer
  size_t pending = 0;              // copies of this layer still to come
  bool failed = false;
  std::vector<std::pair<expert_fetch, std::shared_ptr<const expert_copy>>> got;
  caf::typed_response_promise<int64_t> done;  // the bytes staged, or why not
};

/// "expert E of layer L from rank R: `why`".
[[nodiscard]] std::string expert_fetch_error(const expert_fetch& f, const std::string& why);

/// The expert `f` from `blob`, or why not.
[[nodiscard]] std::shared_ptr<const expert_copy> expert_from_blob(const expert_fetch& f,
                                                                  const expert_blob& blob,
                                                                  std::string& error);

/// Gives the rank a copy engine of its own when `gone`, the one it used, went away (killed, or
/// quit): the copy that found it gone is made on the rank's thread, later ones on the new engine.
template <class Self>
void renew_copy_engine(Self self, const copy_engine_actor& gone) {
  ep_rank_core& core = *self->state.core;
  if (core.copy_engine() != gone)  // renewed already, by an earlier copy
    return;
  std::fprintf(stderr, "rank %lld: the copy engine went away: a new one for this rank\n",
               static_cast<long long>(core.group().rank));
  core.replace_copy_engine(spawn_copy_engine_for(self->system(), caf::actor_cast<caf::actor>(self)));
}

/// Asks for the next layer's copies (of peers as `Peer` handles), or stages them all when there
/// is none left.
template <class Peer, class Self>
void fetch_next_layer(Self self, std::shared_ptr<expert_fetch_run> run) {
  ep_rank_core& core = *self->state.core;
  if (run->next == run->todo.size()) {
    run->done.deliver(core.stage_experts(run->epoch, run->got));
    return;
  }
  const int64_t layer = run->todo[run->next].layer;
  size_t end = run->next;
  while (end < run->todo.size() && run->todo[end].layer == layer)
    ++end;
  run->pending = end - run->next;
  auto fail = [run](std::string why) {
    if (!run->failed)
      run->done.deliver(caf::make_error(serve_errc::unavailable, std::move(why)));
    run->failed = true;
  };
  for (size_t i = run->next; i < end; ++i) {
    const expert_fetch f = run->todo[i];
    self
      ->request(caf::actor_cast<Peer>(core.peer(f.holder)), expert_fetch_timeout, experts_atom::value,
                f.layer, f.expert)
      .then(
        [self, run, f, fail](expert_blob& blob) {
          if (run->failed)
            return;
          const auto got = [self, run, f](std::shared_ptr<const expert_copy> copy) {
            if (run->failed)
              return;
            run->got.emplace_back(f, std::move(copy));
            if (--run->pending == 0)
              fetch_next_layer<Peer>(self, run);
          };
          std::string error;
          if (blob.layer != f.layer || blob.expert != f.expert)
            return fail(expert_fetch_error(f, "got expert " + std::to_string(blob.expert) + " of layer " +
                                                std::to_string(blob.layer)));
          if (const copy_engine_actor engine = self->state.core->copy_engine()) {
            auto sent = std::make_shared<expert_blob>(std::move(blob));
            self->request(engine, caf::infinite, experts_atom::value, *sent)
              .then(got, [self, f, fail, got, engine, sent](const caf::error& e) {
                if (e != caf::sec::request_receiver_down)  // bytes the engine refused
                  return fail(expert_fetch_error(f, self->system().render(e)));
                renew_copy_engine(self, engine);
                std::string why;
                std::shared_ptr<const expert_copy> copy = expert_from_blob(f, *sent, why);
                if (!copy)
                  return fail(why);
                got(std::move(copy));
              });
            return;
          }
          std::shared_ptr<const expert_copy> copy = expert_from_blob(f, blob, error);
          if (!copy)
            return fail(error);
          got(std::move(copy));
        },
        [self, f, fail](const caf::error& e) {
          fail("rank " + std::to_string(f.holder) + " did not send expert " + std::to_string(f.expert) +
               " of layer " + std::to_string(f.layer) + ": " + self->system().render(e));
        });
  }
  run->next = end;
}

}  // namespace moe
