// kernels/model/generator.hpp
// Generation for one sequence on one runner: chunked prefill, then decode with sampling, stop
// tokens and stop strings, streaming text as it becomes final. The actor runtime replaces this
// loop with rank actors; it stays the single-rank baseline they must match.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/model/forward.hpp"
#include "kernels/model/output_text.hpp"
#include "kernels/sampling/logprobs.hpp"
#include "kernels/sampling/sampler.hpp"
#include "kernels/tokenizer/tokenizer.hpp"

namespace moe {

struct generation_result {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;
  std::string text;
  finish_reason reason = finish_reason::none;
  double prefill_seconds = 0.0;          // until the first token's logits
  double decode_seconds = 0.0;           // after that
  std::vector<token_logprobs> logprobs;  // one per output id when params.logprobs is set
};

/// Runs one request at a time on a runner; KV blocks are returned after every request.
class generator {
 public:
  /// chunk_size: prefill tokens per forward call (bounded activation memory). max_context: the
  /// longest sequence (prompt + output) to allow, besides the model's and the KV cache's limits.
  generator(model_runner& runner, std::shared_ptr<const tokenizer> tok, int64_t chunk_size = 512,
            int64_t max_context = INT64_MAX);

  /// on_text receives text deltas that will not change (held back while a stop string may be
  /// forming). Throws input_error for an empty prompt or one that does not fit the context.
  generation_result run(const std::vector<int32_t>& prompt_ids, const sampling_params& params,
                        const std::function<void(std::string_view)>& on_text = {});

 private:
  model_runner& runner_;
  std::shared_ptr<const tokenizer> tok_;
  int64_t chunk_size_;
  int64_t max_context_;
};

}  // namespace moe
