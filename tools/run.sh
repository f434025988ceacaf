#!/usr/bin/env bash
# The main job: set up and build (tools/setup.sh), make the default model on first run, then
# serve it: `moeserve serve` (2 prefill + 2 decode ranks, MessagePack-RPC on 127.0.0.1:8765).
# Extra arguments go to `moeserve serve` (e.g. --port 9000 --decode-ranks 4); with `generate`
# first, they go to `moeserve generate` instead (one prompt through the same cluster).
# MOE_MODEL=DIR serves another checkpoint directory (default models/small-fp8, made if missing).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash tools/setup.sh
model="${MOE_MODEL:-models/small-fp8}"
if [ ! -f "$model/config.json" ]; then
  echo "run: making the default model (small preset, FP8, random weights) in $model"
  build/tools/moeserve make-model --preset small --fp8 --seed 0 --out "$model"
fi
if [ "${1:-}" = generate ]; then
  shift
  if [ $# -eq 0 ]; then
    set -- --chat --prompt "Explain mixture-of-experts models in one sentence." --max-tokens 64 \
           --temperature 0.7 --seed 1
  fi
  exec build/tools/moeserve generate --model "$model" "$@"
fi
exec build/tools/moeserve serve --model "$model" "$@"
