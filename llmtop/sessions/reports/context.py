"""The context sections of a bench report: the prefill curve, the prefix cache pairs, the
conversation (analysis/context.py computes them) and a context-depth sweep
(analysis/depth.py); this module only writes them out, as markdown lines and as JSON-ready
dicts.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from llmtop.sessions.analysis.context import CachePair, PrefillSweep, Turn, cache_saving
from llmtop.sessions.analysis.depth import DEPTH_METRICS, DepthRow, Estimate
from llmtop.sessions.analysis.prefill import CONFIDENCE, QUADRATIC_SHARE, Curve, coef_text
from llmtop.sessions.measure.depths import depth_label
from llmtop.sessions.measure.metrics import MS, SERVER_DECODE
from llmtop.sessions.measure.stats import MEDIAN_CONFIDENCE
from llmtop.sessions.reports.text import md_table
from llmtop.sessions.reports.text import num as _num

SOURCES = {
    "reported": "reported by the server",
    "prompt_eval_count": "the warm prompt_eval_count was smaller by this much",
    "inferred": "inferred from time: the server reports no cached count, so the shared "
    "prefix's calibrated size is assumed",
    "none": "no sign of a hit: same count, and the warm prefill was not faster",
}


def _fit_line(curve: Curve) -> str:
    r2 = "n/a" if curve.r2 is None else f"{curve.r2:.4f}"
    return (
        f"`{curve.formula()}` — least squares over {curve.n} ok requests, T from "
        f"{curve.t_min:.0f} to {curve.t_max:.0f} tokens (the server's prompt_eval_count); "
        f"R² {r2}, residual SD {_num(curve.residual_sd_ms, 2)} ms."
    )


def _coefficients(curve: Curve) -> list[str]:
    level = f"{CONFIDENCE * 100:g} % interval"
    rows = [
        (name, coef_text(value), unit, f"[{coef_text(low)}, {coef_text(high)}]")
        for name, value, unit, (low, high) in (
            ("a (fixed)", curve.a, "ms", curve.a_ci),
            ("b (per token)", curve.b, "ms/token", curve.b_ci),
            ("c (per token²)", curve.c, "ms/token²", curve.c_ci),
        )
    ]
    return md_table(("term", "value", "unit", level), rows)


def _quadratic(curve: Curve) -> str:
    if not curve.quadratic_significant:
        return (
            "The quadratic term is not significant over these sizes (its interval "
            "includes 0): prefill grows linearly here."
        )
    start = curve.quadratic_from
    if start is None and curve.c <= 0:
        return "The quadratic term is negative: prefill grows less than linearly here."
    if start is None:  # c > 0 but b ≤ 0: no per-token cost to compare it with
        return ("The linear term is not positive (b ≤ 0): this curve does not describe "
                "prefill over these sizes; sweep more sizes, spread wider.")
    where = "" if start <= curve.t_max else " (beyond the largest size measured)"
    return (
        f"The quadratic term adds {QUADRATIC_SHARE * 100:g} % to the linear one from "
        f"T ≈ {start:,.0f} tokens{where}, and as much again as the linear term at "
        f"T ≈ {start / QUADRATIC_SHARE:,.0f}."
    )


def sweep_markdown(sweep: PrefillSweep | None) -> list[str]:
    """The "Prefill curve" section (nothing when the run had one prompt size)."""
    if sweep is None:
        return []
    lines = ["", "## Prefill curve", ""]
    if sweep.prefill is None:
        return lines + [f"No curve: {sweep.note}."]
    lines += [
        _fit_line(sweep.prefill),
        "",
        *_coefficients(sweep.prefill),
        "",
        _quadratic(sweep.prefill),
    ]
    poor = sweep.poor_fit()
    if poor:
        lines += [
            "",
            (
                f"**Poor fit**: {poor}. The prefill times vary more than a curve "
                "explains: check whether the machine was quiet (below) and rerun with more "
                "requests per size before trusting the formula."
            ),
        ]
    if sweep.ttft is not None:
        lines += ["", f"TTFT (client): {_fit_line(sweep.ttft)}"]
    lines += ["", *_sweep_table(sweep)]
    if sweep.prior_checks:
        lines += ["", f"Checked against {sweep.prior_label}:", ""]
        lines += [f"- {c.sentence('it')}" for c in sweep.prior_checks]
    return lines


def _sweep_table(sweep: PrefillSweep) -> list[str]:
    """The sweep's table: per size, the server's T, the measured and predicted prefill and
    TTFT (ms), the residual and the decode rate after T."""
    rows = [
        (
            f"{r.target} tok",
            _num(r.tokens),
            r.n,
            _num(r.prefill_ms),
            _num(r.prefill_predicted_ms),
            _num(
                None
                if r.prefill_ms is None or r.prefill_predicted_ms is None
                else r.prefill_ms - r.prefill_predicted_ms,
                2,
            ),
            _num(r.ttft_ms),
            _num(r.ttft_predicted_ms),
            _num(r.decode_tps),
        )
        for r in sweep.rows
    ]
    return md_table(
        (
            "prompt",
            "T (server)",
            "n",
            "prefill ms (median)",
            "curve ms",
            "residual ms",
            "TTFT ms (median)",
            "TTFT curve ms",
            "decode tok/s after T",
        ),
        rows,
    )


def pairs_markdown(pairs: Sequence[CachePair]) -> list[str]:
    """The "Prefix cache" section (nothing without pairs)."""
    if not pairs:
        return []
    rows = [
        (
            p.pair + 1,
            _num(p.cold.metrics.ttft_ms),
            _num(p.warm.metrics.ttft_ms),
            _num(p.cold.metrics.prompt_eval_ms),
            _num(p.warm.metrics.prompt_eval_ms),
            "n/a"
            if p.cached_tokens is None
            else str(p.cached_tokens) + (" (inferred)" if p.source == "inferred" else ""),
            _num(p.saving_ms_per_token, 3),
        )
        for p in pairs
    ]
    lines = [
        "",
        "## Prefix cache (cold: a fresh prefix; warm: the same prefix, a new suffix)",
        "",
        *md_table(
            (
                "pair",
                "TTFT cold ms",
                "TTFT warm ms",
                "prefill cold ms",
                "prefill warm ms",
                "cached tokens",
                "saved ms per cached token",
            ),
            rows,
        ),
        "",
    ]
    savings = [s for p in pairs if (s := p.saving_ms_per_token) is not None]
    if savings:
        inferred = any(p.source == "inferred" for p in pairs)
        lines.append(
            f"Median saving: {_num(statistics.median(savings), 3)} ms of prefill per "
            f"cached token{' (inferred from time)' if inferred else ''}."
        )
    for source in dict.fromkeys(p.source for p in pairs):
        lines.append(f"- cached tokens: {SOURCES[source]}")
    return lines


def turns_markdown(turns: Sequence[Turn], cold: Sequence[Turn] = ()) -> list[str]:
    """The "Conversation" section (nothing without turns); with `cold` (the replay with the
    cache defeated), each turn's cold TTFT and what the cache saved."""
    if not turns:
        return []
    cold_by_turn = {t.turn: t for t in cold}
    saved = cache_saving(turns, cold)
    rows = []
    for t in turns:
        row: tuple[object, ...] = (
            t.turn,
            _num(t.context_tokens),
            _num(t.evaluated),
            "n/a" if t.cached is None else t.cached,
            _num(t.record.metrics.ttft_ms),
            _num(t.record.metrics.prompt_eval_ms),
        )
        if cold:
            c = cold_by_turn.get(t.turn)
            row += (_num(c.record.metrics.ttft_ms) if c else "n/a", _num(saved.get(t.turn)))
        rows.append((*row, _num(t.predicted_ms), t.full or ""))
    head: tuple[str, ...] = ("turn", "context tokens (server)", "evaluated (reported)",
                             "cached (reported)", "TTFT ms", "prefill ms")
    if cold:
        head += ("TTFT cache defeated ms", "saved by the cache ms")
    lines = [
        "",
        "## Conversation (each turn sends the whole history)",
        "",
        *md_table((*head, "curve: cold prefill ms", "context full"), rows),
    ]
    if saved:
        last = max(saved)
        lines += ["", (
            f"Replayed with the cache defeated (fresh words opening the first message, the same "
            f"history and message), turn {last} took "
            f"{_num(cold_by_turn[last].record.metrics.ttft_ms)} ms to its first token instead of "
            f"{_num(next(t for t in turns if t.turn == last).record.metrics.ttft_ms)} ms: "
            f"the cache saved {_num(saved[last])} ms there.")]
    counts = [t.context_tokens for t in turns if t.context_tokens is not None]
    if len(counts) >= 2 and counts[-1] <= counts[0]:
        lines += [
            "",
            (
                "The server's count did not grow with the history: it counts only the "
                "tokens it evaluated, so the context column is what it read, not what it "
                "held."
            ),
        ]
    full = [t for t in turns if t.full]
    if full:
        lines += [
            "",
            (
                f"The context filled at turn {full[0].turn}: {full[0].full}; turns "
                "from there are shown, never averaged with the others."
            ),
        ]
    return lines


