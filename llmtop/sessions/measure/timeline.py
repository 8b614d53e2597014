"""Per-request metrics from client arrival stamps and the server's own statistics (pure).

Definitions follow docs/method.md ("Metrics of one request") and Ollama's API reference:

    sent ──(load)──┬── prefill ──┤ first token ─ tok ─ … ─ last token / done
         │◄────────── TTFT ────────►│◄ TPOT ►
         │◄──────────────────── E2E latency ─────────────────────────────►│

* TTFT (ms): send → first chunk carrying non-empty content, thinking or tool-call text
  (client clock): a tool call is the model's output as much as an answer is.
* E2E (ms): send → the done chunk (the end of the response as the client saw it).
* ITL (ms): gaps between successive text-carrying chunks. A chunk is not a token.
* TPOT (ms/token): (E2E − TTFT) / (n − 1), with n = the server's `eval_count` when present,
  else the number of text chunks (then `tokens_basis == "chunks"`, labelled as such).
* Client decode rate (tokens/s): (n − 1) / (E2E − TTFT) = 1000 / TPOT: the n − 1 tokens after
  the first, over the time they took.
* Server prefill rate (tokens/s): prompt_eval_count / prompt_eval_duration × 1e9 (Ollama docs).
  Ollama counts cached prompt tokens in `prompt_eval_count` but not in the duration, so on a
  prefix-cache hit this rate is overstated — vary prompts when measuring prefill. Where the
  server says how many it reused (`prompt_cached_count`: llama.cpp's `cache_n`), those are
  left out: the rate is of the tokens the server evaluated in that time.
* Per-token ITL (ms), from the server's token counts: when the server says how many tokens
  each chunk carried (`StreamEvent.tokens`: llama-server's `timings_per_token`), the chunks
  that arrived with one read (the same stamp) form one delivery, and the gap before a
  delivery of k tokens counts as k gaps of gap / k. Speculative decoding delivers several
  accepted tokens at once, which chunk gaps show as one long gap and k − 1 zero gaps.
* Server decode rate (tokens/s): eval_count / eval_duration × 1e9 — Ollama's documented
  convention. `eval_duration` runs from the first token's sample to the last's, i.e. it spans
  n − 1 gaps while `eval_count` counts n tokens, so this is slightly optimistic (by n/(n − 1))
  next to the client rate; with n < 2 it is undefined and reported as None (n/a).
* Overhead (ms): TTFT − (load + prompt eval durations) (docs/method.md, "Server-layer overhead": the
  source measured 813.9 − 796.1 = 17.8 ms for a FastAPI relay). An OpenAI-compatible server
  (stats `source` set) loads its model at its own start, never inside a request: its load is
  n/a and counts 0 here, so llama-server's overhead is TTFT − `timings.prompt_ms`. It is
  never negative: server durations that exceed llmtop's own clock (TTFT, E2E, the span the
  text arrived over) are set aside with the reason in `impossible` (telemetry.py); a
  negative overhead within the clocks' slack is n/a.

Every function returns None ("n/a") rather than inventing a value when an input is missing.

Buffered streams (docs/method.md, "Buffered streams"): a server, a proxy or a compressing
middleware can hold the text back and deliver it in one or a few pieces. The arrival stamps
then say nothing about decoding: a client TPOT of microseconds and a decode rate of tens of
thousands of tokens/s, and seconds of "overhead". `buffering()` detects it from the server's
own counts — far fewer text chunks than `eval_count` tokens, or all the text arriving in a
small part of `eval_duration` — and then the client TPOT, decode rate and overhead are n/a
with the reason; TTFT stays, but it is the time to the whole answer, and the server's rates
stay as they are.

Delivered in blocks (docs/method.md, "Buffered streams"): a proxy that forwards in blocks of
bytes (nginx's default `proxy_buffering`, 4 or 8 KiB) lets every chunk through, over the
whole decode time, so neither test above sees it; its mark is in the gaps. The chunks of a
block arrive with one read, so most gaps are ~0 and the rest are long, one per block
(`blocks`). TTFT then includes the wait for the first block to fill, and the client's rate
(the tokens after the first over E2E − TTFT) comes out above the server's own — which a
stream the client sees as it is made cannot do. The stream is judged buffered, with the
blocks' count, size and period as the evidence. The gaps alone cannot say where the text was
held: a server short of CPU (its threads on every core, the machine busy) writes the tokens
it generated in bursts too, so the reason names both, and the request's probe figures
decide.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import pairwise
from typing import Any

from llmtop.engines.events import ServerStats, StreamEvent
from llmtop.sessions.measure.telemetry import contradicted_durations, without_durations

NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000
# A stream is judged buffered only when the server generated enough tokens to tell (8), and
# then when its text came in fewer chunks than a quarter of its tokens, or arrived within a
# quarter of the server's decode time. An unbuffered Ollama stream sends about one chunk per
# token (a multi-byte character can take two tokens), spread over the whole decode time, so a
# factor of 4 on either side leaves a wide margin against false alarms.
BUFFERED_MIN_TOKENS = 8
BUFFERED_SHARE = 0.25
# A generated token is text: at least one byte of it, except the few special tokens a server
# does not stream (an end-of-turn). A server counting more than IMPOSSIBLE_PER_CHAR tokens per
# character of the text that arrived, plus IMPOSSIBLE_MARGIN, reports what did not happen
# (`eval_count` 10**18, a usage chunk that claims far more than was sent): its counts and
# rates are set aside, never averaged.
IMPOSSIBLE_PER_CHAR = 8
IMPOSSIBLE_MARGIN = 64
# Blocks (`blocks`): a gap under BLOCK_JOIN of the stream's mean gap joins a chunk to the one
# before it (arrived with the same read, or nearly: a block split over a few TCP segments).
# A token stream's gaps scatter around their mean; a gap under a quarter of it is rare (a
# machine that reads late bunches a few). The stream came in blocks when BLOCK_SHARE of its
# gaps are joined (a median block of 4 chunks or more), or BLOCK_SHARE_CONTRADICTED of them
# and the client's decode rate is over RATE_CONTRADICTED × the server's own (the server's is
# optimistic by n/(n − 1) already: an unbuffered client rate stays under it).
BLOCK_JOIN = 0.25
BLOCK_SHARE = 0.75
BLOCK_SHARE_CONTRADICTED = 0.5
RATE_CONTRADICTED = 1.25


@dataclass(frozen=True, slots=True)
class RequestMetrics:
    """Derived metrics of one request. Times in ms, rates in tokens/s; None means n/a.

    tokens_basis: "eval_count" when `output_tokens` came from the server, "chunks" when it is
    the client's count of text chunks (the server gave no `eval_count`), None with no output.
    Every field has a default ("n/a", no chunks) so a metrics record read back from an older
    or partial log (records/schema.py) keeps the fields it has; `compute_metrics` sets them all.
    """

    ttft_ms: float | None = None
    ttft_content_ms: float | None = None  # first non-empty *answer* content (after any thinking)
    e2e_ms: float | None = None
    itl_ms: tuple[float, ...] = ()
    itl_token_ms: tuple[float, ...] = ()  # per token, from the server's counts; () without them
    output_tokens: int | None = None
    tokens_basis: str | None = None
    text_chunks: int = 0
    tpot_ms: float | None = None
    client_decode_tps: float | None = None
    server_prefill_tps: float | None = None
    server_decode_tps: float | None = None
    load_ms: float | None = None
    prompt_eval_ms: float | None = None
    eval_ms: float | None = None
    total_ms: float | None = None
    overhead_ms: float | None = None
    impossible: str | None = None  # why the server's figures cannot be true (set aside)
    buffered: str | None = None  # why the stream was judged buffered (client rates n/a); None = not

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, by field name; the ITL tuples become lists."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}


def ns_to_ms(ns: int | None) -> float | None:
    """Nanoseconds → milliseconds; None stays None."""
    return None if ns is None else ns / NS_PER_MS


def rate_per_s(count: int | None, duration_ns: int | None, *, min_count: int = 1) -> float | None:
    """`count / duration × 1e9` in tokens/s, or None when undefined.

    Undefined when either input is missing, the duration is not positive, or count < min_count
    (a decode rate needs at least 2 tokens: one token has no gap to time).
    """
    if count is None or duration_ns is None or duration_ns <= 0 or count < min_count:
        return None
    return count * NS_PER_S / duration_ns


def server_prefill_tps(stats: ServerStats | None) -> float | None:
    """Prefill rate in tokens/s: evaluated prompt tokens / prompt_eval_duration × 1e9 (Ollama
    docs), the evaluated ones being prompt_eval_count less `prompt_cached_count` where the
    server reports it (llama.cpp: prompt_n = (prompt_n + cache_n) − cache_n).

    None when `prompt_eval_count` or `prompt_eval_duration` is absent or the duration is 0,
    and for a prompt-cache hit (`prompt_cache_hit`): the duration then timed only the few
    tokens not in the cache, and the count includes the cached ones (llama.cpp's prompt_n 1,
    cache_n 500 would read as a prefill of 23,335 tok/s).
    """
    if stats is None or prompt_cache_hit(stats):
        return None
    count = stats.prompt_eval_count
    if count is not None and stats.prompt_cached_count is not None:
        count = max(count - stats.prompt_cached_count, 0)
    return rate_per_s(count, stats.prompt_eval_duration)


def prompt_cache_hit(stats: ServerStats | None) -> bool:
    """Whether the server took at least half of the prompt's tokens from its cache
    (`prompt_cached_count` ≥ prompt_eval_count / 2): its prefill figures are then "cached",
    not a prefill rate."""
    if stats is None or stats.prompt_cached_count is None or not stats.prompt_eval_count:
        return False
    return 2 * stats.prompt_cached_count >= stats.prompt_eval_count


def server_decode_tps(stats: ServerStats | None) -> float | None:
    """Decode rate in tokens/s: eval_count / eval_duration × 1e9 (Ollama's convention).

    The duration spans eval_count − 1 inter-token gaps, so the figure is optimistic by
    n/(n − 1); with eval_count < 2 there is no gap and the rate is None, never 1e9/duration.
    """
    if stats is None:
        return None
    return rate_per_s(stats.eval_count, stats.eval_duration, min_count=2)


def tpot_ms(ttft_ms: float | None, e2e_ms: float | None, tokens: int | None) -> float | None:
    """Time per output token in ms: (E2E − TTFT) / (tokens − 1); None when tokens < 2 or
    E2E is not after TTFT."""
    if ttft_ms is None or e2e_ms is None or tokens is None or tokens < 2 or e2e_ms <= ttft_ms:
        return None  # no time for n − 1 tokens (all text in the done chunk) is no measurement
    return (e2e_ms - ttft_ms) / (tokens - 1)


def live_chunk_rate(
    first_text_ns: int | None, last_text_ns: int | None, chunks: int
) -> float | None:
    """Text chunks per second so far: (chunks − 1) / (last − first), the live stand-in for the
    client decode rate (a chunk is not a token; the token rate needs the server's eval_count,
    known only at the end). None until 2 chunks."""
    if first_text_ns is None or last_text_ns is None or chunks < 2 or last_text_ns <= first_text_ns:
        return None
    return (chunks - 1) * NS_PER_S / (last_text_ns - first_text_ns)


def per_token_itl(events: Sequence[StreamEvent]) -> tuple[float, ...]:
    """The per-token ITL (ms) from the server's token counts (module docstring): () unless
    every text chunk says how many tokens it carried. Chunks with one stamp are one delivery;
    the gap before a delivery of k tokens gives k values of gap / k. The first delivery's
    tokens after its first one came with it: k − 1 gaps of 0."""
    text = [e for e in events if e.has_text]
    if not text or any(e.tokens is None for e in text):
        return ()
    deliveries: list[list[int]] = []  # [stamp, tokens]
    for e in text:
        if deliveries and deliveries[-1][0] == e.t_ns:
            deliveries[-1][1] += e.tokens or 0
        else:
            deliveries.append([e.t_ns, e.tokens or 0])
    out: list[float] = [0.0] * max(deliveries[0][1] - 1, 0)
    for (t0, _), (t1, k) in pairwise(deliveries):
        if k > 0:
            out += [(t1 - t0) / NS_PER_MS / k] * k
    return tuple(out)


def buffering(text_stamps: Sequence[int], stats: ServerStats | None) -> str | None:
    """Why the stream's text was delivered buffered (see the module docstring), or None.

    text_stamps: perf_counter_ns of each text chunk; stats: the server's counts. Needs
    `eval_count` ≥ BUFFERED_MIN_TOKENS; otherwise it cannot be told and is None.
    """
    tokens = stats.eval_count if stats is not None else None
    if tokens is None or tokens < BUFFERED_MIN_TOKENS or not text_stamps:
        return None
    chunks = len(text_stamps)
    if chunks < BUFFERED_SHARE * tokens:
        return (f"{chunks} text chunk{'s' if chunks != 1 else ''} for {tokens} tokens: the "
                "text was held back and delivered in pieces (by the server or something "
                "between: a proxy, compression, a tool-calling mode)")
    decode_ns = stats.eval_duration if stats is not None else None
    span_ns = text_stamps[-1] - text_stamps[0]
    if decode_ns and span_ns < BUFFERED_SHARE * decode_ns:
        return (f"the text of {tokens} tokens arrived within {span_ns / NS_PER_MS:.1f} ms while "
                f"the server took {decode_ns / NS_PER_MS:.1f} ms to generate it: it was held "
                "back and delivered in a burst")
    return None


def blocks(text: Sequence[StreamEvent], stats: ServerStats | None,
           client_tps: float | None = None) -> str | None:
    """Why the stream's text came in blocks of chunks (module docstring, "Delivered in
    blocks"), with the evidence, or None.

    text: the text-carrying events in arrival order (perf_counter_ns stamps). stats: the
    server's figures — its decode rate, and `draft_count`: speculative decoding hands over a
    step's accepted tokens together by design, so its gaps alone are not judged. client_tps:
    the client's decode rate (tokens/s), None when n/a. Needs BUFFERED_MIN_TOKENS text chunks
    spread over some time; otherwise None.
    """
    n = len(text)
    if n < BUFFERED_MIN_TOKENS or text[-1].t_ns <= text[0].t_ns:
        return None
    join_ns = BLOCK_JOIN * (text[-1].t_ns - text[0].t_ns) / (n - 1)
    groups: list[list[StreamEvent]] = [[text[0]]]
    for a, b in pairwise(text):
        if b.t_ns - a.t_ns < join_ns:
            groups[-1].append(b)
        else:
            groups.append([b])
    joined = (n - len(groups)) / (n - 1)
    server_tps = server_decode_tps(stats)
    contradicted = (client_tps is not None and server_tps is not None
                    and client_tps > RATE_CONTRADICTED * server_tps)
    speculative = stats is not None and bool(stats.draft_count)
    if (joined < BLOCK_SHARE or speculative) and not (
            contradicted and joined >= BLOCK_SHARE_CONTRADICTED):
        return None
    return _blocks_reason(groups, join_ns, stats, client_tps, server_tps)


def _blocks_reason(groups: list[list[StreamEvent]], join_ns: float, stats: ServerStats | None,
                   client_tps: float | None, server_tps: float | None) -> str:
    """The evidence of `blocks`: how many, their median size in chunks, tokens (the chunks'
    own counts, else the server's tokens per chunk) and bytes of text, their period, and what
    the first one's wait holds."""
    n = sum(len(g) for g in groups)
    per_chunk = (stats.eval_count / n) if stats is not None and stats.eval_count else None
    if all(e.tokens is not None for g in groups for e in g):
        tokens = [float(sum(e.tokens or 0 for e in g)) for g in groups]
    else:
        tokens = [len(g) * per_chunk for g in groups] if per_chunk is not None else []
    sizes = [sum(len((e.content + e.thinking + e.tool_calls).encode()) for e in g)
             for g in groups]
    period = statistics.median(b[0].t_ns - a[0].t_ns for a, b in pairwise(groups)) / NS_PER_MS
    typical = round(statistics.median(tokens)) if tokens else None
    token_part = f"{typical} token{'s' if typical != 1 else ''}, " if tokens else ""
    chunks = statistics.median(len(g) for g in groups)
    reason = (f"delivered in {len(groups)} blocks of a median {chunks:g} "
              f"chunk{'s' if chunks != 1 else ''} ({token_part}"
              f"{statistics.median(sizes):.0f} bytes of text), one every {period:.0f} ms; "
              f"{n - len(groups)} of {n - 1} chunk gaps under {join_ns / NS_PER_MS:.1f} ms: "
              "something between the server and llmtop held the text back and forwarded it "
              "in blocks (a buffering proxy, as nginx's default proxy_buffering; compression), "
              "or the server sent it so (one short of CPU writes what it generated in bursts: "
              "the probes' CPU figures for the request tell the two apart). "
              f"TTFT includes the wait for the first block ({len(groups[0])} chunks")
    if stats is not None and stats.eval_count and stats.eval_duration and tokens:
        wait_ms = max(tokens[0] - 1, 0) * stats.eval_duration / stats.eval_count / NS_PER_MS
        reason += f": about {wait_ms:.0f} ms of the server's decoding"
    reason += ")"
    if client_tps is not None and server_tps is not None and client_tps > server_tps:
        reason += (f"; the client's decode rate, {client_tps:.1f} tok/s, is above the "
                   f"server's own {server_tps:.1f} tok/s")
    return reason


def impossible_counts(events: Sequence[StreamEvent], stats: ServerStats | None) -> str | None:
    """Why the server's counts cannot be true (IMPOSSIBLE_PER_CHAR: more tokens than the text
    that arrived can hold; 0 tokens for text that arrived; a negative count or duration), or
    None when they can be."""
    if stats is None:
        return None
    for name in ("eval_count", "prompt_eval_count", "eval_duration", "prompt_eval_duration",
                 "load_duration", "total_duration"):
        value = getattr(stats, name, None)
        if value is not None and value < 0:
            return f"the server reports {name} {value}, below zero"
    tokens = stats.eval_count
    chars = sum(len(e.content) + len(e.thinking) + len(e.tool_calls) for e in events)
    if tokens is not None and tokens > IMPOSSIBLE_PER_CHAR * chars + IMPOSSIBLE_MARGIN:
        return (f"the server counts {tokens} tokens for {chars} characters of text: more than "
                "that text can hold; its counts and rates are not used")
    if tokens == 0 and chars > 0:  # every piece of generated text is at least one token
        return (f"the server counts 0 tokens for {chars} characters of text; its counts and "
                "rates are not used (the tokens are counted as chunks)")
    return None


def compute_metrics(
    sent_ns: int, events: Sequence[StreamEvent], stats: ServerStats | None = None
) -> RequestMetrics:
    """Derive every per-request metric from the send stamp, the events and the server stats.

    sent_ns: `perf_counter_ns()` taken just before the request was sent.
    events: the stream's events in arrival order (the done/failure event last, if any).
    stats: the server's statistics (defaults to those on the done event).

    E2E is measured to the done event; a stream without one (failure, truncation) has
    E2E None, because the response never completed. A buffered stream (`buffering`, or one
    delivered in `blocks`) has client TPOT, client decode rate and overhead None, and
    `buffered` says why.
    """
    if stats is None:
        stats = next((e.stats for e in reversed(events) if e.stats is not None), None)
    stats, impossible = _trusted_stats(sent_ns, events, stats)
    text_stamps = [e.t_ns for e in events if e.has_text]
    content_stamp = next((e.t_ns for e in events if e.content), None)
    done_event = next((e for e in reversed(events) if e.done and e.failure is None), None)

    ttft = ns_to_ms(text_stamps[0] - sent_ns) if text_stamps else None
    e2e = ns_to_ms(done_event.t_ns - sent_ns) if done_event is not None else None
    eval_count = stats.eval_count if stats is not None else None
    if eval_count is not None:
        tokens, basis = eval_count, "eval_count"
    elif text_stamps:
        tokens, basis = len(text_stamps), "chunks"
    else:
        tokens, basis = None, None
    tpot, buffered = _client_tpot(events, text_stamps, stats, ttft, e2e, tokens)
    load = ns_to_ms(stats.load_duration) if stats else None
    prompt_eval = ns_to_ms(stats.prompt_eval_duration) if stats else None
    return RequestMetrics(
        ttft_ms=ttft,
        ttft_content_ms=ns_to_ms(content_stamp - sent_ns) if content_stamp is not None else None,
        e2e_ms=e2e,
        itl_ms=tuple((b - a) / NS_PER_MS for a, b in pairwise(text_stamps)),
        itl_token_ms=per_token_itl(events),
        output_tokens=tokens,
        tokens_basis=basis,
        text_chunks=len(text_stamps),
        tpot_ms=tpot,
        client_decode_tps=(1000.0 / tpot) if tpot else None,
        server_prefill_tps=server_prefill_tps(stats),
        server_decode_tps=server_decode_tps(stats),
        load_ms=load,
        prompt_eval_ms=prompt_eval,
        eval_ms=ns_to_ms(stats.eval_duration) if stats else None,
        total_ms=ns_to_ms(stats.total_duration) if stats else None,
        overhead_ms=None if buffered is not None else _overhead(ttft, stats, load, prompt_eval),
        buffered=buffered,
        impossible=impossible,
    )


def _trusted_stats(sent_ns: int, events: Sequence[StreamEvent], stats: ServerStats | None
                   ) -> tuple[ServerStats | None, str | None]:
    """The server's stats as far as they can be believed, and why the rest was set aside
    (None when nothing was): counts no text can hold drop the stats whole (every figure then
    comes from the client's stamps alone); durations over llmtop's own clock drop the
    durations, keeping the counts (llmtop's clock wins: telemetry.py)."""
    impossible = impossible_counts(events, stats)
    if impossible is not None:
        return None, impossible
    contradicted = contradicted_durations(sent_ns, events, stats)
    if stats is not None and contradicted is not None:
        return without_durations(stats), contradicted
    return stats, None


def _client_tpot(events: Sequence[StreamEvent], text_stamps: list[int],
                 stats: ServerStats | None, ttft: float | None, e2e: float | None,
                 tokens: int | None) -> tuple[float | None, str | None]:
    """(client TPOT in ms/token, why the stream is buffered): TPOT is None when the stream
    was held back (`buffering`) or delivered in `blocks`, the reason then set."""
    buffered = buffering(text_stamps, stats)
    if buffered is not None:
        return None, buffered
    tpot = tpot_ms(ttft, e2e, tokens)
    text = [e for e in events if e.has_text]
    buffered = blocks(text, stats, 1000.0 / tpot if tpot else None)
    return (tpot, None) if buffered is None else (None, buffered)


def _overhead(ttft: float | None, stats: ServerStats | None, load: float | None,
              prompt_eval: float | None) -> float | None:
    """TTFT − (load + prompt eval), ms (module docstring, "Overhead"); None when a part is
    n/a or the result is below zero (within telemetry.CLOCK_SLACK_MS the clocks agree: no
    overhead seen). An OpenAI-compatible server loads its model at its own start: its n/a
    load counts 0."""
    if load is None and stats is not None and stats.source is not None:
        load = 0.0
    if ttft is None or load is None or prompt_eval is None:
        return None
    overhead = ttft - (load + prompt_eval)
    return None if overhead < 0 else overhead

