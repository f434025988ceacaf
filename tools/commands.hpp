// tools/commands.hpp
// The `moeserve` verbs. Each lives in tools/<verb>.cpp and registers its sub-command, options
// and callback; a callback throws moe::input_error for bad input (printed as "error: ...").
#pragma once

#include "tools/lib/paths.hpp"  // default_tokenizer_dir

namespace CLI {
class App;
}

namespace moe::tools {

void add_make_model(CLI::App& app);       // tools/make_model.cpp
void add_tokenize(CLI::App& app);         // tools/tokenize.cpp: tokenize, detokenize
void add_generate(CLI::App& app);         // tools/generate.cpp
void add_logits(CLI::App& app);           // tools/logits.cpp
void add_bench_model(CLI::App& app);      // tools/bench_model.cpp
void add_bench_tokenizer(CLI::App& app);  // tools/bench_tokenizer.cpp
void add_bench_cluster(CLI::App& app);    // tools/bench_cluster.cpp
void add_bench_eplb(CLI::App& app);       // tools/bench_eplb.cpp: one expert rebalance while serving
void add_serve(CLI::App& app);            // tools/serve.cpp
void add_client(CLI::App& app);           // tools/client.cpp
void add_bench(CLI::App& app);            // tools/bench.cpp: load generator against `serve`
void add_chaos(CLI::App& app);            // tools/chaos.cpp: a load under random actor kills
void add_eplb_plan(CLI::App& app);        // tools/eplb_plan.cpp: an expert placement from loads
void add_ctl(CLI::App& app);              // tools/ctl.cpp: live changes over an admin connection
void add_cluster(CLI::App& app);          // tools/cluster.cpp: cluster check FILE
void add_cluster_up(CLI::App& cluster);   // tools/cluster_up.cpp: cluster up FILE (a subcommand of cluster)
void add_bench_transport(CLI::App& app);  // tools/bench_transport.cpp: tensors between processes

}  // namespace moe::tools
