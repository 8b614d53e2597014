"""The probe panel names the machine it shows: an agent's (`--probes`), or this one with a
plain "not the engine's" when the engine is elsewhere; an agent's sample ages from when it
was taken, so a dead agent's last sample reads stale."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

from llmtop.probes.remote import AgentSampler, AgentTarget, RemoteSample, SampleSource
from llmtop.probes.verdict import Verdict
from llmtop.tui.app import make_app
from llmtop.tui.link import machine_label
from llmtop.tui.messages import ProbeSampled
from llmtop.tui.state.settings import TuiSettings
from llmtop.tui.widgets.probe_panel import STALE_AFTER_S, ProbePanel

from .fakes import busy_apps, fake_connection, machine_sample, wait_for


def test_the_title_says_when_this_is_not_the_engines_machine() -> None:
    assert machine_label("http://127.0.0.1:11434") == "machine"
    assert machine_label("http://localhost:11434") == "machine"
    here = socket.gethostname()
    assert machine_label("http://gpu-box:11434") == (
        f"this machine ({here}), not the engine's (http://gpu-box:11434)")


async def test_an_agents_sample_is_aged_from_when_it_was_taken(tmp_path: Path) -> None:
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.query_one(ProbePanel)
        _connect_agent(app)
        local = machine_sample(2_000_000_000, 10.0, busy_apps(), Verdict.of([]), 1.0)
        source = SampleSource("agent", "http://gpu-box:11500", "gpu-box", 5, 1, 0)
        taken_ns = 1_000_000_000  # on our clock, mapped from the agent's
        remote = RemoteSample(**{**_fields(local), "t_ns": taken_ns}, source=source)
        app.post_message(ProbeSampled(remote))
        await wait_for(pilot, lambda: panel.sample is remote, what="agent sample drawn")
        assert panel.border_title == "engine's machine: gpu-box (agent)"
        # a slow agent: the sample's age shows
        assert panel.check_age(taken_ns + 3_000_000_000) == 3.0
        assert panel.border_title == "engine's machine: gpu-box (agent) — 3 s old"
        # the agent died: nothing new arrives; age counts from the sample's own stamp
        later = taken_ns + int((STALE_AFTER_S + 1) * 1e9)
        assert panel.check_age(later) == STALE_AFTER_S + 1
        assert panel.border_title == (
            f"engine's machine: gpu-box (agent) — stale, {STALE_AFTER_S + 1:.0f} s old")


def _connect_agent(app: object) -> AgentSampler:
    """Give the app an agent sampler as it is once connected to gpu-box (not started:
    samples are posted to the app directly)."""
    agent = AgentSampler(AgentTarget("http://gpu-box:11500"))
    agent.state, agent.info = "connected", {"machine": "gpu-box"}
    app.link.sampler = agent  # type: ignore[attr-defined]
    return agent


def _fields(sample: object) -> dict[str, object]:
    names = ("t_ns", "wall_time", "system", "processes", "gpu", "verdict", "cost_ms")
    return {name: getattr(sample, name) for name in names}


async def test_an_agents_state_change_relabels_an_idle_panel(tmp_path: Path) -> None:
    """The agent's reader thread reports a state change; the app, idle with its render timer
    paused, is woken and redraws the panel's title."""
    settings = TuiSettings(log_path=str(tmp_path / "s.jsonl"), probes=False)
    app = make_app(settings, connection=fake_connection())
    async with app.run_test(size=(140, 40)) as pilot:
        panel = app.query_one(ProbePanel)
        agent = _connect_agent(app)
        app.post_message(ProbeSampled(machine_sample(1, 10.0, busy_apps(), Verdict.of([]), 1.0)))
        await wait_for(pilot, lambda: panel.border_title == "engine's machine: gpu-box (agent)")
        await wait_for(pilot, lambda: app.main_screen.render_paused, what="idle")
        agent.state = "reconnecting"
        thread = threading.Thread(target=app.link._on_probe_state_thread, args=("reconnecting", ""))
        thread.start()
        thread.join()
        title = "agent http://gpu-box:11500: reconnecting"
        await wait_for(pilot, lambda: panel.border_title == title, what="the new title")
        await pilot.pause()
        assert panel.border_title == title
        # drawn, not only set: the screen as a terminal shows it carries the new state
        assert "reconnecting" in app.export_screenshot()
