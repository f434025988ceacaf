// config/cluster_file.cpp
// Reads a cluster file (layout: config/cluster.toml) through tables of known keys, as
// config/topology.cpp does, and checks it whole before any process starts.
#include "config/cluster_file.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "config/toml_fields.hpp"

namespace moe {
namespace {

std::array<std::pair<std::string_view, field_ref>, 6> top_fields(cluster_file& c) {
  return {{
    {"name", &c.name},
    {"token", &c.token},
    {"heartbeat_interval_s", &c.heartbeat_interval_s},
    {"connection_timeout_s", &c.connection_timeout_s},
    {"data_plane", &c.data_plane},
    {"topology", &c.topology_file},
  }};
}

std::array<std::pair<std::string_view, field_ref>, 8> node_fields(cluster_node& n) {
  return {{
    {"name", &n.name},
    {"host", &n.host},
    {"port", &n.port},
    {"front", &n.front},
    {"rpc_port", &n.rpc_port},
    {"http_port", &n.http_port},
    {"prefill_ranks", &n.prefill_ranks},
    {"decode_ranks", &n.decode_ranks},
  }};
}

template <size_t N>
void read_key(const std::array<std::pair<std::string_view, field_ref>, N>& fields, std::string_view key,
              const toml::node& node, std::string_view prefix, std::string_view origin) {
  const std::string name = std::string(prefix) + std::string(key);
  auto it = std::find_if(fields.begin(), fields.end(), [&](const auto& f) { return f.first == key; });
  if (it == fields.end())
    key_error(origin, node, name, "unknown key (see config/cluster.toml)");
  assign(it->second, node, origin, name);
}

void read_nodes(cluster_file& c, const toml::node& nodes, std::string_view origin) {
  const toml::array* list = nodes.as_array();
  if (list == nullptr || !list->is_array_of_tables())
    type_error(origin, nodes, "node", "[[node]] tables");
  for (const toml::node& entry : *list) {
    cluster_node n;
    const std::string prefix = "node[" + std::to_string(c.nodes.size()) + "].";
    for (const auto& [key, value] : *entry.as_table())
      read_key(node_fields(n), key.str(), value, prefix, origin);
    c.nodes.push_back(std::move(n));
  }
}

// "<origin>: <what>"
[[noreturn]] void invalid(std::string_view origin, const std::string& what) {
  throw input_error(std::string(origin) + ": " + what);
}

std::string in_quotes(std::string_view s) {
  std::string out(1, '"');
  out.append(s).push_back('"');
  return out;
}

bool valid_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
           ch == '_' || ch == '-';
  });
}

// Every port a node listens on, with what it is for.
std::vector<std::pair<int64_t, std::string>> ports_of(const cluster_node& n) {
  std::vector<std::pair<int64_t, std::string>> ports{{n.port, "port"}};
  if (n.front) {
    if (n.rpc_port != 0)
      ports.emplace_back(n.rpc_port, "rpc_port");
    if (n.http_port > 0)
      ports.emplace_back(n.http_port, "http_port");
    else if (n.http_port == -1 && n.rpc_port != 0 && n.rpc_port < 65535)
      ports.emplace_back(n.rpc_port + 1, "http_port (rpc_port + 1)");
  }
  return ports;
}

void check_node(const cluster_node& n, std::string_view origin) {
  const std::string who = "node " + in_quotes(n.name);
  if (n.host.empty())
    invalid(origin, who + ": host must not be empty");
  if (n.port < 1 || n.port > 65535)
    invalid(origin, who + ": port must be in 1..65535 (peers dial it), got " + std::to_string(n.port));
  for (const auto& [count, key] :
       {std::pair{n.prefill_ranks, "prefill_ranks"}, {n.decode_ranks, "decode_ranks"}})
    if (count < 0 || count > 1024)
      invalid(origin, who + ": " + key + " must be in 0..1024, got " + std::to_string(count));
  if (!n.front && n.prefill_ranks == 0 && n.decode_ranks == 0)
    invalid(origin, who + " hosts nothing: give it prefill_ranks, decode_ranks or front = true");
  if (!n.front && (n.rpc_port != cluster_node{}.rpc_port || n.http_port != cluster_node{}.http_port))
    invalid(origin, who + ": rpc_port and http_port belong to the front node");
  if (n.front && (n.rpc_port < 0 || n.rpc_port > 65535))
    invalid(origin, who + ": rpc_port must be in 0..65535, got " + std::to_string(n.rpc_port));
  if (n.front && (n.http_port < -1 || n.http_port > 65535))
    invalid(origin, who + ": http_port must be -1 (rpc_port + 1), 0 (off) or a port, got " +
                      std::to_string(n.http_port));
}

