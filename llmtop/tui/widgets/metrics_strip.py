"""Live numbers under the token pane, then the server's own figures once the request is done.

Row 1 (live): TTFT (ms) · text chunks, then tokens · decode rate. Row 2: what the sparkline
below shows — chunk gaps while streaming (a chunk is not known to be a token until the server's
count arrives), token gaps once the server counted one token per chunk, chunk gaps with the
tokens per chunk otherwise — with the running TPOT and decode rate (per chunk while streaming,
per token after) and the previous request's TPOT, faint. Row 3: bars of those gaps (ms,
`SparkBars`), one cell per gap from the left, with their max and p50 after them. Row 4 (after
done): status, client TPOT and E2E (ms). Row 5: server prefill/decode (tok/s), load and
overhead (ms). Row 6: the failure and its remedy, when there is one. Row 7: "⚠ NOISY while it
ran: …" when a probe sample taken while the request streamed was NOISY. Row 8: the
request's energy where a source was read ("energy 0.267 J/out tok · 0.075 J/prompt tok · 5.4
J · rapl:cpu"), absent otherwise.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.containers import Horizontal, Vertical
from textual.widgets import Static

from llmtop.engines.events import Status
from llmtop.tui.state import fmt
from llmtop.tui.state.live import CutShort, LiveRequest, cut_short
from llmtop.tui.state.session_state import GapsView, gaps_view
from llmtop.tui.widgets.quiet_static import QuietStatic
from llmtop.tui.widgets.spark_bars import SparkBars
from llmtop.tui.widgets.token_pane import failure_text

if TYPE_CHECKING:  # the records (pydantic) load after the first frame, the request's
    # collector with the connection
    from llmtop.sessions.measure.request import RequestResult
    from llmtop.sessions.records.schema import EnergyRecord, FindingRecord

HIDDEN_ROWS = ("failure", "noise", "offload", "energy")  # shown when not empty, in this order
_HIDE_EMPTY = frozenset(HIDDEN_ROWS)
_STATUS_STYLE = {Status.OK: "bold black on green", Status.CANCELLED: "bold black on yellow"}
_OTHER_STATUS = "bold white on red"
NOISY_PREFIX = "⚠ NOISY while it ran: "  # the request; the badge is the machine now


def noise_text(message: str | None) -> Text | str:
    """The NOISY mark of a request ("" when none)."""
    if not message:
        return ""
    return Text.assemble((NOISY_PREFIX, "bold yellow"), (message, "yellow"))


def offload_text(finding: FindingRecord | None) -> Text | str:
    """A request's `offload-mismatch` finding (analysis/offload.py): "⚠ GPU: " and its
    message, the likely causes under it; "" when none."""
    if finding is None:
        return ""
    style = "red" if finding.level == "fail" else "yellow"
    return Text.assemble(("⚠ GPU: ", f"bold {style}"), (finding.message, style),
                         ("\n  → " + finding.remedy, "dim"))


def server_text(result: RequestResult) -> Text:
    """The server's own figures: prefill and decode (tok/s), load and overhead (ms)."""
    m = result.metrics
    return Text.assemble(
        ("server", "dim"),
        "  prefill ",
        (fmt.rate(m.server_prefill_tps), "bold"),
        " · decode ",
        (fmt.rate(m.server_decode_tps), "bold"),
        " · load ",
        (fmt.ms(m.load_ms), "bold"),
        " · overhead ",
        (fmt.ms(m.overhead_ms), "bold"),
    )


def energy_text(records: Sequence[EnergyRecord]) -> Text | str:
    """A finished request's energy, one figure per source: J per output token (decode J /
    output tokens), J per prompt token (prefill J / prompt tokens) and the request's J;
    "(coarse)" dim where the source cannot resolve one request. "" without records."""
    parts: list[Text | str | tuple[str, str]] = []
    for e in records:
        if parts:
            parts.append("   ")
        parts += [("energy", "dim"), " ",
                  (fmt.joules(e.output_j_per_token), "bold"), "/out tok · ",
                  (fmt.joules(e.prompt_j_per_token), "bold"), "/prompt tok · ",
                  (fmt.joules(e.energy_j), "bold"), (f" · {e.source}", "dim")]
        if e.coarse:
            parts.append((" (coarse: aggregate over a bench)", "dim"))
    return Text.assemble(*parts) if parts else ""


