// tools/ctl.cpp
// `moeserve ctl`: an operator's live changes to a running `moeserve serve`, over an admin
// connection (MessagePack-RPC, net/admin_config.hpp):
//   ctl get [TARGET]                 admin.config (one target's, or all)
//   ctl set TARGET KEY=VALUE...      admin.configure
//   ctl apply FILE.toml              admin.configure once per table, in the file's order
//   ctl drain|undrain ROLE RANK      admin.drain / admin.undrain
//   ctl expert-load [--out FILE]     admin.expert_load's matrix (what eplb-plan --load reads)
//   ctl rebalance [--role ROLE]      admin.rebalance: plan and install expert placements now
// Replies print as JSON; a refusal is "error: <code> <message>" and exit status 2.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "config/model_config.hpp"
#include "tools/commands.hpp"
#include "tools/ctl_values.hpp"
#include "tools/wire_client.hpp"

namespace moe::tools {
namespace {

constexpr auto call_timeout = std::chrono::seconds(30);

struct ctl_options {
  std::string host = "127.0.0.1";
  int port = 8765;
  std::string admin_key;
  std::string target;
  std::vector<std::string> assignments;
  std::string file;
  std::string role;
  int64_t rank = 0;
  std::string out;
  std::string group = "all";
};

// An admin connection: authenticated with the admin key when there is one.
class admin_connection {
 public:
  explicit admin_connection(const ctl_options& o) : client_(o.host, static_cast<uint16_t>(o.port)) {
    if (!o.admin_key.empty())
      static_cast<void>(call("auth", [&](auto& pk) { pk.pack_array(1).pack(o.admin_key); }));
  }

  // The result of `method` with params packed by `params`; throws input_error for an error reply.
  template <class Params>
  nlohmann::json call(std::string_view method, Params&& params) {
    const uint32_t id = next_id_++;
    msgpack::sbuffer frame;
    msgpack::packer<msgpack::sbuffer> pk(frame);
    pk.pack_array(4).pack(0).pack(id).pack(method);
    params(pk);
    const net::rpc_response r = client_.call(frame, id, call_timeout);
    if (!r.error.is_nil()) {
      const nlohmann::json e = to_json(r.error);
      throw input_error(std::string(method) + ": " + (e.contains("code") ? e["code"].dump() + " " : "") +
                        (e.contains("message") ? e["message"].get<std::string>() : e.dump()));
    }
    return to_json(r.result);
  }
  nlohmann::json call(std::string_view method) {
    return call(method, [](auto& pk) { pk.pack_array(0); });
  }

