"""The llama.cpp self-test (llmtop/servers/embedded/llama_config.py): trials in real throwaway
processes (scripted ones where a case needs an exact crash or exact rates), the choice, the
cache."""

from __future__ import annotations

import json
import os
import signal
import sys
from dataclasses import replace

import pytest

from llmtop.servers.embedded import llama_config as lc
from llmtop.servers.embedded.llama_config import NO_REPACK, REPACK, Choice, Trial


def script(code: str) -> list[str]:
    """A real child process running `code`."""
    return [sys.executable, "-c", code]


DIE_BY = "import os, signal; print('loading', flush=True); os.kill(os.getpid(), signal.{})"


def rates(prefill: float, decode: float) -> list[str]:
    payload = json.dumps({"prefill_tps": prefill, "decode_tps": decode})
    return script(f"print('llama noise'); print({payload!r})")


def test_signal_text_names_the_signal_and_what_it_means():
    assert lc.signal_text(signal.SIGILL) == "SIGILL (illegal instruction)"
    assert lc.signal_text(signal.SIGSEGV) == "SIGSEGV (segmentation fault)"
    assert lc.signal_text(250) == "signal 250"


def test_a_trial_killed_by_sigill_is_unsafe_with_the_signal_recorded():
    trial = lc.run_trial(REPACK, script(DIE_BY.format("SIGILL")))
    assert (trial.ok, trial.signal, trial.exit_code) == (False, signal.SIGILL, -signal.SIGILL)
    assert trial.describe() == "repack: killed by SIGILL (illegal instruction)"


def test_a_trial_that_ran_reports_its_last_lines_rates():
    trial = lc.run_trial(NO_REPACK, rates(512.5, 38.25))
    assert trial.ok and (trial.prefill_tps, trial.decode_tps) == (512.5, 38.25)
    assert trial.describe() == "no-repack: 38.2 tok/s decode, 512 tok/s prefill"


def test_a_trial_that_exits_with_an_error_keeps_its_last_output_lines():
    trial = lc.run_trial(REPACK, script(
        "import sys; print('a'); print('b', file=sys.stderr); sys.exit(3)"))
    assert (trial.ok, trial.signal, trial.exit_code, trial.detail) == (False, None, 3, "b")


def test_a_trial_that_hangs_is_killed_at_its_timeout_and_fails():
    trial = lc.run_trial(REPACK, script("import time; time.sleep(30)"), timeout_s=0.5)
    assert not trial.ok and trial.detail.startswith("no answer within 0 s")


def test_fastest_takes_the_highest_decode_rate_beyond_the_tie_margin():
    a = Trial("repack", True, prefill_tps=900.0, decode_tps=30.0)
    b = Trial("no-repack", True, prefill_tps=100.0, decode_tps=40.0)
    # 30 < 40 × 0.9 = 36: b is faster by more than the 10 % margin
    assert lc.fastest([a, b]) is b


def test_fastest_breaks_a_decode_tie_with_prefill_then_order():
    a = Trial("repack", True, prefill_tps=500.0, decode_tps=38.0)
    b = Trial("no-repack", True, prefill_tps=700.0, decode_tps=40.0)
    # 38 ≥ 40 × 0.9 = 36: tied on decode; 500 < 700 × 0.9 = 630: b's prefill wins
    assert lc.fastest([a, b]) is b
    c = Trial("no-repack", True, prefill_tps=520.0, decode_tps=40.0)
    # tied on both (500 ≥ 520 × 0.9 = 468): the first in order is kept
    assert lc.fastest([a, c]) is a
    assert lc.fastest([Trial("repack", False, signal=4)]) is None


def runner_for(commands, others_busy=0.0):
    """Trials by real processes; the CPU other programs used meanwhile set to `others_busy`
    (this test machine's own neighbours must not decide the case)."""
    calls = []

    def run(config):
        calls.append(config.name)
        return replace(lc.run_trial(config, commands[config.name]), others_busy=others_busy)

    return run, calls


