// tools/tokenize.cpp
// `moeserve tokenize` (text -> ids as a JSON array) and `moeserve detokenize` (ids -> text) with
// the tokenizer.json of a checkpoint directory (or the set-up tokenizer when --model is absent).
#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/model_config.hpp"
#include "kernels/tokenizer/tokenizer.hpp"
#include "tools/commands.hpp"
#include "tools/token_ids.hpp"

namespace moe::tools {
namespace {

struct tokenize_options {
  std::string model_dir;
  std::string text;
  bool text_given = false;
  bool add_bos = false;
  bool chat = false;
  bool skip_special = false;
};

std::string read_stdin() {
  return {std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
}

void run_tokenize(const tokenize_options& opts) {
  const auto tok = tokenizer::load(opts.model_dir);
  std::string text = opts.text_given ? opts.text : read_stdin();
  if (opts.chat)
    text = apply_chat_template({{"user", text}}, /*add_generation_prompt=*/true);
  const std::vector<int32_t> ids = tok->encode(text, opts.add_bos);
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i)
    out += (i ? ", " : "") + std::to_string(ids[i]);
  std::printf("%s]\n", out.c_str());
}

void run_detokenize(const tokenize_options& opts) {
  const auto tok = tokenizer::load(opts.model_dir);
  const std::vector<int32_t> ids = parse_ids(opts.text_given ? opts.text : read_stdin(), "ids",
                                             /*allow_empty=*/true);
  // any id the model can produce (its vocabulary may be larger than the tokenizer's: V3 has
  // 129280 rows for 128815 tokens); ids without a token decode to nothing, as in HF
  int64_t vocab = tok->vocab_size();
  if (std::filesystem::exists(std::filesystem::path(opts.model_dir) / "config.json"))
    vocab = std::max(vocab, load_model_config(opts.model_dir).vocab_size);
  for (const int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw input_error("token id " + std::to_string(id) + " is outside the vocab [0, " +
                        std::to_string(vocab) + ")");
  const std::string text = tok->decode(ids, opts.skip_special);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fputc('\n', stdout);
}

void add_model_option(CLI::App& cmd, tokenize_options& opts) {
  opts.model_dir = default_tokenizer_dir();
  cmd
    .add_option("--model", opts.model_dir,
                "checkpoint directory holding tokenizer.json (default: the set-up tokenizer)")
    ->type_name("DIR");
}

}  // namespace

void add_tokenize(CLI::App& app) {
  auto opts = std::make_shared<tokenize_options>();
  CLI::App* tokenize = app.add_subcommand(
    "tokenize", "print the token ids of TEXT (or of stdin, byte for byte) as a JSON array");
  add_model_option(*tokenize, *opts);
  tokenize->add_option("text", opts->text, "text to encode; stdin when absent");
  auto* bos = tokenize->add_flag("--add-bos", opts->add_bos, "prepend the BOS id");
  tokenize
    ->add_flag("--chat", opts->chat, "encode the chat template with TEXT as the user message (BOS included)")
    ->excludes(bos);
  tokenize->callback([opts, tokenize] {
    opts->text_given = tokenize->count("text") > 0;
    run_tokenize(*opts);
  });

  auto dopts = std::make_shared<tokenize_options>();
  CLI::App* detokenize =
    app.add_subcommand("detokenize", "print the text of IDS (\"1,2,3\" or a JSON array; stdin when absent)");
  add_model_option(*detokenize, *dopts);
  detokenize->add_option("ids", dopts->text, "token ids; stdin when absent");
  detokenize->add_flag("--skip-special", dopts->skip_special, "leave special tokens out");
  detokenize->callback([dopts, detokenize] {
    dopts->text_given = detokenize->count("ids") > 0;
    run_detokenize(*dopts);
  });
}

}  // namespace moe::tools
