"""A scripted Ollama-API server that logs when its bytes really left (the clock truth).

    python bench/truth_server.py PORT LOG [--first-ms 20] [--chunks 8] [--gap-ms 5]

Plain blocking sockets, one thread per connection, HTTP/1.1 keep-alive, chunked NDJSON as
Ollama writes it. For each `/api/chat` request it appends one JSON line to LOG:
`{"prompt", "recv_ns", "first_ns", "done_ns"}` — `perf_counter_ns()` (CLOCK_MONOTONIC on
Linux: the same clock in every process, so a client's stamps compare directly) when the
request's last byte had been read, just before the first text chunk's `send`, and just
before the done chunk's `send` (the line is written before the done chunk is sent). A client's TTFT
error is then
(its first-text stamp − its send stamp) − (first_ns − recv_ns): what the wire and both
processes' wake-ups add, plus whatever the client counts that is not the server's time.
Metadata routes (`/api/version`, `/api/tags`, `/api/show`, `/api/ps`, `/v1/models`,
`/health`) answer minimally so `llmtop run` (and peer tools) can connect.
`/v1/chat/completions` streams the same script as OpenAI's SSE (text deltas, a finish with
usage, `[DONE]`) and logs the same way. Prints "ready" once listening.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import threading
import time
from time import perf_counter_ns
from typing import IO

MODEL = "truth:latest"
_lock = threading.Lock()


def _chunked(obj: dict) -> bytes:
    return _chunked_raw(json.dumps(obj).encode() + b"\n")


def _headers(status: str, ctype: str, length: int | None = None) -> bytes:
    size = (
        f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    )
    return f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{size}\r\n".encode()


def _json(sock: socket.socket, obj: dict, status: str = "200 OK") -> None:
    body = json.dumps(obj).encode()
    sock.sendall(_headers(status, "application/json", len(body)) + body)


def _read_request(sock: socket.socket, buf: bytearray) -> tuple[str, str, bytes] | None:
    """One request (method, path, body) from `sock`; None when the client closed."""
    while b"\r\n\r\n" not in buf:
        data = sock.recv(65536)
        if not data:
            return None
        buf += data
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, path, _ = lines[0].split(" ", 2)
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
    body = bytearray(rest)
    while len(body) < length:
        data = sock.recv(65536)
        if not data:
            return None
        body += data
    buf[:] = body[length:]
    return method, path, bytes(body[:length])


def _prompt_tokens(req: dict) -> int:
    """The prompt's "token" count: one per whitespace-separated word of the messages, plus
    10 for a chat template (as llmtop/testing/slotted.py counts), so that `llmtop load`'s
    prompt-size calibration converges."""
    return 10 + sum(len(str(m.get("content", "")).split()) for m in req.get("messages") or [])


def _ollama_chunk(text: str | None, args: argparse.Namespace, prompt: int = 4) -> bytes:
    """One /api/chat NDJSON line: text, or (None) the done line with its statistics."""
    if text is not None:
        return _chunked({"model": MODEL, "message": {"role": "assistant", "content": text},
                         "done": False})
    return _chunked({"model": MODEL, "message": {"role": "assistant", "content": ""},
                     "done": True, "done_reason": "stop", "eval_count": args.chunks,
                     "eval_duration": int(args.chunks * args.gap_ms * 1e6),
                     "prompt_eval_count": prompt, "prompt_eval_duration": int(args.first_ms * 1e6),
                     "total_duration": int((args.first_ms + args.chunks * args.gap_ms) * 1e6)})


def _openai_chunk(text: str | None, args: argparse.Namespace, prompt: int = 4) -> bytes:
    """One /v1/chat/completions SSE event: a text delta, or (None) the finish with its
    usage and `[DONE]`."""
    if text is not None:
        obj = {"object": "chat.completion.chunk", "model": MODEL,
               "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
        return _chunked_raw(b"data: " + json.dumps(obj).encode() + b"\n\n")
    obj = {"object": "chat.completion.chunk", "model": MODEL,
           "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": prompt, "completion_tokens": args.chunks,
                     "total_tokens": prompt + args.chunks}}
    return _chunked_raw(b"data: " + json.dumps(obj).encode() + b"\n\ndata: [DONE]\n\n")


def _chunked_raw(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _chat(sock: socket.socket, body: bytes, recv_ns: int, args: argparse.Namespace,
          log: IO[str], openai: bool = False) -> None:
    req = json.loads(body or b"{}")
    messages = req.get("messages") or [{}]
    prompt = str(messages[-1].get("content", ""))
    frame = _openai_chunk if openai else _ollama_chunk
    sock.sendall(_headers("200 OK", "text/event-stream" if openai else "application/x-ndjson"))
    if args.first_ms > 0:  # a zero-latency server never touches the timer
        time.sleep(args.first_ms / 1000)
    first = frame("w0 ", args)
    first_ns = perf_counter_ns()
    sock.sendall(first)
    for i in range(1, args.chunks):
        if args.gap_ms > 0:
            time.sleep(args.gap_ms / 1000)
        sock.sendall(frame(f"w{i} ", args))
    if args.gap_ms > 0:
        time.sleep(args.gap_ms / 1000)
    done = frame(None, args, _prompt_tokens(req))
    with _lock:  # logged before the done chunk goes: a client may read the log once it has it
        log.write(json.dumps({"prompt": prompt, "recv_ns": recv_ns, "first_ns": first_ns,
                              "done_ns": perf_counter_ns()}) + "\n")
        log.flush()
    sock.sendall(done)
    sock.sendall(b"0\r\n\r\n")


def _meta(sock: socket.socket, path: str) -> None:
    details = {"family": "truth", "parameter_size": "0", "quantization_level": "none",
               "format": "gguf"}
    if path == "/api/version":
        _json(sock, {"version": "0.0.0-truth"})
    elif path == "/api/tags":
        _json(sock, {"models": [{"name": MODEL, "model": MODEL, "size": 1,
                                 "details": details}]})
    elif path == "/api/show":
        _json(sock, {"details": details, "model_info": {}, "modelfile": "", "template": ""})
    elif path == "/api/ps":
        _json(sock, {"models": []})
    elif path == "/health":  # llama-server's and vLLM's; peer tools (GuideLLM) check it
        _json(sock, {"status": "ok"})
    elif path == "/v1/models":
        _json(sock, {"object": "list", "data": [{"id": MODEL, "object": "model"}]})
    else:
        _json(sock, {"error": f"no route {path}"}, "404 Not Found")


def _serve(sock: socket.socket, args: argparse.Namespace, log: IO[str]) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    with sock:
        while True:
            try:
                req = _read_request(sock, buf)
            except OSError:
                return
            recv_ns = perf_counter_ns()
            if req is None:
                return
            method, path, body = req
            try:
                if method == "POST" and path in ("/api/chat", "/v1/chat/completions"):
                    _chat(sock, body, recv_ns, args, log, openai=path.startswith("/v1/"))
                else:
                    _meta(sock, path)
            except OSError:
                return


def main(argv: list[str] | None = None) -> int:
    """Serve until killed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("log")
    ap.add_argument("--first-ms", type=float, default=20.0)
    ap.add_argument("--chunks", type=int, default=8)
    ap.add_argument("--gap-ms", type=float, default=5.0)
    args = ap.parse_args(argv)
    server = socket.create_server(("127.0.0.1", args.port))
    log = open(args.log, "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn, args, log), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
