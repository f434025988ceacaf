// actors/errors.hpp
// Serving errors carried as caf::error values (category "moe"); the wire API maps them to its
// HTTP-like codes (429 overloaded, 400/422 invalid, 499 cancelled, 503 unavailable).
#pragma once

#include <caf/error.hpp>
#include <caf/fwd.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>
#include <cstdint>
#include <string>

namespace moe {

enum class serve_errc : uint8_t {
  none = 0,
  overloaded,   // a bounded queue is full: retry later
  invalid,      // the request fails validation
  cancelled,    // the client cancelled
  unavailable,  // no rank can take the request now
  crash_loop,   // a supervised actor died more often than its restart limits allow
  refused,      // a peer node without the cluster's name and token
};

[[nodiscard]] std::string to_string(serve_errc x);

/// The text a serve error was made with (make_error(code, "text")); empty when it has none.
[[nodiscard]] std::string error_text(const caf::error& e);

/// Lets the actor system render "moe" errors (sys.render) as "moe: overloaded" and the like.
void add_serve_error_category(caf::actor_system_config& cfg);

}  // namespace moe

CAF_ERROR_CODE_ENUM(moe::serve_errc, "moe")
