#!/usr/bin/python3
"""tests/scripts/http_checks.py: the HTTP front of a running `moeserve serve`, driven by Python's
http.client and raw sockets (keep-alive, pipelining, malformed and oversized requests, slow
headers, a chunked body, a disconnect mid-stream that frees its KV). Run by test_http.sh, which
starts the server with the limits these checks expect:
  --api-key KEY --admin-key ADMIN --read-timeout 1 --keep-alive-timeout 2
  --max-body-bytes 4096 --max-header-bytes 1024 --max-connections 6
Usage: http_checks.py PORT KEY ADMIN MODEL EXPECTED_TEXT_FILE"""
import http.client
import json
import socket
import sys
import time

port, key, admin, model, expected_file = sys.argv[1:6]
expected = open(expected_file, encoding="utf-8").read()
prompt = "The quick brown fox"


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def ok(message):
    print("ok: " + message)


def request(method, path, body=None, token=key, conn=None, headers=None):
    """(status, headers, parsed JSON or raw text) over `conn` or a new connection."""
    own = conn is None
    conn = conn or http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    if body is not None:
        h["Content-Type"] = "application/json"
        body = json.dumps(body)
    conn.request(method, path, body=body, headers=h)
    r = conn.getresponse()
    raw = r.read().decode("utf-8")
    if own:
        conn.close()
    try:
        return r.status, r, json.loads(raw)
    except ValueError:
        return r.status, r, raw


def expect_error(status, got_status, data, param=None, what=""):
    if got_status != status:
        fail(f"{what}: expected {status}, got {got_status}: {data}")
    err = data.get("error") if isinstance(data, dict) else None
    if not err or not {"message", "type", "param", "code"} <= err.keys():
        fail(f"{what}: not OpenAI's error shape: {data}")
    if param is not None and err["param"] != param:
        fail(f"{what}: param {err['param']!r}, expected {param!r}: {data}")
    return err


def raw_exchange(data, read_until_close=True, timeout=10):
    """Sends `data` on a new socket; returns what comes back until the server closes it."""
    s = socket.create_connection(("127.0.0.1", int(port)), timeout=timeout)
    s.sendall(data)
    out = b""
    while True:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        out += chunk
        if not read_until_close:
            break
    s.close()
    return out


def read_responses(sock, count):
    """Reads `count` whole Content-Length responses from `sock`: [(status, body)]."""
    buf = b""
    out = []
    while len(out) < count:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = buf[:head_end].decode()
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value)
            if len(buf) >= head_end + 4 + length:
                out.append((int(head.split(" ")[1]), buf[head_end + 4:head_end + 4 + length]))
                buf = buf[head_end + 4 + length:]
                continue
        chunk = sock.recv(65536)
        if not chunk:
            fail(f"the server closed after {len(out)} of {count} responses")
        buf += chunk
    return out


# --- the connection budget, shared with the wire (--max-connections 6), first: nothing else is open
held = [socket.create_connection(("127.0.0.1", int(port)), timeout=10) for _ in range(6)]
time.sleep(0.3)
refused = raw_exchange(b"GET /health HTTP/1.1\r\n\r\n")
if not refused.startswith(b"HTTP/1.1 429") or b"Retry-After: 1\r\n" not in refused:
    fail(f"a 7th connection: {refused[:200]!r}")
for s in held:
    s.close()
time.sleep(0.3)
ok("a connection over --max-connections gets 429 with Retry-After")

# --- health, models, auth
status, _, data = request("GET", "/health", token=None)
if status != 200 or data.get("status") != "ok":
    fail(f"/health without a key: {status} {data}")
status, r, data = request("GET", "/v1/models", token=None)
expect_error(401, status, data, what="/v1/models without a key")
if r.getheader("WWW-Authenticate") != "Bearer":
    fail("a 401 without WWW-Authenticate: Bearer")
expect_error(401, *request("GET", "/v1/models", token="wrong")[::2], what="a wrong key")
status, _, data = request("GET", "/v1/models")
if status != 200 or data["object"] != "list" or [m["id"] for m in data["data"]] != [model]:
    fail(f"/v1/models: {status} {data}")
ok(f"/health open, /v1/models 401 without the key, {data['data'][0]['id']} with it")
status, _, data = request("GET", "/ready")
if status != 200 or data.get("ready") is not True:
    fail(f"/ready: {status} {data}")
ok(f"/ready after a real 1-token generation: {data}")

# --- completions: greedy text equals `moeserve generate`'s; stream equals it too
body = {"model": model, "prompt": prompt, "max_tokens": 8, "temperature": 0, "ignore_eos": True}
status, _, data = request("POST", "/v1/completions", body)
if status != 200:
    fail(f"/v1/completions: {status} {data}")
text = data["choices"][0]["text"]
if not expected.startswith(text) or not text:
    fail(f"completion {text!r} is not what moeserve generate gave: {expected!r}")
if data["usage"] != {"prompt_tokens": 5, "completion_tokens": 8, "total_tokens": 13}:
    fail(f"usage: {data['usage']}")
if data["choices"][0]["finish_reason"] != "length" or data["object"] != "text_completion":
    fail(f"completion shape: {data}")
