"""The right-hand panel: what else the machine is doing, from the latest `ProbeSample`.

One Line-API widget rather than a container of three Statics: the verdict (`verdict_text`),
the machine (`system_text`) and the apps (`apps_text`) are rendered into one list of lines,
each section followed by a blank line, and a new sample repaints only the lines whose text
changed — never a screen layout. (The three Statics changed height whenever a line wrapped or
a finding came or went, e.g. "llmtop itself: 6 % ⚠ over its budget" wrapping at 42 columns,
and each such change re-arranged the whole screen: ~15 ms of CPU on a 2-core machine,
bench/tui_cost.py.) The panel's virtual height is at least its own height, so it changes
(a layout) only while the lines overflow the panel and their count changes.
"""

from __future__ import annotations

import sys
import time
from collections import deque
from typing import TYPE_CHECKING

from rich.style import Style
from rich.text import Text
from textual import events
from textual.events import Resize
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from llmtop.tui.state import fmt
from llmtop.tui.state.wrap import visible_text, wrap_lines
from llmtop.tui.widgets.apps_view import ENGINE_UNKNOWN, MAX_APPS, TOP_N, apps_text
from llmtop.tui.widgets.system_view import cpu_style, system_text
from llmtop.tui.widgets.token_pane import forward_typing
from llmtop.tui.widgets.verdict_badge import verdict_text

if TYPE_CHECKING:  # the sampler's module imports psutil and the probes: after the first frame
    from llmtop.probes.sampler import ProbeSample

STALE_AFTER_S = 5.0  # no new sample for this long: the probes are stuck (interval is 0.25-2 s)
SLOW_AFTER_S = 2.0  # an agent's sample this old came late (it samples every 0.5 s)
SECTIONS = ("verdict", "system", "apps")  # top to bottom, a blank line after each
STARTING = "probes starting…"
APPS_FIXED_LINES = 5  # the apps section beside its apps: title, llmtop, engine, cost, blank
HISTORY_MIN_HEIGHT = 40  # a panel this tall (a large terminal) also draws the CPU history
# llmtop's own start-up (imports, Textual's first layout, connecting) is not its running cost:
# a sample taken this soon after the TUI was imported does not mark llmtop over its budget
# (the first frame said "llmtop itself: 22.8 % ⚠ over its 5 % budget";
# the first frame came at 1.9 s, the engine answered at 4.3 s; two idle samples more: 10 s)
STARTUP_GRACE_NS = 10 * 10**9
STARTED_NS = time.perf_counter_ns()  # this module is imported as the TUI starts
HISTORY_KEEP = 240  # CPU readings kept for it (2 min at a sample a second while streaming)


def from_agent(sample: object) -> bool:
    """Whether `sample` is an agent's (`probes.remote.RemoteSample`). The agent's module
    (httpx under it) is looked up, not imported: no agent's sample exists before it is
    loaded, and the panel is drawn in the first frame, before anything else loads it."""
    remote = sys.modules.get("llmtop.probes.remote")
    return remote is not None and isinstance(sample, remote.RemoteSample)

