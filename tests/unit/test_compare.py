"""`llmtop compare`: verdicts on constructed runs with known differences, refusals, warnings,
exit codes. Expected medians are computed with `statistics.median`, independently of numpy."""

from __future__ import annotations

import json
import random
import re
import statistics

import pytest

from llmtop import cli
from llmtop.sessions.analysis.compare.logs import compare_logs
from llmtop.sessions.analysis.compare.stats import MIN_OK, judge, ratio_test
from llmtop.sessions.measure.metrics import COMPARE_METRICS
from llmtop.sessions.records.log import read_log
from tests.unit.compare_logs import lognormal, write_log

TTFT, DECODE = COMPARE_METRICS["ttft"], COMPARE_METRICS["decode"]


def test_ratio_of_medians_and_an_interval_around_it():
    rng = random.Random(7)
    a, b = lognormal(rng, 100, 20), lognormal(rng, 130, 20)
    t = ratio_test(a, b)
    assert t.median_a == pytest.approx(statistics.median(a))
    assert t.ratio == pytest.approx(statistics.median(b) / statistics.median(a))
    assert t.ci_low < t.ratio < t.ci_high and t.ci_low > 1 and t.significant


def test_the_bootstrap_is_seeded():
    rng = random.Random(3)
    a, b = lognormal(rng, 100, 15), lognormal(rng, 100, 15)
    assert ratio_test(a, b, seed=5) == ratio_test(a, b, seed=5)


def test_equal_distributions_read_no_significant_difference_in_95_percent_of_trials():
    # 200 seeded trials of two runs of 20 requests drawn from one distribution
    quiet = 0
    for trial in range(200):
        rng = random.Random(trial)
        row = judge(TTFT, "200 tok", lognormal(rng, 400, 20), lognormal(rng, 400, 20), seed=trial)
        quiet += not row.significant
        assert row.significant or row.verdict.startswith("no significant difference")
    assert quiet >= 190


def test_a_20_percent_shift_is_detected_every_time():
    for trial in range(30):
        rng = random.Random(1000 + trial)
        slow = judge(TTFT, "200 tok", lognormal(rng, 400, 20), lognormal(rng, 480, 20), seed=trial)
        assert slow.regression and slow.verdict.startswith("B is ") and "slower" in slow.verdict
        rates = judge(DECODE, "200 tok", lognormal(rng, 50, 20), lognormal(rng, 40, 20), seed=trial)
        assert rates.regression and "slower" in rates.verdict


def test_verdict_words_and_numbers():
    rng = random.Random(11)
    a, b = lognormal(rng, 400, 20, 0.05), lognormal(rng, 320, 20, 0.05)  # B's TTFT 20 % lower
    row = judge(TTFT, "200 tok", a, b)
    m = re.fullmatch(r"B is (\d\.\d\d)× faster \(95 % CI (\d\.\d\d)–(\d\.\d\d)\)", row.verdict)
    assert m, row.verdict
    speed = statistics.median(a) / statistics.median(b)  # a time: faster = A / B
    assert float(m[1]) == pytest.approx(speed, abs=0.005)
    assert float(m[2]) <= float(m[1]) <= float(m[3]) and not row.regression


def test_too_few_ok_requests_are_not_compared():
    row = judge(TTFT, "200 tok", [100.0] * (MIN_OK - 1), [120.0] * 20)
    assert row.test is None and not row.significant
    assert row.verdict == f"too few ok requests to compare (A 4, B 20; at least {MIN_OK} each)"


def _pair(tmp_path, b_ttft_factor=1.0, n=20, seed=1, a_header=None, b_header=None, **kw):
    rng = random.Random(seed)
    a = write_log(tmp_path / "a.jsonl", lognormal(rng, 400, n), **(a_header or {}), **kw)
    b = write_log(tmp_path / "b.jsonl", lognormal(rng, 400 * b_ttft_factor, n),
                  **(b_header or {}), **kw)
    return a, b


def test_logs_with_a_known_slowdown(tmp_path):
    a, b = _pair(tmp_path, 1.2)
    c = compare_logs(read_log(a), read_log(b), metrics=("ttft", "decode"))
    ttft, decode = c.rows
    assert ttft.group == "200 tok" and ttft.n_a == ttft.n_b == 20  # the warm-up left out
    assert ttft.regression and c.regression
    assert decode.verdict.startswith("no significant difference")  # 20 tok/s in both


