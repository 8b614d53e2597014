"""Does the kernel keep each TCP segment's receive stamp while segments wait unread?

    python bench/rx_coalesce.py [--segments 6] [--size 150] [--gap-ms 10]

A reader that sleeps through a stream and reads it later (once per TUI frame, say) could
still stamp every chunk at its arrival only if each queued segment kept its own
`SO_TIMESTAMPNS` stamp (stamping/rxstamps.py). This sends `segments` writes of `size` bytes
`gap-ms` apart over loopback (TCP_NODELAY, a child process, each send's `time_ns` logged),
leaves them unread until the last has arrived, then reads `size` bytes per `recvmsg` and
prints each read's stamp minus its own segment's send. Kept stamps read about +0.05 ms each;
merged ones read the last segment's stamp for every read (+(N−1)·gap … +0 ms), which is what
Linux's receive queue does when it coalesces a segment into the one before it
(`tcp_try_coalesce` moves the newer stamp onto the merged buffer). Linux only; exit status 1
when the stamps were merged.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import struct
import sys
import time

SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux asm-generic/socket.h


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--segments", type=int, default=6)
    ap.add_argument("--size", type=int, default=150, help="bytes per segment (an NDJSON line)")
    ap.add_argument("--gap-ms", type=float, default=10.0)
    a = ap.parse_args()
    if sys.platform != "linux":
        print("rx_coalesce: Linux only")
        return 0
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    r, w = os.pipe()
    if os.fork() == 0:  # the sender
        c = socket.create_connection(srv.getsockname())
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sent = []
        for i in range(a.segments):
            time.sleep(a.gap_ms / 1e3)
            sent.append(time.time_ns())
            c.send(bytes([65 + i % 26]) * a.size)
        os.write(w, " ".join(map(str, sent)).encode() + b"\n")
        time.sleep(1.0)
        os._exit(0)
    conn, _ = srv.accept()
    conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    time.sleep((a.segments * a.gap_ms + 200) / 1e3)  # every segment waits unread
    sent = [int(x) for x in os.read(r, 1 << 20).split()]
    print(f"rx_coalesce: Linux {platform.release()}, {a.segments} segments of {a.size} bytes "
          f"{a.gap_ms:g} ms apart, read after the last; load {os.getloadavg()[0]:.2f}")
    late = []
    for i, t_sent in enumerate(sent):
        data, anc, _, _ = conn.recvmsg(a.size, socket.CMSG_SPACE(16))
        stamps = [struct.unpack("qq", d[:16]) for _, kind, d in anc if kind == SO_TIMESTAMPNS]
        if not stamps:
            print(f"  read {i}: {len(data)} bytes, no stamp")
            continue
        t = stamps[0][0] * 10**9 + stamps[0][1]
        late.append((t - t_sent) / 1e6)
        print(f"  read {i}: {len(data)} bytes, stamp − its send {late[-1]:+.3f} ms")
    merged = bool(late) and max(late) > a.gap_ms / 2
    print("  stamps merged while waiting (each read carries a later segment's)" if merged
          else "  each segment kept its own stamp")
    return 1 if merged else 0


if __name__ == "__main__":
    sys.exit(main())
