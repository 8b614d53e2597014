"""Joules in a window, per request and per token: pure functions over one source's samples.

A source's samples (`EnergySample`, stamps in `time.perf_counter_ns()`, in time order) define
a cumulative energy E(t), J, from the first sample:

- COUNTER: E rises by Δvalue × joules_per_unit between two samples; a fall is a wrap when the
  source has a `wrap_range` (Δ = value_b − value_a + wrap_range: the counter runs from 0 up
  to the range and starts again at 0, kernel Documentation/power/powercap/powercap.rst,
  `max_energy_range_uj`), else a reset (no joules across it). Between samples E is linear
  (the counter is read at the stamps; nothing is known in between).
- LEVEL (battery): E rises by (value_a − value_b) × joules_per_unit; a charge in µAh is
  further multiplied by the mean of the two voltages (E = ∫V dQ by the trapezoid rule;
  multiplying charge × voltage at each sample and differencing would count the voltage's own
  sag as energy). A rise of the level (charging) gives no joules across it.
- POWER: E rises by (P_a + P_b) / 2 × Δt (trapezoid rule); inside a segment E is the exact
  integral of the linearly interpolated power, P_a·τ + (P_b − P_a)·τ² / (2Δt).

The window's joules are E(t1) − E(t0); both edges must lie within the samples.

"Too coarse for one request" (`WindowEnergy.coarse`): a reading is stale by up to one update
period at each edge, and a difference of two readings is uncertain by one resolution step, so
a window is coarse when it is shorter than `1 / MAX_EDGE_ERROR` update periods, or its joules
are under `1 / MAX_EDGE_ERROR` resolution steps (that bounds the edge error to about
MAX_EDGE_ERROR = 10 % of the figure); and when its two edges lie further from their nearest
samples, summed, than MAX_EDGE_ERROR of its length (E is interpolated over that distance at
each edge, so the figure borrows that much of the power around the edge; with no sample
near it, it is the surrounding interval's mean power × the window, not a measurement of
the window). A slow source (`SourceInfo.coarse`: a battery) whose update period is neither
known nor seen in the samples is coarse unless the window spans 1 / MAX_EDGE_ERROR of the
longest sample spacings (an upper bound of its period when every sample changed), and always
when the gauge changed fewer than twice. Coarse figures are still returned: aggregate them
over the run (`run_energy`) and say so.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Sequence

from llmtop.probes.energy.model import (
    EnergySample,
    Kind,
    RequestEnergy,
    RunEnergy,
    SourceInfo,
    WindowEnergy,
)

MAX_EDGE_ERROR = 0.1  # the edge error a per-request figure may carry, as a share of it
COARSE_ADVICE = "too coarse for one request: aggregate over the run"
# The most power one source can draw, W. The largest CPU packages are rated 500 W (AMD EPYC
# 9965, Intel Xeon 6980P), the largest GPU boards about 1.2 kW (NVIDIA GB200), a laptop
# battery delivers under 300 W; 10 kW is 8 to 20 times those. A reading that implies more
# (a counter that jumped by megajoules, one that ran backwards taken for a wrap, a power
# sample of 25 MW) is a fault of the counter or its driver, not energy: it is set aside.
MAX_SOURCE_POWER_W = 10_000.0


def segment_joules(info: SourceInfo, a: EnergySample, b: EnergySample) -> tuple[float | None, str]:
    """Joules between two consecutive samples a → b of `info` (formulas: module docstring).

    Returns (joules, "") or (None, reason) when a value is missing, a counter without a wrap
    range fell, a battery level rose, a power reading is negative, or the joules imply more
    than MAX_SOURCE_POWER_W over the segment (`_too_much`)."""
    if a.value is None or b.value is None:
        return None, "no reading at a sample in the window"
    if info.kind is Kind.POWER:
        low = min(a.value, b.value)
        if low < 0:
            return None, f"a power reading of {low:.3g} W: power drawn is not negative"
        return _too_much(info, a, b, (a.value + b.value) / 2 * (b.t_ns - a.t_ns) / 1e9, "")
    if info.kind is Kind.COUNTER:
        delta = b.value - a.value
        wrapped = ""
        if delta < 0:
            if not info.wrap_range:
                return None, "the counter went backwards (driver reload?)"
            delta += info.wrap_range
            wrapped = (f"the counter fell by {(a.value - b.value) * info.joules_per_unit:.3g} J; "
                       "read as a wrap, ")
        return _too_much(info, a, b, delta * info.joules_per_unit, wrapped)
    used = a.value - b.value
    if used < 0:
        return None, "the battery's level rose (charging) in the window"
    if a.volts is not None and b.volts is not None:
        return _too_much(info, a, b, used * info.joules_per_unit * (a.volts + b.volts) / 2, "")
    if a.volts is not None or b.volts is not None:
        return None, "no voltage at a sample in the window"
    return _too_much(info, a, b, used * info.joules_per_unit, "")


def _too_much(info: SourceInfo, a: EnergySample, b: EnergySample, joules: float,
              wrapped: str) -> tuple[float | None, str]:
    """(joules, "") for a plausible segment a → b, else (None, why): the mean power it implies,
    joules over the segment's seconds, is above MAX_SOURCE_POWER_W. The seconds are at least
    the source's update period (a RAPL counter steps every 1 ms: two reads closer than that
    may see a whole step), and 1 ns when neither is known. `wrapped`: the words saying the
    segment was read as a counter's wrap, to start the reason."""
    seconds = max((b.t_ns - a.t_ns) / 1e9, info.update_period_s or 0.0, 1e-9)
    power = joules / seconds
    if power <= MAX_SOURCE_POWER_W:
        return joules, ""
    return None, (f"{wrapped}{joules:.3g} J in {seconds:.3g} s would be {power:.3g} W, more "
                  f"than any one source draws ({MAX_SOURCE_POWER_W:.0f} W): a faulty reading, "
                  "set aside")