@pytest.mark.parametrize(("b_header", "problem"), [
    ({"options": {"temperature": 0.0, "seed": 42, "num_ctx": 32768, "num_predict": 100}},
     "options (num_ctx) differ: A 4096, B 32768"),
    ({"engine": "ollama"}, "engines differ: A embedded, B ollama"),
])
def test_runs_measured_differently_are_refused(tmp_path, b_header, problem):
    a, b = _pair(tmp_path, b_header=b_header)
    c = compare_logs(read_log(a), read_log(b))
    assert c.refused and c.rows == [] and any(p.startswith(problem) for p in c.checks.problems)
    vary = "num_ctx" if "num_ctx" in problem else "engine"
    assert not compare_logs(read_log(a), read_log(b), vary=(vary,)).refused


def test_other_prompt_sizes_are_refused_unless_varied(tmp_path):
    rng = random.Random(2)
    a = write_log(tmp_path / "a.jsonl", lognormal(rng, 400, 10), target=200)
    b = write_log(tmp_path / "b.jsonl", lognormal(rng, 400, 10), target=1000)
    c = compare_logs(read_log(a), read_log(b))
    assert c.checks.problems[0].startswith("prompt sizes differ: A 200 tok, B 1000 tok")
    varied = compare_logs(read_log(a), read_log(b), vary=("prompt",))
    assert varied.rows[0].group == "200 tok → 1000 tok"


def test_environment_and_noise_warnings(tmp_path):
    noisy = [{"request_id": 3, "verdict": {"quiet": False}}, {"request_id": 4}]
    a = write_log(tmp_path / "a.jsonl", lognormal(random.Random(4), 400, 20))
    b = write_log(tmp_path / "b.jsonl", lognormal(random.Random(5), 400, 20), probes=noisy,
                  model_details={"digest": "def"}, environment={"power": "battery"},
                  llmtop_version="9")
    w = compare_logs(read_log(a), read_log(b)).checks.warnings
    assert any(x.startswith("llmtop versions differ: A ") and x.endswith(", B 9") for x in w)
    assert "model digests differ: A abc, B def: another build of it" in w
    assert "power sources differ: A mains, B battery" in w
    assert "B was measured on a NOISY machine (1 of 2 probe samples during requests)" in w


def test_a_drifted_run_is_named(tmp_path):
    rng = random.Random(4)
    a = write_log(tmp_path / "a.jsonl", lognormal(rng, 400, 20))
    drifting = [400.0] * 10 + [600.0] * 10  # last-5 median 50 % above the first-5: CONTAMINATED
    b = write_log(tmp_path / "b.jsonl", drifting)
    warnings = compare_logs(read_log(a), read_log(b)).checks.warnings
    assert any(w.startswith("B's verdict is CONTAMINATED: ") for w in warnings)


def test_cli_exit_codes_and_formats(tmp_path, capsys):
    a, b = _pair(tmp_path, 1.2)
    assert cli.main(["compare", str(a), str(b), "--metric", "ttft"]) == 1
    assert "REGRESSION" in capsys.readouterr().out
    assert cli.main(["compare", str(a), str(a), "--format", "json"]) == 0
    captured = capsys.readouterr()
    # new-user pass N43: comparing a log with itself was said nowhere
    assert f"{a} and {a} are the same log" in captured.err
    doc = json.loads(captured.out)
    (row,) = [r for r in doc["comparisons"][0]["rows"] if r["metric"] == "ttft"]
    assert row["ratio"] == 1.0 and not row["significant"]
    assert cli.main(["compare", str(a), str(b), "--threshold", "50", "--metric", "ttft"]) == 0
    capsys.readouterr()
    other = write_log(tmp_path / "c.jsonl", [400.0] * 10, engine="ollama")
    assert cli.main(["compare", str(a), str(other)]) == 2
    assert "not comparable: engines differ" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["compare", str(a), str(b), "--metric", "speed"])


