// tools/lib/single_rank.cpp
#include "tools/lib/single_rank.hpp"

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <string>

#include "kernels/model/output_text.hpp"
#include "kernels/sampling/sampler.hpp"

namespace moe::tools {

namespace {

using clock_type = std::chrono::steady_clock;

struct in_flight {
  size_t spec = 0;
  sequence_kv kv;
  std::unique_ptr<sampler> pick;
  int64_t prefilled = 0;  // prompt tokens in the KV
  int32_t last = -1;      // the token to feed next, once prefilled
  clock_type::time_point submitted;
};

double seconds(clock_type::time_point from, clock_type::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

}  // namespace

cluster_run run_single_rank(model_runner& runner, const std::vector<request_spec>& specs,
                            const single_rank_options& options) {
  if (options.concurrency < 1 || options.token_budget < 1)
    throw input_error("single rank: concurrency and token budget must be at least 1");
  const model_config& cfg = runner.weights().config;
  for (size_t i = 0; i < specs.size(); ++i) {
    const request_spec& s = specs[i];
    const std::string at = "single rank: request " + std::to_string(i);
    if (s.prompt_ids.empty())
      throw input_error(at + " has an empty prompt");
    if (!s.sampling.stop.empty())
      throw input_error(at + " has stop strings, which need a tokenizer (the cluster serves them)");
    if (const std::string bad = validate(s.sampling); !bad.empty())
      throw input_error(at + ": " + bad);
  }
  kv_cache& cache = runner.cache();
  cluster_run run;
  run.requests.resize(specs.size());
  std::deque<in_flight> flying;  // in admission order
  struct release_all {           // a forward that throws leaves no block taken
    std::deque<in_flight>& flying;
    kv_cache& cache;
    ~release_all() {
      for (in_flight& f : flying)
        f.kv.release(cache);
    }
  } guard{flying, cache};
  size_t next_spec = 0;
  const auto start = clock_type::now();
  while (next_spec < specs.size() || !flying.empty()) {
    while (next_spec < specs.size() && static_cast<int64_t>(flying.size()) < options.concurrency) {
      const request_spec& s = specs[next_spec];
      in_flight f{.spec = next_spec,
                  .pick = std::make_unique<sampler>(s.sampling, s.prompt_ids),
                  .submitted = clock_type::now()};
      const int64_t tokens = static_cast<int64_t>(s.prompt_ids.size()) + s.sampling.max_tokens;
      if (!f.kv.reserve(cache, tokens))
        throw input_error("single rank: the KV pool (" + std::to_string(cache.num_blocks()) + " blocks of " +
                          std::to_string(cache.block_size()) + " tokens) cannot hold request " +
                          std::to_string(next_spec) + " (" + std::to_string(tokens) + " tokens) beside " +
                          std::to_string(flying.size()) + " running");
      run.requests[next_spec].num_prompt_tokens = static_cast<int64_t>(s.prompt_ids.size());
      flying.push_back(std::move(f));
      ++next_spec;
    }
    // one forward call: every decoding request's token, then prompt chunks within the budget
    std::vector<batch_entry> batch;
    std::vector<in_flight*> owner;  // per entry; null: a prompt chunk with no logits
    int64_t budget = options.token_budget;
    for (in_flight& f : flying)
      if (f.last >= 0) {
        batch.push_back({.tokens = std::span(&f.last, 1), .kv = &f.kv, .decode = true});
        owner.push_back(&f);
        --budget;
      }
    for (in_flight& f : flying) {
      const auto& prompt = specs[f.spec].prompt_ids;
      const int64_t left = static_cast<int64_t>(prompt.size()) - f.prefilled;
      if (f.last >= 0 || left == 0 || budget <= 0)
        continue;
      const int64_t n = std::min(left, budget);
      const bool final_chunk = n == left;
      batch.push_back(
        {.tokens = std::span(prompt).subspan(static_cast<size_t>(f.prefilled), static_cast<size_t>(n)),
         .kv = &f.kv,
         .no_logits = !final_chunk});
      owner.push_back(final_chunk ? &f : nullptr);
      f.prefilled += n;
      budget -= n;
    }
    const std::vector<float> logits = runner.forward(batch);
    const auto now = clock_type::now();
    const auto vocab = static_cast<size_t>(cfg.vocab_size);
    size_t r = 0;
    for (in_flight* f : owner) {
      if (!f)
        continue;
      const int32_t id = f->pick->sample(std::span(logits).subspan(r++ * vocab, vocab));
      f->pick->accept(id);
      cluster_request_result& out = run.requests[f->spec];
      std::vector<int32_t>& ids = out.result.output_ids;
      if (ids.empty())
        out.ttft_s = seconds(f->submitted, now);
      ids.push_back(id);
      out.token_times_s.push_back(seconds(f->submitted, now));
      const request_spec& s = specs[f->spec];
      out.result.reason = token_finish(s.sampling, cfg.eos_token_id, id, static_cast<int64_t>(ids.size()),
                                       static_cast<int64_t>(s.prompt_ids.size() + ids.size()),
                                       cfg.max_position_embeddings);
      f->last = id;
      if (out.result.reason != finish_reason::none)
        out.total_s = seconds(f->submitted, now);
    }
    for (auto it = flying.begin(); it != flying.end();)
      if (run.requests[it->spec].result.reason != finish_reason::none) {
        it->kv.release(cache);
        it = flying.erase(it);
      } else {
        ++it;
      }
  }
  run.wall_s = seconds(start, clock_type::now());
  return run;
}

}  // namespace moe::tools
