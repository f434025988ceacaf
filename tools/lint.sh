#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy) over C++ sources, using build/compile_commands.json (tools/setup.sh
# writes it). Usage:
#   tools/lint.sh                 the .cpp files changed against HEAD (staged, unstaged, untracked)
#   tools/lint.sh --base REV      the .cpp files changed since REV
#   tools/lint.sh DIR|FILE ...    every tracked .cpp file under those paths (CI: actors net)
# Exits 1 if any file has a finding. Clean results are cached per translation unit (MOE_CACHE_DIR).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
command -v clang-tidy >/dev/null || { echo "lint: clang-tidy not found (tools/setup.sh installs it)"; exit 2; }
[ -f build/compile_commands.json ] || { echo "lint: build/compile_commands.json missing: run tools/setup.sh"; exit 2; }
if [ "${1:-}" = "--base" ]; then
  mapfile -t files < <(git diff --name-only --diff-filter=d "$2" -- '*.cpp')
elif [ $# -gt 0 ]; then
  mapfile -t files < <(git ls-files -- "$@" | grep -E '\.cpp$')
else
  mapfile -t files < <({ git diff --name-only --diff-filter=d HEAD -- '*.cpp'
                         git ls-files --others --exclude-standard -- '*.cpp'; } | sort -u)
fi
# only files the build compiles (the CUDA-only and fuzz sources are not in a CPU build's database)
mapfile -t files < <(for f in "${files[@]}"; do grep -q "\"file\": \"$PWD/$f\"" build/compile_commands.json && echo "$f"; done)
if [ ${#files[@]} -eq 0 ]; then
  echo "lint: no files to check"
  exit 0
fi
# a file whose preprocessed source was found clean before is not checked again (tools/lint_cached.py)
exec /usr/bin/python3 tools/lint_cached.py "${MOE_LINT_JOBS:-2}" "${files[@]}"
