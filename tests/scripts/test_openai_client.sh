#!/usr/bin/env bash
# tests/scripts/test_openai_client.sh
# The official OpenAI client library (npm `openai`, installed by tools/setup.sh) under node
# against `moeserve serve`'s HTTP front on a tiny model: a completion equal to `moeserve
# generate`'s greedy text, a streamed chat joined equal to the whole one, models.list, and the
# error classes of a 401, a 404 model, a 400 and a 422.
# Run by CTest as: bash test_openai_client.sh <path-to-moeserve> <build-dir>
set -uo pipefail
moeserve=${1:?usage: test_openai_client.sh <moeserve> <build-dir>}
build=${2:?usage: test_openai_client.sh <moeserve> <build-dir>}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
module="$(cd "$build" && pwd)/npm/node_modules/openai"
if ! command -v node >/dev/null || [[ ! -f $module/package.json ]]; then
  echo "skipped: node or npm's openai (tools/setup.sh installs it in build/npm) is missing"
  exit 0
fi
source "$root/tests/scripts/serve_helpers.sh"

"$moeserve" make-model --preset tiny --seed 5 --out "$tmp/tiny" >/dev/null 2>&1 || fail "make-model"
flags=(--prefill-ranks 1 --decode-ranks 1 --kv-blocks 64 --page-size 16 --max-context 4096
       --dispatch-dtype fp32 --reference)
"$moeserve" generate --model "$tmp/tiny" "${flags[@]}" --prompt "The quick brown fox" --max-tokens 8 \
  --ignore-eos --temperature 0 >"$tmp/gen.out" 2>"$tmp/gen.err" || fail "moeserve generate: $(cat "$tmp/gen.err")"

MOESERVE_API_KEY=key-$$ start_server "$moeserve" --model "$tmp/tiny" "${flags[@]}" --log-stats-interval 0
timeout -k 5 120 node "$root/tests/scripts/openai_client_checks.cjs" "$module" "$http_port" "key-$$" tiny \
  "$tmp/gen.out" || fail "the OpenAI client's checks"
stop_server
