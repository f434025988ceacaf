// tools/generate.cpp
// `moeserve generate`: one prompt through the single-rank path, streamed to stdout, ending with
// prompt and decode speeds; --json prints one object instead.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kernels/model/generator.hpp"
#include "tools/commands.hpp"
#include "tools/model_session.hpp"
#include "tools/sampling_options.hpp"

namespace moe::tools {

namespace {

struct generate_options {
  session_options session;
  sampling_flags sampling;
  std::string prompt, tokens, system;
  bool chat = false, json = false;
  int64_t chunk_size = 512;
};

std::vector<int32_t> prompt_ids(const generate_options& o, const model_session& s) {
  if (!o.tokens.empty())
    return parse_ids(o.tokens, "--tokens");
  std::string text = o.prompt;
  if (o.chat) {
    std::vector<chat_message> messages;
    if (!o.system.empty())
      messages.push_back({"system", o.system});
    messages.push_back({"user", o.prompt});
    text = apply_chat_template(messages, /*add_generation_prompt=*/true);
    return s.tok->encode(text, /*add_bos=*/false);          // the template starts with BOS
  }
  return s.tok->encode(text, /*add_bos=*/true);
}

void run(const CLI::App& cmd, generate_options& o) {
  const sampling_params params = finish_sampling_options(cmd, o.sampling);
  if (o.prompt.empty() == o.tokens.empty())
    throw input_error("give exactly one of --prompt TEXT or --tokens IDS");
  auto s = open_session(o.session, /*need_tokenizer=*/true);
  const std::vector<int32_t> ids = prompt_ids(o, *s);
  generator gen(*s->runner, s->tok, o.chunk_size);
  auto on_text = [&](std::string_view delta) {
    if (!o.json) {
      std::fwrite(delta.data(), 1, delta.size(), stdout);
      std::fflush(stdout);
    }
  };
  const generation_result r = gen.run(ids, params, on_text);
  const double prompt_tps = r.prefill_seconds > 0 ? ids.size() / r.prefill_seconds : 0.0;
  // The first output token comes from the prefill's logits; the rest each cost one decode step.
  const size_t decode_steps = r.output_ids.empty() ? 0 : r.output_ids.size() - 1;
  const double decode_tps = r.decode_seconds > 0 ? decode_steps / r.decode_seconds : 0.0;
  if (o.json) {
    nlohmann::json j = {{"prompt_ids", r.prompt_ids}, {"output_ids", r.output_ids},
                        {"text", r.text}, {"finish_reason", to_string(r.reason)},
                        {"timings", {{"prefill_s", r.prefill_seconds}, {"decode_s", r.decode_seconds},
                                     {"prompt_tok_per_s", prompt_tps}, {"decode_tok_per_s", decode_tps}}},
                        {"backend", s->device->name()}};
    std::cout << j.dump() << std::endl;
    return;
  }
  std::printf("\n[%zu prompt tokens: %.1f tok/s | %zu generated: %.1f tok/s decode | finish: %s | %s]\n",
              ids.size(), prompt_tps, r.output_ids.size(), decode_tps, to_string(r.reason),
              std::string(s->device->name()).c_str());
}

}  // namespace

void add_generate(CLI::App& app) {
  auto o = std::make_shared<generate_options>();
  CLI::App* cmd = app.add_subcommand("generate", "generate text from a prompt (single rank)");
  add_session_options(*cmd, o->session);
  add_sampling_options(*cmd, o->sampling);
  cmd->add_option("--prompt", o->prompt, "prompt text");
  cmd->add_option("--tokens", o->tokens, "prompt token ids, e.g. 0,100,200");
  cmd->add_option("--system", o->system, "system prompt (with --chat)");
  cmd->add_flag("--chat", o->chat, "wrap the prompt in the DeepSeek-V3 chat format");
  cmd->add_flag("--json", o->json, "print one JSON object instead of streaming text");
  cmd->add_option("--chunked-prefill-size", o->chunk_size, "prefill tokens per forward call")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->callback([cmd, o] { run(*cmd, *o); });
}

}  // namespace moe::tools
