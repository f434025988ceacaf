// tools/expert_load_json.cpp
#include "tools/expert_load_json.hpp"

#include <cmath>

#include "config/model_config.hpp"  // input_error

namespace moe::tools {

namespace {

std::string at(std::string_view origin, size_t row) {
  return std::string(origin) + ": row " + std::to_string(row);
}

nlohmann::json rows_of(const matrix<int32_t>& m) {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t r = 0; r < m.rows; ++r) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t c = 0; c < m.cols; ++c)
      row.push_back(m(r, c));
    out.push_back(std::move(row));
  }
  return out;
}

}  // namespace

matrix<double> parse_expert_load(std::string_view text, std::string_view origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw input_error(std::string(origin) + ": not JSON (" + e.what() + ")");
  }
  if (!j.is_array())
    throw input_error(std::string(origin) +
                      ": expected an array of MoE layers, each an array of per-expert loads");
  matrix<double> load(static_cast<int64_t>(j.size()), 0);
  for (size_t r = 0; r < j.size(); ++r) {
    const nlohmann::json& row = j[r];
    if (!row.is_array())
      throw input_error(at(origin, r) + ": expected an array of per-expert loads");
    if (r == 0) {
      if (row.empty())
        throw input_error(at(origin, r) + ": no experts");
      load = matrix<double>(static_cast<int64_t>(j.size()), static_cast<int64_t>(row.size()));
    } else if (static_cast<int64_t>(row.size()) != load.cols) {
      throw input_error(at(origin, r) + " has " + std::to_string(row.size()) + " experts, row 0 has " +
                        std::to_string(load.cols));
    }
    for (size_t e = 0; e < row.size(); ++e) {
      const nlohmann::json& v = row[e];
      if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0)
        throw input_error(at(origin, r) + ", expert " + std::to_string(e) + ": expected a load >= 0, got " +
                          v.dump());
      load(static_cast<int64_t>(r), static_cast<int64_t>(e)) = v.get<double>();
    }
  }
  return load;
}

nlohmann::json expert_load_json(const matrix<double>& load) {
  nlohmann::json out = nlohmann::json::array();
  for (int64_t r = 0; r < load.rows; ++r) {
    nlohmann::json row = nlohmann::json::array();
    for (int64_t c = 0; c < load.cols; ++c) {
      const double v = load(r, c);
      if (v == std::floor(v) && std::abs(v) < 9.0e15)
        row.push_back(static_cast<int64_t>(v));
      else
        row.push_back(v);
    }
    out.push_back(std::move(row));
  }
  return out;
}

nlohmann::json expert_plan_json(const expert_plan& plan) {
  nlohmann::json log2phy = nlohmann::json::array();
  for (const matrix<int32_t>& layer : plan.log2phy)
    log2phy.push_back(rows_of(layer));
  return {
    {"phy2log", rows_of(plan.phy2log)}, {"log2phy", std::move(log2phy)}, {"logcnt", rows_of(plan.logcnt)}};
}

void check_plan_shape(const matrix<double>& load, int64_t num_replicas, int64_t num_groups, int64_t num_nodes,
                      int64_t num_ranks) {
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (num_ranks <= 0)
    throw input_error("--ranks: expected a count > 0, got " + n(num_ranks));
  if (num_nodes <= 0)
    throw input_error("--nodes: expected a count > 0, got " + n(num_nodes));
  if (num_groups <= 0)
    throw input_error("--groups: expected a count > 0, got " + n(num_groups));
  if (num_replicas % num_ranks != 0)
    throw input_error("--replicas " + n(num_replicas) + " is not a multiple of --ranks " + n(num_ranks));
  if (load.cols > 0 && num_replicas < load.cols)
    throw input_error("--replicas " + n(num_replicas) + " is fewer than the load's " + n(load.cols) +
                      " experts: each needs a slot");
  if (num_groups % num_nodes == 0) {  // the hierarchical policy
    if (num_ranks % num_nodes != 0)
      throw input_error("--ranks " + n(num_ranks) + " is not a multiple of --nodes " + n(num_nodes) +
                        " (the hierarchical policy, as --groups divides by --nodes)");
    if (load.cols % num_groups != 0)
      throw input_error("the load's " + n(load.cols) + " experts do not split into --groups " +
                        n(num_groups) + " (the hierarchical policy, as --groups divides by --nodes)");
  }
}

}  // namespace moe::tools
