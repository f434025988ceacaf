#!/usr/bin/env bash
# The main job: set up and build (tools/setup.sh), make the default model on first run, then
# generate from a prompt. Extra arguments go to `moeserve generate` (e.g. --prompt "...").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash tools/setup.sh
model="${MOE_MODEL:-models/small-fp8}"
if [ ! -f "$model/config.json" ]; then
  echo "run: making the default model (small preset, FP8, random weights) in $model"
  build/tools/moeserve make-model --preset small --fp8 --seed 0 --out "$model"
fi
if [ $# -eq 0 ]; then
  set -- --chat --prompt "Explain mixture-of-experts models in one sentence." --max-tokens 64 \
         --temperature 0.7 --seed 1
fi
exec build/tools/moeserve generate --model "$model" "$@"
