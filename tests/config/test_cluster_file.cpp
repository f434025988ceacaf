// tests/config/test_cluster_file.cpp
// The cluster file: the example reads as its comments say, every key lands in its field, and
// each rule (unknown node, duplicate address, ranks that do not divide the experts, ...) is one
// error naming the file and what is wrong, before anything starts.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "error_of.hpp"
#include "config/cluster_file.hpp"

using moe::cluster_file;
using moe::cluster_node;
using moe::input_error;

namespace {

using moe::testing::error_of;

// A directory of files that lives for one test.
struct temp_dir {
  std::filesystem::path path = std::filesystem::temp_directory_path() /
                               ("moe_cluster_" + std::to_string(::getpid()));
  temp_dir() { std::filesystem::create_directories(path); }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::filesystem::path write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return path / name;
  }
};

// A valid two-node file: the front and one node with both roles, then `extra` appended.
std::string small_file(const std::string& extra = "") {
  return R"(name = "t"
token = "secret"
[[node]]
name = "f"
port = 7000
front = true
[[node]]
name = "r"
port = 7001
prefill_ranks = 1
decode_ranks = 1
)" + extra;
}

std::string load_error(const std::string& text) {
  temp_dir dir;
  const auto file = dir.write("c.toml", text);
  return error_of([&] { (void)moe::load_cluster(file); });
}

moe::model_config experts(int64_t n) {
  moe::model_config m;
  m.n_routed_experts = n;
  return m;
}

}  // namespace

TEST_CASE("config/cluster.toml: four loopback nodes, one EP group of 4 decode ranks over two of them") {
  const cluster_file c = moe::load_cluster(MOE_SOURCE_DIR "/config/cluster.toml");
  CHECK(c.name == "loopback");
  CHECK(c.token == "loopback-example-token-change-me");
  CHECK(c.heartbeat_interval_s == doctest::Approx(0.1));
  CHECK(c.connection_timeout_s == doctest::Approx(1.0));
  CHECK(c.data_plane == "auto");
  REQUIRE(c.nodes.size() == 4);
  CHECK(c.nodes[0] ==
        cluster_node{.name = "front", .port = 7400, .front = true, .rpc_port = 8765, .http_port = 8766});
  CHECK(c.nodes[1] == cluster_node{.name = "prefill-0", .port = 7401, .prefill_ranks = 2});
  CHECK(c.nodes[2] == cluster_node{.name = "decode-0", .port = 7402, .decode_ranks = 2});
  CHECK(c.nodes[3] == cluster_node{.name = "decode-1", .port = 7403, .decode_ranks = 2});
  CHECK(c.topology.prefill_ranks == 2);
  CHECK(c.topology.decode_ranks == 4);
  CHECK(c.topology.port == 8765);
  CHECK(c.topology.http_port == 8766);
  CHECK(moe::first_decode_rank(c, 3) == 2);
  CHECK(moe::first_prefill_rank(c, 3) == 2);
  CHECK(moe::front_node(c).name == "front");
  // 256 experts (DeepSeek-V3) split over 2 prefill and 4 decode ranks
  moe::validate_cluster_for_model(c, experts(256), "cluster.toml");
}

TEST_CASE("cluster file: a topology file beside it sets the other keys, the nodes set the rank counts") {
  temp_dir dir;
  dir.write("topo.toml",
            "[prefill]\nranks = 7\n[kv_cache]\nblocks = 99\n[expert_parallel]\nredundant_experts = 2\n");
  const auto file = dir.write("c.toml", "topology = \"topo.toml\"\n" + small_file());
  const cluster_file c = moe::load_cluster(file);
  CHECK(c.topology.kv_blocks == 99);
  CHECK(c.topology.redundant_experts == 2);
  CHECK(c.topology.prefill_ranks == 1);
  CHECK(c.topology.decode_ranks == 1);
}

TEST_CASE("cluster file: MOESERVE_CLUSTER_TOKEN replaces the file's token, and some token is required") {
  ::setenv("MOESERVE_CLUSTER_TOKEN", "from-env", 1);
  temp_dir dir;
  CHECK(moe::load_cluster(dir.write("c.toml", small_file())).token == "from-env");
  ::unsetenv("MOESERVE_CLUSTER_TOKEN");
  CHECK(moe::load_cluster(dir.write("c.toml", small_file())).token == "secret");
  std::string no_token = small_file();
  no_token.replace(no_token.find("token = \"secret\""), 16, "");
  CHECK(load_error(no_token).find("no cluster token: set token in the file or MOESERVE_CLUSTER_TOKEN") !=
        std::string::npos);
}

TEST_CASE("cluster file: --node picks a node by name, an unknown one lists the names") {
  const cluster_file c = moe::load_cluster(MOE_SOURCE_DIR "/config/cluster.toml");
  CHECK(moe::find_node(c, "decode-1").port == 7403);
  CHECK(error_of([&] { (void)moe::find_node(c, "decode-2"); }) ==
        "unknown node \"decode-2\" (the cluster file names: front, prefill-0, decode-0, decode-1)");
}

