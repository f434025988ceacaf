// actors/decode_rank.cpp
// Continuous batching: between steps the actor admits hand-offs and applies cancels; a step
// feeds every running request's last token through the model on the stream and samples the next.
//
// NOTE: while a step is in flight the stream owns the running requests (their KV, samplers and
// last tokens); the actor defers every change to them until the step's result arrives.
#include "actors/decode_rank.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <map>
#include <set>

#include "actors/stream.hpp"
#include "kernels/model/output_text.hpp"

namespace moe {

struct decode_step_result {
  std::vector<uint64_t> request_ids;
  std::vector<int32_t> tokens;              // next token of each request, same order
  std::string error;
  int64_t num_free_blocks = 0;
};

namespace {

struct running_request {
  kv_handoff job;
  sequence_kv kv;
  int32_t last_token = 0;                   // sampled, not yet fed through the model
  int64_t num_generated = 1;                // the first token came from prefill
};

struct decode_rank_state {
  std::unique_ptr<rank_model> model;
  std::unique_ptr<cpu_stream> stream;
  std::map<uint64_t, running_request> running;
  std::vector<kv_handoff> joining;          // arrived during a step
  std::set<uint64_t> cancelled;             // asked during a step
  bool step_in_flight = false;
  int64_t num_steps = 0;
  int64_t num_free_blocks = 0;
  static inline const char* name = "decode_rank";

  ~decode_rank_state() { stream.reset(); }  // drain the stream before the model goes
};

using decode_pointer = decode_rank_actor::stateful_pointer<decode_rank_state>;

void finish(decode_pointer self, uint64_t id, std::vector<int32_t> tokens, finish_reason reason,
            std::string error = {}) {
  auto& st = self->state;
  auto it = st.running.find(id);
  if (it == st.running.end())
    return;
  caf::anon_send(it->second.job.session, token_atom::value,
                 token_chunk{id, std::move(tokens), reason, std::move(error)});
  it->second.kv.release(st.model->cache);
  st.running.erase(it);
}

// Admits waiting hand-offs whose KV fits; applies cancels. Only between steps.
void admit_and_cancel(decode_pointer self) {
  auto& st = self->state;
  rank_model& m = *st.model;
  std::vector<kv_handoff> still_waiting;
  for (kv_handoff& job : st.joining) {
    if (st.cancelled.erase(job.request_id)) {
      caf::anon_send(job.session, token_atom::value, token_chunk{job.request_id, {}, finish_reason::abort, {}});
      continue;
    }
    running_request r{.job = std::move(job), .kv = {}, .last_token = 0, .num_generated = 1};
    if (!r.kv.reserve(m.cache, r.job.pages.num_tokens + 1)) {
      if (st.running.empty())                               // can never fit here
        caf::anon_send(r.job.session, token_atom::value,
                       token_chunk{r.job.request_id, {}, finish_reason::error, "the decode rank's KV pool is too small"});
      else
        still_waiting.push_back(std::move(r.job));
      continue;
    }
    import_kv(m.cache, r.kv, r.job.pages);
    r.job.pages = {};                                       // the cache holds it now
    r.last_token = r.job.first_token;
    const uint64_t id = r.job.request_id;
    st.running.emplace(id, std::move(r));
  }
  st.joining = std::move(still_waiting);
  for (uint64_t id : st.cancelled)
    finish(self, id, {}, finish_reason::abort);
  st.cancelled.clear();
  st.num_free_blocks = m.cache.num_free_blocks();
}

void start_step(decode_pointer self) {
  auto& st = self->state;
  if (st.step_in_flight)
    return;
  admit_and_cancel(self);
  std::vector<running_request*> batch;
  for (auto& [id, r] : st.running) {
    if (!r.kv.reserve(st.model->cache, r.kv.num_cached + 1)) {
      finish(self, id, {}, finish_reason::length);          // KV pool exhausted: cannot go on
      return start_step(self);
    }
    batch.push_back(&r);
  }
  if (batch.empty())
    return;
  st.step_in_flight = true;
  auto result = std::make_shared<decode_step_result>();
  rank_model* m = st.model.get();
  st.stream->enqueue(
      [m, batch, result] {
        std::vector<batch_entry> entries;
        for (running_request* r : batch) {
          entries.push_back({.tokens = std::span(&r->last_token, 1), .kv = &r->kv});
          result->request_ids.push_back(r->job.request_id);
        }
        std::vector<float> logits = m->runner.forward(entries);
        const int64_t vocab = m->weights->config.vocab_size;
        for (size_t i = 0; i < batch.size(); ++i) {
          std::vector<float> row(logits.begin() + i * vocab, logits.begin() + (i + 1) * vocab);
          const int32_t token = batch[i]->job.pick->sample(row);
          batch[i]->job.pick->accept(token);
          result->tokens.push_back(token);
        }
      },
      [self = caf::actor_cast<caf::actor>(self), result, m](const std::string& error) {
        result->error = error;
        result->num_free_blocks = m->cache.num_free_blocks();
        caf::anon_send(self, step_atom::value, result);
      });
}

decode_rank_actor::behavior_type decode_rank(decode_pointer self, std::shared_ptr<const model_weights> weights,
                                             rank_model_config cfg) {
  self->state.model = std::make_unique<rank_model>(std::move(weights), cfg);
  self->state.stream = std::make_unique<cpu_stream>("decode");
  self->state.num_free_blocks = self->state.model->cache.num_free_blocks();
  return {
    [=](submit_atom, kv_handoff& job) {
      self->state.joining.push_back(std::move(job));
      start_step(self);
    },
    [=](cancel_atom, uint64_t id) {
      self->state.cancelled.insert(id);
      start_step(self);                                      // applies it now if idle
    },
    [=](step_atom, std::shared_ptr<decode_step_result> result) {
      auto& st = self->state;
      st.step_in_flight = false;
      ++st.num_steps;
      const model_config& cfg = st.model->weights->config;
      for (size_t i = 0; i < result->request_ids.size(); ++i) {
        const uint64_t id = result->request_ids[i];
        auto it = st.running.find(id);
        if (it == st.running.end())
          continue;
        if (!result->error.empty()) {
          finish(self, id, {}, finish_reason::error, result->error);
          continue;
        }
        running_request& r = it->second;
        const int32_t token = result->tokens[i];
        ++r.num_generated;
        const finish_reason reason = token_finish(r.job.spec.sampling, cfg.eos_token_id, token, r.num_generated,
                                                  r.kv.num_cached + 1, st.model->max_context());
        if (reason != finish_reason::none) {
          finish(self, id, {token}, reason);
          continue;
        }
        r.last_token = token;
        caf::anon_send(r.job.session, token_atom::value, token_chunk{id, {token}, finish_reason::none, {}});
      }
      st.num_free_blocks = st.model->cache.num_free_blocks();
      start_step(self);
    },
    [=](stats_atom) {
      const auto& st = self->state;
      return rank_stats{static_cast<int64_t>(st.running.size() + st.joining.size()), st.model->cache.num_blocks(),
                        st.num_free_blocks, st.num_steps};
    },
  };
}

}  // namespace

decode_rank_actor spawn_decode_rank(caf::actor_system& sys, std::shared_ptr<const model_weights> weights,
                                    rank_model_config cfg) {
  return sys.spawn(decode_rank, std::move(weights), cfg);
}

}  // namespace moe
