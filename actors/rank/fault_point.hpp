// actors/rank/fault_point.hpp
// Deterministic fault injection for tests: a rank armed with a point crashes (an uncaught
// exception, as a bug would: the supervisor sees an abnormal exit) the next time it gets there,
// once. Where each point is:
//   dispatch      at the last MoE layer of a step with requests of the rank's own (an idle
//                 step's exchange does not count), instead of sending its dispatch to its peers
//                 (they wait for it inside the step);
//   combine       at the last MoE layer of such a step, instead of answering its peers' dispatches;
//   handoff       prefill: the session has the first token, the KV is not yet sent;
//                 decode: the KV hand-off has arrived and not yet joined;
//   first_decode  decode: a hand-off has joined (its KV is written), before its first step;
//   hang          at the last MoE layer of such a step, instead of sending its dispatch, the stream
//                 blocks until the rank stops (a kernel that never returns): the rank lives on
//                 and answers, makes no progress, and its peers wait for it inside the step.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace moe {

enum class fault_point : uint8_t { none, dispatch, combine, handoff, first_decode, hang };

[[nodiscard]] std::string_view to_string(fault_point p) noexcept;
/// "dispatch", "combine", "handoff", "first_decode", "hang"; nullopt for anything else.
[[nodiscard]] std::optional<fault_point> parse_fault_point(std::string_view name) noexcept;

/// What an armed rank throws at its fault point (all but hang).
struct injected_fault : std::runtime_error {
  explicit injected_fault(fault_point p)
      : std::runtime_error("fault injection: crashed at " + std::string(to_string(p))) {}
};

}  // namespace moe
