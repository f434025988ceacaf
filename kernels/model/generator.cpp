// kernels/model/generator.cpp
// One request's prefill and decode loop on a single runner.
#include "kernels/model/generator.hpp"

#include <algorithm>
#include <chrono>
#include <string>

namespace moe {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Releases the sequence's KV blocks on every exit path.
struct kv_guard {
  kv_cache& cache;
  sequence_kv& kv;
  ~kv_guard() { kv.release(cache); }
};

}  // namespace

generator::generator(model_runner& runner, std::shared_ptr<const tokenizer> tok, int64_t chunk_size,
                     int64_t max_context)
    : runner_(runner), tok_(std::move(tok)), chunk_size_(std::max<int64_t>(1, chunk_size)),
      max_context_(max_context) {}

generation_result generator::run(const std::vector<int32_t>& prompt_ids, const sampling_params& params,
                                 const std::function<void(std::string_view)>& on_text) {
  const model_config& cfg = runner_.weights().config;
  const int64_t num_prompt = static_cast<int64_t>(prompt_ids.size());
  if (num_prompt == 0)
    throw input_error("the prompt is empty");
  const int64_t max_context = std::min(
    {max_context_, cfg.max_position_embeddings, runner_.cache().num_blocks() * runner_.cache().block_size()});
  if (num_prompt >= max_context)
    throw input_error("the prompt has " + std::to_string(num_prompt) + " tokens; the context holds at most " +
                      std::to_string(max_context - 1) + " prompt tokens");
  generation_result result;
  result.prompt_ids = prompt_ids;
  sequence_kv kv;
  kv_guard guard{runner_.cache(), kv};
  sampler pick(params, prompt_ids);
  const auto t0 = clock_type::now();

  // -- chunked prefill: only the last token's logits are needed
  std::vector<float> logits = runner_.prefill(prompt_ids, kv, chunk_size_);
  result.prefill_seconds = seconds_since(t0);

  // -- decode
  const auto t1 = clock_type::now();
  text_stream out(tok_, params.stop);
  auto emit = [&](const std::string& delta) {
    if (!delta.empty() && on_text)
      on_text(delta);
  };
  for (;;) {
    picked_token next = pick_token(pick, logits, params.logprobs);
    const int32_t id = next.token_id;
    for (token_logprobs& t : next.logprobs)
      result.logprobs.push_back(std::move(t));
    result.output_ids.push_back(id);  // vLLM keeps a stop token's id
    const int64_t num_generated = static_cast<int64_t>(result.output_ids.size());
    result.reason = token_finish(params, cfg.eos_token_id, id, num_generated, num_prompt + num_generated,
                                 max_context);
    if (result.reason != finish_reason::stop)  // but not its text
      emit(out.push(id));
    if (out.stopped())
      result.reason = finish_reason::stop;
    if (result.reason != finish_reason::none)
      break;
    if (!kv.reserve(runner_.cache(), num_prompt + num_generated)) {
      result.reason = finish_reason::length;
      break;
    }
    const batch_entry entry{.tokens = std::span(&result.output_ids.back(), 1), .kv = &kv, .decode = true};
    logits = runner_.forward(std::span(&entry, 1));
  }
  emit(out.finish());
  result.reason = final_reason(result.reason, out);
  result.text = out.text();
  result.decode_seconds = seconds_since(t1);
  return result;
}

}  // namespace moe