def _partial(info: SourceInfo, a: EnergySample, b: EnergySample, seg_j: float, t_ns: int) -> float:
    """Joules from a.t_ns to t_ns inside the segment a → b (whose total is seg_j)."""
    span = b.t_ns - a.t_ns
    if span <= 0:
        return 0.0
    tau = t_ns - a.t_ns
    if info.kind is Kind.POWER and a.value is not None and b.value is not None:
        tau_s, span_s = tau / 1e9, span / 1e9
        return a.value * tau_s + (b.value - a.value) * tau_s * tau_s / (2 * span_s)
    return seg_j * tau / span


def observed_update_period(samples: Sequence[EnergySample]) -> float | None:
    """The source's update period as the samples show it, s: the mean interval between the
    stamps at which the value changed. Only where the sampling resolves the updates (at least
    one pair of consecutive samples with equal values); None otherwise (the source updates
    faster than it is sampled, or fewer than two changes were seen)."""
    changes: list[int] = []
    repeated = False
    for prev, cur in itertools.pairwise(samples):
        if prev.value is None or cur.value is None:
            continue
        if cur.value == prev.value:
            repeated = True
        else:
            changes.append(cur.t_ns)
    if not repeated or len(changes) < 2:
        return None
    return (changes[-1] - changes[0]) / (len(changes) - 1) / 1e9


def window_energy(
    info: SourceInfo, samples: Sequence[EnergySample], t0_ns: int, t1_ns: int
) -> WindowEnergy:
    """Joules `info` measured in [t0_ns, t1_ns] (perf_counter ns) from its `samples`.

    samples: in time order (non-decreasing t_ns). Needs a sample at or before t0_ns and one
    at or after t1_ns; otherwise, or across a missing reading, a reset or a charge, joules is
    None with the reason. The coarse rule and the formulas: the module docstring.
    Raises ValueError when t1_ns < t0_ns or the samples are out of order."""
    if t1_ns < t0_ns:
        raise ValueError(f"window ends before it starts: t0_ns={t0_ns}, t1_ns={t1_ns}")
    stamps = [s.t_ns for s in samples]
    if any(b < a for a, b in itertools.pairwise(stamps)):
        raise ValueError("samples must be in time order")
    inside = bisect.bisect_right(stamps, t1_ns) - bisect.bisect_left(stamps, t0_ns)

    def result(joules: float | None, coarse: bool, reason: str | None) -> WindowEnergy:
        return WindowEnergy(info.name, t0_ns, t1_ns, joules, coarse, reason, inside,
                            info.integrated)

    if not info.readable:
        return result(None, False, info.reason or "source not readable")
    i0 = bisect.bisect_right(stamps, t0_ns) - 1  # last sample at or before t0
    i1 = bisect.bisect_left(stamps, t1_ns)  # first sample at or after t1
    if i0 < 0 or i1 >= len(samples):
        return result(None, False, "the window is not inside the samples (need one at or "
                                   "before its start and one at or after its end)")
    joules = 0.0
    outside_ns = _to_nearest(stamps, t0_ns) + _to_nearest(stamps, t1_ns)
    for k in range(i0, max(i1, i0 + 1)):
        if k + 1 >= len(samples):
            break
        a, b = samples[k], samples[k + 1]
        seg, why = segment_joules(info, a, b)
        if seg is None:
            return result(None, False, why)
        lo, hi = max(t0_ns, a.t_ns), min(t1_ns, b.t_ns)
        if hi > lo:
            joules += _partial(info, a, b, seg, hi) - _partial(info, a, b, seg, lo)
    return result(joules, *_coarse(info, samples, (t1_ns - t0_ns) / 1e9, outside_ns / 1e9,
                                  joules))


