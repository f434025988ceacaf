#!/usr/bin/env python3
"""Gather llama-debug runs into tests/reference/llama_cpp_vectors.json (see compare.sh vectors).

  write_vectors.py SOURCE MODEL_DIR RUN_DIR [MODEL_DIR RUN_DIR ...]  > llama_cpp_vectors.json

RUN_DIR holds llama-debug --save-logits output (llamacpp-*.bin, *-tokens.bin), greedy.json
(tools/llama_cpp/greedy.cpp on the same ids), prompt.txt and make_model.txt (the make-model
flags, one a line). Each case keeps the checkpoint's sha256 so
that the test tells a changed generator apart from a changed forward pass.
"""
import glob
import hashlib
import json
import sys

import numpy as np


def case(model, run):
    sha = hashlib.sha256()
    for f in sorted(glob.glob(f"{model}/*.safetensors")):
        with open(f, "rb") as fh:
            sha.update(fh.read())
    tokens = np.fromfile(glob.glob(f"{run}/*-tokens.bin")[0], dtype=np.int32)
    logits_file = [p for p in glob.glob(f"{run}/llamacpp-*.bin") if not p.endswith("-tokens.bin")][0]
    logits = np.fromfile(logits_file, dtype=np.float32)
    greedy = json.load(open(f"{run}/greedy.json"))
    if greedy["prompt"] != tokens.tolist():
        raise SystemExit(f"write_vectors: {run}: greedy.json ran another prompt")
    return {"make_model": open(f"{run}/make_model.txt").read().split(),
            "safetensors_sha256": sha.hexdigest(),
            "prompt": open(f"{run}/prompt.txt", encoding="utf-8").read(),
            "tokens": tokens.tolist(),
            "last_logits": [float(f"{x:.9g}") for x in logits.tolist()],
            "greedy_tokens": greedy["tokens"],
            "greedy_logprobs": greedy["logprobs"]}


def main():
    source, pairs = sys.argv[1], sys.argv[2:]
    out = {"source": f"{source}: llama-debug -ctk f32 -ctv f32 -fa off --save-logits on the f32 GGUF written "
                     "by tools/llama_cpp/export_gguf.py; regenerate with tools/llama_cpp/compare.sh vectors",
           "cases": [case(pairs[i], pairs[i + 1]) for i in range(0, len(pairs), 2)]}
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
