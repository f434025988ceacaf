// tests/config/test_topology.cpp
// The topology config: the example file equals the defaults, every TOML key lands in its field,
// unknown keys and mistyped values are errors naming the key, each validation rule names its
// key and flag, and command-line flags override the file.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "config/model_config.hpp"
#include "config/topology.hpp"
#include "tools/lib/topology_options.hpp"

using moe::input_error;
using moe::topology_config;

namespace {

using moe::testing::error_of;

std::string parse_error(const std::string& toml) {
  return error_of([&] { (void)moe::parse_topology(toml, "test.toml"); });
}

// A TOML file that lives for one test.
struct temp_file {
  std::filesystem::path path;
  explicit temp_file(const std::string& text)
      : path(std::filesystem::temp_directory_path() /
             ("moe_topology_" + std::to_string(::getpid()) + ".toml")) {
    std::ofstream(path) << text;
  }
  ~temp_file() { std::filesystem::remove(path); }
};

// Parses `args` as `moeserve serve` would and resolves the topology.
topology_config resolve(std::vector<std::string> args) {
  CLI::App app;
  moe::tools::topology_options opts;
  moe::tools::add_topology_options(app, opts, /*listen=*/true);
  args.insert(args.begin(), "moeserve");
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (std::string& a : args)
    argv.push_back(a.data());
  app.parse(static_cast<int>(argv.size()), argv.data());
  return moe::tools::resolve_topology(opts);
}

}  // namespace

TEST_CASE("config/topology.toml holds the defaults, and the defaults are valid") {
  const topology_config cfg = moe::load_topology(MOE_SOURCE_DIR "/config/topology.toml");
  CHECK(cfg == topology_config{});
  CHECK_NOTHROW(moe::validate(cfg));
  CHECK(cfg.prefill_ranks == 2);
  CHECK(cfg.decode_ranks == 2);
  CHECK(cfg.host == "127.0.0.1");
  CHECK_FALSE(cfg.link_model);
  CHECK(cfg.intra_node == moe::link_spec{77.0, 153.0});  // DeepEP EP8, NVLink
  CHECK(cfg.inter_node == moe::link_spec{118.0, 43.0});  // DeepEP EP16, RDMA
  CHECK(moe::combine_dtype(cfg) == "bf16");
}

TEST_CASE("topology file: every key is read into its field") {
  const topology_config cfg = moe::parse_topology(R"(
[prefill]
ranks = 3
chunked_prefill_size = 256
max_prefill_tokens = 1024
[decode]
ranks = 5
max_running_requests = 16
[scheduler]
max_queued_requests = 8
max_context = 2048
new_token_ratio = 0.5
[kv_cache]
blocks = 100
page_size = 16
[cluster]
ranks_per_node = 4
threads_per_rank = 2
[expert_parallel]
redundant_experts = 32
two_batch_overlap = false
dispatch_dtype = "fp32"
combine = "reduced"
balancer = "global"
interval_steps = 250
[link_model]
enabled = true
intra_node_latency_us = 1.5
intra_node_bandwidth_gb_s = 2.5
inter_node_latency_us = 3
inter_node_bandwidth_gb_s = 0
[server]
host = "0.0.0.0"
port = 9000
http_port = 0
[fault_tolerance]
max_restarts = 7
restart_period_s = 1.5
stall_timeout_s = 0
max_migrations = 2
)",
                                                  "test.toml");
  topology_config want;
  want.prefill_ranks = 3;
  want.chunked_prefill_size = 256;
  want.max_prefill_tokens = 1024;
  want.decode_ranks = 5;
  want.max_running_requests = 16;
  want.max_queued_requests = 8;
  want.max_context = 2048;
  want.kv_blocks = 100;
  want.page_size = 16;
  want.ranks_per_node = 4;
  want.threads_per_rank = 2;
  want.redundant_experts = 32;
  want.two_batch_overlap = false;
  want.dispatch_dtype = "fp32";
  want.combine = "reduced";
  want.expert_balancer = "global";
  want.eplb_interval_steps = 250;
  want.link_model = true;
  want.intra_node = {1.5, 2.5};
  want.inter_node = {3.0, 0.0};  // an integer is a fine number
  want.host = "0.0.0.0";
  want.port = 9000;
  want.http_port = 0;
  want.new_token_ratio = 0.5;
  want.max_restarts = 7;
  want.restart_period_s = 1.5;
  want.stall_timeout_s = 0.0;
  want.max_migrations = 2;
  CHECK(cfg == want);
  CHECK(moe::combine_dtype(cfg) == "fp32");
}

