// tools/generate.cpp
// `moeserve generate`: one prompt through the in-process cluster (the topology flags and --config
// as `serve` takes them; --trace FILE writes the run's Chrome trace), or with --single-rank
// through the single-rank baseline; streamed to stdout, ending with prompt and decode speeds;
// --json prints one object instead.
#include <CLI/CLI.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "kernels/model/generator.hpp"
#include "actors/system_config.hpp"
#include "tools/lib/cluster_client.hpp"
#include "tools/commands.hpp"
#include "tools/lib/model_session.hpp"
#include "tools/cli_checks.hpp"
#include "tools/token_ids.hpp"
#include "tools/sampling_options.hpp"
#include "tools/lib/topology_options.hpp"

namespace moe::tools {

namespace {

struct generate_options {
  session_options session;
  topology_options topology;
  sampling_flags sampling;
  std::string prompt, tokens, system, trace_file;
  bool chat = false, json = false, single_rank = false;
  int32_t logprobs = -1;  // --logprobs N (with --json); -1: none
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
    return s.tok->encode(text, /*add_bos=*/false);  // the template starts with BOS
  }
  return s.tok->encode(text, /*add_bos=*/true);
}

void print_stream(const generate_options& o, std::string_view delta) {
  if (!o.json) {
    std::fwrite(delta.data(), 1, delta.size(), stdout);
    std::fflush(stdout);
  }
}

void report(const generate_options& o, const generation_result& r, const std::string& where) {
  const double prompt_tps = r.prefill_seconds > 0 ? r.prompt_ids.size() / r.prefill_seconds : 0.0;
  // The first output token comes from the prefill's logits; the rest each cost one decode step.
  const size_t decode_steps = r.output_ids.empty() ? 0 : r.output_ids.size() - 1;
  const double decode_tps = r.decode_seconds > 0 ? decode_steps / r.decode_seconds : 0.0;
  if (o.json) {
    nlohmann::json j = {{"prompt_ids", r.prompt_ids},
                        {"output_ids", r.output_ids},
                        {"text", r.text},
                        {"finish_reason", to_string(r.reason)},
                        {"timings",
                         {{"prefill_s", r.prefill_seconds},
                          {"decode_s", r.decode_seconds},
                          {"prompt_tok_per_s", prompt_tps},
                          {"decode_tok_per_s", decode_tps}}},
                        {"backend", where}};
    if (o.logprobs >= 0) {  // as the wire API's: top_logprobs as [id, logprob] pairs
      nlohmann::json list = nlohmann::json::array();
      for (const token_logprobs& t : r.logprobs) {
        nlohmann::json top = nlohmann::json::array();
        for (const logprob_entry& e : t.top)
          top.push_back({e.token_id, e.logprob});
        list.push_back({{"token_id", t.token_id}, {"logprob", t.logprob}, {"top_logprobs", top}});
      }
      j["logprobs"] = list;
    }
    std::cout << j.dump() << std::endl;
    return;
  }
  std::printf("\n[%zu prompt tokens: %.1f tok/s | %zu generated: %.1f tok/s decode | finish: %s | %s]\n",
              r.prompt_ids.size(), prompt_tps, r.output_ids.size(), decode_tps, to_string(r.reason),
              where.c_str());
}

generation_result run_single_rank(generate_options& o, const topology_config& topo,
                                  const sampling_params& params) {
  o.session.kv_blocks = topo.kv_blocks;
  o.session.block_size = topo.page_size;
  o.session.max_context = topo.max_context;
  auto s = open_session(o.session, /*need_tokenizer=*/true);
  const std::vector<int32_t> ids = prompt_ids(o, *s);
  generator gen(*s->runner, s->tok, topo.chunked_prefill_size, topo.max_context);
  generation_result r = gen.run(ids, params, [&](std::string_view delta) { print_stream(o, delta); });
  report(o, r, "single rank, " + std::string(s->device->name()));
  return r;
}

void run_cluster(generate_options& o, const topology_config& topo, const sampling_params& params) {
  std::shared_ptr<const model_session> s = load_model(o.session, /*need_tokenizer=*/true);
  const std::vector<int32_t> ids = prompt_ids(o, *s);
  std::shared_ptr<const model_weights> weights(s, &s->weights);
  caf::actor_system_config sys_cfg;
  configure_actor_system(sys_cfg);
  caf::actor_system sys{sys_cfg};
  const cluster c =
    spawn_cluster(sys, weights, s->tok,
                  {.topology = topo, .reference = o.session.reference, .trace = !o.trace_file.empty()});
  cluster_run run;
  try {
    run = run_requests(sys, c, {request_spec{.prompt_ids = ids, .sampling = params}}, 1,
                       [&](std::string_view delta) { print_stream(o, delta); });
  } catch (...) {
    c.stop();
    throw;
  }
  c.stop();
  const cluster_request_result& r = run.requests.at(0);
  if (r.result.reason == finish_reason::error)
    throw input_error(r.result.error);
  if (c.trace)
    c.trace->write_json(o.trace_file);
  generation_result g{.prompt_ids = ids,
                      .output_ids = r.result.output_ids,
                      .text = r.result.text,
                      .reason = r.result.reason,
                      .prefill_seconds = r.ttft_s,
                      .decode_seconds = r.total_s - r.ttft_s,
                      .logprobs = r.result.logprobs};
  report(o, g,
         std::to_string(topo.prefill_ranks) + "P+" + std::to_string(topo.decode_ranks) + "D cluster, " +
           (o.session.reference ? "cpu-ref" : "cpu") + ", dispatch " + topo.dispatch_dtype +
           (topo.two_batch_overlap ? ", two-batch overlap" : ""));
}

void run(const CLI::App& cmd, generate_options& o) {
  if (o.logprobs >= 0 && !o.json)
    throw input_error("--logprobs prints with --json only (one object with every token's logprobs)");
  if (o.logprobs >= 0)
    o.sampling.params.logprobs = o.logprobs;
  const sampling_params params = finish_sampling_options(cmd, o.sampling);
  if (o.prompt.empty() == o.tokens.empty())
    throw input_error("give exactly one of --prompt TEXT or --tokens IDS");
  const topology_config topo = resolve_topology(o.topology);
  o.session.ep = ep_precision_of(topo);
  if (o.single_rank) {
    run_single_rank(o, topo, params);
  } else {
    validate_for_model(topo, load_model_config(o.session.model_dir));  // before the weights load
    run_cluster(o, topo, params);
  }
}

}  // namespace