class ProbePanel(ScrollView):
    """Verdict, system and apps of one sample; `show` renders one sample into the three.

    texts: what each section shows now, by name ("verdict", "system", "apps"): the Rich Text
    of `verdict_text`, `system_text` and `apps_text` (the verdict reads "probes starting…"
    until the first sample).

    When a sample has no process data (its read gave up, see `ProcessProbe`), the last good
    process data is shown marked stale with its age. When no sample at all has arrived for
    STALE_AFTER_S, the border title says how old the shown data is.

    label: the border title, naming the machine shown ("machine"; the app names the agent's
    machine, or says this is not the engine's). A sample from an agent (`RemoteSample`) is
    aged from when it was taken (its stamp, mapped onto our clock), not from when it came.

    The space decides how much is shown (the screen at every size): the apps
    fill the lines the verdict and the machine leave free (TOP_N at least, MAX_APPS at most),
    and a panel at least HISTORY_MIN_HEIGHT lines tall adds the machine's CPU history, one
    cell per sample (`fmt.spark_char`, 0–100 %), the newest on the right.
    """

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.label = "machine"
        self._title = self.label  # the border title as last set (plain text)
        self.border_title = self.label
        self.sample: ProbeSample | None = None
        self._good: ProbeSample | None = None  # the last sample with process data
        self._shown_ns: int | None = None
        self.texts: dict[str, Text] = {"verdict": Text(STARTING), "system": Text(), "apps": Text()}
        self._strips: list[Strip] = []  # the rendered lines, at the content width
        self._lines: dict[object, Strip] = {}  # the strips of the last redraw by line text
        # (plain text and spans): a line whose text did not change is not rendered again
        self._lines_key: object = None  # the (width, style) they were rendered at
        self._cpu: deque[float | None] = deque(maxlen=HISTORY_KEEP)  # machine CPU %, per sample
        self.engine_unknown = ENGINE_UNKNOWN  # the engine line with no engine CPU (the app
        # sets apps_view.ENGINE_STARTING while it connects)

    def on_mount(self) -> None:
        self.set_interval(1.0, self.check_age, name="probe-age")

    def on_key(self, event: events.Key) -> None:
        """Typing with the panel focused (Tab) goes to the prompt box (`forward_typing`)."""
        forward_typing(self, event)

    def off(self, why: str) -> None:
        """No samples will come (e.g. `llmtop watch --no-probes`): say `why` instead of
        "probes starting…"."""
        self.texts["verdict"] = Text(why, style="dim")
        self._redraw(everything=True)

    def show(self, sample: ProbeSample) -> None:
        """Render one sample (called by the app's capped render timer)."""
        self.sample = sample
        self._shown_ns = time.perf_counter_ns()
        if from_agent(sample):
            self._shown_ns = min(self._shown_ns, sample.t_ns)
        self._set_title(self.label)
        if sample.processes is not None:
            self._good = sample
        self._cpu.append(None if sample.system is None else sample.system.cpu_percent)
        self._compose_texts()
        self._redraw()

    def _compose_texts(self) -> None:
        """The three sections of the shown sample, sized to the panel (see the class)."""
        sample, good = self.sample, self._good
        if sample is None:
            return
        stale = good is not None and good is not sample
        region = self.scrollable_content_region
        system = system_text(sample.system, sample.gpu)
        if region.height >= HISTORY_MIN_HEIGHT and region.width > 0:
            system.append("\n")
            system.append_text(self.history_text(region.width))
        verdict = self._fitted_verdict(sample, region.width, region.height
                                       - len(wrap_lines(system, region.width)[0]) - 1)
        used = sum(len(wrap_lines(t, region.width)[0]) + 1 for t in (verdict, system))
        room = region.height - used - APPS_FIXED_LINES - (1 if stale else 0)
        self.texts = {
            "verdict": verdict,
            "system": system,
            "apps": apps_text(
                good.processes if stale and good else sample.processes,
                sample.cost_ms,
                (sample.t_ns - good.t_ns) / 1e9 if stale and good else None,
                top_n=max(TOP_N, min(MAX_APPS, room)),
                budget_warning=not 0 <= sample.t_ns - STARTED_NS < STARTUP_GRACE_NS,
                engine_unknown=self.engine_unknown,
            ),
        }

    @staticmethod
    def _fitted_verdict(sample: ProbeSample, width: int, height: int) -> Text:
        """The verdict in what the machine section leaves of `height` lines, keeping room
        for the apps (APPS_FIXED_LINES + TOP_N): whole when it fits, else without the
        remedies, else its first finding only (13 lines of NOISY findings
        pushed the apps to the panel's last line, at the moment one wants to see them)."""
        full = verdict_text(sample.verdict)
        if width <= 0 or height <= 0:
            return full
        room = height - APPS_FIXED_LINES - TOP_N - 1
        for text in (full, verdict_text(sample.verdict, remedies=False),
                     verdict_text(sample.verdict, remedies=False, max_findings=1)):
            if len(wrap_lines(text, width)[0]) <= room:
                return text
        return text

    def history_text(self, width: int) -> Text:
        """The "CPU history" line and, under it, the last `width` machine CPU readings, one
        cell each (0–100 %; "·" where a sample had none), coloured as the CPU bar is."""
        text = Text("CPU history, a cell per sample", style="dim")
        text.append("\n")
        for value in list(self._cpu)[-width:]:
            text.append(fmt.spark_char(value), style=cpu_style(value))
        return text

    def _render_strips(self, width: int) -> list[Strip]:
        """Each section word-wrapped to `width` (`wrap.wrap_lines`), then a blank line; the
        lines are full-width and styled, ready for `render_line`."""
        style = self.rich_style
        old, self._lines = self._lines, {}
        if self._lines_key != (width, style):
            self._lines_key, old = (width, style), {}
        strips: list[Strip] = []
        for name in SECTIONS:
            for line in wrap_lines(visible_text(self.texts[name]), width)[0]:
                key = (line.plain, tuple(line.spans))
                strip = old.get(key) or self._lines.get(key) or self._strip(line, width, style)
                self._lines[key] = strip
                strips.append(strip)
            strips.append(Strip.blank(width, style))
        return strips

    def _strip(self, line: Text, width: int, style: Style) -> Strip:
        """One wrapped line as a strip `width` cells wide, in the panel's `style`."""
        strip = Strip(list(line.render(self.app.console)), line.cell_len)
        return strip.crop_extend(0, width, style).apply_style(style)

    def _redraw(self, everything: bool = False) -> None:
        """Re-render the lines; repaint only those that changed (all when `everything`)."""
        width = self.scrollable_content_region.width
        if width <= 0:
            return  # not laid out yet: on_resize renders
        old, new = self._strips, self._render_strips(width)
        self._strips = new
        rows = max(len(new), self.scrollable_content_region.height)
        if not everything and self.virtual_size.width == width:
            # between resizes the scroll room only grows: a line count that goes up and down
            # by one with every sample must not ask for a screen layout each time
            rows = max(rows, self.virtual_size.height)
        size = Size(width, rows)
        if size != self.virtual_size:
            self.virtual_size = size  # a layout: only when the lines overflow the panel
            everything = True
        if everything:
            self.refresh()
            return
        changed = [
            y
            for y in range(max(len(old), len(new)))
            if y >= len(old) or y >= len(new) or old[y] != new[y]
        ]
        if changed:
            self.refresh_lines(changed[0], changed[-1] - changed[0] + 1)

    def on_resize(self, _: Resize) -> None:
        self._compose_texts()  # the room for apps and the history follows the size
        self._redraw(everything=True)

    def render_line(self, y: int) -> Strip:
        index = self.scroll_offset.y + y
        if index >= len(self._strips):
            return Strip.blank(self.scrollable_content_region.width, self.rich_style)
        return self._strips[index]  # full width already (no horizontal scroll)

    def check_age(self, now_ns: int | None = None) -> float | None:
        """Seconds since the last sample was shown, or for an agent's since it was taken
        (`now_ns`: perf_counter_ns, default now);
        past STALE_AFTER_S the border title reads "machine — stale, 7 s old"; an agent's
        sample past SLOW_AFTER_S (a slow agent) reads "… — 3 s old". None before the first."""
        if self._shown_ns is None:
            return None
        age = ((now_ns if now_ns is not None else time.perf_counter_ns()) - self._shown_ns) / 1e9
        title = self.label
        if age > STALE_AFTER_S:
            title = f"{self.label} — stale, {age:.0f} s old"
        elif age > SLOW_AFTER_S and from_agent(self.sample):
            title = f"{self.label} — {age:.0f} s old"
        self._set_title(title)
        return age

    def _set_title(self, title: str) -> None:
        """Set the border title when it changed: setting it repaints the whole panel, even
        to the same text (this ran every second: a frame a second for nothing)."""
        if title != self._title:
            self._title = title
            self.border_title = title