TEST_CASE("topology file: absent keys keep their defaults") {
  topology_config want;
  want.decode_ranks = 7;
  CHECK(moe::parse_topology("[decode]\nranks = 7\n", "test.toml") == want);
  CHECK(moe::parse_topology("", "test.toml") == topology_config{});
}

TEST_CASE("topology file: unknown sections and keys are errors naming them") {
  std::string msg = parse_error("[prefill]\nranks = 2\nrank = 2\n");
  CHECK(msg.find("test.toml:3") != std::string::npos);
  CHECK(msg.find("\"prefill.rank\"") != std::string::npos);
  CHECK(msg.find("unknown key") != std::string::npos);
  msg = parse_error("[prefil]\nranks = 2\n");
  CHECK(msg.find("\"prefil\"") != std::string::npos);
  CHECK(msg.find("unknown section") != std::string::npos);
  CHECK(parse_error("ranks = 2\n").find("unknown section") != std::string::npos);
  // A key of another section is unknown here.
  CHECK(parse_error("[decode]\nchunked_prefill_size = 1\n").find("\"decode.chunked_prefill_size\"") !=
        std::string::npos);
}

TEST_CASE("topology file: a value of the wrong type names the key and what was expected") {
  struct bad_case {
    std::string toml, key, expected;
  };
  const std::vector<bad_case> cases = {
    {"[prefill]\nranks = \"two\"\n", "\"prefill.ranks\"", "expected an integer"},
    {"[prefill]\nranks = 2.5\n", "\"prefill.ranks\"", "expected an integer"},
    {"[link_model]\nenabled = \"yes\"\n", "\"link_model.enabled\"", "expected true or false"},
    {"[link_model]\nintra_node_latency_us = \"fast\"\n", "\"link_model.intra_node_latency_us\"",
     "expected a number"},
    {"[server]\nhost = 127\n", "\"server.host\"", "expected a string"},
    {"[expert_parallel]\ntwo_batch_overlap = 1\n", "\"expert_parallel.two_batch_overlap\"",
     "expected true or false"},
    {"prefill = 3\n", "\"prefill\"", "expected a table"},
  };
  for (const bad_case& c : cases) {
    CAPTURE(c.toml);
    const std::string msg = parse_error(c.toml);
    CHECK(msg.find("test.toml:") == 0);
    CHECK(msg.find(c.key) != std::string::npos);
    CHECK(msg.find(c.expected) != std::string::npos);
  }
}

TEST_CASE("topology file: syntax errors and missing files name the file") {
  CHECK(parse_error("[prefill\nranks = 2\n").find("test.toml:1:") == 0);
  CHECK(parse_error("[prefill]\nranks = 2\nranks = 3\n").find("test.toml:3:") == 0);
  const std::string msg = error_of([] { (void)moe::load_topology("/nonexistent/topo.toml"); });
  CHECK(msg.find("/nonexistent/topo.toml") != std::string::npos);
}

