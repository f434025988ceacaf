// tools/model_flops.hpp
// The arithmetic of a forward pass, from the config alone, as the fast path does it (MLA in
// the naive form for prompts and the absorbed form for decode and a step's last layer, as
// kernels/model/forward.hpp's attention_forms; top_k routed experts per token): bench-model's prefill GFLOP/s, set against the machine's BF16 peak. A multiply-add
// counts as two FLOPs; norms, RoPE, softmax and the router's top-k are left out (O(hidden) per
// token against O(hidden^2)).
#pragma once

#include <cstdint>

#include "config/model_config.hpp"
#include "kernels/model/forward.hpp"

namespace moe::tools {

/// FLOPs of one token's matmuls (every layer's projections and MLP; not the lm_head, not the
/// attention over cached keys). kv_b_proj counts once per token in either form: W_UK into its
/// query and W_UV out of its latent (absorbed), or its key's k_nope and v expanded (naive).
[[nodiscard]] double token_matmul_flops(const model_config& c);
/// FLOPs of one query attending to one cached key, over all layers and heads: absorbed, its
/// score against [c_kv | k_rope] and the key's c_kv added into the weighted sum; naive, its score
/// against [k_nope | k_rope] and the key's v added in.
[[nodiscard]] double key_attention_flops(const model_config& c,
                                         attention_form form = attention_form::absorbed);
/// FLOPs of a prefill of `prompt_len` tokens from an empty cache (the token at position p
/// attends to p + 1 keys) with logits for the last token only, so the last layer runs past its
/// q / kv projections for that token alone, in the decode form, as the forward pass does.
[[nodiscard]] double prefill_flops(const model_config& c, int64_t prompt_len, attention_forms forms = {});

}  // namespace moe::tools
