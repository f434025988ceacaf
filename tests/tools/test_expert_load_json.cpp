// tests/tools/test_expert_load_json.cpp
// The load-matrix and plan JSON of `eplb-plan` and `ctl expert-load`: the EPLB README example
// round trip against its published plan, and the errors for malformed loads and shapes.
#include <doctest/doctest.h>

#include <string>

#include "config/model_config.hpp"
#include "tools/expert_load_json.hpp"

using namespace moe;
using namespace moe::tools;

namespace {

// deepseek-ai/EPLB's README example: 2 layers, 12 experts
const char* readme_load = R"([[90, 132, 40, 61, 104, 165, 39, 4, 73, 56, 183, 86],
                              [20, 107, 104, 64, 19, 197, 187, 157, 172, 86, 16, 27]])";

std::string error_of(const std::string& text) {
  try {
    static_cast<void>(parse_expert_load(text, "load.json"));
  } catch (const input_error& e) {
    return e.what();
  }
  return "no error";
}

std::string shape_error(int64_t replicas, int64_t groups, int64_t nodes, int64_t ranks) {
  try {
    check_plan_shape(parse_expert_load(readme_load, "x"), replicas, groups, nodes, ranks);
  } catch (const input_error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("eplb-plan JSON: the README example's loads give its published plan") {
  const matrix<double> load = parse_expert_load(readme_load, "load.json");
  CHECK(load.rows == 2);
  CHECK(load.cols == 12);
  CHECK(load(1, 5) == 197.0);
  check_plan_shape(load, 16, 4, 2, 8);
  const nlohmann::json plan = expert_plan_json(rebalance_experts(load, 16, 4, 2, 8));
  CHECK(plan["phy2log"] == nlohmann::json::parse(R"([[5, 6, 5, 7, 8, 4, 3, 4, 10, 9, 10, 2, 0, 1, 11, 1],
                                                     [7, 10, 6, 8, 6, 11, 8, 9, 2, 4, 5, 1, 5, 0, 3, 1]])"));
  CHECK(plan["logcnt"] == nlohmann::json::parse(R"([[1, 2, 1, 1, 2, 2, 1, 1, 1, 1, 2, 1],
                                                    [1, 2, 1, 1, 1, 2, 2, 1, 2, 1, 1, 1]])"));
  REQUIRE(plan["log2phy"].size() == 2);
  CHECK(plan["log2phy"][0][1] == nlohmann::json::parse("[15, 13]"));  // expert 1: replica 0, 1
  CHECK(plan["log2phy"][0][0] == nlohmann::json::parse("[12, -1]"));
  // and the load writes back as it was read, counts as integers
  CHECK(expert_load_json(load) == nlohmann::json::parse(readme_load));
  CHECK(expert_load_json(load).dump().find('.') == std::string::npos);
}

TEST_CASE("eplb-plan JSON: malformed loads are refused naming the row and expert") {
  CHECK(error_of("[[1, 2], [3").find("load.json: not JSON") == 0);
  CHECK(error_of(R"({"a": 1})") ==
        "load.json: expected an array of MoE layers, each an array of per-expert loads");
  CHECK(error_of("[[1, 2, 3], [4, 5]]") == "load.json: row 1 has 2 experts, row 0 has 3");
  CHECK(error_of("[[1, 2], 3]") == "load.json: row 1: expected an array of per-expert loads");
  CHECK(error_of("[[1, -2]]") == "load.json: row 0, expert 1: expected a load >= 0, got -2");
  CHECK(error_of(R"([[1, "2"]])") == "load.json: row 0, expert 1: expected a load >= 0, got \"2\"");
  CHECK(error_of("[[]]") == "load.json: row 0: no experts");
  CHECK(parse_expert_load("[]", "x").rows == 0);  // no MoE layers: an empty plan
}

TEST_CASE("eplb-plan JSON: shapes the planner cannot place are refused naming the flag") {
  CHECK(shape_error(16, 4, 2, 8) == "no error");
  CHECK(shape_error(18, 4, 2, 8) == "--replicas 18 is not a multiple of --ranks 8");
  CHECK(shape_error(8, 4, 2, 8) == "--replicas 8 is fewer than the load's 12 experts: each needs a slot");
  CHECK(shape_error(18, 4, 2, 6) == "no error");
  CHECK(shape_error(16, 4, 4, 2) ==
        "--ranks 2 is not a multiple of --nodes 4 (the hierarchical policy, as --groups divides by --nodes)");
  CHECK(shape_error(16, 8, 2, 8) ==
        "the load's 12 experts do not split into --groups 8 (the hierarchical policy, as --groups divides by "
        "--nodes)");
  CHECK(shape_error(16, 3, 2, 8) == "no error");  // 3 groups on 2 nodes: the global policy
  CHECK(shape_error(16, 4, 2, 0) == "--ranks: expected a count > 0, got 0");
}