// No two listeners of the cluster on one host:port.
void check_addresses(const cluster_file& c, std::string_view origin) {
  std::map<std::pair<std::string, int64_t>, std::string> taken;  // (host, port) -> "node "x" key"
  for (const cluster_node& n : c.nodes)
    for (const auto& [port, key] : ports_of(n)) {
      const std::string who = "node " + in_quotes(n.name) + " " + key;
      auto [it, fresh] = taken.emplace(std::pair{n.host, port}, who);
      if (!fresh)
        invalid(origin,
                who + " and " + it->second + " have the same address " + n.host + ":" + std::to_string(port));
    }
}

// The names of the nodes hosting ranks of one role, with their counts: "decode-0 (2), decode-1 (1)".
std::string hosts_of(const cluster_file& c, int64_t cluster_node::*ranks) {
  std::string out;
  for (const cluster_node& n : c.nodes)
    if (n.*ranks > 0)
      out += (out.empty() ? "" : ", ") + n.name + " (" + std::to_string(n.*ranks) + ")";
  return out;
}

int64_t total(const cluster_file& c, int64_t cluster_node::*ranks) {
  int64_t sum = 0;
  for (const cluster_node& n : c.nodes)
    sum += n.*ranks;
  return sum;
}

}  // namespace

cluster_file parse_cluster(std::string_view toml_text, std::string_view origin) {
  const toml::table root = parse_toml(toml_text, origin);
  cluster_file c;
  for (const auto& [key, node] : root) {
    if (key.str() == "node")
      read_nodes(c, node, origin);
    else
      read_key(top_fields(c), key.str(), node, "", origin);
  }
  return c;
}

cluster_file load_cluster(const std::filesystem::path& file) {
  const auto read = [](const std::filesystem::path& path, std::string_view what) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
      throw input_error(path.string() + ": cannot open the " + std::string(what));
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  const std::string origin = file.string();
  cluster_file c = parse_cluster(read(file, "cluster file"), origin);
  if (!c.topology_file.empty()) {
    const std::filesystem::path topo = file.parent_path() / c.topology_file;
    c.topology = parse_topology(read(topo, "topology file (key \"topology\")"), topo.string());
  }
  if (const char* token = std::getenv(std::string(cluster_token_env).c_str());
      token != nullptr && *token != 0)
    c.token = token;
  c.topology.prefill_ranks = total(c, &cluster_node::prefill_ranks);
  c.topology.decode_ranks = total(c, &cluster_node::decode_ranks);
  for (const cluster_node& n : c.nodes)
    if (n.front) {
      c.topology.host = n.host;
      c.topology.port = n.rpc_port;
      c.topology.http_port = n.http_port;
    }
  validate_cluster(c, origin);
  return c;
}

