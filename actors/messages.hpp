// actors/messages.hpp
// Plain structs carried by actor messages.
#pragma once

#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <vector>

#include "kernels/sampling/sampler.hpp"

namespace moe {

/// What a client asks for, once validated at the boundary.
struct request_spec {
  std::vector<int32_t> prompt_ids;
  sampling_params sampling;
};

/// The request queue's counters.
struct queue_stats {
  int64_t num_queued = 0;                   // admitted, waiting for a running slot
  int64_t num_running = 0;                  // handed downstream, not done yet
  int64_t num_admitted = 0;                 // since start
  int64_t num_rejected = 0;                 // answered "overloaded"
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, queue_stats& x) {
  return f(caf::meta::type_name("queue_stats"), x.num_queued, x.num_running, x.num_admitted,
           x.num_rejected);
}

}  // namespace moe

// In-process only for now; a serializable form comes with multi-process ranks.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(moe::request_spec)
