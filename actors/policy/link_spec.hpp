// actors/policy/link_spec.hpp
// One class of link between ranks (intra-node or inter-node): a fixed latency plus a bandwidth.
#pragma once

namespace moe {

/// Latency in microseconds; bandwidth in GB/s (1e9 bytes/s), 0 = unlimited.
struct link_spec { double latency_us = 0.0; double bandwidth_gb_s = 0.0; };

}  // namespace moe