TEST_CASE("cluster file: unknown keys, wrong types and syntax errors name the file, line and key") {
  CHECK(error_of([] { (void)moe::parse_cluster("nmae = \"x\"\n", "c.toml"); }) ==
        "c.toml:1:8: key \"nmae\": unknown key (see config/cluster.toml)");
  CHECK(error_of([] { (void)moe::parse_cluster("[[node]]\nname = \"a\"\nprot = 1\n", "c.toml"); }) ==
        "c.toml:3:8: key \"node[0].prot\": unknown key (see config/cluster.toml)");
  CHECK(error_of([] { (void)moe::parse_cluster("[[node]]\nport = \"7000\"\n", "c.toml"); }) ==
        "c.toml:2:8: key \"node[0].port\": expected an integer, got string '7000'");
  CHECK(error_of([] {
          (void)moe::parse_cluster("node = 3\n", "c.toml");
        }).find("key \"node\": expected [[node]] tables") != std::string::npos);
  CHECK(error_of([] { (void)moe::parse_cluster("name = \n", "c.toml"); }).rfind("c.toml:1:", 0) == 0);
  CHECK(error_of([] { (void)moe::load_cluster("/nonexistent/c.toml"); }) ==
        "/nonexistent/c.toml: cannot open the cluster file");
}

TEST_CASE("cluster file: each rule is an error naming what is wrong") {
  struct rule {
    std::string text, error;
  };
  const rule rules[] = {
    {small_file("[[node]]\nname = \"r\"\nport = 7002\ndecode_ranks = 1\n"), "two nodes are named \"r\""},
    {small_file("[[node]]\nname = \"x\"\nport = 7001\ndecode_ranks = 1\n"),
     "node \"x\" port and node \"r\" port have the same address 127.0.0.1:7001"},
    {small_file("[[node]]\nname = \"x\"\nport = 8766\ndecode_ranks = 1\n"),
     "node \"x\" port and node \"f\" http_port (rpc_port + 1) have the same address 127.0.0.1:8766"},
    {small_file("[[node]]\nname = \"x\"\nport = 7001\nhost = \"127.0.0.2\"\ndecode_ranks = 1\n"), ""},
    {small_file("[[node]]\nname = \"x\"\nport = 7002\nfront = true\n"),
     "exactly one node must be the front (front = true), got 2"},
    {small_file("[[node]]\nname = \"x\"\nport = 7002\n"),
     "node \"x\" hosts nothing: give it prefill_ranks, decode_ranks or front = true"},
    {small_file("[[node]]\nname = \"x y\"\nport = 7002\ndecode_ranks = 1\n"),
     "node[2]: name must be 1-64 characters of [A-Za-z0-9._-], got \"x y\""},
    {small_file("[[node]]\nname = \"x\"\nport = 0\ndecode_ranks = 1\n"),
     "node \"x\": port must be in 1..65535 (peers dial it), got 0"},
    {small_file("[[node]]\nname = \"x\"\nport = 7002\ndecode_ranks = -1\n"),
     "node \"x\": decode_ranks must be in 0..1024, got -1"},
    {small_file("[[node]]\nname = \"x\"\nport = 7002\ndecode_ranks = 1\nrpc_port = 9000\n"),
     "node \"x\": rpc_port and http_port belong to the front node"},
    {"name = \"t\"\ntoken = \"s\"\n", "no [[node]]: a cluster needs a front node and nodes with prefill and "
                                      "decode ranks"},
    {"name = \"t\"\ntoken = \"s\"\n[[node]]\nname = \"f\"\nport = 1\nfront = true\ndecode_ranks = 1\n",
     "no node has prefill_ranks: the cluster needs at least one prefill rank"},
  };
  for (const rule& r : rules) {
    CAPTURE(r.text);
    if (r.error.empty()) {
      temp_dir dir;
      CHECK_NOTHROW((void)moe::load_cluster(dir.write("c.toml", r.text)));
      continue;
    }
    const std::string error = load_error(r.text);
    CHECK(error.find(r.error) != std::string::npos);
    CHECK(error.find("c.toml: ") != std::string::npos);  // names the file
  }
  // (a top-level key goes before the first [[node]]: after it, TOML puts it in the last node)
  CHECK(load_error("data_plane = \"rdma\"\n" + small_file())
          .find("data_plane must be \"auto\", \"ucx\", \"middleman\" or \"nccl\", got \"rdma\"") !=
        std::string::npos);
  temp_dir dir;
  CHECK(moe::load_cluster(dir.write("n.toml", "data_plane = \"nccl\"\n" + small_file())).data_plane ==
        "nccl");
  CHECK(load_error("heartbeat_interval_s = 2.0\n" + small_file())
          .find("connection_timeout_s must be above heartbeat_interval_s") != std::string::npos);
}

TEST_CASE(
  "cluster file: the ranks of a role, over all nodes, must divide the experts, the error names the nodes") {
  const cluster_file c = moe::load_cluster(MOE_SOURCE_DIR "/config/cluster.toml");
  cluster_file three = c;
  three.nodes[3].decode_ranks = 1;
  three.topology.decode_ranks = 3;
  CHECK(
    error_of([&] { moe::validate_cluster_for_model(three, experts(256), "c.toml"); }) ==
    "c.toml: 3 decode ranks (decode-0 (2), decode-1 (1)) do not divide the model's 256 routed experts + 0 "
    "redundant slots = 256: each rank of an expert-parallel group holds the same number of slots");
  three.topology.redundant_experts = 2;  // 258 slots split over 3 ranks: 86 each
  CHECK_NOTHROW(moe::validate_cluster_for_model(three, experts(256), "c.toml"));
  CHECK_NOTHROW(moe::validate_cluster_for_model(three, experts(0), "c.toml"));  // a dense model
}
