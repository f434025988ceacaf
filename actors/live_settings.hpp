// actors/live_settings.hpp
// What a configurable actor (a balancer, the request queue) keeps of its live configuration
// (actors/policy/live_config.hpp) and the messages it answers for it:
//   (configure_atom, config_fields) -> versioned_config: a change, validated whole and applied
//     between two messages (so between two picks), raising the epoch; refused with
//     serve_errc::invalid naming the field, changing nothing;
//   (configure_atom, versioned_config): restores what an earlier instance had (its supervisor
//     sends it to a restarted actor before anyone else learns the new handle);
//   (config_atom) -> versioned_config: the settings now.
#pragma once

#include <caf/error.hpp>
#include <caf/replies_to.hpp>
#include <cstdio>
#include <string>
#include <utility>

#include "actors/atoms.hpp"
#include "actors/errors.hpp"
#include "actors/policy/live_config.hpp"

namespace moe {

/// A configurable actor's part of its typed interface.
using configure_change = caf::replies_to<configure_atom, config_fields>::with<versioned_config>;
using configure_restore = caf::reacts_to<configure_atom, versioned_config>;
using config_query = caf::replies_to<config_atom>::with<versioned_config>;

template <class Settings>
struct live_settings {
  std::string target;  // as the wire names it: "prefill_balancer", ...
  Settings now;        // as started (the topology's) until a change
  uint64_t epoch = 0;

  [[nodiscard]] versioned_config current() const { return {target, epoch, fields_of(now)}; }

  /// Applies `change` (or refuses it, naming the field).
  [[nodiscard]] caf::expected<versioned_config> configure(const config_fields& change) {
    auto next = changed(now, change);
    if (auto* err = std::get_if<std::string>(&next))
      return caf::make_error(serve_errc::invalid, std::move(*err));
    now = std::get<Settings>(std::move(next));
    ++epoch;
    return current();
  }

  /// Takes back an earlier instance's settings. They were accepted once, so they fit; should
  /// they not, the start-up settings stay and the reason is logged.
  void restore(const versioned_config& v) {
    auto back = changed(now, v.fields);
    if (auto* err = std::get_if<std::string>(&back)) {
      std::fprintf(stderr, "%s: could not restore configuration epoch %llu (%s): keeping the start-up one\n",
                   target.c_str(), static_cast<unsigned long long>(v.epoch), err->c_str());
      return;
    }
    now = std::get<Settings>(std::move(back));
    epoch = v.epoch;
  }
};

}  // namespace moe

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::config_fields)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::versioned_config)