def live_texts(live: LiveRequest) -> dict[str, Text]:
    """The live row while a request streams, by label id: "ttft" (ms, client), "count" (text
    chunks so far) and "decode" (client chunks/s so far, `LiveRequest.live_decode_cps`)."""
    return {
        "ttft": Text.assemble("TTFT ", (fmt.ms(live.ttft_ms), "bold")),
        "count": Text.assemble("chunks ", (str(live.chunks), "bold")),
        "decode": Text.assemble("decode ", (fmt.rate(live.live_decode_cps, "chunk/s"), "bold")),
    }


def gaps_text(view: GapsView) -> Text:
    """The gaps row: "token gaps ms  TPOT 10.14 ms/tok · 98.6 tok/s · prev 15.14 ms/tok"
    (`GapsView`; per chunk and chunk/s while streaming; "prev" dim)."""
    tpot = fmt.NA if view.tpot_ms is None else f"{fmt.ms(view.tpot_ms, 2)}/{view.unit}"
    text = Text.assemble(
        (view.label, "bold"),
        "  TPOT ",
        (tpot, "bold"),
        " · ",
        (fmt.rate(view.rate, f"{view.unit}/s"), "bold"),
    )
    if view.previous_tpot_ms is not None:
        previous = f" · prev {fmt.ms(view.previous_tpot_ms, 2)}/{view.previous_unit}"
        text.append(previous, "dim")
    return text


def cut_short_texts(cut: CutShort) -> dict[str, Text | str]:
    """The rows of a cancelled request that `result_texts` overrides: the client's chunk
    figures (`live.cut_short`), labelled "(chunks, cancelled)"."""
    status = Text(f" {Status.CANCELLED} ", style=_STATUS_STYLE[Status.CANCELLED])
    return {
        "count": Text.assemble("chunks ", (str(cut.chunks), "bold")),
        "decode": Text.assemble("decode ", (fmt.rate(cut.rate, "chunk/s"), "bold")),
        "client": Text.assemble(
            status,
            "  TPOT ",
            (f"{fmt.ms(cut.tpot_ms, 2)}/chunk", "bold"),
            " · last chunk ",
            (fmt.ms(cut.last_chunk_ms), "bold"),
            (" (chunks, cancelled)", "dim"),
        ),
    }


def gaps_scale(gaps_ms: Sequence[float]) -> str:
    """The gap bars' scale, drawn after them: "max 4620.0 · p50 33.1 ms" (the tallest bar and
    the median gap, ms; "" with no gap), so one stall that flattens the other bars to ▁ is
    read as what it is."""
    if not gaps_ms:
        return ""
    return f"max {max(gaps_ms):.1f} · p50 {statistics.median(gaps_ms):.1f} ms"


def result_texts(result: RequestResult, word: str = "") -> dict[str, Text | str]:
    """A finished request's rows, by label id: "ttft" (ms), "count" (the server's eval_count,
    or the client's chunks when it sent none), "decode" (client tok/s), "client" (status,
    TPOT and E2E, ms), "server" (`server_text`) and "failure" ("" when there is none). A
    cancelled request keeps its client figures per chunk (`cut_short_texts`). `word`: the
    session's status for an ok request (`SessionState.word`): "cold-start" or "cached" reads
    so, as in the history and the report."""
    # analysis.run (records, pydantic) when a result is drawn, not before the first frame
    from llmtop.sessions.analysis.run import BenchStatus

    m = result.metrics
    # "chunks" when the server sent no eval_count: the count is the client's, not tokens
    label = "chunks " if m.tokens_basis == "chunks" else "tokens "
    tokens = "n/a" if m.output_tokens is None else str(m.output_tokens)
    status = Text(f" {result.status} ", style=_STATUS_STYLE.get(result.status, _OTHER_STATUS))
    if word in (BenchStatus.COLD_START, BenchStatus.CACHED) and result.status == Status.OK:
        status = Text(f" {word} ", style=_OTHER_STATUS)
    texts: dict[str, Text | str] = {
        # a buffered stream: TTFT is the time to the whole answer, client rates are n/a
        "ttft": Text.assemble(
            "whole answer " if m.buffered else "TTFT ", (fmt.ms(m.ttft_ms), "bold")
        ),
        "count": Text.assemble(label, (tokens, "bold")),
        "decode": Text.assemble("decode ", (fmt.rate(m.client_decode_tps), "bold")),
        "client": Text.assemble(
            status,
            "  TPOT ",
            (fmt.ms(m.tpot_ms, 2), "bold"),
            " · E2E ",
            (fmt.ms(m.e2e_ms), "bold"),
        ),
        "server": (
            Text("server  no statistics (no done chunk)", style="dim")
            if result.stats is None
            else server_text(result)
        ),
        "failure": failure_text(result.failure)
        if result.failure
        else (
            Text(f"impossible server figures, set aside: {m.impossible}", style="yellow")
            if m.impossible
            else Text(f"buffered stream — client TPOT/decode n/a: {m.buffered}", style="yellow")
            if m.buffered
            else ""
        ),
    }
    cut = cut_short(result)
    return texts if cut is None else {**texts, **cut_short_texts(cut)}


