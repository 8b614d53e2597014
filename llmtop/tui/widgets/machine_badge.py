"""The machine in one line: QUIET / NOISY (and why) with the machine's CPU, where the probe
panel has no room (a narrow main screen, the bench screen below PANEL_MIN_WIDTH, the load
screen, which has no panel)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text

from llmtop.tui.state import fmt
from llmtop.tui.state.noise import noisy_message
from llmtop.tui.widgets.quiet_static import QuietStatic

if TYPE_CHECKING:  # the sampler's module imports psutil and the probes: after the first frame
    from llmtop.probes.sampler import ProbeSample

STARTING = "machine: probes starting…"


def badge_text(sample: ProbeSample | None, cpu: bool = True) -> Text:
    """The badge: " QUIET  CPU 12.0 %" or " NOISY  <the worst finding's message> · CPU
    99.0 %" (`cpu`: with the machine's CPU %, of all cores, and the first GPU's `gpu_badge`);
    STARTING before the first sample."""
    if sample is None:
        return Text(STARTING, style="dim")
    quiet = sample.verdict.quiet
    text = (
        Text(" QUIET ", "bold black on green")
        if quiet
        else Text.assemble((" NOISY ", "bold white on red"), " ", noisy_message(sample.verdict))
    )
    if cpu and sample.system is not None:
        text.append(
            f"{' ' if quiet else ' · '}CPU {fmt.pct(sample.system.cpu_percent)}", style="dim"
        )
        said = noisy_message(sample.verdict).startswith("thermal pressure")
        text.append(gpu_badge(sample, thermal=not said), style="dim")
    return text


def gpu_badge(sample: ProbeSample, thermal: bool = True) -> str:
    """The first GPU in a few words after the CPU: " · GPU 42 % 12.0 W · thermal serious"
    (busy %, its power, the machine's thermal pressure where read: `thermal` False leaves it
    to a NOISY message that already says it, so 80 columns hold the GPU's figures); "" without
    a GPU."""
    gpu = sample.gpu
    if gpu is None or not gpu.available or not gpu.devices:
        return ""
    d = gpu.devices[0]
    words = [f"GPU {d.util_percent:.0f} %" if d.util_percent is not None else "GPU n/a"]
    if d.power_w is not None:
        words.append(f"{d.power_w:.1f} W")
    out = " · " + " ".join(words)
    shown = thermal and d.thermal_state is not None
    return out + (f" · thermal {d.thermal_state}" if shown else "")


class MachineBadge(QuietStatic):
    """One line, cut with an ellipsis when it is longer than the widget (llmtop.tcss)."""

    def show(self, sample: ProbeSample | None) -> None:
        """Draw `sample`'s badge (`badge_text`); nothing when the text is unchanged."""
        self.set_text(badge_text(sample))


__all__ = ["STARTING", "MachineBadge", "badge_text"]