void validate_cluster(const cluster_file& c, std::string_view origin) {
  if (!valid_name(c.name))
    invalid(origin, "name must be 1-64 characters of [A-Za-z0-9._-], got " + in_quotes(c.name));
  if (c.token.empty())
    invalid(origin, "no cluster token: set token in the file or " + std::string(cluster_token_env));
  if (!std::isfinite(c.heartbeat_interval_s) || c.heartbeat_interval_s < 0.001 ||
      c.heartbeat_interval_s > 60.0)
    invalid(origin,
            "heartbeat_interval_s must be in 0.001..60, got " + std::to_string(c.heartbeat_interval_s));
  if (!std::isfinite(c.connection_timeout_s) || c.connection_timeout_s <= c.heartbeat_interval_s ||
      c.connection_timeout_s > 600.0)
    invalid(origin, "connection_timeout_s must be above heartbeat_interval_s and at most 600, got " +
                      std::to_string(c.connection_timeout_s));
  if (c.data_plane != "auto" && c.data_plane != "ucx" && c.data_plane != "middleman" &&
      c.data_plane != "nccl")
    invalid(origin, "data_plane must be \"auto\", \"ucx\", \"middleman\" or \"nccl\", got " +
                      in_quotes(c.data_plane));
  if (c.nodes.empty())
    invalid(origin, "no [[node]]: a cluster needs a front node and nodes with prefill and decode ranks");
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const cluster_node& n = c.nodes[i];
    if (!valid_name(n.name))
      invalid(origin, "node[" + std::to_string(i) +
                        "]: name must be 1-64 characters of [A-Za-z0-9._-], got " + in_quotes(n.name));
    if (!seen.emplace(n.name, i).second)
      invalid(origin, "two nodes are named " + in_quotes(n.name));
    check_node(n, origin);
  }
  const auto fronts = std::count_if(c.nodes.begin(), c.nodes.end(),
                                    [](const cluster_node& n) { return n.front; });
  if (fronts != 1)
    invalid(origin, "exactly one node must be the front (front = true), got " + std::to_string(fronts));
  check_addresses(c, origin);
  if (total(c, &cluster_node::prefill_ranks) == 0)
    invalid(origin, "no node has prefill_ranks: the cluster needs at least one prefill rank");
  if (total(c, &cluster_node::decode_ranks) == 0)
    invalid(origin, "no node has decode_ranks: the cluster needs at least one decode rank");
  try {
    validate(c.topology);
  } catch (const input_error& e) {
    invalid(origin, e.what());
  }
}

void validate_cluster_for_model(const cluster_file& c, const model_config& model, std::string_view origin) {
  const int64_t slots = model.n_routed_experts + c.topology.redundant_experts;
  if (model.n_routed_experts == 0)
    return;
  for (const auto& [ranks, role] : {std::pair{&cluster_node::prefill_ranks, "prefill"},
                                    std::pair{&cluster_node::decode_ranks, "decode"}}) {
    const int64_t n = total(c, ranks);
    if (slots % n != 0)
      invalid(origin, std::to_string(n) + " " + role + " ranks (" + hosts_of(c, ranks) +
                        ") do not divide the model's " + std::to_string(model.n_routed_experts) +
                        " routed experts + " + std::to_string(c.topology.redundant_experts) +
                        " redundant slots = " + std::to_string(slots) +
                        ": each rank of an expert-parallel "
                        "group holds the same number of slots");
  }
}

const cluster_node& find_node(const cluster_file& c, std::string_view name) {
  for (const cluster_node& n : c.nodes)
    if (n.name == name)
      return n;
  std::string names;
  for (const cluster_node& n : c.nodes)
    names += (names.empty() ? "" : ", ") + n.name;
  throw input_error("unknown node " + in_quotes(name) + " (the cluster file names: " + names + ")");
}

const cluster_node& front_node(const cluster_file& c) {
  return *std::find_if(c.nodes.begin(), c.nodes.end(), [](const cluster_node& n) { return n.front; });
}

int64_t first_prefill_rank(const cluster_file& c, size_t i) {
  int64_t first = 0;
  for (size_t j = 0; j < i && j < c.nodes.size(); ++j)
    first += c.nodes[j].prefill_ranks;
  return first;
}

int64_t first_decode_rank(const cluster_file& c, size_t i) {
  int64_t first = 0;
  for (size_t j = 0; j < i && j < c.nodes.size(); ++j)
    first += c.nodes[j].decode_ranks;
  return first;
}

}  // namespace moe
