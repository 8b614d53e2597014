"""The prefill curve (analysis/prefill.py): exact coefficients, intervals checked against
numpy.polyfit's covariance, the source's check of a saved curve, and a bench sweep against
the scripted engine whose prefill is exactly 20 + 0.8·T + 4e-4·T² ms (testing/context.py).
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from scipy import stats

from llmtop.connect import connect
from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.analysis.prefill import Curve, CurveError, check_prediction, fit_curve
from llmtop.sessions.measure.config import BenchConfig
from llmtop.sessions.reports.compare import Comparisons
from llmtop.sessions.reports.formats import render
from llmtop.sessions.reports.run import build
from llmtop.sessions.runners.bench import BenchRunner
from llmtop.sessions.runners.curves import CurveStore, SavedCurve, curve_key
from llmtop.testing.context import ContextUpstream, Prefill

TRUE = Prefill(20.0, 0.8, 4e-4)  # the done-when engine of issue 24
SIZES = (32, 64, 128, 256)


def test_exact_points_give_the_exact_coefficients():
    tokens = [16, 64, 128, 256, 512, 16, 512]
    curve = fit_curve(tokens, [TRUE.ms(t) for t in tokens])
    assert curve.a == pytest.approx(20.0, abs=1e-9)
    assert curve.b == pytest.approx(0.8, rel=1e-12)
    assert curve.c == pytest.approx(4e-4, rel=1e-9)
    assert max(abs(r) for r in curve.residuals_ms) < 1e-9 and curve.r2 == pytest.approx(1.0)
    # c·T² = 10 % of b·T at T = 0.1 · 0.8 / 4e-4 = 200 tokens
    assert curve.quadratic_from == pytest.approx(200.0)
    assert curve.formula() == "prefill(ms) = 20 + 0.8·T + 4.00e-4·T²"
    assert Curve.from_dict(curve.to_dict()) == curve


def test_intervals_match_polyfit_covariance():
    x = np.array([1.0, 2, 3, 4, 5, 6])
    y = np.array([1.0, 4.1, 8.9, 16.2, 24.8, 36.1])
    # numpy.polyfit scales its covariance by SSE / (n − 3), as an OLS interval needs
    coef, cov = np.polyfit(x, y, 2, cov=True)
    half = stats.t.ppf(0.975, 3) * np.sqrt(np.diag(cov))  # [c, b, a]
    curve = fit_curve(x, y)
    assert curve.c == pytest.approx(coef[0]) and curve.a == pytest.approx(coef[2])
    assert curve.c_ci == pytest.approx((coef[0] - half[0], coef[0] + half[0]))
    assert curve.b_ci == pytest.approx((coef[1] - half[1], coef[1] + half[1]))
    assert curve.a_ci == pytest.approx((coef[2] - half[2], coef[2] + half[2]))
    residuals = y - np.polyval(coef, x)
    assert curve.residuals_ms == pytest.approx(tuple(residuals))
    assert curve.residual_sd_ms == pytest.approx(np.sqrt((residuals**2).sum() / 3))


def test_the_sources_curve_against_its_clean_measurement():
    # the source: prefill = 4.50·T + 1.96e-4·T², T = 195 → 877.5 + 7.45 = 885 ms; measured
    # 796.1 ms. (884.95 − 796.1) / 796.1 = 11.2 % (the source says "about 10 %")
    seed = Curve(0.0, 4.50, 1.96e-4, (0, 0), (0, 0), (0, 0), 4, 100, 300, 1.0, 0.0)
    check = check_prediction(seed, 195, 796.1)
    assert check.predicted_ms == pytest.approx(884.9529)
    assert check.error_pct == pytest.approx(11.161, abs=1e-3)
    assert check.sentence() == (
        "your curve predicts 885 ms at 195 tokens; measured 796 ms: 11 % pessimistic"
    )
    with pytest.raises(CurveError, match="positive"):
        check_prediction(seed, 195, 0.0)
    below = Curve(-100.0, 1.0, 0.0, (0, 0), (0, 0), (0, 0), 8, 64, 512, 0.9, 1.0)
    assert check_prediction(below, 32, 50.0).sentence() == (  # −100 + 32 = −68 ms
        "your curve predicts -68 ms at 32 tokens, no time at all; measured 50 ms: it does not "
        "hold here"
    )


def test_a_curve_that_does_not_hold_is_called_poor():
    tokens = [64, 128, 256, 512] * 2
    exact = fit_curve(tokens, [TRUE.ms(t) for t in tokens])
    assert exact.poor_fit(500.0) == ""
    # the same sizes with prefill jumping by ±40 %: with 3 sizes or fewer named, the
    # residuals swamp the curve
    noisy_ms = [TRUE.ms(t) * (1.4 if i < 4 else 0.6) for i, t in enumerate(tokens)]
    noisy = fit_curve(tokens, noisy_ms)
    assert "residual SD" in noisy.poor_fit(500.0)
    # ... but each size's two requests straddle the truth (1.4× then 0.6×, median = mean =
    # the truth, so least squares meets it too), and the curve meets every size's median:
    # the scatter is the machine's, the curve holds
    medians = [(t, TRUE.ms(t)) for t in (64, 128, 256, 512)]
    assert noisy.poor_fit(500.0, medians) == ""
    # a size whose median sits 30 % above the others' curve: the curve misses somewhere by
    # over 10 %. Prefill 20 + 0.8·T + 4e-4·T² is 71.6, 128.6, 251.0, 534.4 ms at 64 … 512;
    # 256 measured at 1.3 × 251.0 = 326.3 ms, both requests
    bent = [TRUE.ms(t) * (1.3 if t == 256 else 1.0) for t in tokens]
    curve = fit_curve(tokens, bent)
    bent_medians = [(t, TRUE.ms(t) * (1.3 if t == 256 else 1.0)) for t in (64, 128, 256, 512)]
    worst = max(bent_medians, key=lambda m: abs(curve.predict(m[0]) - m[1]) / m[1])
    off = abs(curve.predict(worst[0]) - worst[1]) / worst[1]
    assert off > 0.10
    assert curve.poor_fit(None, bent_medians) == (
        f"it misses the median at {worst[0]:,} tokens by {100 * off:.0f} % (predicts "
        f"{curve.predict(worst[0]):,.0f} ms, measured {worst[1]:,.0f} ms)")
    # a curve that goes below 0 ms inside its own range: a = −100, b = 1 → −36 ms at 64
    down = Curve(-100.0, 1.0, 0.0, (0, 0), (0, 0), (0, 0), 8, 64, 512, 0.9, 1.0)
    assert down.poor_fit(None) == "it predicts a time ≤ 0 inside the sizes measured"


def test_too_few_sizes_is_a_clear_error():
    with pytest.raises(CurveError, match="at least 3 prompt sizes.*--prompt-tokens"):
        fit_curve([100, 100, 200, 200], [1.0, 1.0, 2.0, 2.0])


def test_two_calibrated_sizes_are_two_sizes_however_many_counts():
    # new-user pass N39: --prompt-tokens 100,400 came back as counts 100…106 and 400…406,
    # 14 distinct values, and a quadratic was fitted to what were two points
    from llmtop.sessions.analysis.prefill import prompt_sizes

    tokens = [100 + i for i in range(7)] + [400 + i for i in range(7)]
    assert prompt_sizes(tokens) == 2
    with pytest.raises(CurveError, match="got 2 size"):
        fit_curve(tokens, [TRUE.ms(t) for t in tokens])
    # 110 is within 10 % of 100 (and 1 token): one size; 112 starts the next
    assert prompt_sizes([100, 110, 111]) == 1 and prompt_sizes([100, 112]) == 2


def test_a_curve_whose_linear_term_is_not_positive_says_so():
    from llmtop.sessions.reports.context import _quadratic

    # c > 0 but b < 0 (the helper's 1273 − 13.71·T + 0.03125·T²): not "the quadratic term is
    # negative", which its sign contradicts
    curve = fit_curve([100, 200, 300, 400], [1273 - 13.71 * t + 0.03125 * t * t
                                             for t in (100, 200, 300, 400)])
    assert curve.b < 0 < curve.c
    text = _quadratic(curve)
    assert "negative" not in text and "not positive (b ≤ 0)" in text


async def _bench(url: str, path: str, **config: object) -> object:
    conn = await connect("ollama", url, "slotted")
    try:
        cfg = BenchConfig(
            requests=2, warmup=1, prompt_tokens=SIZES, max_tokens=4, preflight_s=0, **config
        )  # type: ignore[arg-type]
        return await BenchRunner(conn, cfg, path).run()
    finally:
        await conn.close()


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


def test_sweep_fits_the_scripted_prefill_within_5_percent(cache_home):
    with ContextUpstream(TRUE) as up:
        key = curve_key("ollama", up.url, "slotted")
        # a saved curve from "an earlier run": the source's own
        saved = Curve(0.0, 4.50, 1.96e-4, (0, 0), (0, 0), (0, 0), 4, 100, 300, 1.0, 0.0)
        CurveStore().store(key, SavedCurve(saved, "your curve from 11-30"))
        outcome = asyncio.run(_bench(up.url, str(cache_home / "b.jsonl")))
    report = build(outcome.log)
    sweep = report.sweep
    assert sweep is not None and sweep.prefill is not None
    fit = sweep.prefill
    for got, want in ((fit.a, 20.0), (fit.b, 0.8), (fit.c, 4e-4)):
        assert got == pytest.approx(want, rel=0.05)
    assert fit.n == 2 * len(SIZES)  # the measured requests, warm-ups left out
    assert [r.tokens for r in sweep.rows] == [float(t) for t in SIZES]  # calibrated exactly
    md = render(report, "md")
    assert "`prefill(ms) = 20 + 0.8·T + 4.00e-4·T²`" in md
    assert "from T ≈ 200 tokens" in md
    page = render(report, "html")  # the curve with its fit and residuals, in the HTML report
    assert 'id="prefill-curve"' in page and "prefill(ms) = 20 + 0.8·T + 4.00e-4·T²" in page
    # the saved curve checked on each size: at T = 32 it predicts 4.5·32 + 1.96e-4·32² =
    # 144.20 ms against 20 + 25.6 + 0.4096 = 46.01 ms measured: +213 % pessimistic
    first = sweep.prior_checks[0]
    assert first.predicted_ms == pytest.approx(144.2007, abs=1e-3)
    assert first.measured_ms == pytest.approx(46.0096, abs=1e-3)
    assert "Checked against your curve from 11-30" in md and "213 % pessimistic" in md
    # and this sweep's curve is now the saved one, with the calibration's tokens per word
    # (the slotted tokenizer: one token per word)
    now = CurveStore().load(key)
    assert now is not None and now.curve.b == pytest.approx(0.8, rel=0.05)
    assert now.tokens_per_word == pytest.approx(1.0)
    # the chat's own 10 template tokens: calibration's 17 less the 7-word closing instruction
    assert now.template_tokens == 10 and now.prompt_tokens(" ".join(["w"] * 1990)) == 2000


def test_compare_says_how_a_curve_predicts_the_other_run(cache_home):
    with ContextUpstream(TRUE) as up:
        a = asyncio.run(_bench(up.url, str(cache_home / "a.jsonl"), save_curve=False))
    faster_fixed = Prefill(10.0, 0.9, 4e-4)  # B: another engine, same model name
    with ContextUpstream(faster_fixed) as up:
        b = asyncio.run(_bench(up.url, str(cache_home / "b.jsonl"), save_curve=False))
    comparison = compare_logs(a.log, b.log)
    md = render(Comparisons([comparison], [a.log, b.log]), "md")
    # A's curve at T = 128: 20 + 102.4 + 6.5536 = 128.95 ms; B measured 10 + 115.2 + 6.5536 =
    # 131.75 ms: (128.95 − 131.75) / 131.75 = −2.1 %, optimistic
    assert "A's prefill curve against these prefill times:" in md
    assert "- it predicts 129 ms at 128 tokens; measured 132 ms: 2 % optimistic" in md
