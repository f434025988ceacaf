// tools/llama_cpp/greedy.cpp
// Greedy decoding in llama.cpp, for tools/llama_cpp/compare.sh (built there against the
// llama.cpp it builds; not part of moeserve's build): one prompt of token ids, then N steps of
// one token each through llama.cpp's KV cache (f32, no flash attention), printing each chosen
// id and its log-probability as one JSON object:
//   greedy MODEL.gguf IDS N  ->  {"prompt": [...], "tokens": [...], "logprobs": [...]}
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::vector<llama_token> parse_ids(const std::string& text) {
  std::vector<llama_token> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    ids.push_back(static_cast<llama_token>(std::stol(item)));
  return ids;
}

void print_list(const char* name, const std::vector<double>& v, bool integers) {
  std::printf("\"%s\": [", name);
  for (size_t i = 0; i < v.size(); ++i)
    std::printf(integers ? "%s%.0f" : "%s%.9g", i ? ", " : "", v[i]);
  std::printf("]");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL.gguf IDS STEPS\n", argv[0]);
    return 2;
  }
  std::vector<llama_token> prompt = parse_ids(argv[2]);
  const int steps = std::atoi(argv[3]);
  if (prompt.empty() || steps < 1) {
    std::fprintf(stderr, "greedy: need at least one prompt id and one step\n");
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  ggml_backend_load_all();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) {
    std::fprintf(stderr, "greedy: cannot load %s\n", argv[1]);
    return 1;
  }
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(prompt.size() + steps + 1);
  cp.n_batch = cp.n_ubatch = static_cast<uint32_t>(prompt.size());
  cp.type_k = cp.type_v = GGML_TYPE_F32;  // the default f16 cache rounds the latent
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) {
    std::fprintf(stderr, "greedy: cannot create a context\n");
    return 1;
  }
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  std::vector<double> chosen, logprobs, prompt_ids(prompt.begin(), prompt.end());
  llama_batch batch = llama_batch_get_one(prompt.data(), static_cast<int32_t>(prompt.size()));
  llama_token next = 0;
  for (int s = 0; s < steps; ++s) {
    if (llama_decode(ctx, batch) != 0) {
      std::fprintf(stderr, "greedy: llama_decode failed at step %d\n", s);
      return 1;
    }
    const float* logits = llama_get_logits_ith(ctx, -1);
    int best = 0;
    for (int v = 1; v < vocab; ++v)
      if (logits[v] > logits[best])
        best = v;
    double sum = 0.0;
    for (int v = 0; v < vocab; ++v)
      sum += std::exp(static_cast<double>(logits[v]) - logits[best]);
    chosen.push_back(best);
    logprobs.push_back(-std::log(sum));
    next = best;
    batch = llama_batch_get_one(&next, 1);
  }
  std::printf("{");
  print_list("prompt", prompt_ids, true);
  std::printf(", ");
  print_list("tokens", chosen, true);
  std::printf(", ");
  print_list("logprobs", logprobs, false);
  std::printf("}\n");
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
