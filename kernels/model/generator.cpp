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

// Largest cut <= n that does not split a UTF-8 character of s.
size_t utf8_boundary(std::string_view s, size_t n) {
  while (n > 0 && n < s.size() && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80)
    --n;
  return n;
}

// Releases the sequence's KV blocks on every exit path.
struct kv_guard {
  kv_cache& cache;
  sequence_kv& kv;
  ~kv_guard() { kv.release(cache); }
};

}  // namespace

size_t find_stop(std::string_view text, const std::vector<std::string>& stop, size_t search_from) {
  size_t best = std::string_view::npos;
  for (const std::string& s : stop) {
    if (s.empty())
      continue;
    const size_t from = search_from >= s.size() ? search_from - s.size() + 1 : 0;
    const size_t at = text.find(s, from);
    best = std::min(best, at);
  }
  return best;
}

generator::generator(model_runner& runner, std::shared_ptr<const tokenizer> tok, int64_t chunk_size)
    : runner_(runner), tok_(std::move(tok)), chunk_size_(std::max<int64_t>(1, chunk_size)) {}

generation_result generator::run(const std::vector<int32_t>& prompt_ids,
                                 const sampling_params& params,
                                 const std::function<void(std::string_view)>& on_text) {
  const model_config& cfg = runner_.weights().config;
  const int64_t num_prompt = static_cast<int64_t>(prompt_ids.size());
  if (num_prompt == 0)
    throw input_error("the prompt is empty");
  const int64_t max_context = std::min<int64_t>(cfg.max_position_embeddings,
                                                runner_.cache().num_blocks() * runner_.cache().block_size());
  if (num_prompt >= max_context)
    throw input_error("the prompt has " + std::to_string(num_prompt) +
                      " tokens; the context holds at most " + std::to_string(max_context - 1) +
                      " prompt tokens");
  generation_result result;
  result.prompt_ids = prompt_ids;
  sequence_kv kv;
  kv_guard guard{runner_.cache(), kv};
  sampler pick(params, prompt_ids);
  const auto t0 = clock_type::now();

  // -- chunked prefill: only the last chunk's last row of logits is needed
  std::vector<float> logits;
  for (int64_t begin = 0; begin < num_prompt; begin += chunk_size_) {
    const int64_t n = std::min(chunk_size_, num_prompt - begin);
    if (!kv.reserve(runner_.cache(), begin + n))
      throw input_error("not enough KV blocks for the prompt");
    const batch_entry entry{.tokens = std::span(prompt_ids).subspan(begin, n), .kv = &kv};
    logits = runner_.forward(std::span(&entry, 1));
  }
  result.prefill_seconds = seconds_since(t0);

  // -- decode
  const auto t1 = clock_type::now();
  incremental_decoder detok(tok_, /*skip_special=*/true);
  size_t emitted = 0, max_stop = 0;
  bool cut_at_stop_string = false;
  for (const std::string& s : params.stop)
    max_stop = std::max(max_stop, s.size());
  auto emit_upto = [&](size_t end) {
    if (end > emitted && on_text)
      on_text(std::string_view(result.text).substr(emitted, end - emitted));
    emitted = std::max(emitted, end);
  };
  for (;;) {
    const int32_t id = pick.sample(logits);
    pick.accept(id);
    const bool is_stop_id = (!params.ignore_eos && id == cfg.eos_token_id) ||
                            std::find(params.stop_token_ids.begin(), params.stop_token_ids.end(),
                                      id) != params.stop_token_ids.end();
    if (is_stop_id) {
      result.output_ids.push_back(id);                      // vLLM keeps the stop token id
      result.reason = finish_reason::stop;
      break;
    }
    result.output_ids.push_back(id);
    const size_t before = result.text.size();
    result.text += detok.push(id);
    if (const size_t cut = find_stop(result.text, params.stop, before); cut != std::string::npos) {
      result.text.resize(cut);
      result.reason = finish_reason::stop;
      cut_at_stop_string = true;
      break;
    }
    emit_upto(utf8_boundary(result.text, result.text.size() - std::min(result.text.size(),
                                                                        max_stop ? max_stop - 1 : 0)));
    const int64_t position = num_prompt + static_cast<int64_t>(result.output_ids.size());
    if (static_cast<int64_t>(result.output_ids.size()) >= params.max_tokens || position >= max_context) {
      result.reason = finish_reason::length;
      break;
    }
    if (!kv.reserve(runner_.cache(), position)) {
      result.reason = finish_reason::length;
      break;
    }
    const batch_entry entry{.tokens = std::span(&result.output_ids.back(), 1), .kv = &kv};
    logits = runner_.forward(std::span(&entry, 1));
  }
  if (!cut_at_stop_string) {                                // flush an unfinished character
    const size_t before = result.text.size();
    result.text += detok.finish();
    if (const size_t cut = find_stop(result.text, params.stop, before); cut != std::string::npos) {
      result.text.resize(cut);
      result.reason = finish_reason::stop;
    }
  }
  emit_upto(result.text.size());
  result.decode_seconds = seconds_since(t1);
  return result;
}

}  // namespace moe