TEST_CASE("topology validate: each rule names its key and flag") {
  struct rule {
    std::function<void(topology_config&)> break_it;
    std::string names;
  };
  const std::vector<rule> rules = {
    {[](auto& c) { c.prefill_ranks = 0; }, "prefill.ranks (--prefill-ranks) must be >= 1, got 0"},
    {[](auto& c) { c.decode_ranks = -1; }, "decode.ranks (--decode-ranks)"},
    {[](auto& c) { c.ranks_per_node = 0; }, "cluster.ranks_per_node (--ranks-per-node)"},
    {[](auto& c) { c.threads_per_rank = -1; }, "cluster.threads_per_rank (--threads-per-rank)"},
    {[](auto& c) { c.redundant_experts = -1; }, "expert_parallel.redundant_experts"},
    {[](auto& c) { c.chunked_prefill_size = 0; }, "prefill.chunked_prefill_size"},
    {[](auto& c) { c.max_prefill_tokens = 511; },
     "prefill.max_prefill_tokens (--max-prefill-tokens) must be >= prefill.chunked_prefill_size "
     "(512), got 511"},
    {[](auto& c) { c.max_running_requests = 0; }, "decode.max_running_requests"},
    {[](auto& c) { c.max_queued_requests = 0; }, "scheduler.max_queued_requests"},
    {[](auto& c) { c.max_context = 1; }, "scheduler.max_context (--max-context) must be >= 2"},
    {[](auto& c) { c.kv_blocks = 0; }, "kv_cache.blocks (--kv-blocks) must be >= 1"},
    {[](auto& c) { c.page_size = 0; }, "kv_cache.page_size (--page-size)"},
    {[](auto& c) { c.kv_blocks = 1, c.page_size = 1; }, "must hold >= 2 tokens, got 1"},
    {[](auto& c) { c.kv_blocks = int64_t{1} << 31; }, "kv_cache.blocks (--kv-blocks) must be <= 2147483647"},
    {[](auto& c) { c.page_size = int64_t{1} << 41; }, "kv_cache.page_size (--page-size) must be <= 4096"},
    // "unlimited" as 2^63 - 1 overflowed ranks x requests and admitted nothing
    {[](auto& c) { c.max_running_requests = std::numeric_limits<int64_t>::max(); },
     "decode.max_running_requests (--max-running-requests) must be <= 16777216"},
    {[](auto& c) { c.max_queued_requests = int64_t{1} << 25; }, "scheduler.max_queued_requests"},
    {[](auto& c) { c.max_context = int64_t{1} << 25; }, "scheduler.max_context (--max-context) must be <="},
    {[](auto& c) { c.max_prefill_tokens = int64_t{1} << 25; },
     "prefill.max_prefill_tokens (--max-prefill-tokens) must be <="},
    {[](auto& c) { c.prefill_ranks = 1025; }, "prefill.ranks (--prefill-ranks) must be <= 1024"},
    {[](auto& c) { c.decode_ranks = 1025; }, "decode.ranks (--decode-ranks) must be <= 1024"},
    {[](auto& c) { c.ranks_per_node = 1025; }, "cluster.ranks_per_node"},
    {[](auto& c) { c.threads_per_rank = int64_t{1} << 32; },
     "cluster.threads_per_rank (--threads-per-rank) must be <= 1024"},
    {[](auto& c) { c.redundant_experts = int64_t{1} << 40; },
     "expert_parallel.redundant_experts (--redundant-experts) must be <="},
    {[](auto& c) { c.intra_node.latency_us = 1e30; },
     "link_model.intra_node_latency_us (--intra-node-latency-us) must be a number in 0..1e7"},
    {[](auto& c) { c.intra_node.bandwidth_gb_s = 1e-300; },
     "(--intra-node-bandwidth-gbs) must be 0 (unlimited) or"},
    {[](auto& c) { c.dispatch_dtype = "fp16"; }, "dispatch_dtype (--dispatch-dtype) must be fp8"},
    {[](auto& c) { c.combine = "pairs"; }, "expert_parallel.combine (--combine) must be exact or reduced"},
    {[](auto& c) { c.expert_balancer = "eplb"; },
     "expert_parallel.balancer (--expert-balancer) must be hierarchical, global or off, got \"eplb\""},
    {[](auto& c) { c.eplb_interval_steps = -1; },
     "expert_parallel.interval_steps (--eplb-interval) must be >= 0"},
    {[](auto& c) { c.intra_node.latency_us = -1.0; }, "link_model.intra_node_latency_us"},
    {[](auto& c) { c.inter_node.bandwidth_gb_s = -5.0; }, "(--inter-node-bandwidth-gbs)"},
    {[](auto& c) { c.inter_node.latency_us = std::numeric_limits<double>::infinity(); },
     "link_model.inter_node_latency_us"},
    {[](auto& c) { c.host.clear(); }, "server.host (--host) must not be empty"},
    {[](auto& c) { c.port = 65536; }, "server.port (--port) must be in 0..65535, got 65536"},
    {[](auto& c) { c.port = -1; }, "server.port"},
    {[](auto& c) { c.http_port = -2; }, "server.http_port (--http-port) must be in 0..65535 (0: off) or -1"},
    {[](auto& c) { c.http_port = 65536; }, "server.http_port (--http-port)"},
    {[](auto& c) { c.http_port = c.port; }, "server.http_port (--http-port) must differ from --port 8765"},
    {[](auto& c) { c.new_token_ratio = 0.0; },
     "scheduler.new_token_ratio (--new-token-ratio) must be a number in (0, 1]"},
    {[](auto& c) { c.new_token_ratio = 1.5; }, "scheduler.new_token_ratio"},
    {[](auto& c) { c.max_restarts = -1; }, "fault_tolerance.max_restarts (--max-restarts) must be >= 0"},
    {[](auto& c) { c.restart_period_s = 0.0; }, "fault_tolerance.restart_period_s (--restart-period)"},
    {[](auto& c) { c.restart_period_s = std::numeric_limits<double>::quiet_NaN(); },
     "fault_tolerance.restart_period_s"},
    {[](auto& c) { c.stall_timeout_s = -1.0; }, "fault_tolerance.stall_timeout_s (--stall-timeout)"},
    {[](auto& c) { c.max_migrations = -1; }, "fault_tolerance.max_migrations (--max-migrations)"},
  };
  for (const rule& r : rules) {
    CAPTURE(r.names);
    topology_config cfg;
    r.break_it(cfg);
    const std::string msg = error_of([&] { moe::validate(cfg); });
    CHECK(msg.find("topology: ") == 0);
    CHECK(msg.find(r.names) != std::string::npos);
  }
}