void add_generate(CLI::App& app) {
  auto o = std::make_shared<generate_options>();
  CLI::App* cmd = app.add_subcommand("generate",
                                     "generate text from a prompt through the in-process cluster");
  add_session_options(*cmd, o->session, /*reference_by_default=*/false, /*kv_flags=*/false);
  add_topology_options(*cmd, o->topology);
  add_sampling_options(*cmd, o->sampling);
  cmd->add_option("--prompt", o->prompt, "prompt text");
  cmd->add_option("--tokens", o->tokens, "prompt token ids, e.g. 0,100,200")->check(token_id_list);
  cmd->add_option("--system", o->system, "system prompt (with --chat)");
  cmd->add_flag("--chat", o->chat, "wrap the prompt in the DeepSeek-V3 chat format");
  cmd->add_flag("--json", o->json, "print one JSON object instead of streaming text");
  cmd
    ->add_option("--logprobs", o->logprobs,
                 "with --json: each output token's logprob and its N most likely alternatives")
    ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--single-rank", o->single_rank,
                "run on one rank without actors (the baseline the cluster must match)");
  cmd->add_option("--trace", o->trace_file, "write the run's Chrome trace (JSON) to this file");
  cmd->callback([cmd, o] { run(*cmd, *o); });
}

}  // namespace moe::tools
