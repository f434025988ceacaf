#!/usr/bin/env bash
# Runs clang-tidy (.clang-tidy) over C++ sources, using build/compile_commands.json (tools/setup.sh
# writes it). Usage:
#   tools/lint.sh                 the .cpp files changed against HEAD (staged, unstaged, untracked)
#   tools/lint.sh --base REV      the .cpp files changed since REV
#   tools/lint.sh DIR|FILE ...    every tracked .cpp file under those paths (CI: actors net)
# Exits 1 if any file has a finding.
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
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
printf '%s\n' "${files[@]}" | xargs -P "${MOE_LINT_JOBS:-2}" -n 1 clang-tidy -p build --quiet >"$log" 2>&1 || status=1
grep -E '(warning|error):' "$log" | grep -v 'warnings generated' || true
if [ $status -ne 0 ]; then
  echo "lint: findings in ${#files[@]} files checked (full log above)"
  exit 1
fi
echo "lint: ${#files[@]} files clean"
