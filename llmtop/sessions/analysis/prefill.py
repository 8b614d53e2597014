"""The prefill curve: prefill time as a quadratic in the prompt's token count, fitted by least
squares, and what a saved curve predicts for new data.

Why a quadratic: prefill reads T prompt tokens (work ∝ T) and each attends to the ones before
it (work ∝ T²), plus a fixed cost per request; the source fitted `prefill(ms) = 4.50·T +
1.96e-4·T²` and found it 10 % pessimistic on clean data (docs/method.md, "The prefill
curve"). `fit_curve` fits `a + b·T + c·T²` (ms, ms/token, ms/token²) by ordinary least
squares (numpy.linalg.lstsq) and gives each coefficient a confidence interval from the
t distribution with n − 3 degrees of freedom (scipy.stats.t), the residuals, R² and the
residual standard deviation.

Pure: numbers in, numbers out; no records, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

CONFIDENCE = 0.95  # the coefficients' confidence level
QUADRATIC_SHARE = 0.10  # the quadratic term "matters" once it adds 10 % to the linear term
POOR_FIT_SHARE = 0.10  # a size's median missed by over 10 %: the curve does not hold
CHECKED_SIZES = 4  # from 4 sizes the curve is judged at each size's median (Curve.poor_fit)
SCALE = 1000.0  # T is fitted in thousands of tokens, so the design matrix stays well scaled


class CurveError(ValueError):
    """The points cannot determine a quadratic (fewer than 3 distinct token counts, or
    fewer than 4 points, which leave no degree of freedom for an interval)."""


@dataclass(frozen=True)
class Curve:
    """`y(ms) = a + b·T + c·T²` for T prompt tokens.

    a, b, c: the coefficients (ms, ms/token, ms/token²); *_ci: their CONFIDENCE intervals
    (low, high) in the same units. n: points fitted; t_min / t_max: the token counts they
    span; r2: the coefficient of determination; residual_sd_ms: the residuals' standard
    deviation (n − 3 degrees of freedom); residuals_ms: measured − predicted per point, in
    the order given. metric: what was fitted ("prefill" or "ttft").
    """

    a: float
    b: float
    c: float
    a_ci: tuple[float, float]
    b_ci: tuple[float, float]
    c_ci: tuple[float, float]
    n: int
    t_min: float
    t_max: float
    r2: float | None
    residual_sd_ms: float
    residuals_ms: tuple[float, ...] = ()
    metric: str = "prefill"

    def predict(self, tokens: float) -> float:
        """The curve's value at `tokens` prompt tokens, ms."""
        return self.a + self.b * tokens + self.c * tokens * tokens

    def formula(self) -> str:
        """The curve as text: "prefill(ms) = 20.0 + 0.800·T + 4.00e-4·T²"."""
        return f"{self.metric}(ms) = {coef_text(self.a)} {_signed(self.b)}·T {_signed(self.c)}·T²"

    def poor_fit(self, median_ms: float | None,
                 sizes: Sequence[tuple[float, float]] = ()) -> str:
        """Why the curve should not be trusted ("" when it can be), by llmtop's rules:

        * with CHECKED_SIZES or more prompt sizes (`sizes`: each size's median token count and
          median time, ms): the curve misses a size's median by more than POOR_FIT_SHARE of
          it. That is the source's own test of a curve (docs/method.md, "The prefill curve":
          its curve was 10 % pessimistic at 195 tokens); the spread of single requests inside
          a size is the machine's, not the curve's, and is reported (residual SD) but not held
          against it;
        * with fewer sizes (a quadratic through 3 sizes meets each median whatever they are):
          its residual SD over POOR_FIT_SHARE of `median_ms` (the measured median);
        * always: a time ≤ 0 predicted inside the sizes measured."""
        reasons = []
        if len(sizes) >= CHECKED_SIZES:
            worst = max(sizes, key=lambda s: abs(self.predict(s[0]) - s[1]) / s[1])
            predicted = self.predict(worst[0])
            off = (predicted - worst[1]) / worst[1]
            if abs(off) > POOR_FIT_SHARE:
                reasons.append(
                    f"it misses the median at {worst[0]:,.0f} tokens by {100 * abs(off):.0f} % "
                    f"(predicts {predicted:,.0f} ms, measured {worst[1]:,.0f} ms)"
                )
        elif median_ms and self.residual_sd_ms > POOR_FIT_SHARE * median_ms:
            reasons.append(
                f"the residual SD ({self.residual_sd_ms:.0f} ms) is "
                f"{100 * self.residual_sd_ms / median_ms:.0f} % of the median time"
            )
        lowest = min(self.predict(self.t_min), self.predict(self.t_max))
        vertex = -self.b / (2 * self.c) if self.c else None
        if vertex is not None and self.t_min < vertex < self.t_max:
            lowest = min(lowest, self.predict(vertex))
        if lowest <= 0:
            reasons.append("it predicts a time ≤ 0 inside the sizes measured")
        return "; ".join(reasons)

    @property
    def quadratic_significant(self) -> bool:
        """True when c's confidence interval excludes 0."""
        low, high = self.c_ci
        return low > 0 or high < 0

    @property
    def quadratic_from(self) -> float | None:
        """The token count where c·T² reaches QUADRATIC_SHARE of b·T (T = 0.1·b / c), or None
        when b or c is not positive (no such point)."""
        if self.b <= 0 or self.c <= 0:
            return None
        return QUADRATIC_SHARE * self.b / self.c

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (intervals as lists); `from_dict` reads it back."""
        data = asdict(self)
        for key in ("a_ci", "b_ci", "c_ci", "residuals_ms"):
            data[key] = list(data[key])
        return data

    @classmethod
    def from_dict(cls, data: Any) -> Curve:
        """A curve from `to_dict`'s output. Raises CurveError naming what is wrong."""
        if not isinstance(data, dict):
            raise CurveError(f"a saved curve must be a JSON object, got {type(data).__name__}")
        try:
            return cls(
                a=float(data["a"]),
                b=float(data["b"]),
                c=float(data["c"]),
                a_ci=_pair(data["a_ci"]),
                b_ci=_pair(data["b_ci"]),
                c_ci=_pair(data["c_ci"]),
                n=int(data["n"]),
                t_min=float(data["t_min"]),
                t_max=float(data["t_max"]),
                r2=None if data.get("r2") is None else float(data["r2"]),
                residual_sd_ms=float(data["residual_sd_ms"]),
                residuals_ms=tuple(float(x) for x in data.get("residuals_ms", ())),
                metric=str(data.get("metric", "prefill")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CurveError(f"a saved curve lacks or mangles a field ({exc!r})") from exc


def coef_text(x: float) -> str:
    """4 significant digits; scientific (4.00e-4) below 0.01 or from 1e5."""
    if x != 0 and not 1e-2 <= abs(x) < 1e5:
        mantissa, exp = f"{x:.2e}".split("e")
        return f"{mantissa}e{int(exp)}"
    return f"{x:.4g}"


def _signed(x: float) -> str:
    return f"− {coef_text(-x)}" if x < 0 else f"+ {coef_text(x)}"


def _pair(value: Any) -> tuple[float, float]:
    low, high = value
    return float(low), float(high)


SAME_SIZE = 0.10  # token counts within 10 % of a size's smallest are that one size


def prompt_sizes(tokens: Sequence[float]) -> int:
    """How many prompt sizes the token counts cover: a calibrated size comes back from the
    server as a few nearby counts (100 → 100…106 tokens), which are one size, not seven
    (sizes 100 and 400 read as 14 "distinct" counts, and a quadratic was
    fitted to what were two points). A count more than SAME_SIZE above the current size's
    smallest starts a new size."""
    sizes = 0
    start: float | None = None
    for value in sorted(tokens):
        if start is None or value > start * (1 + SAME_SIZE) + 1:
            sizes += 1
            start = value
    return sizes


def fit_curve(
    tokens: Sequence[float],
    ms: Sequence[float],
    metric: str = "prefill",
    confidence: float = CONFIDENCE,
) -> Curve:
    """Least-squares fit of `ms ≈ a + b·T + c·T²` over paired `tokens` (T) and `ms`.

    Raises CurveError for mismatched lengths, non-finite values, fewer than 3 prompt sizes
    (`prompt_sizes`) or fewer than 4 points (the interval needs n − 3 ≥ 1).
    """
    # numpy and scipy.stats (~1 s of imports on 2 cores) only when a curve is fitted: the
    # TUI reads saved curves before its first frame and fits none
    import numpy as np
    from scipy import stats

    if len(tokens) != len(ms):
        raise CurveError(f"{len(tokens)} token counts but {len(ms)} times")
    t = np.asarray(tokens, dtype=float)
    y = np.asarray(ms, dtype=float)
    if not (np.all(np.isfinite(t)) and np.all(np.isfinite(y))):
        raise CurveError("a token count or a time is not a finite number")
    distinct = prompt_sizes(t.tolist())
    if distinct < 3 or len(t) < 4:
        raise CurveError(
            f"a quadratic needs at least 3 prompt sizes and 4 points; got {distinct} size(s) "
            f"and {len(t)} point(s): sweep more sizes (--prompt-tokens 128,512,2048, or three "
            "depths or more with --depths) or more requests"
        )
    x = t / SCALE
    design = np.column_stack([np.ones_like(x), x, x * x])
    coef, _res, _rank, _sv = np.linalg.lstsq(design, y, rcond=None)
    fitted = design @ coef
    residuals = y - fitted
    dof = len(y) - 3
    sse = float(residuals @ residuals)
    sigma2 = sse / dof
    cov = sigma2 * np.linalg.pinv(design.T @ design)
    half = stats.t.ppf(0.5 + confidence / 2, dof) * np.sqrt(np.clip(np.diag(cov), 0, None))
    scale = np.array([1.0, SCALE, SCALE * SCALE])  # back to ms, ms/token, ms/token²
    c0, c1, c2 = (coef / scale).tolist()
    h0, h1, h2 = (half / scale).tolist()
    sst = float(((y - y.mean()) ** 2).sum())
    return Curve(
        a=c0,
        b=c1,
        c=c2,
        a_ci=(c0 - h0, c0 + h0),
        b_ci=(c1 - h1, c1 + h1),
        c_ci=(c2 - h2, c2 + h2),
        n=len(y),
        t_min=float(t.min()),
        t_max=float(t.max()),
        r2=None if sst == 0 else 1.0 - sse / sst,
        residual_sd_ms=math.sqrt(sigma2),
        residuals_ms=tuple(residuals.tolist()),
        metric=metric,
    )


@dataclass(frozen=True)
class PredictionCheck:
    """A curve's prediction against a measurement at one size.

    tokens: the measured prompt's token count; predicted_ms / measured_ms; error_pct:
    (predicted − measured) / measured × 100 — positive: the curve is pessimistic (it
    predicts slower than measured), negative: optimistic. The source's check: 885 ms
    predicted at 195 tokens, 796.1 ms measured → +11.2 % (the source rounds it to "about
    10 % pessimistic").
    """

    tokens: float
    predicted_ms: float
    measured_ms: float

    @property
    def error_pct(self) -> float:
        """(predicted − measured) / measured, %."""
        return 100.0 * (self.predicted_ms - self.measured_ms) / self.measured_ms

    def sentence(self, source: str = "your curve") -> str:
        """'your curve predicts 885 ms at 195 tokens; measured 796 ms: 11 % pessimistic'."""
        err = self.error_pct
        if self.predicted_ms <= 0:
            return (
                f"{source} predicts {self.predicted_ms:.0f} ms at {self.tokens:.0f} tokens, "
                f"no time at all; measured {self.measured_ms:.0f} ms: it does not hold here"
            )
        if abs(err) < 0.5:
            return (
                f"{source} predicts {self.predicted_ms:.0f} ms at {self.tokens:.0f} tokens; "
                f"measured {self.measured_ms:.0f} ms: it holds (within 0.5 %)"
            )
        word = "pessimistic" if err > 0 else "optimistic"
        return (
            f"{source} predicts {self.predicted_ms:.0f} ms at {self.tokens:.0f} tokens; "
            f"measured {self.measured_ms:.0f} ms: {abs(err):.0f} % {word}"
        )


def check_prediction(curve: Curve, tokens: float, measured_ms: float) -> PredictionCheck:
    """What `curve` predicted at `tokens` against `measured_ms`. Raises CurveError when the
    measurement is not a positive number (a percentage of it means nothing)."""
    if not measured_ms > 0 or not math.isfinite(measured_ms):
        raise CurveError(f"a measured time must be a positive number of ms, got {measured_ms}")
    return PredictionCheck(tokens, curve.predict(tokens), measured_ms)