def context_json(
    sweep: PrefillSweep | None, pairs: Sequence[CachePair], turns: Sequence[Turn],
    cold: Sequence[Turn] = (),
) -> dict[str, Any]:
    """The sections as JSON-ready dicts (None / [] where the run had none); each turn's
    `saved_ms` is what the cache saved (None without a cold replay of it)."""
    curve: dict[str, Any] | None = None
    if sweep is not None:
        curve = {
            "prefill": sweep.prefill.to_dict() if sweep.prefill else None,
            "formula": sweep.prefill.formula() if sweep.prefill else None,
            "quadratic_from_tokens": sweep.prefill.quadratic_from if sweep.prefill else None,
            "ttft": sweep.ttft.to_dict() if sweep.ttft else None,
            "note": sweep.note,
            "sizes": [vars(r) for r in sweep.rows],
            "prior": [
                {
                    "tokens": c.tokens,
                    "predicted_ms": c.predicted_ms,
                    "measured_ms": c.measured_ms,
                    "error_pct": c.error_pct,
                }
                for c in sweep.prior_checks
            ],
        }
    return {
        "prefill_curve": curve,
        "cache_pairs": [
            {
                "pair": p.pair,
                "cached_tokens": p.cached_tokens,
                "source": p.source,
                "saving_ms_per_token": p.saving_ms_per_token,
                "cold": p.cold.metrics.to_dict(),
                "warm": p.warm.metrics.to_dict(),
            }
            for p in pairs
        ],
        "conversation": _turns_json(turns, cache_saving(turns, cold)),
        "conversation_cold": _turns_json(cold, {}),
    }