def test_an_unreadable_log_is_refused_with_its_reason(tmp_path, capsys):
    old = tmp_path / "old.jsonl"
    old.write_text('{"type": "header", "format": 99, "llmtop_version": "9.0"}\n')
    a, _b = _pair(tmp_path)
    assert cli.main(["compare", str(a), str(old)]) == 2
    assert "session-log format 99, written by llmtop 9.0" in capsys.readouterr().err


def _probes(noisy_ids, quiet_ids):
    return ([{"request_id": i, "verdict": {"quiet": False}} for i in noisy_ids]
            + [{"request_id": i} for i in quiet_ids])


def test_two_noisy_runs_make_no_claim_however_large_the_difference(tmp_path):
    from llmtop.sessions.reports.compare import headline, to_json

    rng = random.Random(21)
    # B's TTFT is half of A's (B 2x faster by the numbers), but both met a NOISY machine:
    # A in 20 of 20 samples during its requests, B in 2 of 20 (10 %: the NOISY_SHARE edge)
    a = write_log(tmp_path / "a.jsonl", lognormal(rng, 800, 20),
                  probes=_probes(range(20), []))
    # (B's samples during its measured requests, ids 2-21: a sample during the warm-up or
    # no request moves none of the figures compared, and is not counted)
    b = write_log(tmp_path / "b.jsonl", lognormal(rng, 400, 20),
                  probes=_probes(range(2, 4), range(4, 22)))
    c = compare_logs(read_log(a), read_log(b), names=("a", "b"))
    # A's own verdict is CONTAMINATED: its measured requests have ids 2-21 (the warm-up is 1,
    # compare_logs.write_log), so the NOISY samples tagged 0-19 overlap 18 of its 20
    assert c.distrust == [("A was CONTAMINATED: the probes found the machine NOISY during 18 "
                          "of the 20 measured requests"),
                          "B was NOISY in 2 of 20 probe samples"]
    line = headline(c)
    assert line.startswith("NOT ATTRIBUTABLE: b vs a: A was CONTAMINATED: ")
    assert "; B was NOISY in 2 of 20 probe samples;" in line
    assert "faster" not in line
    assert any("faster" in r.verdict for r in c.rows)  # the numbers are still shown below
    doc = json.loads(to_json([c]))["comparisons"][0]
    assert doc["trusted"] is False and doc["distrust"] == c.distrust
    # new-user pass N10: B is faster (no regression by the numbers), yet the comparison is
    # distrusted: exit 1, so a CI gate on the exit code does not pass it
    assert not c.regression
    assert cli.main(["compare", str(a), str(b)]) == 1
    assert cli.main(["compare", str(b), str(b)]) == 1  # B against itself: still noisy


def test_one_noisy_sample_in_twenty_still_allows_a_claim(tmp_path):
    from llmtop.sessions.reports.compare import headline

    rng = random.Random(22)
    a = write_log(tmp_path / "a.jsonl", lognormal(rng, 800, 20), probes=_probes([], range(20)))
    b = write_log(tmp_path / "b.jsonl", lognormal(rng, 400, 20),
                  probes=_probes([0], range(1, 20)))  # 1 of 20 = 5 % < 10 %
    c = compare_logs(read_log(a), read_log(b), names=("a", "b"))
    assert c.trusted and headline(c).startswith("b vs a: no regression; ")
    assert cli.main(["compare", str(a), str(b)]) == 0


def test_the_report_says_what_each_run_sent(tmp_path, capsys):
    dataset = {"prompt_tokens": [200], "dataset": {"file": "chat.jsonl", "records": 20}}
    a, b = _pair(tmp_path, a_header={"bench": dataset}, b_header={"bench": dataset})
    assert cli.main(["compare", str(a), str(b), "--metric", "ttft"]) in (0, 1)
    out = capsys.readouterr().out
    assert f"- {a} sent: dataset chat.jsonl\n- {b} sent: dataset chat.jsonl" in out
    (tmp_path / "plain").mkdir()
    plain_a, plain_b = _pair(tmp_path / "plain")
    assert cli.main(["compare", str(plain_a), str(plain_b), "--metric", "ttft"]) in (0, 1)
    assert " sent: " not in capsys.readouterr().out  # llmtop's own prompts: nothing said
