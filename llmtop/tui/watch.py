"""`llmtop watch`'s screen as an app: the watch itself runs as a child process
(`llmtop watch --json --live`, commands/watch.py), and this app draws its lines.

Why a child process: the proxies forward every block the moment it arrives; in the same
process they would wait for the GIL, and in the same event loop for each frame being drawn
(milliseconds on a 2-core machine), which would add to the very TTFT and ITL they measure.
Apart, the forwarding never waits for the screen, and the child's stdout (one JSON line per
started, streaming and finished request) is all the screen needs. The child stops with the
app (SIGTERM), and on its own when the app's process is gone (`--parent-pid`). The probe
panel has its own sampler here; the child samples for each request's verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence

from textual import work

from llmtop.probes.sampler import ProbeSample, ProbeSampler
from llmtop.sessions.runners.watch.serving import (
    Pair,
    UpstreamEngines,
    probe_sampler,
    silent_upstream,
)
from llmtop.tui.base import LlmtopBaseApp
from llmtop.tui.screens.watch import WatchScreen

PROBE_INTERVAL_S = 1.0
STOP_WAIT_S = 5.0


def child_argv(args: argparse.Namespace, pairs: Sequence[Pair]) -> list[str]:
    """The watch process's command line for these flags and pairs."""
    argv = [sys.executable, "-m", "llmtop", "watch", "--json", "--live",
            "--parent-pid", str(os.getpid())]
    for p in pairs:
        argv += ["--listen", p.listen, "--upstream", p.upstream]
    for flag, value in (("--log", getattr(args, "log", None)), ("--prometheus", args.prometheus),
                        ("--token-file", args.token_file)):
        if value:
            argv += [flag, str(value)]
    argv += ["--log-bodies"] if args.log_bodies else []
    argv += ["--show-text"] if args.show_text else []
    argv += [] if args.sample_probes else ["--no-probes"]
    return argv


class WatchApp(LlmtopBaseApp):
    """Runs `argv` (the watch process) and shows its lines on a WatchScreen. argv None: no
    child (the pilot tests feed the screen themselves)."""

    TITLE = "llmtop watch"

    def __init__(self, argv: list[str] | None, pairs: Sequence[Pair], show_text: bool,
                 probes: bool = True) -> None:
        super().__init__()
        self.argv, self.probes, self.pairs = argv, probes, tuple(pairs)
        self.screen_ = WatchScreen([(p.listen, p.upstream) for p in pairs], show_text, probes)
        self.child: asyncio.subprocess.Process | None = None
        self.sampler: ProbeSampler | None = None
        self.errors: list[str] = []

    def on_mount(self) -> None:
        self.push_screen(self.screen_)
        if self.probes:
            # the GPU read in every sample only while a request streams through the watch
            # (the sampler's slow beat between them, as `llmtop watch` without its screen)
            rows = self.screen_.state
            self.sampler = probe_sampler(PROBE_INTERVAL_S, self._sampled, UpstreamEngines(
                [upstream for _listen, upstream in self.screen_.pairs]),
                measuring=lambda: bool(rows.open))
            self.sampler.start()
        if self.argv is not None:
            self.follow()
        self.check_upstreams()

    @work(thread=True, group="upstreams")
    def check_upstreams(self) -> None:
        """Say, as a warning that stays 30 s, which upstream nothing answers at now."""
        for pair in self.pairs:
            if (silent := silent_upstream(pair)) is not None:
                self.call_from_thread(self.notify, silent, title="upstream",
                                      severity="warning", timeout=30)

    def _sampled(self, sample: ProbeSample) -> None:
        self.call_from_thread(self.screen_.show_probe, sample)

    @work(exclusive=True, group="watch")
    async def follow(self) -> None:
        """Start the watch process and feed its lines to the screen until it ends."""
        assert self.argv is not None
        self.child = await asyncio.create_subprocess_exec(
            *self.argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            limit=1 << 24)
        assert self.child.stdout is not None and self.child.stderr is not None
        errors = asyncio.ensure_future(self.child.stderr.read())
        async for raw in self.child.stdout:
            with contextlib.suppress(ValueError):
                line = json.loads(raw)
                if isinstance(line, dict):
                    self.screen_.take(line)
        code = await self.child.wait()
        self.errors = (await errors).decode(errors="replace").strip().splitlines()
        if code != 0:
            self.exit(int(code), message="\n".join(self.errors[-5:]))

    async def on_unmount(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        if self.child is not None and self.child.returncode is None:
            self.child.terminate()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.child.wait(), STOP_WAIT_S)


def main(args: argparse.Namespace, pairs: Sequence[Pair], token: str | None) -> int:
    """Run the screen with the watch process behind it; the exit code is the child's when it
    failed, else 0. `token` was checked by commands/watch.prepare (the child reads the same
    --token-file)."""
    del token  # the child reads --token-file itself
    app = WatchApp(child_argv(args, pairs), pairs, args.show_text, args.sample_probes)
    code = app.run()
    return int(code or 0)
