// actors/policy/live_config.cpp
#include "actors/policy/live_config.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace moe {

namespace {

using maybe_error = std::optional<std::string>;

// Limits that keep every field far from overflow and from nonsense.
constexpr double max_weight = 1e6;
constexpr int64_t max_limit = 1'000'000;
constexpr int64_t max_steps = 10'000'000;

std::string kind_of(const config_value& v) {
  switch (v.index()) {
    case 0: return "a boolean";
    case 1: return "an integer";
    case 2: return "a number";
    case 3: return "a string";
    default: return "a list";
  }
}

std::string expected(const config_field& f, const std::string& what) {
  return f.key + ": expected " + what + ", got " + kind_of(f.value) + " (" + to_string(f.value) + ")";
}

maybe_error read_real(const config_field& f, double lo, double hi, double& out) {
  double v = 0.0;
  if (const auto* i = std::get_if<int64_t>(&f.value))
    v = static_cast<double>(*i);
  else if (const auto* d = std::get_if<double>(&f.value))
    v = *d;
  else
    return expected(f, "a number");
  if (!std::isfinite(v) || v < lo || v > hi)
    return f.key + ": expected a number from " + to_string(lo) + " to " + to_string(hi) + ", got " +
           to_string(v);
  out = v;
  return std::nullopt;
}

maybe_error read_int(const config_field& f, int64_t lo, int64_t hi, int64_t& out) {
  const auto* i = std::get_if<int64_t>(&f.value);
  if (i == nullptr)
    return expected(f, "an integer");
  if (*i < lo || *i > hi)
    return f.key + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi) +
           ", got " + std::to_string(*i);
  out = *i;
  return std::nullopt;
}

maybe_error read_choice(const config_field& f, std::initializer_list<std::string_view> choices,
                        std::string& out) {
  std::string names;
  for (std::string_view c : choices)
    names += (names.empty() ? "" : ", ") + std::string(c);
  const auto* s = std::get_if<std::string>(&f.value);
  if (s == nullptr)
    return expected(f, "one of " + names);
  if (std::find(choices.begin(), choices.end(), *s) == choices.end())
    return f.key + ": expected one of " + names + ", got \"" + *s + "\"";
  out = *s;
  return std::nullopt;
}

maybe_error unknown_key(const config_field& f, std::string_view known) {
  return f.key + ": unknown key (" + std::string(known) + ")";
}

// "drained" (the whole list), "drain" or "undrain" (one rank); `handled` when the key is one.
maybe_error read_drain(const config_field& f, int64_t num_ranks, std::vector<int64_t>& drained,
                       bool& handled) {
  handled = f.key == "drained" || f.key == "drain" || f.key == "undrain";
  if (!handled)
    return std::nullopt;
  if (f.key == "drained") {
    const auto* list = std::get_if<std::vector<int64_t>>(&f.value);
    if (list == nullptr)
      return expected(f, "a list of rank indices");
    std::vector<int64_t> ranks = *list;
    for (const int64_t r : ranks)
      if (r < 0 || r >= num_ranks)
        return f.key + ": rank " + std::to_string(r) + " is not one of 0.." + std::to_string(num_ranks - 1);
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    drained = std::move(ranks);
    return std::nullopt;
  }
  int64_t r = 0;
  if (maybe_error err = read_int(f, 0, num_ranks - 1, r))
    return err;
  const auto at = std::lower_bound(drained.begin(), drained.end(), r);
  const bool present = at != drained.end() && *at == r;
  if (f.key == "drain" && !present)
    drained.insert(at, r);
  else if (f.key == "undrain" && present)
    drained.erase(at);
  return std::nullopt;
}

maybe_error check_some_rank_works(const std::vector<int64_t>& drained, int64_t num_ranks) {
  if (static_cast<int64_t>(drained.size()) >= num_ranks)
    return std::string("drained: every rank would be drained; at least one must take new work");
  return std::nullopt;
}

config_value ranks_value(const std::vector<int64_t>& ranks) { return ranks; }

}  // namespace

std::string to_string(const config_value& v) {
  struct {
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const {
      std::string s = std::to_string(d);  // fixed, 6 decimals: trim the zeros
      s.erase(s.find_last_not_of('0') + 1);
      if (!s.empty() && s.back() == '.')
        s.pop_back();
      return s;
    }
    std::string operator()(const std::string& s) const { return "\"" + s + "\""; }
    std::string operator()(const std::vector<int64_t>& list) const {
      std::string s = "[";
      for (size_t i = 0; i < list.size(); ++i)
        s += (i ? ", " : "") + std::to_string(list[i]);
      return s + "]";
    }
  } text;
  return std::visit(text, v);
}

bool takes_work(const std::vector<int64_t>& drained, int64_t r) {
  return !std::binary_search(drained.begin(), drained.end(), r);
}