TEST_CASE("topology validate: the edges of each range are valid") {
  topology_config cfg;
  cfg.prefill_ranks = cfg.decode_ranks = cfg.ranks_per_node = cfg.threads_per_rank = 1;
  cfg.chunked_prefill_size = cfg.max_prefill_tokens = 1;
  cfg.max_running_requests = cfg.max_queued_requests = 1;
  cfg.max_context = 2;
  cfg.kv_blocks = 1;
  cfg.page_size = 2;
  cfg.intra_node = {0.0, 0.0};
  cfg.port = 0;
  cfg.new_token_ratio = 1e-9;
  cfg.max_restarts = cfg.max_migrations = 0;
  cfg.restart_period_s = 0.001;
  cfg.stall_timeout_s = 0.0;
  CHECK_NOTHROW(moe::validate(cfg));
  cfg.port = 65535;
  cfg.dispatch_dtype = "bf16";
  CHECK_NOTHROW(moe::validate(cfg));  // --http-port -1: any free port after 65535
  cfg.http_port = 0;
  CHECK_NOTHROW(moe::validate(cfg));
  cfg.http_port = 65534;
  CHECK_NOTHROW(moe::validate(cfg));
  cfg.prefill_ranks = cfg.decode_ranks = cfg.ranks_per_node = cfg.threads_per_rank = 1024;
  cfg.max_running_requests = cfg.max_queued_requests = cfg.max_context = int64_t{1} << 24;
  cfg.kv_blocks = INT32_MAX;
  cfg.page_size = 4096;
  cfg.intra_node = {1e7, 1e-3};
  CHECK_NOTHROW(moe::validate(cfg));
}

