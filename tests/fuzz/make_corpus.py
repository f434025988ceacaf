#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_rpc: valid MessagePack-RPC frames (tests/fuzz/corpus/).

Each file is one byte that picks how the fuzzer splits the stream (1 + byte % 64 bytes a
piece), then the frames. Needs python3-msgpack (Debian's, in /usr/bin/python3):
    /usr/bin/python3 tests/fuzz/make_corpus.py
"""
import pathlib

import msgpack


def request(msgid, method, params):
    return msgpack.packb([0, msgid, method, params])


def notification(method, params):
    return msgpack.packb([2, method, params])


def generate(msgid, **fields):
    return request(msgid, "generate", [fields])


SEEDS = {
    "generate_prompt": generate(1, prompt="The capital of France is", max_tokens=16),
    "generate_chat": generate(2, messages=[{"role": "system", "content": "Be brief."},
                                           {"role": "user", "content": "Hi \u00e9\u4e16"}],
                              stream=True),
    "generate_ids": generate(3, input_ids=[0, 5, 17, 128000], max_tokens=4),
    "generate_all_sampling": generate(
        4, prompt="x", max_tokens=8, temperature=0.7, top_p=0.9, top_k=40, min_p=0.05,
        seed=1234, stop=["\n", "END"], stop_token_ids=[1, 2], presence_penalty=0.5,
        frequency_penalty=-0.5, repetition_penalty=1.1, ignore_eos=False, logprobs=5,
        stream=True, n=1, model="deepseek-v3"),
    "generate_nil_fields": generate(5, prompt="y", temperature=None, stop="###", seed=None),
    "pipelined": (request(10, "health", []) + notification("cancel", [10]) +
                  generate(11, prompt="z") + request(12, "stats", [])),
    "tokenize": request(20, "tokenize", ["hello world"]),
    "detokenize": request(21, "detokenize", [[1, 2, 3]]),
    "cancel": request(22, "cancel", [2]),
    "models_ready": request(23, "models", []) + request(24, "ready", []),
    "response": msgpack.packb([1, 30, None, {"text": "ok", "output_ids": [1, 2]}]),
    "error_response": msgpack.packb([1, 31, {"code": 429, "type": "overloaded", "message": "full",
                                             "retryable": True, "retry_after_ms": 100}, None]),
    "token_notification": notification("token", [2, 0, [17, 18], "he"]),
    "large_msgid": request(0xFFFFFFFF, "health", []),
    "auth": request(25, "auth", ["k"]) + request(26, "auth", ["admin"]) + generate(27, prompt="w"),
}


def main():
    out = pathlib.Path(__file__).resolve().parent / "corpus"
    out.mkdir(exist_ok=True)
    for i, (name, frames) in enumerate(sorted(SEEDS.items())):
        split = bytes([(i * 7) % 64])   # a different piece size per seed
        (out / name).write_bytes(split + frames)


if __name__ == "__main__":
    main()
