// actors/prefill_rank.cpp
// The actor only enqueues jobs on its stream and counts them; the stream does the compute and
// sends the results straight to the decode rank and the session.
#include "actors/prefill_rank.hpp"

#include <caf/actor_system.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>

#include "actors/stream.hpp"
#include "kernels/model/output_text.hpp"

namespace moe {

namespace {

struct prefill_rank_state {
  std::unique_ptr<rank_model> model;
  std::unique_ptr<cpu_stream> stream;       // destroyed first: drains before the model goes
  int64_t num_jobs = 0;
  int64_t num_done = 0;
  int64_t num_free_blocks = 0;              // as the stream last saw it
  static inline const char* name = "prefill_rank";

  ~prefill_rank_state() { stream.reset(); }
};

// On the stream: prefill, first token, KV export. Sends the outcome; never throws.
void run_prefill(rank_model& m, prefill_job& job) {
  sequence_kv kv;
  try {
    const auto& prompt = job.spec.prompt_ids;
    const int64_t n = static_cast<int64_t>(prompt.size());
    if (n == 0 || n >= m.max_context())
      throw input_error("the prompt has " + std::to_string(n) + " tokens; this rank takes 1 to " +
                        std::to_string(m.max_context() - 1));
    std::vector<float> logits = m.runner.prefill(prompt, kv, m.config.chunk_size);
    auto pick = std::make_shared<sampler>(job.spec.sampling, prompt);
    const int32_t first = pick->sample(logits);
    pick->accept(first);
    const finish_reason reason = token_finish(job.spec.sampling, m.weights->config.eos_token_id,
                                              first, 1, n + 1, m.max_context());
    caf::anon_send(job.session, token_atom::value, token_chunk{job.request_id, {first}, reason, {}});
    if (reason == finish_reason::none)                        // decoding goes on elsewhere
      caf::anon_send(job.decode_rank, submit_atom::value,
                     kv_handoff{job.request_id, std::move(job.spec), export_kv(m.cache, kv, n), first,
                                std::move(pick), job.session});
  } catch (const std::exception& e) {
    caf::anon_send(job.session, token_atom::value,
                   token_chunk{job.request_id, {}, finish_reason::error, e.what()});
  }
  kv.release(m.cache);
}

prefill_rank_actor::behavior_type prefill_rank(
    prefill_rank_actor::stateful_pointer<prefill_rank_state> self,
    std::shared_ptr<const model_weights> weights, rank_model_config cfg) {
  self->state.model = std::make_unique<rank_model>(std::move(weights), cfg);
  self->state.stream = std::make_unique<cpu_stream>("prefill");
  self->state.num_free_blocks = self->state.model->cache.num_free_blocks();
  return {
    [=](submit_atom, prefill_job& job) {
      ++self->state.num_jobs;
      auto shared_job = std::make_shared<prefill_job>(std::move(job));
      rank_model* model = self->state.model.get();
      const uint64_t id = shared_job->request_id;
      self->state.stream->enqueue([model, shared_job] { run_prefill(*model, *shared_job); },
                                  [self = caf::actor_cast<caf::actor>(self), id, model](const std::string&) {
                                    caf::anon_send(self, done_atom::value, id, model->cache.num_free_blocks());
                                  });
    },
    [=](done_atom, uint64_t, int64_t free_blocks) {
      ++self->state.num_done;
      self->state.num_free_blocks = free_blocks;
    },
    [=](stats_atom) {
      const auto& st = self->state;
      return rank_stats{st.num_jobs - st.num_done, st.model->cache.num_blocks(), st.num_free_blocks,
                        st.num_done};
    },
  };
}

}  // namespace

prefill_rank_actor spawn_prefill_rank(caf::actor_system& sys, std::shared_ptr<const model_weights> weights,
                                      rank_model_config cfg) {
  return sys.spawn(prefill_rank, std::move(weights), cfg);
}

}  // namespace moe