std::variant<prefill_balancer_settings, std::string> changed(const prefill_balancer_settings& s,
                                                             const config_fields& change) {
  prefill_balancer_settings out = s;
  for (const config_field& f : change) {
    bool drain = false;
    maybe_error err = read_drain(f, out.num_ranks, out.drained, drain);
    if (drain) {
    } else if (f.key == "policy") {
      err = read_choice(f, {"deepseek", "least_tokens", "round_robin"}, out.policy);
    } else if (f.key == "attention_weight") {
      err = read_real(f, 0.0, max_weight, out.attention_weight);
    } else if (f.key == "token_weight") {
      err = read_real(f, 0.0, max_weight, out.token_weight);
    } else {
      err = unknown_key(f, "policy, attention_weight, token_weight, drained, drain, undrain");
    }
    if (err)
      return *err;
  }
  if (maybe_error err = check_some_rank_works(out.drained, out.num_ranks))
    return *err;
  if (out.attention_weight == 0.0 && out.token_weight == 0.0)
    return std::string("token_weight: attention_weight and token_weight are both 0; one must weigh");
  return out;
}

std::variant<decode_balancer_settings, std::string> changed(const decode_balancer_settings& s,
                                                            const config_fields& change) {
  decode_balancer_settings out = s;
  for (const config_field& f : change) {
    bool drain = false;
    maybe_error err = read_drain(f, out.num_ranks, out.drained, drain);
    if (drain) {
    } else if (f.key == "policy") {
      err = read_choice(f, {"deepseek", "power_of_two", "round_robin"}, out.policy);
    } else if (f.key == "kv_weight") {
      err = read_real(f, 0.0, max_weight, out.kv_weight);
    } else if (f.key == "request_weight") {
      err = read_real(f, 0.0, max_weight, out.request_weight);
    } else if (f.key == "seed") {
      err = read_int(f, 0, INT64_MAX, out.seed);
    } else {
      err = unknown_key(f, "policy, kv_weight, request_weight, seed, drained, drain, undrain");
    }
    if (err)
      return *err;
  }
  if (maybe_error err = check_some_rank_works(out.drained, out.num_ranks))
    return *err;
  if (out.kv_weight == 0.0 && out.request_weight == 0.0)
    return std::string("request_weight: kv_weight and request_weight are both 0; one must weigh");
  return out;
}

std::variant<request_queue_settings, std::string> changed(const request_queue_settings& s,
                                                          const config_fields& change) {
  request_queue_settings out = s;
  for (const config_field& f : change) {
    maybe_error err;
    if (f.key == "max_queued")
      err = read_int(f, 1, max_limit, out.max_queued);
    else if (f.key == "max_running")
      err = read_int(f, 1, max_limit, out.max_running);
    else
      err = unknown_key(f, "max_queued, max_running");
    if (err)
      return *err;
  }
  return out;
}

config_fields fields_of(const prefill_balancer_settings& s) {
  return {{"policy", s.policy},
          {"attention_weight", s.attention_weight},
          {"token_weight", s.token_weight},
          {"drained", ranks_value(s.drained)}};
}

config_fields fields_of(const decode_balancer_settings& s) {
  return {{"policy", s.policy},
          {"kv_weight", s.kv_weight},
          {"request_weight", s.request_weight},
          {"seed", s.seed},
          {"drained", ranks_value(s.drained)}};
}

std::variant<expert_balancer_settings, std::string> changed(const expert_balancer_settings& s,
                                                            const config_fields& change) {
  expert_balancer_settings out = s;
  for (const config_field& f : change) {
    maybe_error err;
    if (f.key == "policy") {
      err = read_choice(f, {"hierarchical", "global", "off"}, out.policy);
    } else if (f.key == "interval_steps") {
      err = read_int(f, 0, max_steps, out.interval_steps);
    } else if (f.key == "window_steps") {
      err = read_int(f, 1, max_steps, out.window_steps);
    } else if (f.key == "redundant_experts") {
      err = read_int(f, 0, out.num_logical, out.redundant_experts);
    } else if (f.key == "minimal_movement") {
      if (const auto* b = std::get_if<bool>(&f.value))
        out.minimal_movement = *b;
      else
        err = expected(f, "true or false");
    } else {
      err = unknown_key(f, "policy, interval_steps, window_steps, redundant_experts, minimal_movement");
    }
    if (err)
      return *err;
  }
  return out;
}

config_fields fields_of(const expert_balancer_settings& s) {
  return {{"policy", s.policy},
          {"interval_steps", s.interval_steps},
          {"window_steps", s.window_steps},
          {"redundant_experts", s.redundant_experts},
          {"minimal_movement", s.minimal_movement}};
}

config_fields fields_of(const request_queue_settings& s) {
  return {{"max_queued", s.max_queued}, {"max_running", s.max_running}};
}

}  // namespace moe