ok(f"completion {text!r} equals moeserve generate's, usage {data['usage']}")

conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
conn.request("POST", "/v1/completions",
             json.dumps(dict(body, stream=True, stream_options={"include_usage": True})),
             {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
r = conn.getresponse()
if r.status != 200 or not r.getheader("Content-Type", "").startswith("text/event-stream"):
    fail(f"stream: {r.status} {r.getheaders()}")
events = [line[6:] for line in r.read().decode().split("\n") if line.startswith("data: ")]
if events[-1] != "[DONE]":
    fail(f"the stream does not end with [DONE]: {events[-3:]}")
chunks = [json.loads(e) for e in events[:-1]]
streamed = "".join(c["choices"][0]["text"] for c in chunks if c["choices"])
if streamed != text:
    fail(f"streamed {streamed!r} != {text!r}")
if chunks[-1]["choices"] != [] or chunks[-1]["usage"]["completion_tokens"] != 8:
    fail(f"no usage chunk last: {chunks[-1]}")
if chunks[-2]["choices"][0]["finish_reason"] != "length":
    fail(f"no finish_reason chunk: {chunks[-2]}")
ok(f"stream: {len(chunks)} chunks joined equal the completion, usage chunk, [DONE]")
# keep-alive: the same connection serves the next request
status, _, data = request("POST", "/v1/completions", body, conn=conn)
if status != 200 or data["choices"][0]["text"] != text:
    fail(f"a second request on a kept-alive connection: {status} {data}")
conn.close()
ok("keep-alive: a second request on the same connection")

# --- chat: streamed chunks joined equal the non-streamed message
chat = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 6, "temperature": 0,
        "ignore_eos": True}
status, _, data = request("POST", "/v1/chat/completions", chat)
if status != 200 or data["object"] != "chat.completion":
    fail(f"chat: {status} {data}")
message = data["choices"][0]["message"]["content"]
conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=60)
conn.request("POST", "/v1/chat/completions", json.dumps(dict(chat, stream=True)),
             {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
events = [line[6:] for line in conn.getresponse().read().decode().split("\n") if line.startswith("data: ")]
conn.close()
chunks = [json.loads(e) for e in events[:-1]]
if chunks[0]["choices"][0]["delta"].get("role") != "assistant":
    fail(f"chat's first chunk has no role: {chunks[0]}")
joined = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
if joined != message:
    fail(f"chat stream {joined!r} != {message!r}")
ok(f"chat: streamed equals non-streamed ({message!r})")

# --- chat without max_tokens: OpenAI's default, the rest of the context
long_messages = [{"role": "user", "content": "a " * 990}]
status, _, counted = request("POST", "/tokenize", {"messages": long_messages})
if status != 200:
    fail(f"/tokenize of messages: {status} {counted}")
status, _, data = request("POST", "/v1/chat/completions", {"messages": long_messages, "temperature": 0,
                                                           "ignore_eos": True})
if status != 200 or data["usage"]["prompt_tokens"] != counted["count"] or \
        data["usage"]["completion_tokens"] != 1024 - counted["count"] or data["choices"][0]["finish_reason"] != "length":
    fail(f"chat without max_tokens after a {counted['count']}-token prompt: {status} {data}")
ok(f"chat without max_tokens: {data['usage']['completion_tokens']} tokens, the rest of the 1024-token context")

# --- errors in OpenAI's shape, with the wire's codes
expect_error(404, *request("POST", "/v1/completions", dict(body, model="gpt-4"))[::2], "model",
             "an unknown model")
expect_error(400, *request("POST", "/v1/completions", dict(body, n=2))[::2], "n", "n=2")
expect_error(422, *request("POST", "/v1/completions", dict(body, temperature="hot"))[::2], "temperature",
             "temperature as a string")
expect_error(400, *request("POST", "/v1/completions", dict(body, max_token=3))[::2], "max_token",
             "an unknown field")
expect_error(422, *request("POST", "/v1/completions", dict(body, max_tokens=100000))[::2], "max_tokens",
             "max_tokens past the context")
expect_error(404, *request("GET", "/v2/nothing")[::2], what="an unknown path")
status, r, data = request("GET", "/v1/completions")
expect_error(405, status, data, what="GET on completions")
if r.getheader("Allow") != "POST":
    fail("a 405 without Allow")
ok("errors: 404 model, 400 n / unknown field, 422 temperature / context, 404 path, 405 method")

# --- tokenize / detokenize (vLLM's shapes), a chunked body
status, _, data = request("POST", "/tokenize", {"prompt": prompt})
if status != 200 or data["count"] != 5 or len(data["tokens"]) != 5 or data["max_model_len"] != 1024:
    fail(f"/tokenize: {status} {data}")
ids = data["tokens"]
status, _, back = request("POST", "/detokenize", {"tokens": ids[1:]})
if status != 200 or back["prompt"] != prompt:
    fail(f"/detokenize: {status} {back}")
payload = json.dumps({"prompt": prompt}).encode()
chunked = (b"POST /tokenize HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key.encode() +
           b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
           b"%x\r\n%s\r\n" % (7, payload[:7]) + b"%x\r\n%s\r\n" % (len(payload) - 7, payload[7:]) + b"0\r\n\r\n")
reply = raw_exchange(chunked)
if not reply.startswith(b"HTTP/1.1 200") or json.loads(reply.split(b"\r\n\r\n", 1)[1])["tokens"] != ids:
    fail(f"a chunked body: {reply[:300]!r}")
ok(f"/tokenize {ids}, /detokenize back, a chunked body")

# --- admin: 403 for a client key, 200 for the admin key
expect_error(403, *request("GET", "/admin/config")[::2], what="/admin/config with the client key")
status, _, data = request("GET", "/admin/config", token=admin)
if status != 200 or "prefill_balancer" not in data:
    fail(f"/admin/config: {status} {data}")
status, _, data = request("POST", "/admin/configure", {"target": "request_queue", "max_queued": 64}, token=admin)
if status != 200 or data.get("target") != "request_queue":
    fail(f"/admin/configure: {status} {data}")
expect_error(422, *request("POST", "/admin/configure", {"target": "request_queue", "max_queued": -1},
                           token=admin)[::2], what="an invalid configuration")
ok(f"admin over HTTP: config, configure (epoch {data.get('epoch')}), 422 for a bad value, 403 for a client")

# --- pipelining: two requests in one write, answered in order
s = socket.create_connection(("127.0.0.1", int(port)), timeout=30)
auth = b"Authorization: Bearer " + key.encode() + b"\r\n"
s.sendall(b"GET /v1/models HTTP/1.1\r\n" + auth + b"\r\n" + b"GET /health HTTP/1.1\r\n\r\n")
(first_status, first), (second_status, second) = read_responses(s, 2)
s.close()
if first_status != 200 or json.loads(first)["object"] != "list" or json.loads(second)["status"] != "ok":
    fail(f"pipelined answers out of order: {first!r} {second!r}")
ok("pipelined requests answered in order")

# --- malformed, oversized, slow
reply = raw_exchange(b"HELLO WORLD\r\n\r\n")
if not reply.startswith(b"HTTP/1.1 400"):
    fail(f"a malformed request line: {reply[:200]!r}")
reply = raw_exchange(b"GET /health HTTP/1.1\r\nX-Big: " + b"a" * 2000 + b"\r\n\r\n")
if not reply.startswith(b"HTTP/1.1 431"):
    fail(f"an oversized header: {reply[:200]!r}")
reply = raw_exchange(b"POST /v1/completions HTTP/1.1\r\n" + auth + b"Content-Length: 5000\r\n\r\n" + b"x" * 5000)
if not reply.startswith(b"HTTP/1.1 413"):
    fail(f"a body over --max-body-bytes: {reply[:200]!r}")
started = time.monotonic()
reply = raw_exchange(b"GET /health HTTP/1.1\r\nHost: slow", timeout=10)
took = time.monotonic() - started
if not reply.startswith(b"HTTP/1.1 408") or took > 5:
    fail(f"a slow request head: {reply[:200]!r} after {took:.1f} s")
ok(f"400 malformed, 431 big header, 413 big body, 408 slow head after {took:.1f} s")
s = socket.create_connection(("127.0.0.1", int(port)), timeout=10)
s.sendall(b"GET /health HTTP/1.1\r\n\r\n")
read_responses(s, 1)
started = time.monotonic()
idle = s.recv(100)
took = time.monotonic() - started
s.close()
if idle != b"" or took < 1.5 or took > 6:
    fail(f"an idle kept-alive connection: {idle!r} after {took:.1f} s")
ok(f"an idle kept-alive connection closed after {took:.1f} s")


# --- a client that leaves mid-stream: its request is cancelled and its KV freed
def stats():
    status, _, data = request("GET", "/stats")
    if status != 200:
        fail(f"/stats: {status} {data}")
    return data


before = stats()
free_before = [r["free_blocks"] for r in before["ranks"]]
s = socket.create_connection(("127.0.0.1", int(port)), timeout=30)
long_body = json.dumps(dict(body, max_tokens=900, stream=True)).encode()
s.sendall(b"POST /v1/completions HTTP/1.1\r\n" + auth + b"Content-Type: application/json\r\nContent-Length: " +
          str(len(long_body)).encode() + b"\r\n\r\n" + long_body)
got = b""
while got.count(b"data: ") < 3:
    got += s.recv(65536)
running = stats()["queue"]["running"]
s.close()
deadline = time.monotonic() + 20
while True:
    now = stats()
    if now["queue"]["running"] == 0 and [r["free_blocks"] for r in now["ranks"]] == free_before:
        break
    if time.monotonic() > deadline:
        fail(f"KV not freed after a disconnect: before {before}, now {now}")
    time.sleep(0.1)
if running != 1 or now["cancelled"] != before["cancelled"] + 1:
    fail(f"running {running} during the stream; cancelled {before['cancelled']} -> {now['cancelled']}")
ok(f"a disconnect mid-stream cancelled the request and freed its KV ({free_before} free blocks again)")
print("http checks passed")
