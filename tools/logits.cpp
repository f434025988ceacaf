// tools/logits.cpp
// `moeserve logits`: float32 logits [num_tokens, vocab] of a full prefill, as .npy, for checking
// against other implementations. The fp32 reference path unless --fast.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "tools/commands.hpp"
#include "tools/lib/model_session.hpp"
#include "tools/cli_checks.hpp"
#include "tools/token_ids.hpp"
#include "tools/npy.hpp"

namespace moe::tools {

namespace {

struct logits_options {
  session_options session;
  std::string tokens, out;
  int64_t chunk_size = 512;
};

void run(logits_options& o) {
  const std::vector<int32_t> ids = parse_ids(o.tokens, "--tokens");
  auto s = open_session(o.session, /*need_tokenizer=*/false);
  const int64_t vocab = s->weights.config.vocab_size;
  sequence_kv kv;
  const std::vector<float> logits = s->runner->prefill(ids, kv, o.chunk_size, /*all_logits=*/true);
  kv.release(*s->cache);
  write_npy(o.out, logits, {static_cast<int64_t>(ids.size()), vocab});
  std::fprintf(stderr, "wrote %s: [%zu, %lld] float32 logits (%s)\n", o.out.c_str(), ids.size(),
               static_cast<long long>(vocab), std::string(s->device->name()).c_str());
}

}  // namespace

void add_logits(CLI::App& app) {
  auto o = std::make_shared<logits_options>();
  CLI::App* cmd = app.add_subcommand("logits", "write the logits of a full prefill as .npy");
  add_session_options(*cmd, o->session, /*reference_by_default=*/true);
  cmd->add_option("--tokens", o->tokens, "token ids, e.g. 0,100,200")->required()->check(token_id_list);
  cmd->add_option("--out", o->out, "output .npy file")->required();
  cmd->add_option("--chunked-prefill-size", o->chunk_size, "tokens per forward call")
    ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd->callback([o] { run(*o); });
}

}  // namespace moe::tools