class MetricsStrip(Vertical):
    """TTFT/tokens/decode/gaps while streaming; server prefill/decode/load/overhead/status after."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self._shown: object = None  # the request (or result) the rows below show
        self._noise_shown: str | None = None
        self._offload_shown: FindingRecord | None = None
        self._word_shown = ""

    async def mount_rows(self) -> None:
        """Mount the rows: the live figures, the chunk gaps (label and bars), the client's
        and the server's lines, then the rows shown only when they have something to say,
        hidden. Just after the first frame (`later.LaterParts`: before the first connection,
        so before any request); until then the strip keeps their five lines empty (CSS)."""
        live = Horizontal(Static("TTFT —", id="ttft"), Static("tokens —", id="count"),
                          Static("decode —", id="decode"), id="live-row")
        hidden = [QuietStatic("", id=wid) for wid in HIDDEN_ROWS]
        for row in hidden:
            row.display = False
        await self.mount_all([
            live, Static("chunk gaps ms", id="itl-label"),
            SparkBars(id="itl", stretch=False),  # one cell per gap, its scale after it
            QuietStatic("", id="client"), QuietStatic("", id="server"), *hidden])

    def _static(self, wid: str) -> Static:
        return self.query_one(f"#{wid}", Static)

    def _put(self, wid: str, content: Text | str) -> None:
        """Update a label. The live labels have fixed widths (CSS), so they repaint in place;
        the rows below (set when a request starts or ends) ask for a screen layout only when
        their height changes (`QuietStatic`); an unchanged label is not touched."""
        static = self._static(wid)
        if static.content == content:
            return  # the same text (TTFT, once known): no repaint
        if isinstance(static, QuietStatic):  # a layout only when its height changes
            static.set_text(Text(content) if isinstance(content, str) else content)
        else:
            static.update(content, layout=False)
        if wid in _HIDE_EMPTY:
            static.display = bool(str(content))  # no blank line where there is nothing to say

    def show_live(self, live: LiveRequest, previous: RequestResult | None = None,
                  word: str = "") -> None:
        """Update from the live buffers (capped render timer only); `previous` is the request
        before it (its TPOT is drawn as a reference); `word`: see `result_texts`."""
        result = live.result
        if result is None:
            for wid, content in live_texts(live).items():
                self._put(wid, content)
            if self._shown is not live:
                self._shown = live
                self._put("server", "")
                self._put("failure", "")
                self._put("energy", "")
            self._put("client", Text(live.wait_text() or "streaming…", style="dim"))
        elif self._shown is not result or self._word_shown != word:
            self._shown, self._word_shown = result, word
            self.show_result(result, word)
            self._put("energy", energy_text(live.energy))
        if live.noisy != self._noise_shown:
            self._noise_shown = live.noisy
            self._put("noise", noise_text(live.noisy))
        if live.offload is not self._offload_shown:
            self._offload_shown = live.offload
            self._put("offload", offload_text(live.offload))
        view = gaps_view(live, previous)
        head = gaps_text(view)
        label = self._static("itl-label")
        if label.content != head:
            label.update(head, layout=False)  # one line, full width: repaints in place
        bars = self.query_one("#itl", SparkBars)
        bars.data = view.gaps_ms  # no-op when unchanged
        bars.note = gaps_scale(view.gaps_ms)

    def clear(self) -> None:
        """No request on screen (a new session, `MainScreen.new_session`): every label back
        to what it says before the first request."""
        self._shown = self._noise_shown = self._offload_shown = None
        self._word_shown = ""
        for wid, blank in (("ttft", "TTFT —"), ("count", "tokens —"), ("decode", "decode —")):
            self._put(wid, blank)
        self._static("itl-label").update("chunk gaps ms", layout=False)
        bars = self.query_one("#itl", SparkBars)
        bars.data = ()
        bars.note = gaps_scale(())
        for wid in ("client", "server", "failure", "noise", "offload", "energy"):
            self._put(wid, "")

    def show_result(self, result: RequestResult, word: str = "") -> None:
        """The finished request's metrics (client and server side) and its status."""
        for wid, content in result_texts(result, word).items():
            self._put(wid, content)