TEST_CASE("topology for a model: the ranks split the experts, the served context is the least limit") {
  moe::model_config m;
  m.n_routed_experts = 16;
  m.max_position_embeddings = 163840;
  topology_config cfg;  // 2 + 2 ranks, no redundant slots
  CHECK_NOTHROW(moe::validate_for_model(cfg, m));
  cfg.decode_ranks = 3;
  CHECK(
    error_of([&] { moe::validate_for_model(cfg, m); }) ==
    "topology: decode.ranks (--decode-ranks) must divide the model's 16 routed experts + 0 redundant slots "
    "(expert_parallel.redundant_experts, --redundant-experts) = 16, got 3");
  cfg.redundant_experts = 2;                       // 18 slots: 3 decode ranks split them
  CHECK_NOTHROW(moe::validate_for_model(cfg, m));  // prefill's 2 ranks: 18 / 2 = 9 each
  cfg.prefill_ranks = 4;
  CHECK(error_of([&] {
          moe::validate_for_model(cfg, m);
        }).find("prefill.ranks (--prefill-ranks) must divide") != std::string::npos);
  m.n_routed_experts = 0;  // a dense model: anything goes
  CHECK_NOTHROW(moe::validate_for_model(cfg, m));

  topology_config t;  // 8192 context, 256 x 64 KV tokens
  CHECK(moe::served_context(t, 163840) == 8192);
  CHECK(moe::served_context(t, 4096) == 4096);
  t.kv_blocks = 1;
  t.page_size = 8;
  CHECK(moe::served_context(t, 163840) == 8);  // one rank's whole pool
}

TEST_CASE("topology flags: none give the defaults, and every flag sets its field") {
  CHECK(resolve({}) == topology_config{});
  const topology_config cfg = resolve({"--prefill-ranks",
                                       "3",
                                       "--decode-ranks",
                                       "5",
                                       "--ranks-per-node",
                                       "4",
                                       "--redundant-experts",
                                       "32",
                                       "--two-batch-overlap",
                                       "off",
                                       "--chunked-prefill-size",
                                       "256",
                                       "--max-prefill-tokens",
                                       "1024",
                                       "--max-running-requests",
                                       "16",
                                       "--max-queued-requests",
                                       "8",
                                       "--kv-blocks",
                                       "100",
                                       "--page-size",
                                       "16",
                                       "--max-context",
                                       "2048",
                                       "--dispatch-dtype",
                                       "bf16",
                                       "--combine",
                                       "reduced",
                                       "--threads-per-rank",
                                       "2",
                                       "--link-model",
                                       "on",
                                       "--intra-node-latency-us",
                                       "1.5",
                                       "--intra-node-bandwidth-gbs",
                                       "2.5",
                                       "--inter-node-latency-us",
                                       "3",
                                       "--inter-node-bandwidth-gbs",
                                       "0",
                                       "--host",
                                       "0.0.0.0",
                                       "--port",
                                       "9000",
                                       "--http-port",
                                       "9100",
                                       "--new-token-ratio",
                                       "0.25",
                                       "--max-restarts",
                                       "9",
                                       "--restart-period",
                                       "4",
                                       "--stall-timeout",
                                       "2.5",
                                       "--max-migrations",
                                       "1",
                                       "--expert-balancer",
                                       "hierarchical",
                                       "--eplb-rebalance-num-iterations",
                                       "64"});
  topology_config want;
  want.prefill_ranks = 3;
  want.decode_ranks = 5;
  want.ranks_per_node = 4;
  want.redundant_experts = 32;
  want.two_batch_overlap = false;
  want.chunked_prefill_size = 256;
  want.max_prefill_tokens = 1024;
  want.max_running_requests = 16;
  want.max_queued_requests = 8;
  want.kv_blocks = 100;
  want.page_size = 16;
  want.max_context = 2048;
  want.dispatch_dtype = "bf16";
  want.combine = "reduced";
  want.expert_balancer = "hierarchical";
  want.eplb_interval_steps = 64;
  want.threads_per_rank = 2;
  want.link_model = true;
  want.intra_node = {1.5, 2.5};
  want.inter_node = {3.0, 0.0};
  want.host = "0.0.0.0";
  want.port = 9000;
  want.http_port = 9100;
  want.new_token_ratio = 0.25;
  want.max_restarts = 9;
  want.restart_period_s = 4.0;
  want.stall_timeout_s = 2.5;
  want.max_migrations = 1;
  CHECK(cfg == want);
}

