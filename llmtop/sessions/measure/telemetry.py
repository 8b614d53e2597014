"""The server's durations checked against llmtop's own clock (pure, no I/O).

A server's durations (`ServerStats`, ns) describe parts of the time llmtop watched, from its
send stamp to the done chunk's arrival, so they must fit inside what llmtop saw:

1. E2E: the server's work on a request (its `total_duration`, and its phases load + prompt
   eval + eval one after the other) happens between llmtop's send and the done chunk's
   arrival; none of it can last longer than E2E.
2. TTFT: the model is loaded and the prompt evaluated before the first token exists, so
   load + prompt eval cannot exceed TTFT. Past it, the overhead (TTFT − load − prompt eval,
   docs/method.md) would be negative: a server whose time passed faster than llmtop's.
3. The decode span: llmtop saw the text of the tokens arrive over the span from the first
   text chunk to the last; the server generated the tokens after the first within
   `eval_duration`. A decode far shorter than the span it arrived over means the server
   booked its decode time somewhere else (a llama.cpp server once booked it as prompt time:
   `prompt_ms` 4075 and `predicted_ms` 1 for 111 tokens, "decode 111000 tok/s", "overhead
   −3853.5 ms").

Where a server's figure and llmtop's clock disagree, llmtop's clock wins: the server's
durations (and the rates and overhead made of them) are set aside with the reason, its token
counts kept (`without_durations`). Tolerances:

* CLOCK_SLACK_MS for 1 and 2: each is a sub-interval argument, exact for an honest server,
  so only the clocks' own error is allowed. The worst stamping error measured was 3.6 ms
  (in-process stamps, two busy programs on a 2-core VM: docs/method.md, "Kernel receive
  stamps"); servers report durations to the µs or better. 5 ms covers both.
* DECODE_SHARE and DECODE_SLACK_MS for 3: the first and the last chunk can meet different
  delays on their way (a server's flush, a network queue, a reader late by the stamping
  error), so the span may exceed the decode time by those delays. A decode under a quarter
  of the span (the factor of 4 `timeline.BUFFERED_SHARE` uses the other way) *and* more
  than 50 ms short of it (over ten times the worst stamping error) is not such a delay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from llmtop.engines.events import ServerStats, StreamEvent

NS_PER_MS = 1_000_000
CLOCK_SLACK_MS = 5.0
DECODE_SHARE = 0.25
DECODE_SLACK_MS = 50.0
DURATIONS = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")


def _ms(ns: int | None) -> float | None:
    return None if ns is None else ns / NS_PER_MS


def contradicted_durations(
    sent_ns: int, events: Sequence[StreamEvent], stats: ServerStats | None
) -> str | None:
    """Why the server's durations cannot be true by llmtop's clock (the module docstring's
    three tests), or None when they fit. sent_ns: the send stamp (perf_counter_ns); events:
    the stream's events in arrival order, the done event last when it came; stats: the
    server's figures (None: nothing to check). Several reasons are joined with "; "."""
    if stats is None:
        return None
    text = [e.t_ns for e in events if e.has_text]
    done = next((e for e in reversed(events) if e.done and e.failure is None), None)
    reasons = []
    # llmtop's own times are the yardstick: one that is negative (a send stamp from another
    # clock than the chunks', which only a test double can make) measures nothing to check
    if done is not None and done.t_ns >= sent_ns:
        reasons.append(past_e2e(stats, (done.t_ns - sent_ns) / NS_PER_MS))
    if text and text[0] >= sent_ns:
        reasons.append(past_ttft(stats, (text[0] - sent_ns) / NS_PER_MS))
    if text:
        reasons.append(decode_contradicted(stats, (text[-1] - text[0]) / NS_PER_MS))
    found = [r for r in reasons if r is not None]
    if not found:
        return None
    return ("; ".join(found) + ": the server's durations, and the rates and overhead made of "
            "them, are not used (llmtop's clock is)")


def past_e2e(stats: ServerStats, e2e_ms: float) -> str | None:
    """The reason when `total_duration`, or load + prompt eval + eval, exceed the request's
    E2E (ms, llmtop's clock) by more than CLOCK_SLACK_MS; else None."""
    total = _ms(stats.total_duration)
    if total is not None and total > e2e_ms + CLOCK_SLACK_MS:
        return (f"the server reports total_duration {total:.1f} ms for a request that took "
                f"{e2e_ms:.1f} ms by llmtop's clock")
    parts = [_ms(v) for v in (stats.load_duration, stats.prompt_eval_duration,
                              stats.eval_duration)]
    phases = sum(p for p in parts if p is not None)
    if phases > e2e_ms + CLOCK_SLACK_MS:
        return (f"the server's load, prompt eval and eval durations add up to {phases:.1f} ms, "
                f"more than the {e2e_ms:.1f} ms the request took by llmtop's clock")
    return None


def past_ttft(stats: ServerStats, ttft_ms: float) -> str | None:
    """The reason when load + prompt eval (those the server gave) exceed TTFT (ms, llmtop's
    clock) by more than CLOCK_SLACK_MS — a negative overhead; else None."""
    named = [(n, _ms(v)) for n, v in (("load", stats.load_duration),
                                      ("prompt eval", stats.prompt_eval_duration))]
    given = [(n, v) for n, v in named if v is not None]
    if not given:
        return None
    before = sum(v for _, v in given)
    if before <= ttft_ms + CLOCK_SLACK_MS:
        return None
    what = " + ".join(n for n, _ in given)
    return (f"the server's {what} ({before:.1f} ms) is longer than the TTFT llmtop measured "
            f"({ttft_ms:.1f} ms), though it comes before the first token (an overhead of "
            f"{ttft_ms - before:.1f} ms)")


def decode_contradicted(stats: ServerStats, span_ms: float) -> str | None:
    """The reason when `eval_duration` is under DECODE_SHARE of the span (ms) over which llmtop
    saw the text arrive, and more than DECODE_SLACK_MS short of it; else None."""
    decode = _ms(stats.eval_duration)
    if decode is None or decode >= DECODE_SHARE * span_ms or span_ms - decode <= DECODE_SLACK_MS:
        return None
    tokens = stats.eval_count
    rate = (f", {tokens * 1000 / decode:.0f} tok/s" if tokens and decode > 0 else "")
    count = f"{tokens} tokens" if tokens is not None else "its tokens"
    return (f"the server says it generated {count} in {decode:.1f} ms{rate}, but llmtop saw "
            f"their text arrive over {span_ms:.1f} ms")


def without_durations(stats: ServerStats) -> ServerStats:
    """`stats` with every duration set aside (None); counts, done reason and source kept."""
    return replace(stats, **dict.fromkeys(DURATIONS))