 private:
  wire_client client_;
  uint32_t next_id_ = 1;
};

void print(const nlohmann::json& j) { std::printf("%s\n", j.dump().c_str()); }

void run_get(const ctl_options& o) {
  admin_connection c(o);
  const nlohmann::json all = c.call("admin.config");
  if (o.target.empty())
    return print(all);
  if (!all.contains(o.target))
    throw input_error("get: no target " + o.target + " (the server has: " + [&] {
      std::string names;
      for (const auto& [name, fields] : all.items())
        names += (names.empty() ? "" : ", ") + name;
      return names;
    }() + ")");
  print(all[o.target]);
}

void run_set(const ctl_options& o) {
  target_change change{o.target, {}};
  for (const std::string& a : o.assignments)
    change.fields.push_back(parse_assignment(a));
  admin_connection c(o);
  print(c.call("admin.configure", [&](auto& pk) { pack_change(pk, change); }));
}

void run_apply(const ctl_options& o) {
  std::ifstream in(o.file, std::ios::binary);
  if (!in)
    throw input_error("apply: cannot open " + o.file);
  std::ostringstream text;
  text << in.rdbuf();
  const std::vector<target_change> changes = parse_config_toml(text.str(), o.file);
  admin_connection c(o);
  for (const target_change& change : changes)  // each applied whole; a refusal stops the rest
    print(c.call("admin.configure", [&](auto& pk) { pack_change(pk, change); }));
}

void run_drain(const ctl_options& o, bool drain) {
  admin_connection c(o);
  print(c.call(drain ? "admin.drain" : "admin.undrain", [&](auto& pk) {
    pk.pack_array(1).pack_map(2).pack("role").pack(o.role).pack("rank").pack(o.rank);
  }));
}

void run_expert_load(const ctl_options& o) {
  admin_connection c(o);
  const nlohmann::json all = c.call("admin.expert_load");
  const nlohmann::json& load = o.group == "all" ? all["load"] : all[o.group]["load"];
  if (o.out.empty())
    return print(load);
  std::ofstream out(o.out, std::ios::binary);
  if (!out)
    throw input_error("--out: cannot write " + o.out);
  out << load.dump() << "\n";
  std::fprintf(stderr, "ctl: wrote %zu layers x %zu experts over %lld steps to %s\n", load.size(),
               load.empty() ? size_t{0} : load[0].size(),
               static_cast<long long>(all.value("window_steps", int64_t{0})), o.out.c_str());
}

void run_rebalance(const ctl_options& o) {
  admin_connection c(o);
  print(c.call("admin.rebalance", [&](auto& pk) {
    if (o.role.empty())
      pk.pack_array(0);
    else
      pk.pack_array(1).pack_map(1).pack("role").pack(o.role);
  }));
}

}  // namespace

void add_ctl(CLI::App& app) {
  auto o = std::make_shared<ctl_options>();
  CLI::App* ctl = app.add_subcommand("ctl", "Change a running server's balancers and queue live (admin)");
  ctl->require_subcommand(1);
  ctl->add_option("--host", o->host, "Server address")->capture_default_str();
  ctl->add_option("--port", o->port, "Server MessagePack-RPC port")->capture_default_str();
  ctl->add_option("--admin-key", o->admin_key, "The server's --admin-key; env MOESERVE_ADMIN_KEY")
    ->envname("MOESERVE_ADMIN_KEY");

  CLI::App* get = ctl->add_subcommand("get", "Print the configuration (every target's, or one's) as JSON");
  get->add_option("target", o->target, "prefill_balancer, decode_balancer, expert_balancer or request_queue");
  get->callback([o] { run_get(*o); });

  CLI::App* set = ctl->add_subcommand("set", "Change fields of one target, all or none");
  set->add_option("target", o->target, "prefill_balancer, decode_balancer, expert_balancer or request_queue")
    ->required();
  set->add_option("fields", o->assignments, "KEY=VALUE (true, 3, 0.5, 1,2 or a word)")->required();
  set->callback([o] { run_set(*o); });

  CLI::App* apply = ctl->add_subcommand("apply", "Apply a TOML file: one table per target, in order");
  apply->add_option("file", o->file, "e.g. [decode_balancer] policy = \"round_robin\"")->required();
  apply->callback([o] { run_apply(*o); });

  for (const bool drain : {true, false}) {
    CLI::App* d = ctl->add_subcommand(drain ? "drain" : "undrain",
                                      drain ? "Send a rank no new work (its running work finishes)"
                                            : "Let a drained rank take new work again");
    d->add_option("role", o->role, "prefill or decode")->required();
    d->add_option("rank", o->rank, "The rank's index in its role")->required();
    d->callback([o, drain] { run_drain(*o, drain); });
  }

  CLI::App* load = ctl->add_subcommand("expert-load", "Write the routed-token matrix eplb-plan --load reads");
  load->add_option("--out", o->out, "JSON file (default: stdout)");
  load->add_option("--group", o->group, "Whose: all, prefill or decode")
    ->check(CLI::IsMember({"all", "prefill", "decode"}))
    ->capture_default_str();
  load->callback([o] { run_expert_load(*o); });

  CLI::App* rebalance = ctl->add_subcommand(
    "rebalance", "Have the expert balancers plan from the routed load and move experts now");
  rebalance->add_option("--role", o->role, "Only this group's: prefill or decode")
    ->check(CLI::IsMember({"prefill", "decode"}));
  rebalance->callback([o] { run_rebalance(*o); });
}

}  // namespace moe::tools
