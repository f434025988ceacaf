#!/usr/bin/env bash
# Formats every C++ and CUDA file git tracks or would track with .clang-format (clang-format of Debian 12, 14.x).
# Usage: tools/format.sh [--check]   --check changes nothing and exits 1 if a file needs formatting.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v clang-format >/dev/null || { echo "format: clang-format not found (tools/setup.sh installs it)"; exit 2; }
# tracked files and new ones not ignored: a file added but not committed yet is formatted too
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' '*.cu' '*.cuh' '*.h')
if [ "${1:-}" = "--check" ]; then
  if ! clang-format --dry-run --Werror "${files[@]}" 2>/tmp/moe-format.$$; then
    grep -E '^[^ ].*: (error|warning):' /tmp/moe-format.$$ | cut -d: -f1 | sort -u | sed 's/^/format: needs formatting: /'
    rm -f /tmp/moe-format.$$
    echo "format: run tools/format.sh to fix"
    exit 1
  fi
  rm -f /tmp/moe-format.$$
  echo "format: ${#files[@]} files formatted"
else
  clang-format -i "${files[@]}"
fi
