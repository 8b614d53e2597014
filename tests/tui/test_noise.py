"""NOISY probe samples mark the request they were taken during (main screen), from the probe
messages the app already receives; QUIET samples and samples outside a request mark nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmtop.probes.processes import ProcessSample
from llmtop.probes.sampler import ProbeSampler
from llmtop.probes.system import SystemSample
from llmtop.tui.app import LlmtopApp
from llmtop.tui.link import END_SAMPLE_S
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.state.noise import NoiseTracker, noisy_message

from .fakes import MS, SENT_NS, busy_apps, probe_sample, shown, system_sample, wait_for
from .test_fake_engine import build, done, send

NOISE = "Chromium (14 processes) is using 38 % CPU"


@pytest.fixture(autouse=True)
def fixed_send_stamp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmtop.sessions.measure.request.perf_counter_ns", lambda: SENT_NS)


def test_tracker_spans_and_messages() -> None:
    tracker = NoiseTracker()
    assert not tracker.add(probe_sample(SENT_NS + 5 * MS))  # QUIET: not kept
    assert tracker.add(probe_sample(SENT_NS + 50 * MS, NOISE))
    assert tracker.version == 1
    assert tracker.first_during(SENT_NS, SENT_NS + 200 * MS) == NOISE
    assert tracker.first_during(SENT_NS, None) == NOISE  # still streaming: open end
    assert tracker.first_during(SENT_NS + 60 * MS, SENT_NS + 200 * MS) is None
    assert tracker.first_during(0, None) is None  # not sent yet
    # the sample taken as the request sent at SENT_NS ended: after its last event, but its
    # figures are over its last stretch, so it counts for that request and no other
    assert tracker.add(probe_sample(SENT_NS + 900 * MS, "tail"), ends=SENT_NS)
    assert tracker.first_during(SENT_NS + 60 * MS, SENT_NS + 200 * MS) is None
    assert [s.message for s in tracker.during(SENT_NS, SENT_NS + 200 * MS)] == [NOISE, "tail"]
    assert noisy_message(probe_sample(1, "x").verdict) == "x"
    assert noisy_message(probe_sample(1).verdict) == ""


async def post(pilot, app: LlmtopApp, t_ms: float, noisy: str | None) -> None:  # type: ignore[no-untyped-def]
    """Post a sample taken `t_ms` after the send; return once the app took it and redrew the
    request's numbers (a NOISY mark it changed is then on screen)."""
    sample = probe_sample(SENT_NS + int(t_ms * MS), noisy)
    app.post_message(ProbeSampled(sample))
    await wait_for(pilot, lambda: app.latest_probe is sample, what="the sample taken")
    await numbers_drawn(pilot, app)


async def numbers_drawn(pilot, app: LlmtopApp) -> None:  # type: ignore[no-untyped-def]
    """Wait until the render timer drew the request's numbers (its NOISY mark included)."""
    live = app.main_screen.live
    await wait_for(pilot, lambda: live is None or not live.numbers_dirty, what="numbers drawn")


async def test_noisy_sample_during_the_request_is_shown_with_its_figures(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "hello")  # sent at SENT_NS, done at +200 ms
        await wait_for(pilot, lambda: done(app), what="request done")
        await post(pilot, app, 500.0, NOISE)  # after the request: not its noise
        await post(pilot, app, 100.0, None)  # during it, but QUIET
        assert shown(app, "#noise") == ""
        await post(pilot, app, 100.0, NOISE)  # taken during it, arrived late: still its noise
        assert shown(app, "#noise") == f"⚠ NOISY while it ran: {NOISE}"
        assert shown(app, "#client").startswith(" ok ")  # shown beside the final figures
        await send(pilot, app, "think")  # sent at SENT_NS too, but done at +70 ms
        await wait_for(pilot, lambda: done(app, 2), what="second request")
        await numbers_drawn(pilot, app)
        live = app.main_screen.live
        assert live is not None and live.noisy is None  # +100 and +500 ms: after it
        assert shown(app, "#noise") == ""


async def test_noisy_sample_while_streaming_marks_at_once(tmp_path: Path) -> None:
    app, _ = build(tmp_path)
    async with app.run_test(size=(140, 40)) as pilot:
        await send(pilot, app, "slow")  # first chunk at +10 ms, then hangs
        main = app.main_screen
        await wait_for(pilot, lambda: main.live is not None and main.live.chunks == 1, what="chunk")
        await post(pilot, app, 20.0, NOISE)
        assert shown(app, "#noise") == f"⚠ NOISY while it ran: {NOISE}"
        await pilot.press("escape")  # cancel: the mark stays with the cancelled request
        await wait_for(pilot, lambda: done(app), what="cancelled")
        await numbers_drawn(pilot, app)
        live = app.main_screen.live
        assert live is not None and live.noisy is None  # ended at +10 ms, sample at +20
        assert shown(app, "#noise") == ""


class Machine:
    """Stand-ins for the sampler's probes: a quiet 2-core machine with Chromium busy."""

    def sample(self) -> SystemSample:
        return system_sample(20.0, (20.0, 20.0))


class BusyApps:
    def sample(self) -> ProcessSample:
        return ProcessSample(apps=busy_apps(), self_cpu_percent=1.0, engine_cpu_percent=None,
                             warming_up=False)


async def test_the_sample_taken_as_a_request_ends_counts_for_it(tmp_path: Path) -> None:
    """A real sampler thread: as the request ends the app asks it for one sample at once,
    which counts for that request (taken on the real clock, long after the request's stamps
    on the scripted one, so no other sample can), then the idle interval is back."""
    app, _ = build(tmp_path)
    sampler = ProbeSampler(2.0, app.link._on_probe_thread, system_probe=Machine(),  # type: ignore[arg-type]
                           process_probe=BusyApps(), gpu=False)  # type: ignore[arg-type]
    async with app.run_test(size=(140, 40)) as pilot:
        app.link.sampler = sampler
        sampler.start()  # a first sample at once, before the request
        await wait_for(pilot, lambda: app.latest_probe is not None, what="a first sample")
        first = app.latest_probe
        await send(pilot, app, "hello")
        await wait_for(pilot, lambda: done(app), what="request done")
        live = app.main_screen.live
        assert live is not None
        await wait_for(pilot, lambda: live.noisy is not None, what="the end sample's mark")
        assert first is not None and live.noisy == noisy_message(first.verdict) != ""
        assert sampler.interval_s == app.settings.probe_interval_s != END_SAMPLE_S
        await numbers_drawn(pilot, app)
        assert shown(app, "#noise") == f"⚠ NOISY while it ran: {live.noisy}"
