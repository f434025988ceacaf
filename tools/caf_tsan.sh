#!/usr/bin/env bash
# Builds CAF 0.17.6 (core and io) from Debian's source package with ThreadSanitizer into
# build-caf-tsan/install, for the tsan preset. Debian's libcaf is not instrumented, so TSan cannot
# see the synchronisation inside it (mailbox enqueue, scheduler queues) and reports every message
# handed between threads as a race; an instrumented CAF sees it. Idempotent; about 5 min on 2 cores.
# It is built once per machine, not once per checkout: build-caf-tsan links to
# $MOE_CACHE_DIR/caf-tsan-0.17.6 (default ~/.cache/moeserve), as ccache keeps compiled objects.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/build-caf-tsan"
if [ ! -e "$out" ]; then
  cache="${MOE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/moeserve}/caf-tsan-0.17.6"
  if mkdir -p "$cache" 2>/dev/null; then
    ln -s "$cache" "$out"
  else
    mkdir -p "$out"
  fi
fi
[ -f "$out/install/lib/libcaf_core.so" ] && [ -f "$out/install/lib/libcaf_io.so" ] && exit 0
mkdir -p "$out/src"
cd "$out/src"
if [ ! -f actor-framework_0.17.6.orig.tar.gz ]; then
  echo "caf_tsan: fetching CAF 0.17.6's source from Debian's archive"
  # a deb-src twin of the machine's Debian sources, used for this one download only
  sed 's/^Types: deb$/Types: deb-src/' /etc/apt/sources.list.d/debian.sources >"$out/debsrc.sources"
  apt_opts=(-o Dir::Etc::sourcelist="$out/debsrc.sources" -o Dir::Etc::sourceparts=-
            -o Dir::State::Lists="$out/apt-lists" -o APT::Sandbox::User=root)
  mkdir -p "$out/apt-lists/partial"
  apt-get update -qq "${apt_opts[@]}"
  # the orig tarball is all that is built; the Debian packaging files are not needed
  apt-get source --download-only -qq "${apt_opts[@]}" actor-framework=0.17.6-2.1 2>/dev/null || true
  [ -f actor-framework_0.17.6.orig.tar.gz ] || { echo "caf_tsan: could not fetch actor-framework_0.17.6.orig.tar.gz"; exit 1; }
fi
# the checksum Debian's actor-framework_0.17.6-2.1.dsc lists for it
echo "e2bf5bd243f08bb7d8adde197cfe3e6d71314ed3378fe0692f8932f4c3b3928c  actor-framework_0.17.6.orig.tar.gz" |
  sha256sum --check --quiet
rm -rf actor-framework-0.17.6
tar xzf actor-framework_0.17.6.orig.tar.gz
# CAF 0.17.6 predates GCC 12, whose <cstring> and <memory> no longer pull in <limits>
sed -i '0,/#include <memory>/s//#include <limits>\n#include <memory>/' \
  actor-framework-0.17.6/libcaf_io/caf/io/network/receive_buffer.hpp
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
echo "caf_tsan: building CAF 0.17.6 core and io with -fsanitize=thread"
cmake -S actor-framework-0.17.6 -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_INSTALL_PREFIX="$out/install" \
  -DCAF_NO_EXAMPLES=ON -DCAF_NO_UNIT_TESTS=ON -DCAF_NO_OPENSSL=ON -DCAF_NO_TOOLS=ON \
  -DCAF_NO_PYTHON=ON -DCAF_NO_OPENCL=ON -DCAF_NO_SUMMARY=ON -DCAF_NO_COMPILER_CHECK=ON >"$out/build.log" 2>&1
cmake --build build -j "${MOE_BUILD_JOBS:-2}" >>"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; exit 1; }
cmake --install build >>"$out/build.log" 2>&1