def _to_nearest(stamps: Sequence[int], t_ns: int) -> int:
    """ns from `t_ns` to the nearest stamp: how far E(t) is interpolated at an edge."""
    k = bisect.bisect_left(stamps, t_ns)
    return min(abs(stamps[j] - t_ns) for j in (k - 1, k) if 0 <= j < len(stamps))


def _coarse(
    info: SourceInfo, samples: Sequence[EnergySample], duration_s: float, outside_s: float,
    joules: float,
) -> tuple[bool, str | None]:
    why: list[str] = []
    period = info.update_period_s or observed_update_period(samples)
    if period is not None and duration_s < period / MAX_EDGE_ERROR:
        why.append(f"{duration_s:.3g} s is under {1 / MAX_EDGE_ERROR:g} update periods "
                   f"of {period:.3g} s")
    elif period is None and info.coarse:
        why.extend(_unknown_period(samples, duration_s))
    if outside_s > MAX_EDGE_ERROR * duration_s:
        why.append(f"its edges are {outside_s:.3g} s from the nearest samples, over "
                   f"{MAX_EDGE_ERROR:.0%} of its {duration_s:.3g} s: the figure is the "
                   "surrounding interval's mean power, not the window's")
    if info.resolution_j and abs(joules) < info.resolution_j / MAX_EDGE_ERROR:
        why.append(f"{joules:.3g} J is under {1 / MAX_EDGE_ERROR:g} steps of "
                   f"{info.resolution_j:.3g} J")
    if not why:
        return False, None
    return True, f"{COARSE_ADVICE} ({'; '.join(why)})"


def _unknown_period(samples: Sequence[EnergySample], duration_s: float) -> list[str]:
    """The coarse rule for a slow source (a battery gauge) whose update period the samples do
    not show: if some consecutive values repeat, the gauge changed fewer than twice over the
    whole series (coarse); if none repeat, it updates at least as often as it was sampled, so
    the longest sample spacing bounds the period from above and the usual rule applies."""
    values = [s.value for s in samples if s.value is not None]
    if any(a == b for a, b in itertools.pairwise(values)):
        return ["the gauge changed fewer than twice in the samples"]
    bound = max((b.t_ns - a.t_ns for a, b in itertools.pairwise(samples)), default=0) / 1e9
    if duration_s < bound / MAX_EDGE_ERROR:
        return [(f"{duration_s:.3g} s is under {1 / MAX_EDGE_ERROR:g} sample spacings of "
                f"{bound:.3g} s (the gauge's update period is not known)")]
    return []


def idle_power(
    info: SourceInfo, samples: Sequence[EnergySample], t0_ns: int, t1_ns: int
) -> float | None:
    """Mean power in [t0_ns, t1_ns], W: the machine's idle power when the window is a quiet
    one before the run (preflight's). window joules / window seconds; None when the window's
    joules are unknown (see `window_energy` for why) or it is empty.
    Raises ValueError as `window_energy` does."""
    return window_energy(info, samples, t0_ns, t1_ns).mean_power_w


def _per(joules: float | None, count: int) -> float | None:
    return joules / count if joules is not None and count > 0 else None


def _less_idle(window: WindowEnergy | None, idle_w: float | None) -> float | None:
    if window is None or window.joules is None or idle_w is None:
        return None
    return window.joules - idle_w * window.duration_s


def request_energy(
    info: SourceInfo,
    samples: Sequence[EnergySample],
    send_ns: int,
    first_token_ns: int | None,
    last_chunk_ns: int,
    prompt_tokens: int,
    output_tokens: int,
    idle_power_w: float | None = None,
) -> RequestEnergy:
    """One request's energy from one source, split at its first token.

    Stamps: perf_counter ns; send ≤ first token ≤ last chunk (first_token_ns None: a request
    that produced no token; then only the total is given).
    total = E[send, last chunk]; prefill = E[send, first token]; decode = E[first token,
    last chunk] (J). j_per_output_token = decode / output_tokens; j_per_prompt_token =
    prefill / prompt_tokens (J/token; None for a count of 0 or unknown energy).
    Above idle (idle_power_w in W, e.g. from `idle_power`): each energy − idle_power_w ×
    its window's seconds, and the per-token figures from those.
    Raises ValueError for stamps out of order or negative token counts."""
    if prompt_tokens < 0 or output_tokens < 0:
        raise ValueError(f"token counts must be ≥ 0: {prompt_tokens}, {output_tokens}")
    if first_token_ns is not None and not send_ns <= first_token_ns <= last_chunk_ns:
        raise ValueError("stamps must satisfy send ≤ first token ≤ last chunk: "
                         f"{send_ns}, {first_token_ns}, {last_chunk_ns}")
    total = window_energy(info, samples, send_ns, last_chunk_ns)
    prefill = decode = None
    if first_token_ns is not None:
        prefill = window_energy(info, samples, send_ns, first_token_ns)
        decode = window_energy(info, samples, first_token_ns, last_chunk_ns)
    return request_from_windows(info.name, total, prefill, decode, prompt_tokens,
                                output_tokens, idle_power_w)


