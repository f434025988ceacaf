#!/usr/bin/python3
"""A MessagePack-RPC client for `moeserve serve`, using only Debian's python3-msgpack.

Sends one streaming `generate` (after `auth` when given a key), prints the text as "token"
notifications arrive, then the finish reason and token counts on stderr. Run it with Debian's
Python (/usr/bin/python3):

    /usr/bin/python3 tools/example_client.py --port 8765 --max-tokens 32 "Hello"
    MOESERVE_API_KEY=... /usr/bin/python3 tools/example_client.py "Hello"   # or --api-key KEY
"""
import argparse
import os
import socket
import sys

import msgpack

REQUEST, RESPONSE, NOTIFICATION = 0, 1, 2
AUTH_MSGID = 0


def generate(sock, msgid, params, api_key=None):
    """Yields ("token", text_delta) for each streamed chunk, then ("result", result_map).

    With api_key, an `auth` request goes first on the connection (pipelined: the server answers
    it before it reads the generate)."""
    if api_key:
        sock.sendall(msgpack.packb([REQUEST, AUTH_MSGID, "auth", [api_key]], use_bin_type=True))
    sock.sendall(msgpack.packb([REQUEST, msgid, "generate", [params]], use_bin_type=True))
    unpacker = msgpack.Unpacker(raw=False)
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("the server closed the connection")
        unpacker.feed(data)
        for message in unpacker:
            if message[0] == NOTIFICATION and message[1] == "token" and message[2][0] == msgid:
                yield "token", message[2][3]
            elif message[0] == NOTIFICATION and message[1] == "error":
                raise RuntimeError("server: %s" % message[2][0])
            elif message[0] == RESPONSE and message[1] == AUTH_MSGID and message[2] is not None:
                raise RuntimeError("server: %d %s" % (message[2]["code"], message[2]["message"]))
            elif message[0] == RESPONSE and message[1] == msgid:
                _, _, error, result = message
                if error is not None:
                    raise RuntimeError("server: %d %s" % (error["code"], error["message"]))
                yield "result", result
                return


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("prompt")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--chat", action="store_true", help="send the prompt as a user message")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--api-key", default=os.environ.get("MOESERVE_API_KEY"),
                    help="authenticate with this key first (default: $MOESERVE_API_KEY)")
    args = ap.parse_args()

    params = {"max_tokens": args.max_tokens, "temperature": args.temperature,
              "ignore_eos": args.ignore_eos, "stream": True}
    if args.seed is not None:
        params["seed"] = args.seed
    if args.chat:
        params["messages"] = [{"role": "user", "content": args.prompt}]
    else:
        params["prompt"] = args.prompt

    try:
        sock = socket.create_connection((args.host, args.port), timeout=60)
    except OSError as e:
        sys.stderr.write("cannot connect to %s:%d: %s\n" % (args.host, args.port, e))
        return 2
    with sock:
        try:
            for kind, value in generate(sock, 1, params, args.api_key):
                if kind == "token":
                    sys.stdout.write(value)
                    sys.stdout.flush()
                else:
                    usage = value["usage"]
                    sys.stderr.write("\n[finish: %s | %d prompt tokens | %d generated | ttft %.3f s]\n"
                                     % (value["finish_reason"], usage["prompt_tokens"],
                                        usage["completion_tokens"], value["timings"]["ttft"]))
        except (RuntimeError, OSError) as e:                  # ConnectionError is an OSError
            sys.stderr.write("\n%s\n" % e)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
