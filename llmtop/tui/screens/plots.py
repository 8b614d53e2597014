"""The plots screen (Ctrl+G; also from the sessions screen): a session log's requests as
pictures, drawn with textual-plotext's PlotextPlot widget.

Four plots of one prompt size: TTFT and the server's decode rate per request in run order
(ok requests joined, warm-ups and excluded requests as separate marked series, the legend in
each title; the axis is scaled to the ok requests and a point far off it, such as a cold
start 80x slower, is named in the title rather than squashing the rest), and the
distributions of TTFT and of the inter-token gaps. The axes are padded (no point on the frame),
request numbers and counts are whole ticks, and both histograms start at 0 ms
(`llmtop.tui.state.plot_axes`). The log is read afresh when the screen
opens (the session log is flushed per record), so it shows the session up to now; `[` and
`]` step through the prompt sizes of a bench log. `c` switches to the context view of a
bench with a sweep, cache pairs or a conversation (analysis/context.py): the prefill curve
with the sizes' medians, its residuals, TTFT and prefill per turn against the context, and
prefill cold vs warm per cache pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Grid
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual_plotext import PlotextPlot

from llmtop.sessions.analysis.context import (
    CachePair,
    PrefillSweep,
    Turn,
    cache_pairs,
    conversation,
    prefill_sweep,
)
from llmtop.sessions.analysis.run import analyze_run
from llmtop.sessions.analysis.series import SizeSeries, run_series
from llmtop.sessions.records.log import LogError, read_log
from llmtop.tui.state.plot_axes import (
    PAD,
    histogram,
    integer_ticks,
    nice_ticks,
    off_scale,
    padded_range,
    tick_label,
)

MARKS = {"ok": "●", "warmup": "o", "excluded": "x"}  # plotext markers (a name or a character)
SYMBOLS = {"ok": "●", "warmup": "o", "excluded": "x"}  # how plotext draws MARKS
# the ok requests' line, under their points: braille dots, finer than any point's glyph
# (drawn in the points' own "•", three requests looked like thirty)
LINE_MARK = "braille"
LEGEND = {"ok": "ok", "warmup": "warm-up", "excluded": "excluded"}
# excluded red and warm-ups grey, as the HTML report draws them (red crosses): never green
COLORS = {"ok": "cyan", "warmup": "gray", "excluded": "red"}
BINS = 30


def plot_title(label: str, kinds: Sequence[str], away: Sequence[str],
               width: int | None = None) -> str:
    """A per-request plot's title with its legend, e.g. "TTFT ms · ● ok  x excluded · off
    scale: #1 1600": the legend in the title, as plotext's own box covered the first point;
    `away` names the points left off the axis. plotext drops a title wider than its plot
    (at 120 columns and at 80, the TTFT plot lost its name and its off-scale note), so
    within `width` cells the parts go in this order: the long "off scale" becomes "off: …",
    the legend goes, the off-scale note goes; the label stays. The x axis says "request #"."""
    legend = "  ".join(f"{SYMBOLS[k]} {LEGEND[k]}" for k in kinds)
    note = f"off scale: {', '.join(away)}" if away else ""
    short = f"off: {', '.join(away)}" if away else ""
    tries = [(legend, note), (legend, short), ("", short), ("", "")]
    for leg, off in tries:
        title = " · ".join(part for part in (label, leg, off) if part)
        if width is None or len(title) <= width:
            return title
    return label


class PlotsScreen(Screen[None]):
    """TTFT and decode series, TTFT and ITL histograms of one log's prompt size."""

    DEFAULT_CSS = """
    #plots-grid { grid-size: 2 2; height: 1fr; }
    #plots-title { height: auto; padding: 0 1; color: $text-muted; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Back"),
        Binding("right_square_bracket", "step(1)", "Next size"),
        Binding("left_square_bracket", "step(-1)", "Previous size"),
        Binding("c", "context", "Context"),
    ]

    def __init__(self, log_path: str) -> None:
        super().__init__()
        self.log_path = log_path
        self.series: list[SizeSeries] = []
        self.index = 0
        self.problem: str | None = None
        self.sweep: PrefillSweep | None = None
        self.pairs: list[CachePair] = []
        self.turns: list[Turn] = []
        self.cold_turns: list[Turn] = []  # the conversation replayed with the cache defeated
        self.context = False  # showing the context view (`c`)

    def compose(self) -> ComposeResult:
        yield Static(id="plots-title")
        with Grid(id="plots-grid"):
            for name in ("ttft", "decode", "ttft-hist", "itl-hist"):
                yield PlotextPlot(id=f"plot-{name}")
        yield Footer()

    def on_mount(self) -> None:
        try:
            log = read_log(self.log_path)
        except LogError as exc:
            self.problem = str(exc)
        else:
            analysis = analyze_run(log)
            self.series = run_series(analysis)
            self.sweep = prefill_sweep(analysis)
            self.pairs = cache_pairs(log.requests)
            num_ctx = (log.header.options or {}).get("num_ctx")
            curve, ctx = (self.sweep.prefill if self.sweep else None,
                          num_ctx if isinstance(num_ctx, int) else None)
            self.turns = conversation(log.requests, curve, ctx)
            self.cold_turns = conversation(log.requests, curve, ctx, "turn-cold")
        self.draw()
        # once laid out, again at the plots' real widths: a title fitted to no width was
        # dropped whole by plotext at 80x24 (seen after the first draw)
        self.call_after_refresh(self.draw)

    def on_resize(self) -> None:
        """Titles are fitted to the plots' widths: fit them again."""
        self.draw()

    def action_context(self) -> None:
        """Switch between the per-size plots and the context view."""
        self.context = not self.context
        self.draw()

    def action_step(self, delta: int) -> None:
        """Show the next (1) or previous (-1) prompt size."""
        if self.series:
            self.index = (self.index + delta) % len(self.series)
            self.draw()

    def draw(self) -> None:
        """Redraw the four plots for the current prompt size (or say why there are none)."""
        title = self.query_one("#plots-title", Static)
        if self.context:
            self.draw_context(title)
            return
        if self.problem or not self.series:
            title.update(self.problem or f"{self.log_path}: no requests yet")
            return
        s = self.series[self.index]
        title.update(
            f"{s.label} ({self.index + 1} of {len(self.series)}; [ ] switch) · {self.log_path}"
        )
        for column, name, label in ((1, "ttft", "TTFT ms"), (2, "decode", "decode tok/s")):
            plt = self._fresh(f"#plot-{name}", "", "request #")
            ok = [float(v) for p in s.points["ok"] if (v := p[column]) is not None]
            xs: list[float] = []
            ys: list[float] = []
            kinds: list[str] = []
            away: list[str] = []
            for kind, points in s.points.items():
                xy = [(p[0], float(v)) for p in points if (v := p[column]) is not None]
                if kind != "ok":  # scaled to the ok requests (plot_axes.off_scale)
                    away += [f"#{x} {y:.0f}" for x, y in xy if off_scale(y, ok)]
                    xy = [(x, y) for x, y in xy if not off_scale(y, ok)]
                if xy:
                    if kind == "ok" and len(xy) > 1:
                        plt.plot([x for x, _ in xy], [y for _, y in xy], marker=LINE_MARK,
                                 color=COLORS[kind])
                    plt.scatter([x for x, _ in xy], [y for _, y in xy], marker=MARKS[kind],
                                color=COLORS[kind])
                    xs += [float(x) for x, _ in xy]
                    ys += [y for _, y in xy]
                    kinds.append(kind)
            width = self.query_one(f"#plot-{name}", PlotextPlot).content_size.width
            # before the layout: half the screen, what the 2×2 grid gives a plot
            width = width or self.app.size.width // 2 - 2
            plt.title(plot_title(label, kinds, away, width - 2))
            if xs:  # padded: no point on the frame; request numbers are whole
                x_lo, x_hi = padded_range(xs)
                plt.xlim(x_lo, x_hi)
                plt.xticks(integer_ticks(x_lo, x_hi))
                y_lo, y_hi = padded_range(ys, floor=0.0)
                plt.ylim(y_lo, y_hi)
                ticks = nice_ticks(y_lo, y_hi)  # evenly spaced, whatever the plot's height
                plt.yticks(ticks, [tick_label(t) for t in ticks])
        self._histogram("#plot-ttft-hist", "TTFT distribution (ok requests)", s.ok_ttft, None)
        self._histogram("#plot-itl-hist", "inter-token gaps (ok requests)", s.gaps, 0.0)
        for plot in self.query(PlotextPlot):
            plot.refresh()

    def draw_context(self, title: Static) -> None:
        """The context view: curve, residuals, turns, cache pairs (each empty with its
        reason in the title when the log has none)."""
        sweep = self.sweep
        curve = sweep.prefill if sweep else None
        missing = [what for what, have in (("prefill curve", curve), ("cache pairs",
                   self.pairs), ("conversation", self.turns)) if not have]
        title.update("context (c: back)" + (f" · this log has no {', '.join(missing)}"
                                             if missing else "") + f" · {self.log_path}")
        plt = self._fresh("#plot-ttft", curve.formula() if curve else "prefill curve",
                          "prompt tokens (server)")
        if sweep is not None and curve is not None:
            plt.scatter([r.tokens for r in sweep.rows], [r.prefill_ms or 0 for r in sweep.rows],
                        marker="dot", label="median prefill ms")
            xs = [curve.t_min + (curve.t_max - curve.t_min) * i / 40 for i in range(41)]
            plt.plot(xs, [curve.predict(x) for x in xs], label="curve")
        plt = self._fresh("#plot-decode", "prefill residual ms (measured − curve)",
                          "prompt tokens (server)")
        if sweep is not None and curve is not None:
            rows = [r for r in sweep.rows if r.prefill_ms is not None and r.prefill_predicted_ms]
            plt.scatter([r.tokens for r in rows],
                        [(r.prefill_ms or 0) - (r.prefill_predicted_ms or 0) for r in rows])
        plt = self._fresh("#plot-ttft-hist", "per turn: TTFT ms (x: context full)",
                          "context tokens (server)")
        turns = [t for t in self.turns if t.context_tokens is not None]
        if turns:
            plt.plot([t.context_tokens for t in turns], [t.record.metrics.ttft_ms or 0
                                                        for t in turns], label="TTFT")
            cold = [t for t in self.cold_turns if t.context_tokens is not None]
            if cold:
                plt.plot([t.context_tokens for t in cold],
                         [t.record.metrics.ttft_ms or 0 for t in cold], label="cache defeated")
            full = [t for t in turns if t.full]
            if full:
                plt.scatter([t.context_tokens for t in full],
                            [t.record.metrics.ttft_ms or 0 for t in full], marker="x")
        plt = self._fresh("#plot-itl-hist", "prefill ms: cold vs warm", "cache pair")
        if self.pairs:
            plt.multiple_bar([str(p.pair + 1) for p in self.pairs],
                             [[p.cold.metrics.prompt_eval_ms or 0 for p in self.pairs],
                              [p.warm.metrics.prompt_eval_ms or 0 for p in self.pairs]],
                             labels=["cold", "warm"])
        for plot in self.query(PlotextPlot):
            plot.refresh()

    def _histogram(
        self, selector: str, title: str, values: Sequence[float], low: float | None
    ) -> None:
        """Counts of `values` (ms) in BINS bins from `low` (`plot_axes.histogram`), with
        whole-number ticks for the counts and the ms."""
        plt = self._fresh(selector, title, "ms")
        if not values:
            return
        lefts, counts, width = histogram(values, BINS, low)
        plt.bar([x + width / 2 for x in lefts], counts, width=0.9, color="cyan")
        plt.xlim(lefts[0], lefts[-1] + width)
        plt.xticks(integer_ticks(lefts[0], lefts[-1] + width))
        plt.ylim(0, max(counts) * (1 + PAD))
        plt.yticks(integer_ticks(0, max(counts)))

    def _fresh(self, selector: str, title: str, xlabel: str):  # type: ignore[no-untyped-def]
        plt = self.query_one(selector, PlotextPlot).plt
        plt.clear_data()
        plt.clear_figure()
        plt.title(title)
        plt.xlabel(xlabel)
        return plt
