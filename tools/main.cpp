// tools/main.cpp
// `moeserve <verb>`: the command-line entry point.
#include <CLI/CLI.hpp>
#include <malloc.h>
#include <cstdio>
#include <exception>

#include "config/model_config.hpp"
#include "tools/commands.hpp"

int main(int argc, char** argv) {
  // Keep large freed blocks for reuse instead of returning them to the kernel: a batch's logits
  // (64 rows x a 129280-token vocabulary: 33 MB, above glibc's 32 MiB mmap ceiling) would
  // otherwise be a fresh mapping every step, ~8000 page faults, which on a VM cost more than the
  // step's matmuls (bench-cluster --single-rank, 64 requests: 26 s -> 9 s).
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  CLI::App app{"moeserve: serving DeepSeek-V3-architecture MoE models"};
  app.require_subcommand(1);
  moe::tools::add_make_model(app);
  moe::tools::add_tokenize(app);
  moe::tools::add_generate(app);
  moe::tools::add_logits(app);
  moe::tools::add_bench_model(app);
  moe::tools::add_bench_tokenizer(app);
  moe::tools::add_bench_cluster(app);
  moe::tools::add_bench_eplb(app);
  moe::tools::add_serve(app);
  moe::tools::add_client(app);
  moe::tools::add_bench(app);
  moe::tools::add_chaos(app);
  moe::tools::add_eplb_plan(app);
  moe::tools::add_ctl(app);
  moe::tools::add_cluster(app);
  moe::tools::add_bench_transport(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int status = app.exit(e);  // prints help or the usage error
    return status == 0 ? 0 : 2;
  } catch (const moe::input_error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
