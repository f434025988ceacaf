#!/usr/bin/env bash
# The tests: set up and build (tools/setup.sh), then every test under CTest. Extra arguments go
# to ctest (e.g. -R tokenizer).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
MOE_BUILD_JOBS="${MOE_BUILD_JOBS:-2}" bash tools/setup.sh
ctest --test-dir build --output-on-failure -j2 --timeout 600 "$@"
