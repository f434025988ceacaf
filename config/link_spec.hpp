// config/link_spec.hpp
// One class of link between ranks (intra-node or inter-node) in the link model.
#pragma once

namespace moe {

/// A fixed latency per message plus size / bandwidth; bandwidth in GB/s (1e9 bytes/s), 0 = unlimited.
struct link_spec {
  double latency_us = 0.0;
  double bandwidth_gb_s = 0.0;
  bool operator==(const link_spec&) const = default;
};

}  // namespace moe