def request_from_windows(
    source: str,
    total: WindowEnergy,
    prefill: WindowEnergy | None,
    decode: WindowEnergy | None,
    prompt_tokens: int,
    output_tokens: int,
    idle_power_w: float | None = None,
) -> RequestEnergy:
    """A request's figures from its three windows (send → last chunk, send → first token,
    first token → last chunk), already measured: one source's (`request_energy`) or a sum
    over several (`combine`). Per-token and above-idle arithmetic as in `request_energy`.
    Raises ValueError for negative token counts."""
    if prompt_tokens < 0 or output_tokens < 0:
        raise ValueError(f"token counts must be ≥ 0: {prompt_tokens}, {output_tokens}")
    pre_j = prefill.joules if prefill else None
    dec_j = decode.joules if decode else None
    pre_idle, dec_idle = _less_idle(prefill, idle_power_w), _less_idle(decode, idle_power_w)
    return RequestEnergy(
        source=source,
        total=total,
        prefill=prefill,
        decode=decode,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        j_per_output_token=_per(dec_j, output_tokens),
        j_per_prompt_token=_per(pre_j, prompt_tokens),
        idle_power_w=idle_power_w,
        total_above_idle_j=_less_idle(total, idle_power_w),
        prefill_above_idle_j=pre_idle,
        decode_above_idle_j=dec_idle,
        j_per_output_token_above_idle=_per(dec_idle, output_tokens),
        j_per_prompt_token_above_idle=_per(pre_idle, prompt_tokens),
    )


def run_energy(
    info: SourceInfo,
    samples: Sequence[EnergySample],
    t0_ns: int,
    t1_ns: int,
    prompt_tokens: int,
    output_tokens: int,
    requests: int,
    idle_power_w: float | None = None,
) -> RunEnergy:
    """A run's (or one load level's) energy: E[t0, t1] in J, and J per output token =
    E / output_tokens (all-in: prefill included). Above idle: E − idle_power_w × seconds.
    The figure to give when per-request windows are coarse. Raises ValueError as
    `window_energy` does, or for negative counts."""
    if min(prompt_tokens, output_tokens, requests) < 0:
        raise ValueError("counts must be ≥ 0")
    return run_from_window(info.name, window_energy(info, samples, t0_ns, t1_ns),
                           prompt_tokens, output_tokens, requests, idle_power_w)


def run_from_window(
    source: str,
    window: WindowEnergy,
    prompt_tokens: int,
    output_tokens: int,
    requests: int,
    idle_power_w: float | None = None,
) -> RunEnergy:
    """A run's figures from its window, already measured (one source's or a `combine`d
    sum): J per output token = window J / output_tokens; above idle as in `run_energy`.
    Raises ValueError for negative counts."""
    if min(prompt_tokens, output_tokens, requests) < 0:
        raise ValueError("counts must be ≥ 0")
    above = _less_idle(window, idle_power_w)
    return RunEnergy(
        source=source,
        window=window,
        prompt_tokens=prompt_tokens,
        output_tokens=output_tokens,
        requests=requests,
        j_per_output_token=_per(window.joules, output_tokens),
        idle_power_w=idle_power_w,
        above_idle_j=above,
        j_per_output_token_above_idle=_per(above, output_tokens),
    )


def combine(name: str, windows: Sequence[WindowEnergy]) -> WindowEnergy:
    """Sum the same window over several sources (the CPU packages: `SourceInfo.summed`),
    named `name`. joules: the sum, None if any is None; coarse if any is; samples_inside: the
    fewest. Raises ValueError for no windows or windows that differ in t0/t1."""
    if not windows:
        raise ValueError("nothing to combine")
    t0, t1 = windows[0].t0_ns, windows[0].t1_ns
    if any(w.t0_ns != t0 or w.t1_ns != t1 for w in windows):
        raise ValueError("windows differ")
    parts = [w.joules for w in windows]
    joules = None if any(p is None for p in parts) else sum(p for p in parts if p is not None)
    reasons = "; ".join(f"{w.source}: {w.reason}" for w in windows if w.reason)
    return WindowEnergy(name, t0, t1, joules, any(w.coarse for w in windows), reasons or None,
                        min(w.samples_inside for w in windows),
                        any(w.integrated for w in windows))