def test_the_self_test_keeps_the_configuration_that_survives_a_sigill(tmp_path):
    run, calls = runner_for({"repack": script(DIE_BY.format("SIGILL")),
                             "no-repack": rates(400.0, 35.0)})
    choice = lc.choose("model.gguf", 2, forced="auto", runner=run, cache=tmp_path / "c.json")
    assert calls == ["repack", "no-repack"]
    assert choice.config is NO_REPACK and choice.source == "self-test"
    assert choice.reason == ("llama.cpp repack off: the AMX/repack path was killed by SIGILL "
                             "(illegal instruction) on this CPU")
    assert [t.ok for t in choice.trials] == [False, True]


def test_the_choice_is_cached_for_this_machine_and_build_and_retested_for_another(
        tmp_path, monkeypatch):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x" * 10)
    cache = tmp_path / "c.json"
    run, calls = runner_for({"repack": rates(500.0, 40.0), "no-repack": rates(100.0, 20.0)})
    first = lc.choose(str(model), 2, forced="auto", runner=run, cache=cache)
    again = lc.choose(str(model), 2, forced="auto", runner=run, cache=cache)
    assert calls == ["repack", "no-repack"]  # the second call ran no trial
    assert (first.config, again.config, again.source) == (REPACK, REPACK, "cached self-test")
    assert again.trials == first.trials
    model.write_bytes(b"x" * 11)  # another model file: another key
    lc.choose(str(model), 2, forced="auto", runner=run, cache=cache)
    assert calls == ["repack", "no-repack"] * 2
    monkeypatch.setattr(lc, "_cpu_identity", lambda: "another CPU")
    lc.choose(str(model), 2, forced="auto", runner=run, cache=cache)
    assert calls == ["repack", "no-repack"] * 3


def test_a_corrupt_cache_is_ignored_and_rewritten(tmp_path):
    cache = tmp_path / "c.json"
    cache.write_text("{not json")
    run, _ = runner_for({"repack": rates(500.0, 40.0), "no-repack": rates(100.0, 20.0)})
    assert lc.choose("m", 1, forced="auto", runner=run, cache=cache).config is REPACK
    assert json.loads(cache.read_text())["entries"][0]["choice"]["config"] == "repack"


def test_forcing_skips_the_trials_and_a_bad_value_is_refused(tmp_path, monkeypatch):
    def never(config):
        raise AssertionError("no trial when forced")

    monkeypatch.setenv(lc.ENV_FORCE, "off")
    choice = lc.choose("m", 1, runner=never, cache=tmp_path / "c.json")
    assert (choice.config, choice.trials) == (NO_REPACK, ())
    assert choice.reason == "llama.cpp repack off: forced by LLMTOP_LLAMA_REPACK=off"
    assert lc.choose("m", 1, forced="on", runner=never).config is REPACK
    with pytest.raises(ValueError, match="LLMTOP_LLAMA_REPACK='maybe' is not one of on, off"):
        lc.choose("m", 1, forced="maybe", runner=never)


def test_no_configuration_surviving_is_an_error_naming_each_trial(tmp_path):
    run, _ = runner_for({"repack": script(DIE_BY.format("SIGILL")),
                         "no-repack": script(DIE_BY.format("SIGSEGV"))})
    with pytest.raises(lc.NoSafeConfig) as err:
        lc.choose("m", 1, forced="auto", runner=run, cache=tmp_path / "c.json")
    assert str(err.value).endswith("repack: killed by SIGILL (illegal instruction); no-repack: "
                                   "killed by SIGSEGV (segmentation fault)")
    assert not (tmp_path / "c.json").exists()  # nothing cached: the next start tries again


def test_a_choice_round_trips_through_its_dict():
    choice = Choice(NO_REPACK, "why", "self-test",
                    (Trial("repack", False, signal=4, exit_code=-4),
                     Trial("no-repack", True, 400.0, 35.0, exit_code=0)), "2026-12-01T00:00:00Z")
    assert Choice.from_dict(json.loads(json.dumps(choice.to_dict()))) == choice


def test_apply_sets_use_extra_bufts_on_every_load_and_can_be_undone():
    lib = pytest.importorskip("llama_cpp.llama_cpp")
    original = lib.llama_model_default_params
    try:
        lc.apply(NO_REPACK)
        assert lib.llama_model_default_params().use_extra_bufts is False
        assert lc.applied() is NO_REPACK
        lc.apply(REPACK)  # wraps the original again, not the wrapper
        assert lib.llama_model_default_params().use_extra_bufts is True
        assert lib.llama_model_default_params._llmtop_original is original
    finally:
        lib.llama_model_default_params = original
    assert lc.applied() is None