TEST_CASE("topology flags: flags given override the file, the rest comes from the file") {
  const temp_file file("[prefill]\nranks = 3\n[decode]\nranks = 5\n"
                       "[expert_parallel]\ntwo_batch_overlap = false\n");
  const topology_config cfg = resolve({"--config", file.path.string(), "--prefill-ranks", "4"});
  CHECK(cfg.prefill_ranks == 4);
  CHECK(cfg.decode_ranks == 5);
  CHECK_FALSE(cfg.two_batch_overlap);
  CHECK(cfg.kv_blocks == topology_config{}.kv_blocks);
  CHECK(resolve({"--config", file.path.string(), "--two-batch-overlap", "on"}).two_batch_overlap);
  CHECK(resolve({"--config", file.path.string(), "--enable-two-batch-overlap"}).two_batch_overlap);
}

TEST_CASE("topology flags: on|off switches and SGLang aliases") {
  CHECK_FALSE(resolve({"--two-batch-overlap", "off"}).two_batch_overlap);
  CHECK(resolve({"--two-batch-overlap", "on"}).two_batch_overlap);
  CHECK(resolve({"--link-model", "on"}).link_model);
  CHECK_FALSE(resolve({"--link-model", "off"}).link_model);
  CHECK(resolve({"--ep-num-redundant-experts", "32"}).redundant_experts == 32);
}

TEST_CASE("topology flags: bad values are rejected") {
  CHECK_THROWS_AS(resolve({"--prefill-ranks", "two"}), CLI::ParseError);
  CHECK_THROWS_AS(resolve({"--intra-node-latency-us", "fast"}), CLI::ParseError);
  CHECK_THROWS_AS(resolve({"--two-batch-overlap", "maybe"}), CLI::ValidationError);
  CHECK_THROWS_AS(resolve({"--link-model", "yes"}), CLI::ValidationError);
  CHECK_THROWS_AS(resolve({"--dispatch-dtype", "fp16"}), CLI::ValidationError);
  CHECK_THROWS_AS(resolve({"--config", "/nonexistent/topo.toml"}), CLI::ValidationError);
  CHECK_THROWS_AS(resolve({"--two-batch-overlap", "off", "--enable-two-batch-overlap"}), CLI::ExcludesError);
  // Values that parse but fail validate() name the flag.
  CHECK(error_of([] { resolve({"--prefill-ranks", "0"}); }).find("--prefill-ranks") != std::string::npos);
  CHECK(error_of([] { resolve({"--port", "70000"}); }).find("--port") != std::string::npos);
  CHECK(error_of([] {
          resolve({"--chunked-prefill-size", "8192"});
        }).find("--max-prefill-tokens") != std::string::npos);
}

TEST_CASE("topology flags: a bad file is an error naming the file and key") {
  const temp_file file("[decode]\nranks = \"two\"\n");
  const std::string msg = error_of([&] { resolve({"--config", file.path.string()}); });
  CHECK(msg.find(file.path.string()) == 0);
  CHECK(msg.find("\"decode.ranks\"") != std::string::npos);
}

TEST_CASE("topology flags: only a verb that listens takes --host and --port") {
  CLI::App app;
  moe::tools::topology_options opts;
  moe::tools::add_topology_options(app, opts);  // generate, bench-cluster
  std::vector<std::string> args = {"moeserve", "--port", "9000"};
  std::vector<char*> argv;
  argv.reserve(args.size());
  for (std::string& a : args)
    argv.push_back(a.data());
  CHECK_THROWS_AS(app.parse(static_cast<int>(argv.size()), argv.data()), CLI::ExtrasError);
}
