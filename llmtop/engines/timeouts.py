"""The clients' timeouts, seconds, in a module with no imports, so the CLI can name them in
its flags' defaults and limits without loading httpx (bench/cli_start.py).

DEFAULT_READ_TIMEOUT_S is the longest wait for the next byte of a reply (engines/http.py:
every engine client and llmtop's relay read with it); TOKEN_TIMEOUT_S is the longest wait
for the next event of a stream, measured from the last one the engine yielded, so keep-alive
pings, which reset the read timeout and yield nothing, cannot reset it
(sessions/measure/request.py, `run_request`; `--token-timeout`).
"""

import math

DEFAULT_CONNECT_TIMEOUT_S = 5.0
# A generous read timeout: a cold 7B model can take tens of seconds to load before the
# first byte, but a hung server must not block forever (httpx-based clients such as
# `ollama.AsyncClient` otherwise wait with no timeout at all).
DEFAULT_READ_TIMEOUT_S = 300.0
# The token timeout's default is the read timeout, and so is its most: a stream that sends
# nothing for DEFAULT_READ_TIMEOUT_S is already ended by the read timeout, so a longer token
# timeout would hold only a server that pings; it can only make the wait shorter.
TOKEN_TIMEOUT_S = DEFAULT_READ_TIMEOUT_S
MAX_TOKEN_TIMEOUT_S = DEFAULT_READ_TIMEOUT_S


def parse_token_timeout(text: str) -> float:
    """`--token-timeout SECONDS` (and Locust's `--llmtop-token-timeout`): a finite number of
    seconds > 0 and at most MAX_TOKEN_TIMEOUT_S. Raises ValueError for anything else, saying
    the bound and why (the callers show it as their usage error, exit 2)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or not 0 < value <= MAX_TOKEN_TIMEOUT_S:
        raise ValueError(
            f"{text!r} is not a number of seconds > 0 and <= {MAX_TOKEN_TIMEOUT_S:g}: the "
            f"read timeout ({DEFAULT_READ_TIMEOUT_S:g} s) already ends a stream that sends "
            "nothing for that long, so this limit, which keep-alive pings cannot reset, can "
            "only be shorter")
    return value
