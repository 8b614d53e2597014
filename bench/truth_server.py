"""A scripted Ollama-API server that logs when its bytes really left (the clock truth).

    python bench/truth_server.py PORT LOG [--first-ms 20] [--chunks 8] [--gap-ms 5]
                                          [--user-stamps]

Plain blocking sockets, one thread per connection, HTTP/1.1 keep-alive, chunked NDJSON as
Ollama writes it. For each `/api/chat` request it appends one JSON line to LOG:
`{"prompt", "recv_ns", "first_ns", "done_ns", "stamps", "recv_user_ns", "first_user_ns",
"done_user_ns"}`, all on `perf_counter_ns()`'s clock (CLOCK_MONOTONIC on Linux: the same
clock in every process, so a client's stamps compare directly):

- recv_ns: when the request's last byte reached the machine; first_ns / done_ns: when the
  first text chunk / the done chunk left it. With `"stamps": "kernel"` these are the
  kernel's: the receive stamp of the segment that completed the request (`SO_TIMESTAMPNS`)
  and the software transmit stamps of the two sends (`SO_TIMESTAMPING`, read back from the
  socket's error queue; on loopback the stamp is taken as the segment is handed to the
  device), each moved from CLOCK_REALTIME onto CLOCK_MONOTONIC by the two clocks' offset
  read at that moment. So the truth does not move when this server waits for a CPU (two
  CPU burners on a 2-core machine): its waits fall inside the true TTFT, where a client
  sees them too. Where the kernel gives no stamp (not Linux, or `--user-stamps`), they are
  the `*_user_ns` stamps and `"stamps"` says "user".
- recv_user_ns / first_user_ns / done_user_ns: this server's own perf_counter_ns after the
  request was read, just before the first text chunk's `send`, and just before the done
  chunk's `send` (the line is written before the done chunk is sent, so its done stamps are
  read then).

A client's TTFT error is then (its first-text stamp − its send stamp) − (first_ns − recv_ns):
what the wire and the client's own waits add, plus whatever the client counts that is not
the server's time.
Metadata routes (`/api/version`, `/api/tags`, `/api/show`, `/api/ps`, `/v1/models`,
`/health`) answer minimally so `llmtop run` (and peer tools) can connect.
`/v1/chat/completions` streams the same script as OpenAI's SSE (text deltas, a finish with
usage, `[DONE]`) and logs the same way. Prints "ready" once listening.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time
from time import perf_counter_ns, time_ns
from typing import IO

MODEL = "truth:latest"
_lock = threading.Lock()

# Linux: asm-generic/socket.h and linux/net_tstamp.h
SO_TIMESTAMPNS = 35
SO_TIMESTAMPING = 37
TX_FLAGS = (1 << 1) | (1 << 4) | (1 << 11)  # TX_SOFTWARE | SOFTWARE | OPT_TSONLY
ANC = socket.CMSG_SPACE(64) if hasattr(socket, "CMSG_SPACE") else 0


class Stamps:
    """The kernel's stamps of one connection (module docstring), or none (`kernel` False)."""

    def __init__(self, sock: socket.socket, kernel: bool) -> None:
        self.sock = sock
        self.kernel = False
        self.rx_ns: int | None = None  # the last recvmsg's receive stamp
        if kernel and sys.platform == "linux":
            try:
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, TX_FLAGS)
                self.kernel = True
            except OSError:
                pass

    def recv(self, size: int) -> bytes:
        """`sock.recv`, keeping the receive stamp of what it read."""
        if not self.kernel:
            return self.sock.recv(size)
        data, anc, _flags, _addr = self.sock.recvmsg(size, ANC)
        for level, kind, raw in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
                sec, nsec = struct.unpack("qq", raw[:16])
                self.rx_ns = _monotonic(sec * 10**9 + nsec)
        return data

    def send(self, data: bytes) -> int | None:
        """`sock.sendall(data)`; the kernel's transmit stamp of its last byte (None without)."""
        self.sock.sendall(data)
        if not self.kernel:
            return None
        last = None
        while True:  # the error queue holds a stamp per send: keep the newest
            try:
                _d, anc, _f, _a = self.sock.recvmsg(
                    1, ANC, socket.MSG_ERRQUEUE | socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return last
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPING and len(raw) >= 16:
                    sec, nsec = struct.unpack("qq", raw[:16])  # the software stamp comes first
                    last = _monotonic(sec * 10**9 + nsec)


def _monotonic(wall_ns: int) -> int:
    """A CLOCK_REALTIME stamp on perf_counter_ns's clock (the offset read now)."""
    return wall_ns - (time_ns() - perf_counter_ns())


def _chunked(obj: dict) -> bytes:
    return _chunked_raw(json.dumps(obj).encode() + b"\n")


def _headers(status: str, ctype: str, length: int | None = None) -> bytes:
    size = (
        f"Content-Length: {length}\r\n" if length is not None else "Transfer-Encoding: chunked\r\n"
    )
    return f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n{size}\r\n".encode()


def _json(conn: Stamps, obj: dict, status: str = "200 OK") -> None:
    body = json.dumps(obj).encode()
    conn.send(_headers(status, "application/json", len(body)) + body)


def _read_request(sock: Stamps, buf: bytearray) -> tuple[str, str, bytes] | None:
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


def _chat(conn: Stamps, body: bytes, recv: tuple[int, int | None], args: argparse.Namespace,
          log: IO[str], openai: bool = False) -> None:
    req = json.loads(body or b"{}")
    messages = req.get("messages") or [{}]
    prompt = str(messages[-1].get("content", ""))
    frame = _openai_chunk if openai else _ollama_chunk
    conn.send(_headers("200 OK", "text/event-stream" if openai else "application/x-ndjson"))
    if args.first_ms > 0:  # a zero-latency server never touches the timer
        time.sleep(args.first_ms / 1000)
    first = frame("w0 ", args)
    first_user = perf_counter_ns()
    first_kernel = conn.send(first)
    for i in range(1, args.chunks):
        if args.gap_ms > 0:
            time.sleep(args.gap_ms / 1000)
        conn.send(frame(f"w{i} ", args))
    if args.gap_ms > 0:
        time.sleep(args.gap_ms / 1000)
    done = frame(None, args, _prompt_tokens(req))
    done_user = perf_counter_ns()
    done_kernel = conn.send(done)  # its stamp is needed in the line, so it goes first
    recv_user, recv_kernel = recv
    kernel = None not in (recv_kernel, first_kernel, done_kernel)
    with _lock:  # logged before the body's end goes: a client may read the log once it has it
        log.write(json.dumps({
            "prompt": prompt,
            "recv_ns": recv_kernel if kernel else recv_user,
            "first_ns": first_kernel if kernel else first_user,
            "done_ns": done_kernel if kernel else done_user,
            "stamps": "kernel" if kernel else "user",
            "recv_user_ns": recv_user, "first_user_ns": first_user, "done_user_ns": done_user,
        }) + "\n")
        log.flush()
    conn.sock.sendall(b"0\r\n\r\n")


def _meta(sock: Stamps, path: str) -> None:
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
    conn = Stamps(sock, kernel=not args.user_stamps)
    buf = bytearray()
    with sock:
        while True:
            conn.rx_ns = None
            try:
                req = _read_request(conn, buf)
            except OSError:
                return
            recv = (perf_counter_ns(), conn.rx_ns)
            if req is None:
                return
            method, path, body = req
            try:
                if method == "POST" and path in ("/api/chat", "/v1/chat/completions"):
                    _chat(conn, body, recv, args, log, openai=path.startswith("/v1/"))
                else:
                    _meta(conn, path)
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
    ap.add_argument("--user-stamps", action="store_true",
                    help="log this server's own stamps, not the kernel's")
    args = ap.parse_args(argv)
    server = socket.create_server(("127.0.0.1", args.port))
    log = open(args.log, "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        threading.Thread(target=_serve, args=(conn, args, log), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