def test_version_line_reports_the_cached_choice_or_that_none_was_made(tmp_path):
    cache = tmp_path / "c.json"
    assert lc.report_line(cache).startswith("not tested with this build on this CPU yet")
    choice = Choice(NO_REPACK, "llama.cpp repack off: because", "self-test", (),
                    "2026-12-01T10:00:00Z")
    lc.remember(choice, str(tmp_path / "any.gguf"), cache)
    assert lc.report_line(cache) == "llama.cpp repack off: because [self-test 2026-12-01T10:00:00Z]"


def test_two_builds_on_one_machine_keep_an_entry_each(tmp_path, monkeypatch):
    cache = tmp_path / "c.json"
    run, calls = runner_for({"repack": rates(500.0, 40.0), "no-repack": rates(100.0, 20.0)})
    base = lc.machine_key("m")
    for build in ("venv-a", "venv-b", "venv-a", "venv-b"):
        monkeypatch.setattr(lc, "machine_key", lambda model, b=build: {**base, "libs": b})
        lc.choose("m", 1, forced="auto", runner=run, cache=cache)
    assert calls == ["repack", "no-repack"] * 2  # each build tested once, then remembered
    assert len(json.loads(cache.read_text())["entries"]) == 2


def test_a_trial_that_times_out_proves_nothing_and_is_not_cached(tmp_path):
    cache = tmp_path / "c.json"
    slow = script("import time; time.sleep(30)")
    calls = []

    def run(config):
        calls.append(config.name)
        command = slow if config is REPACK else rates(100.0, 20.0)
        return lc.run_trial(config, command, timeout_s=0.5)

    choice = lc.choose("m", 1, forced="auto", runner=run, cache=cache)
    # the one that ran is kept, but the one that timed out may be the faster: test again later
    assert (choice.config, choice.source) == (NO_REPACK, lc.INCONCLUSIVE)
    assert "the repack trial gave no answer in time (a busy machine)" in choice.reason
    assert not cache.exists()

    def nothing_ran(config):
        calls.append(config.name)
        return lc.run_trial(config, slow, timeout_s=0.5)

    choice = lc.choose("m", 1, forced="auto", runner=nothing_ran, cache=cache)
    # no signal, no verdict: llama.cpp's default is kept, and no error is raised
    assert (choice.config, choice.source) == (REPACK, lc.INCONCLUSIVE)
    assert choice.reason.startswith("llama.cpp repack on: the self-test could not finish")
    assert not cache.exists()


def test_rates_measured_beside_a_busy_program_are_not_compared(tmp_path):
    cache = tmp_path / "c.json"
    run, _ = runner_for({"repack": rates(100.0, 20.0), "no-repack": rates(500.0, 40.0)},
                        others_busy=0.6)
    choice = lc.choose("m", 1, forced="auto", runner=run, cache=cache)
    # no-repack's 40 tok/s would win on a quiet machine; 60 % busy: the default is kept
    assert (choice.config, choice.source) == (REPACK, lc.INCONCLUSIVE)
    assert "other programs used 60% of the CPU during the self-test" in choice.reason
    assert not cache.exists()
    run, _ = runner_for({"repack": script(DIE_BY.format("SIGILL")),
                         "no-repack": rates(500.0, 40.0)}, others_busy=0.6)
    # with one survivor there is nothing to compare: its safety is the verdict, and cached
    assert lc.choose("m", 1, forced="auto", runner=run, cache=cache).source == "self-test"
    assert cache.exists()


def test_others_busy_is_the_machine_cpu_less_the_trials_own():
    cpus = os.cpu_count() or 1
    # 3 s of busy CPU in 2 s of wall time, 1 s of it the trial's: 2 s / (2 s × cpus)
    assert lc._others_busy((100.0, 10.0), (103.0, 11.0), 2.0) == pytest.approx(1 / cpus)
    assert lc._others_busy(None, (1.0, 1.0), 2.0) is None