def _turns_json(turns: Sequence[Turn], saved: dict[int, float]) -> list[dict[str, Any]]:
    return [
            {
                "turn": t.turn,
                "context_tokens": t.context_tokens,
                "evaluated": t.evaluated,
                "cached": t.cached,
                "predicted_ms": t.predicted_ms,
                "full": t.full,
                "saved_ms": saved.get(t.turn),
                "metrics": t.record.metrics.to_dict(),
            }
            for t in turns
    ]


def _estimate_cell(e: Estimate, unit: str) -> str:
    """"812.4 [790.1–830.0]": the median and its interval, n/a where absent; one decimal for
    rates, two for times under 100 ms (a TPOT of 8.37 ms)."""
    digits = 2 if unit == MS and e.median is not None and e.median < 100 else 1
    if e.median is None:
        return _num(None)
    if e.low is None or e.high is None:
        return f"{_num(e.median, digits)} (n={e.n})"
    return f"{_num(e.median, digits)} [{_num(e.low, digits)}–{_num(e.high, digits)}]"


# Beside "prefill", the server's decode rate is named as short (both are the server's)
_DEPTH_HEADS = {SERVER_DECODE.key: "decode"}


def depth_markdown(rows: Sequence[DepthRow]) -> list[str]:
    """The "Context depth" section: one row per depth, each metric's median with its
    interval (nothing when the run swept no depths)."""
    if not rows:
        return []
    headers = ("depth", "server tokens", "n",
               *(f"{_DEPTH_HEADS.get(m.key, m.shown)} {m.unit}" for m in DEPTH_METRICS))
    table = [(depth_label(r.depth), _num(r.tokens, 0),
              max((e.n for e in r.estimates.values()), default=0),
              *(_estimate_cell(r.estimates[m.key], m.unit) for m in DEPTH_METRICS))
             for r in rows]
    notes = sorted({e.note for r in rows for e in r.estimates.values() if e.note})
    how = (f"Per depth: the median of the baseline requests and its {MEDIAN_CONFIDENCE * 100:g} % "
           "interval in brackets (the sign test's order statistics: no shape assumed); "
           "prefill and decode are the server's own rates, decode after the depth's "
           "context; server tokens is its count of the context (prompt_eval_count).")
    return ["", "## Context depth", "", how, "",
            *md_table(headers, table), *([""] + [f"*{n}*" for n in notes] if notes else [])]


def depth_json(rows: Sequence[DepthRow]) -> dict[str, Any]:
    """{"context_depth": [row, …]}: each depth's row (DepthRow.to_dict), [] when none."""
    return {"context_depth": [r.to_dict() for r in rows]}
