// tests/config/error_of.hpp
// The message of the input_error a call throws, for the config tests.
#pragma once

#include <doctest/doctest.h>

#include <functional>
#include <string>

#include "config/model_config.hpp"

namespace moe::testing {

/// The message of the input_error `fn` throws; fails the test when it throws nothing.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const input_error& e) {
    return e.what();
  }
  FAIL("expected an input_error");
  return {};
}

}  // namespace moe::testing
