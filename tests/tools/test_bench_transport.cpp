// tests/tools/test_bench_transport.cpp
// `moeserve bench-transport --engine ucx` runs between two processes over shared memory and TCP:
// the tool checks every acknowledgement's checksum against the bytes it sent and exits non-zero
// on a mismatch, so a zero exit with a row per transport means the bytes arrived.
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "tools/transport_ucx.hpp"

namespace {

struct run_result {
  int status = -1;
  std::string out;
};

run_result run(const std::string& command) {
  run_result r;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  for (size_t n = 0; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;)
    r.out.append(buf, n);
  const int status = pclose(pipe);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1))
    ++n;
  return n;
}

}  // namespace

TEST_CASE("bench-transport --engine ucx: checked messages over shared memory and TCP") {
  const std::string moeserve = MOE_BINARY_DIR "/tools/moeserve";
  if (!moe::tools::ucx_built()) {
    MESSAGE("skipped: built without UCX (libucx-dev)");
    return;
  }
  if (!std::filesystem::exists(moeserve)) {
    MESSAGE("skipped: " << moeserve << " is not built");
    return;
  }
  const run_result r = run("timeout 60 " + moeserve +
                           " bench-transport --engine ucx --ucx-tls sm --ucx-tls tcp --sizes 4096,40000"
                           " --iters 3 --window 2 2>&1");
  INFO(r.out);
  CHECK(r.status == 0);
  CHECK(count(r.out, "UCX_TLS=sm") == 1);
  CHECK(count(r.out, "UCX_TLS=tcp") == 1);
  CHECK(count(r.out, "\n        4096 ") == 2);  // one row per transport
  CHECK(count(r.out, "\n       40000 ") == 2);
  CHECK(count(r.out, "middleman") == 0);
}
