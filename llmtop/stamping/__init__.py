"""The wire stamping: when a request's bytes left and when each reply byte arrived.

Every duration llmtop reports starts at a send stamp and ends at an arrival stamp, both on
`time.perf_counter_ns()`'s clock, taken as close to the socket as Python allows:

* `stamps`: the `SendStamp` context a request opens, the httpx hooks that fill it, and the
  arrival of the bytes that completed each line (`arrival_ns`);
* `arrivals`: an asyncio network backend for httpx whose reads note their arrival;
* `rxstamps`: the kernel's receive stamp of those bytes (Linux `SO_TIMESTAMPNS`, read with
  `recvmsg`), which the client's own scheduling cannot delay;
* `netbuffer`: the read-ahead buffer the stamped streams share;
* `blocking`: the same for a blocking httpx client (Locust's gevent users).

Below the engines' clients and the measuring core, which both use it; it imports neither.
"""
